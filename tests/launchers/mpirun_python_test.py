#!/usr/bin/env python3
"""Open MPI with Python workers: the mpirun lines of deploy/mpi/README.md's
"Python workers" section, run for real.

    tests/launchers/mpirun_python_test.py SOURCE_DIR BIN_DIR PYTHON_DIR

Run by the interpreter the module `ps` is built for (CMake's PS_PYTHON);
it stands for the blocks' /usr/bin/python3, PYTHON_DIR (the build's
python/ folder) for their build/python, BIN_DIR for build/bin/, and the
workers' train.py is tests/python/sum_worker.py, whose integer pushes give
every worker an exact sum to check.

1. The one-host block as printed, on a job of 2 servers and 4 workers:
   mpirun must exit 0 before the deadline with every Python worker rank
   0..3 finished once with the exact sum, each having taken its rank from
   OMPI_COMM_WORLD_RANK minus 2 (the server count), each shard serving
   the endpoint of its index, and both servers stopped by themselves once
   the workers left. Nothing of mpirun's process group may outlive it.
2. The workers-alone block, with the servers started by an mpirun of
   their own: its world holds only the 4 workers, so each takes its world
   rank as it is; both mpiruns exit 0.
3. The one-host block with one worker too many (5 for a 4-worker job):
   it must fail (exit code not 0) before the deadline, naming the
   out-of-range rank 4.
4. The cluster block's placement, computed by mpirun without launching
   on a hostfile of three hosts: shard i on host i.

Skips (exit 77) when mpirun is not installed.
"""

import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher_job  # noqa: E402
import mpirun_test  # noqa: E402
from launcher_job import Failure  # noqa: E402

DEADLINE_S = mpirun_test.DEADLINE_S
SERVERS_EXIT_S = 15  # the servers' own mpirun, once the workers' has ended
CLOCKS = 10  # sum_worker.py's default


class Paths:
    """Where the blocks' names point in this test."""

    def __init__(self, source_dir, bin_dir, python_dir):
        self.readme = os.path.join(source_dir, "deploy", "mpi", "README.md")
        self.bin_dir = bin_dir
        self.python_dir = python_dir
        self.train = os.path.join(source_dir, "tests", "python", "sum_worker.py")


def block_argv(paths, marker, job):
    """The block after `<!-- marker -->` as argv, its names replaced by this
    test's (build/bin/, build/python, /usr/bin/python3, train.py,
    job.yaml)."""
    line = launcher_job.readme_block(paths.readme, marker)
    for name in ("build/python", "/usr/bin/python3", "train.py", "job.yaml"):
        if name not in line:
            raise Failure("the %s block no longer names %s: %s" % (marker, name, line))
    line = (line.replace("build/bin/", paths.bin_dir.rstrip("/") + "/")
            .replace("build/python", paths.python_dir)
            .replace("train.py", paths.train).replace("job.yaml", job))
    return [sys.executable if arg == "/usr/bin/python3" else arg for arg in shlex.split(line)]


def check_one_host(paths, work):
    job = launcher_job.write_sums_job(os.path.join(work, "job.yaml"), servers=2, workers=4)
    rc, out = launcher_job.run_in_group(block_argv(paths, "tested: python one host", job),
                                        DEADLINE_S, cwd=work)
    if rc != 0:
        raise Failure("mpirun exited %d:\n%s" % (rc, out))
    total = launcher_job.check_sums(
        out, workers=4, clocks=CLOCKS,
        source=r'environment variable OMPI_COMM_WORLD_RANK="[2-5]" minus offset 2')
    launcher_job.check_servers(out, job)
    print("python one host: mpirun exit 0, Python workers 0-3 from OMPI_COMM_WORLD_RANK minus "
          "2 summed %d exactly, servers stopped by themselves" % total)


def check_workers_alone(paths, work):
    job = launcher_job.write_sums_job(os.path.join(work, "alone.yaml"), servers=2, workers=4)
    workers = block_argv(paths, "tested: python workers alone", job)
    first_np = workers.index("-np")
    servers = workers[:first_np] + ["-np", "2", os.path.join(paths.bin_dir, "ps_server"),
                                    "--config", job]
    log_path = os.path.join(work, "alone-servers.log")
    with open(log_path, "w") as log:
        server_run = subprocess.Popen(servers, cwd=work, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc, out = launcher_job.run_in_group(workers, DEADLINE_S, cwd=work)
        if rc != 0:
            raise Failure("the workers' mpirun exited %d:\n%s" % (rc, out))
        try:
            server_rc = server_run.wait(timeout=SERVERS_EXIT_S)
        except subprocess.TimeoutExpired:
            raise Failure("the servers' mpirun did not end within %d s after the workers' "
                          "did:\n%s" % (SERVERS_EXIT_S, launcher_job.read_text(log_path)))
        servers_out = launcher_job.read_text(log_path)
        if launcher_job.group_alive(server_run.pid):
            raise Failure("the servers' mpirun exited (%d) but left processes of its group "
                          "running:\n%s" % (server_rc, servers_out))
        if server_rc != 0:
            raise Failure("the servers' mpirun exited %d:\n%s" % (server_rc, servers_out))
        total = launcher_job.check_sums(
            out, workers=4, clocks=CLOCKS,
            source=r'environment variable OMPI_COMM_WORLD_RANK="[0-3]" \(OMPI_COMM_WORLD_SIZE '
                   r'is the role\'s count: no offset\)')
        launcher_job.check_servers(servers_out, job)
    finally:
        launcher_job.kill_group(server_run.pid)
        server_run.wait()
    print("python workers alone: both mpiruns exit 0, Python workers 0-3 took their world rank "
          "as it is and summed %d exactly" % total)


def check_too_many_workers(paths, work):
    job = launcher_job.write_sums_job(os.path.join(work, "bad.yaml"), servers=2, workers=4)
    argv = block_argv(paths, "tested: python one host", job)
    second_np = argv.index("-np", argv.index("-np") + 1)
    argv[second_np + 1] = "5"  # five workers for a job of four
    rc = mpirun_test.expect_refused(
        argv, work, "5 Python workers for a 4-worker job",
        r'rank 4 \(from environment variable OMPI_COMM_WORLD_RANK="6" minus offset 2\) is out '
        r'of range')
    print("python one host, 5 workers for 4: mpirun exit %d, naming rank 4" % rc)


def main():
    paths = Paths(*(os.path.abspath(a) for a in sys.argv[1:4]))
    return mpirun_test.run_checks("mpirun_python_launch_test", [
        lambda work: check_one_host(paths, work),
        lambda work: check_workers_alone(paths, work),
        lambda work: check_too_many_workers(paths, work),
        lambda work: mpirun_test.check_cluster_placement(paths.readme, work, "python cluster"),
    ])


if __name__ == "__main__":
    sys.exit(main())
