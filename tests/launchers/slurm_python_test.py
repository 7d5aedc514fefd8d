#!/usr/bin/env python3
"""Slurm with Python workers: the blocks of deploy/slurm/README.md's
"Python workers" section on the one-node Slurm cluster of slurm_test.py,
brought up and taken down by this test.

    tests/launchers/slurm_python_test.py SOURCE_DIR BIN_DIR PYTHON_DIR

Run by the interpreter the module `ps` is built for (CMake's PS_PYTHON),
which stands for the blocks' /usr/bin/python3; the workers' train.py is
tests/python/sum_worker.py, whose integer pushes give every worker an
exact sum to check. PYTHONPATH is taken out of the environment: the
workers must find the module through ps_job.sbatch, which puts PS_BIN's
../python (PYTHON_DIR) on their path. Then:

1. The job-file block (train.command) in a job of 2 servers and 2
   workers, submitted with the one-node block as printed: the job must end
   before the deadline COMPLETED with ExitCode 0:0, and its output file
   must show both Python workers finished with the exact sum, each having
   taken its rank from SLURM_PROCID minus 2 (the server count), each shard
   serving its own endpoint, both servers stopped by themselves, and the
   script's result line.
2. A job whose Python workers fail (the dense table's sgd makes their
   pulls differ from the sums: each exits 1) must end, its servers too,
   FAILED with the workers' ExitCode 1.
3. `ps_job.sbatch --plan` with a train.command under --cpus-per-task 2:
   the workers' multi-prog line is the command with `--config JOB
   --cpu-threads 2`; a command word with white space is refused (exit 2)
   naming it.

Cleanup and skips as in slurm_test.py.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher_job  # noqa: E402
import slurm_test  # noqa: E402
from launcher_job import Failure  # noqa: E402

JOB_DEADLINE_S = slurm_test.JOB_DEADLINE_S
CLOCKS = 10  # sum_worker.py's default


class Paths:
    """Where the blocks' names point in this test."""

    def __init__(self, source_dir, bin_dir, python_dir):
        self.source_dir = source_dir
        self.readme = os.path.join(source_dir, "deploy", "slurm", "README.md")
        self.bin_dir = bin_dir
        self.python_dir = python_dir
        self.train = os.path.join(source_dir, "tests", "python", "sum_worker.py")


def train_section(paths):
    """The job-file block, with this test's interpreter and train.py."""
    text = launcher_job.readme_text(paths.readme, "tested: python job file")
    if '"/usr/bin/python3"' not in text or '"train.py"' not in text:
        raise Failure("the python job file block no longer names /usr/bin/python3 and train.py: "
                      + text)
    return (text.replace('"/usr/bin/python3"', '"%s"' % sys.executable)
            .replace('"train.py"', '"%s"' % paths.train))


def submit_python_job(cluster, paths, job):
    """Submits the Python one-node block on `job`; (job id, state, exit
    code, output)."""
    line = slurm_test.one_node_line(paths.source_dir, job, "tested: python one node")
    job_id = cluster.submit(line, os.path.dirname(job), {"PS_BIN": paths.bin_dir})
    state, exit_code = cluster.wait_job(job_id, JOB_DEADLINE_S)
    out = launcher_job.read_text(os.path.join(os.path.dirname(job), "slurm-%s.out" % job_id))
    return job_id, state, exit_code, out


def check_python_job(cluster, paths, work):
    job = launcher_job.write_sums_job(os.path.join(work, "job.yaml"), servers=2, workers=2,
                                      extra=train_section(paths))
    job_id, state, exit_code, out = submit_python_job(cluster, paths, job)
    if state != "COMPLETED" or exit_code != "0:0":
        raise Failure("job %s ended %s with ExitCode %s:\n%s" % (job_id, state, exit_code, out))
    total = launcher_job.check_sums(
        out, workers=2, clocks=CLOCKS,
        source=r'environment variable SLURM_PROCID="[23]" minus offset 2')
    launcher_job.check_servers(out, job)
    if "ps_job: the workers run train.command: %s %s --config %s" % (
            sys.executable, paths.train, job) not in out:
        raise Failure("no line naming the workers' command in job %s's output:\n%s"
                      % (job_id, out))
    if "ps_job: result: exit 0 (2 servers, 2 workers)" not in out:
        raise Failure("no result line in job %s's output:\n%s" % (job_id, out))
    print("sbatch job %s: COMPLETED, ExitCode 0:0, Python workers 0-1 from SLURM_PROCID minus 2 "
          "summed %d exactly, servers stopped by themselves" % (job_id, total))


