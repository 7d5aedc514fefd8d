#!/usr/bin/env python3
"""Open MPI: the mpirun lines of deploy/mpi/README.md, run for real.

    tests/launchers/mpirun_test.py SOURCE_DIR BIN_DIR

1. The one-host block, as printed (its `job.yaml` and `build/bin/` replaced
   by this test's job and build folder), on a job of 2 servers and 4
   workers: mpirun must exit 0 before the deadline with every worker rank
   0..3 trained once, each shard serving the endpoint of its index (so
   both shard and rank came from OMPI_COMM_WORLD_RANK, the workers minus
   the server count), and both servers stopped by themselves once the
   workers left. Nothing of mpirun's process group may outlive it.
2. The same line with one server too many for the job file: it must fail
   (exit code not 0), naming the out-of-range shard, before the deadline.
3. The cluster block's placement, computed by mpirun without launching
   (--do-not-launch --display-map) on a hostfile of three hosts: shard i
   on host i, as the README says.

Skips (exit 77) when mpirun is not installed.
"""

import os
import re
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher_job  # noqa: E402
from launcher_job import Failure  # noqa: E402

DEADLINE_S = 45


def one_host_argv(readme, bin_dir, job):
    line = launcher_job.readme_block(readme, "tested: one host")
    if "build/bin/" not in line or "job.yaml" not in line:
        raise Failure("the one-host block no longer names build/bin/ and job.yaml: " + line)
    line = line.replace("build/bin/", bin_dir.rstrip("/") + "/").replace("job.yaml", job)
    return shlex.split(line)


def check_one_host(readme, bin_dir, work):
    job = launcher_job.write_job(os.path.join(work, "job.yaml"), servers=2, workers=4)
    argv = one_host_argv(readme, bin_dir, job)
    rc, out = launcher_job.run_in_group(argv, DEADLINE_S, cwd=work)
    if rc != 0:
        raise Failure("mpirun exited %d:\n%s" % (rc, out))
    launcher_job.check_training(out, workers=4)
    launcher_job.check_servers(out, job)
    print("one host: mpirun exit 0, shards 0-1 and workers 0-3 from OMPI_COMM_WORLD_RANK, "
          "servers stopped by themselves")


def check_too_many_servers(readme, bin_dir, work):
    job = launcher_job.write_job(os.path.join(work, "bad.yaml"), servers=2, workers=4)
    argv = one_host_argv(readme, bin_dir, job)
    argv[argv.index("-np") + 1] = "3"  # three servers for a job of two
    rc = expect_refused(argv, work, "3 servers for a 2-server job",
                        r"shard 2 \(from environment variable OMPI_COMM_WORLD_RANK\S*\) is out of "
                        r"range")
    print("one host, 3 servers for 2: mpirun exit %d, naming shard 2" % rc)


def expect_refused(argv, work, what, error):
    """Runs the mpirun line `argv`, which starts `what` (a wrong process
    count): it must exit non-zero before the deadline, with output that
    matches the regular expression `error`. Returns its exit code."""
    rc, out = launcher_job.run_in_group(argv, DEADLINE_S, cwd=work)
    if rc == 0:
        raise Failure("mpirun with %s exited 0:\n%s" % (what, out))
    if not re.search(error, out):
        raise Failure("mpirun with %s: no error matching /%s/:\n%s" % (what, error, out))
    return rc


def check_cluster_placement(readme, work, marker="cluster"):
    """The block after `<!-- marker -->`, run with --do-not-launch
    --display-map on a hostfile of three hosts: 2 servers and 4 workers,
    shard i on host i."""
    line = launcher_job.readme_block(readme, marker)
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("node01 slots=2\nnode02 slots=2\nnode03 slots=2\n")
    argv = shlex.split(os.path.expandvars(line))
    argv[argv.index("--hostfile") + 1] = hosts
    extra = ["--do-not-launch", "--display-map"]
    if os.geteuid() == 0:
        extra.append("--allow-run-as-root")
    argv[1:1] = extra
    rc, out = launcher_job.run_in_group(argv, DEADLINE_S, cwd=work)
    if rc != 0:
        raise Failure("mpirun --do-not-launch exited %d:\n%s" % (rc, out))
    placed = {}
    node = None
    for l in out.splitlines():
        m = re.search(r"Data for node: (\S+)", l)
        if m:
            node = m.group(1)
        m = re.search(r"Process rank: (\d+)", l)
        if m:
            placed[int(m.group(1))] = node
    if placed.get(0) != "node01" or placed.get(1) != "node02" or len(placed) != 6:
        raise Failure("cluster block: expected shard 0 on node01, shard 1 on node02 and 6 "
                      "ranks, got %s:\n%s" % (placed, out))
    print("%s block: shard 0 on node01, shard 1 on node02, workers on %s"
          % (marker, [placed[r] for r in range(2, 6)]))


def run_checks(name, checks):
    """Runs each of `checks`, a function of a temporary folder, in order
    and returns the test's exit code: SKIP when mpirun is not installed, 1
    at the first Failure (printed), else 0. The folder is removed."""
    launcher_job.exit_on_signals()
    if shutil.which("mpirun") is None:
        print("SKIP: mpirun is not installed (Debian: openmpi-bin, see scripts/setup.sh)")
        return launcher_job.SKIP
    work = tempfile.mkdtemp(prefix="ps_mpirun_")
    try:
        for check in checks:
            check(work)
    except Failure as e:
        print("FAILED: %s" % e)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%s: passed" % name)
    return 0


def main():
    source_dir, bin_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    readme = os.path.join(source_dir, "deploy", "mpi", "README.md")
    return run_checks("mpirun_launch_test", [
        lambda work: check_one_host(readme, bin_dir, work),
        lambda work: check_too_many_servers(readme, bin_dir, work),
        lambda work: check_cluster_placement(readme, work),
    ])


if __name__ == "__main__":
    sys.exit(main())
