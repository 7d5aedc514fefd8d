"""ps_launch starts Python workers: a job whose train.command is a Python
script runs it once per rank with ps_worker's flags, beside the real
ps_server processes it starts itself, and exits 0 when every worker did.
A command that fails fails the job with the worker's exit code named, and
ps_worker refuses a job whose workers run a command of their own."""

import os
import subprocess
import sys

from conftest import BIN_DIR

HERE = os.path.dirname(os.path.abspath(__file__))


def launch(job, timeout=120):
    """ps_launch on `job`, from a folder without the ps module: the module
    must come from ps_launch's own build tree."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([os.path.join(BIN_DIR, "ps_launch"), "--config", job.path],
                          cwd=str(job.tmp), env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, start_new_session=True)


def test_ps_launch_runs_a_python_worker_per_rank(cluster):
    command = '  command: ["%s", "%s", "--clocks", "8"]\n' % (
        sys.executable, os.path.join(HERE, "sum_worker.py"))
    job = cluster(servers=2, workers=2, extra="train:\n" + command, start=False)
    run = launch(job)
    total = sum((r + 1) * (c + 1) for r in range(2) for c in range(8))
    assert run.returncode == 0, run.stdout
    # Both workers' lines, as ps_launch relays them.
    assert run.stdout.count("sums ok %d" % total) == 2, run.stdout


def test_a_failing_command_fails_the_job_naming_the_worker(cluster):
    job = cluster(servers=1, workers=1, start=False,
                  extra='train:\n  command: ["%s", "-c", "import sys; sys.exit(7)"]\n'
                  % sys.executable)
    run = launch(job)
    assert run.returncode != 0, run.stdout
    assert "worker 0" in run.stdout and "7" in run.stdout, run.stdout


def test_ps_worker_refuses_a_job_whose_workers_run_a_command(cluster):
    job = cluster(servers=1, workers=1, start=False,
                  extra='train:\n  command: ["python3", "train.py"]\n')
    run = subprocess.run([os.path.join(BIN_DIR, "ps_worker"), "--config", job.path, "--rank", "0"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60)
    assert run.returncode != 0
    assert "train.command (python3 train.py)" in run.stdout and "ps_launch" in run.stdout, \
        run.stdout