def check_failing_python_workers(cluster, paths, work):
    job = launcher_job.write_sums_job(os.path.join(work, "sgd.yaml"), servers=2, workers=2,
                                      extra=train_section(paths),
                                      optimizer="{ type: sgd, lr: 1.0 }")
    job_id, state, exit_code, out = submit_python_job(cluster, paths, job)
    if (state != "FAILED" or exit_code != "1:0" or "below the bsp bound" not in out
            or "ps_job: result: exit 1 (2 servers, 2 workers)" not in out):
        raise Failure("job %s whose Python workers fail: %s, ExitCode %s (expected FAILED, 1:0, "
                      "the workers' error and the result line):\n%s"
                      % (job_id, state, exit_code, out))
    print("sbatch job %s whose Python workers fail: FAILED, ExitCode 1:0" % job_id)


def check_python_plan(cluster, paths, work):
    script = os.path.join(paths.source_dir, "deploy", "slurm", "ps_job.sbatch")
    env = dict(cluster.env, SLURM_JOB_ID="1", SLURM_NTASKS="6", SLURM_JOB_NODELIST="node01",
               SLURM_TASKS_PER_NODE="6", SLURM_CPUS_PER_TASK="2", PS_BIN=paths.bin_dir)

    def plan(name, command):
        job = launcher_job.write_sums_job(os.path.join(work, name), servers=2, workers=4,
                                          extra="train:\n  command: %s\n" % command)
        r = subprocess.run([script, "--plan", job], cwd=work, env=env, capture_output=True,
                           text=True, timeout=30)
        return job, r

    job, r = plan("plan.yaml", '["/usr/bin/python3", "train.py", "--clocks", "3"]')
    expected = "2-5 /usr/bin/python3 train.py --clocks 3 --config %s --cpu-threads 2" % job
    lines = r.stdout.split("tasks (--multi-prog):\n")[-1].splitlines()
    if r.returncode != 0 or len(lines) != 2 or lines[1] != expected:
        raise Failure("ps_job.sbatch --plan with a train.command: exit %d, expected the workers' "
                      "line %r:\n%s%s" % (r.returncode, expected, r.stdout, r.stderr))
    _, r = plan("spaced.yaml", '["/usr/bin/python3", "my train.py"]')
    if r.returncode != 2 or not re.search(r'train.command\[1\] "my train.py" has white space',
                                          r.stderr):
        raise Failure("ps_job.sbatch --plan with a command word holding a space: exit %d, "
                      "expected 2 naming train.command[1]:\n%s%s"
                      % (r.returncode, r.stdout, r.stderr))
    print("python plan: workers run '%s'; a word with a space refused" % expected)


def main():
    paths = Paths(*(os.path.abspath(a) for a in sys.argv[1:4]))
    beside = os.path.realpath(os.path.join(paths.bin_dir, "..", "python"))
    if beside != os.path.realpath(paths.python_dir):
        print("FAILED: the module's folder %s is not %s, where ps_job.sbatch looks for it"
              % (paths.python_dir, beside))
        return 1
    os.environ.pop("PYTHONPATH", None)
    return slurm_test.run_checks("slurm_python_launch_test", [
        lambda cluster, work: check_python_job(cluster, paths, work),
        lambda cluster, work: check_failing_python_workers(cluster, paths, work),
        lambda cluster, work: check_python_plan(cluster, paths, work),
    ])


if __name__ == "__main__":
    sys.exit(main())
