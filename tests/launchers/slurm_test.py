#!/usr/bin/env python3
"""Slurm: the sbatch line of deploy/slurm/README.md on a one-node Slurm
cluster that this test brings up and takes down.

    tests/launchers/slurm_test.py SOURCE_DIR BIN_DIR

In a temporary folder: munged (its own key, socket, pid, seed and log
files), slurmctld and slurmd on free loopback ports with a generated
slurm.conf (the node is this host's short name at 127.0.0.1 with the CPU
count nproc gives, one partition with OverSubscribe=FORCE,
proctrack/linuxproc, task/none, munge at the test's socket). Every client
command gets SLURM_CONF. Then:

1. The one-node block as printed (`deploy/slurm/` and `job.yaml` replaced
   by this checkout's and this test's; PS_BIN names the build) submits a
   job of 2 servers and 2 workers. The job must end before the deadline
   COMPLETED with ExitCode 0:0, and its output file must show both
   workers trained, each shard serving its own endpoint (the index from
   SLURM_PROCID, the workers' minus the server count), both servers
   stopped by themselves, and the script's result line.
2. The same job submitted with too few tasks must fail (ExitCode 2)
   saying which --ntasks it needs.
3. A job whose workers fail (one step is too few to train) must end, its
   servers too, FAILED with the workers' ExitCode 1.
4. The placement rule of the README's cluster section, through
   `ps_job.sbatch --plan` on an allocation of three nodes described by
   srun's variables: each shard on the node its cluster.servers entry
   names.

Every daemon is stopped by its pid at the end, also when a check fails or
the test is stopped by a signal; any process still carrying this
cluster's SLURM_CONF (a job step, a task) is killed by its pid and
reported. Skips (exit 77) when the Slurm or munge programs are missing,
when not root (slurmd must be root to start job steps as the submitting
user), or when a daemon exits at start (its log is printed).
"""

import ctypes
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher_job  # noqa: E402
from launcher_job import Failure  # noqa: E402

NODE_IDLE_DEADLINE_S = 30
JOB_DEADLINE_S = 45
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "srun", "scancel")


class Skip(Exception):
    """A daemon cannot run on this machine; the message says why."""


def _die_with_parent():
    # A daemon gets SIGTERM when this test dies, even by SIGKILL (a ctest
    # TIMEOUT), so no daemon outlives the test.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _tail(path, lines=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(no log: %s)\n" % e


