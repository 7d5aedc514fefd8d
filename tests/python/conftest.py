"""What the Python module's tests share: a job on loopback with its real
ps_server processes, started by the test and always stopped by pid.

    def test_x(cluster):
        job = cluster(workers=1)          # writes the job file, starts the shards
        with ps.Worker(job.path, 0) as w:
            ...

Environment (set by ctest, tests/python/CMakeLists.txt): PS_BIN_DIR, the
folder of ps_server; PYTHONPATH, build/python.
"""

import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
from ports import free_port  # noqa: E402,F401 (examples_test imports it from here)

BIN_DIR = os.environ.get("PS_BIN_DIR", "")
STOP_GRACE_S = 5

# Two tables of every test job: a dense one (rows 0..9, 3 floats each) and a
# hashed one (any uint64 id, 2 floats), both summing what is pushed (`add`),
# so that integer pushes give exact results.
TABLES = """tables:
  - name: dense
    rows: 10
    dim: 3
    optimizer: { type: add }
  - name: by_id
    keys: hashed
    dim: 2
    max_rows: 1000
    optimizer: { type: add }
"""


def job_text(servers, workers, consistency="bsp", extra="", tables=TABLES):
    addresses = ", ".join('"127.0.0.1:%d"' % free_port() for _ in range(servers))
    return ("cluster:\n  servers: [%s]\n  workers: %d\n%s"
            "consistency: { mode: %s }\n%s" % (addresses, workers, tables, consistency, extra))


def run_python_workers(script, config, workers, args=(), timeout=120):
    """Runs `script` (a file beside this one) once per rank with ps_worker's
    flags (--config, --rank) and `args`, all at once, each a process of its
    own; [(exit code, output)] by rank. Processes still running after
    `timeout` seconds are killed, also when the test fails meanwhile."""
    processes = [subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), script),
         "--config", config, "--rank", str(rank), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for rank in range(workers)]
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, out) for p, out in zip(processes, outputs)]


def run_ps_launch(config, cwd, timeout=120, env=None):
    """Runs `ps_launch --config config` in `cwd` until it exits; (exit code,
    its output: every child's lines, as ps_launch relays them). Past
    `timeout` seconds ps_launch gets SIGTERM (it stops its servers and
    workers), then SIGKILL after STOP_GRACE_S (its children die with it:
    they ask the kernel for SIGKILL when their parent dies), and the test
    fails; so does anything else that stops the test meanwhile, with the
    same clean-up."""
    process = subprocess.Popen([os.path.join(BIN_DIR, "ps_launch"), "--config", config],
                               cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output = process.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        stop_process_group(process)
        pytest.fail("ps_launch --config %s ran past %d s:\n%s"
                    % (config, timeout, process.communicate()[0]))
    finally:
        stop_process_group(process)
    return process.returncode, output


def stop_process_group(process):
    """SIGTERM to the process group of `process` (started with
    start_new_session) while it runs, SIGKILL after STOP_GRACE_S; reaped."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Job:
    """A job file and the ps_server processes serving it."""

    def __init__(self, tmp, servers, workers, consistency, extra, start, tables):
        self.path = str(tmp / "job.yaml")
        self.tmp = tmp
        with open(self.path, "w") as f:
            f.write(job_text(servers, workers, consistency, extra, tables))
        self.servers = []
        self.logs = []
        if start:
            for shard in range(servers):
                log = str(tmp / ("server%d.log" % shard))
                with open(log, "w") as out:
                    self.servers.append(subprocess.Popen(
                        [os.path.join(BIN_DIR, "ps_server"), "--config", self.path,
                         "--shard", str(shard)],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True))
                self.logs.append(log)

    def wait_servers(self, timeout):
        """Each server's exit code, waiting up to `timeout` seconds in all."""
        return [p.wait(timeout) for p in self.servers]

    def server_logs(self):
        text = ""
        for log in self.logs:
            with open(log, errors="replace") as f:
                text += "--- %s\n%s" % (log, f.read())
        return text

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_GRACE_S, to each server still running; reaped."""
        for p in self.servers:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.servers:
            try:
                p.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def cluster(tmp_path, request):
    """cluster(servers=2, workers=1, consistency="bsp", extra="", start=True,
    tables=TABLES): a Job whose servers run until the test ends (also when
    it fails); `tables` is the job file's tables section."""
    if not os.access(os.path.join(BIN_DIR, "ps_server"), os.X_OK):
        pytest.fail("PS_BIN_DIR=%r holds no ps_server: run the tests through ctest" % BIN_DIR)
    jobs = []

    def make(servers=2, workers=1, consistency="bsp", extra="", start=True, tables=TABLES):
        job = Job(tmp_path, servers, workers, consistency, extra, start, tables)
        jobs.append(job)
        return job

    yield make
    failed = getattr(request.node, "rep_call", None)
    for job in jobs:
        job.stop()
        if failed is not None and failed.failed:
            sys.stdout.write(job.server_logs())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item (the fixture prints the
    servers' logs when the test failed)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