class SlurmCluster:
    """munged, slurmctld and slurmd of one node, all files under `root`."""

    def __init__(self, root):
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.conf = os.path.join(root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.daemons = []  # (name, Popen, log path)
        self.jobs = []

    def _path(self, name):
        return os.path.join(self.root, name)

    def write_config(self):
        # munged wants its socket folder searchable by all and its key
        # readable by its owner only.
        os.chmod(self.root, 0o711)
        with open(self._path("munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self._path("munge.key"), 0o400)
        for d in ("state", "spool"):
            os.mkdir(self._path(d))
        open(self._path("plugstack.conf"), "w").close()
        ctld_port, slurmd_port = launcher_job.free_ports(2)
        settings = [
            ("ClusterName", "pstest"),
            ("SlurmctldHost", "%s(127.0.0.1)" % self.node),
            ("SlurmctldPort", ctld_port),
            ("SlurmdPort", slurmd_port),
            ("SlurmUser", "root"),
            ("SlurmdUser", "root"),
            ("AuthType", "auth/munge"),
            ("CredType", "cred/munge"),
            ("AuthInfo", "socket=" + self._path("munge.socket")),
            ("StateSaveLocation", self._path("state")),
            ("SlurmdSpoolDir", self._path("spool")),
            ("SlurmctldPidFile", self._path("slurmctld.pid")),
            ("SlurmdPidFile", self._path("slurmd.pid")),
            ("SlurmctldLogFile", self._path("slurmctld.log")),
            ("SlurmdLogFile", self._path("slurmd.log")),
            ("PlugStackConfig", self._path("plugstack.conf")),
            ("MailProg", "/bin/true"),
            ("ProctrackType", "proctrack/linuxproc"),
            ("TaskPlugin", "task/none"),
            ("JobAcctGatherType", "jobacct_gather/none"),
            ("AccountingStorageType", "accounting_storage/none"),
            ("MpiDefault", "none"),
            ("SchedulerType", "sched/builtin"),
            ("SelectType", "select/cons_tres"),
            ("SelectTypeParameters", "CR_Core"),
            ("ReturnToService", 2),
            ("NodeName", "%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN"
             % (self.node, len(os.sched_getaffinity(0)))),
            ("PartitionName", "ps Nodes=%s Default=YES MaxTime=INFINITE State=UP "
             "OverSubscribe=FORCE" % self.node),
        ]
        with open(self.conf, "w") as f:
            f.writelines("%s=%s\n" % kv for kv in settings)

    def _start(self, name, argv, log):
        out = open(self._path(name + ".out"), "w")
        proc = subprocess.Popen(argv, env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
        out.close()
        self.daemons.append((name, proc, log))
        return proc

    def _check_alive(self, name, proc, log):
        if proc.poll() is not None:
            raise Skip("%s exited with %d at start; its output and log:\n%s%s"
                       % (name, proc.returncode, _tail(self._path(name + ".out")), _tail(log)))

    def start(self):
        self.write_config()
        munge_log = self._path("munged.log")
        munged = self._start("munged", [
            "munged", "--foreground", "--socket=" + self._path("munge.socket"),
            "--key-file=" + self._path("munge.key"), "--log-file=" + munge_log,
            "--pid-file=" + self._path("munged.pid"), "--seed-file=" + self._path("munged.seed")],
            munge_log)
        self._wait_for(lambda: os.path.exists(self._path("munge.socket")), 10,
                       "munged's socket", [("munged", munged, munge_log)])
        ctld = self._start("slurmctld", ["slurmctld", "-D", "-f", self.conf],
                           self._path("slurmctld.log"))
        self._wait_for(lambda: self._client(["scontrol", "ping"]).endswith("is UP"), 15,
                       "slurmctld to answer", self.daemons)
        slurmd = self._start("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.node],
                             self._path("slurmd.log"))
        del ctld, slurmd
        self._wait_for(lambda: self._client(["sinfo", "-h", "-n", self.node, "-o", "%T"])
                       == "idle", NODE_IDLE_DEADLINE_S, "node %s to be idle" % self.node,
                       self.daemons)

    def _client(self, argv, timeout_s=10):
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                           timeout=timeout_s)
        return r.stdout.strip()

    def _wait_for(self, ready, deadline_s, what, daemons):
        deadline = time.monotonic() + deadline_s
        while True:
            for name, proc, log in daemons:
                self._check_alive(name, proc, log)
            try:
                if ready():
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise Failure("waited %d s for %s; the daemons' logs:\n%s" % (
                    deadline_s, what, "".join("== %s\n%s" % (n, _tail(l))
                                              for n, _, l in self.daemons)))
            time.sleep(0.2)

    def submit(self, line, cwd, extra_env):
        """Runs a submit command line (a shell line: it may hold $(...))
        and returns the job id."""
        env = dict(self.env, **extra_env)
        r = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=30)
        m = re.search(r"Submitted batch job (\d+)", r.stdout)
        if r.returncode != 0 or not m:
            raise Failure("%s: exit %d\n%s%s" % (line, r.returncode, r.stdout, r.stderr))
        self.jobs.append(m.group(1))
        return m.group(1)

    def wait_job(self, job_id, deadline_s):
        """Waits for the job to end; returns (JobState, ExitCode)."""
        deadline = time.monotonic() + deadline_s
        show = ""
        while time.monotonic() < deadline:
            show = self._client(["scontrol", "show", "job", job_id])
            state = re.search(r"JobState=(\S+)", show)
            if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING",
                                                "COMPLETING", "SUSPENDED"):
                return state.group(1), re.search(r"ExitCode=(\S+)", show).group(1)
            time.sleep(0.3)
        raise Failure("job %s did not end within %d s:\n%s" % (job_id, deadline_s, show))

    def stop(self):
        """Cancels this cluster's jobs, stops the daemons by pid (SIGTERM,
        then SIGKILL), and kills by pid whatever still carries this
        cluster's SLURM_CONF. Returns what had to be killed that way."""
        for job_id in self.jobs:
            try:
                self._client(["scancel", job_id])
            except subprocess.TimeoutExpired:
                pass
        # A job's step daemons and tasks end shortly after the job does (or
        # after scancel): give them a moment while slurmd still runs.
        daemons = {proc.pid for _, proc, _ in self.daemons}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and set(self._carriers()) - daemons:
            time.sleep(0.1)
        for name, proc, _ in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        return self._kill_leftovers()

    def _carriers(self):
        """{pid: command line} of the processes whose environment holds this
        cluster's SLURM_CONF: its daemons, job steps and tasks."""
        marker = b"\0SLURM_CONF=" + self.conf.encode() + b"\0"
        found = {}
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if pid == os.getpid():
                continue
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    if marker not in b"\0" + f.read() + b"\0":
                        continue
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
        return found

    def _kill_leftovers(self):
        killed = []
        for pid, cmd in self._carriers().items():
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append("%d %s" % (pid, cmd))
            except ProcessLookupError:
                continue
        return killed


def one_node_line(source_dir, job, marker="tested: one node"):
    """The sbatch block after `<!-- marker -->`, with this checkout's
    deploy/slurm/ and the job file `job`."""
    line = launcher_job.readme_block(os.path.join(source_dir, "deploy", "slurm", "README.md"),
                                     marker)
    if "deploy/slurm/" not in line or "job.yaml" not in line:
        raise Failure("the %s block no longer names deploy/slurm/ and job.yaml: %s"
                      % (marker, line))
    return (line.replace("deploy/slurm/", os.path.join(source_dir, "deploy", "slurm") + "/")
            .replace("job.yaml", shlex.quote(job)))


def check_job(cluster, source_dir, bin_dir, work):
    job = launcher_job.write_job(os.path.join(work, "job.yaml"), servers=2, workers=2)
    job_id = cluster.submit(one_node_line(source_dir, job), work, {"PS_BIN": bin_dir})
    state, exit_code = cluster.wait_job(job_id, JOB_DEADLINE_S)
    out_path = os.path.join(work, "slurm-%s.out" % job_id)
    out = _tail(out_path, lines=100000)
    if state != "COMPLETED" or exit_code != "0:0":
        raise Failure("job %s ended %s with ExitCode %s; %s:\n%s"
                      % (job_id, state, exit_code, out_path, out))
    launcher_job.check_training(out, workers=2)
    launcher_job.check_servers(out, job)
    if "ps_job: result: exit 0 (2 servers, 2 workers)" not in out:
        raise Failure("no result line in %s:\n%s" % (out_path, out))
    print("sbatch job %s: COMPLETED, ExitCode 0:0, shards 0-1 and workers 0-1 from "
          "SLURM_PROCID, servers stopped by themselves" % job_id)


def check_too_few_tasks(cluster, source_dir, bin_dir, work):
    job = launcher_job.write_job(os.path.join(work, "few.yaml"), servers=2, workers=2)
    line = re.sub(r"--ntasks=\$\([^)]*\)", "--ntasks=2", one_node_line(source_dir, job))
    job_id = cluster.submit(line, work, {"PS_BIN": bin_dir})
    state, exit_code = cluster.wait_job(job_id, JOB_DEADLINE_S)
    out = _tail(os.path.join(work, "slurm-%s.out" % job_id), lines=1000)
    if state != "FAILED" or exit_code != "2:0" or "submit with sbatch --ntasks=4" not in out:
        raise Failure("job %s with 2 tasks for 4: %s, ExitCode %s (expected FAILED, 2:0 and "
                      "the --ntasks it needs):\n%s" % (job_id, state, exit_code, out))
    print("sbatch job %s with 2 tasks for 4: FAILED, ExitCode 2:0, naming --ntasks=4" % job_id)


def check_failing_worker(cluster, source_dir, bin_dir, work):
    """Workers that fail (one step of training cannot recover the weights:
    exit 1) end the job, servers included, with the workers' exit code."""
    job = launcher_job.write_job(os.path.join(work, "short.yaml"), servers=2, workers=2,
                                 iterations=1)
    job_id = cluster.submit(one_node_line(source_dir, job), work, {"PS_BIN": bin_dir})
    state, exit_code = cluster.wait_job(job_id, JOB_DEADLINE_S)
    out = _tail(os.path.join(work, "slurm-%s.out" % job_id), lines=1000)
    if (state != "FAILED" or exit_code != "1:0" or "the weights did not converge" not in out
            or "ps_job: result: exit 1 (2 servers, 2 workers)" not in out):
        raise Failure("job %s whose workers fail: %s, ExitCode %s (expected FAILED, 1:0, the "
                      "workers' error and the result line):\n%s" % (job_id, state, exit_code, out))
    print("sbatch job %s whose workers fail: FAILED, ExitCode 1:0" % job_id)


def check_cluster_plan(cluster, source_dir, bin_dir, work):
    """The placement rule of the README's cluster section, on an allocation
    of three nodes described by the variables srun would see: shard i on
    the node cluster.servers[i] names (a full name matches its short node
    name), the workers in the other task slots, node by node."""
    job = os.path.join(work, "cluster.yaml")
    with open(job, "w") as f:
        f.write('cluster: { servers: ["node02.example.org:7000", "node01:7000"], workers: 4,\n'
                "           allow_remote: true }\n")
    env = dict(cluster.env, SLURM_JOB_ID="1", SLURM_NTASKS="6",
               SLURM_JOB_NODELIST="node[01-03]", SLURM_TASKS_PER_NODE="2(x3)",
               PS_BIN=bin_dir)
    script = os.path.join(source_dir, "deploy", "slurm", "ps_job.sbatch")
    r = subprocess.run([script, "--plan", job], cwd=work, env=env, capture_output=True,
                       text=True, timeout=30)
    hosts = r.stdout.split("task hosts (SLURM_HOSTFILE):\n")[-1].split("ps_job:")[0].split()
    expected = ["node02", "node01", "node01", "node02", "node03", "node03"]
    if r.returncode != 0 or hosts != expected:
        raise Failure("ps_job.sbatch --plan: exit %d, task hosts %s (expected %s):\n%s%s"
                      % (r.returncode, hosts, expected, r.stdout, r.stderr))
    print("cluster plan: shards on node02 and node01 as cluster.servers names them, "
          "workers on %s" % hosts[2:])


def run_checks(name, checks):
    """Brings up the one-node cluster in a temporary folder, runs each of
    `checks`, a function of (cluster, folder), in order, and takes the
    cluster down (also on a failure or a signal). Returns the test's exit
    code: SKIP when a program is missing, the test is not root or a daemon
    cannot start; 1 at the first Failure (printed) or when a process of the
    cluster outlived it; else 0."""
    missing = [p for p in PROGRAMS if shutil.which(p, path=os.environ.get("PATH", "") +
                                                   ":/usr/sbin:/sbin") is None]
    if missing:
        print("SKIP: not installed: %s (Debian: slurmctld slurmd slurm-client munge, see "
              "scripts/setup.sh)" % " ".join(missing))
        return launcher_job.SKIP
    if os.geteuid() != 0:
        print("SKIP: slurmd must run as root to start job steps; run this test as root")
        return launcher_job.SKIP
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    launcher_job.exit_on_signals()
    work = tempfile.mkdtemp(prefix="ps_slurm_")
    cluster = SlurmCluster(work)
    rc = 0
    try:
        cluster.start()
        print("slurm: node %s idle (slurmctld, slurmd, munged in %s)" % (cluster.node, work))
        for check in checks:
            check(cluster, work)
    except Skip as e:
        print("SKIP: %s" % e)
        rc = launcher_job.SKIP
    except Failure as e:
        print("FAILED: %s" % e)
        rc = 1
    finally:
        leftovers = cluster.stop()
        if leftovers:
            print("FAILED: processes of this cluster outlived it (killed):\n  " +
                  "\n  ".join(leftovers))
            rc = 1
        shutil.rmtree(work, ignore_errors=True)
    if rc == 0:
        print("%s: passed" % name)
    return rc


def main():
    source_dir, bin_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    return run_checks("slurm_launch_test", [
        lambda cluster, work: check_job(cluster, source_dir, bin_dir, work),
        lambda cluster, work: check_too_few_tasks(cluster, source_dir, bin_dir, work),
        lambda cluster, work: check_failing_worker(cluster, source_dir, bin_dir, work),
        lambda cluster, work: check_cluster_plan(cluster, source_dir, bin_dir, work),
    ])


if __name__ == "__main__":
    sys.exit(main())
