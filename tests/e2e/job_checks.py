"""What the end-to-end job tests share: checks that are counted, not
fatal, child processes that are always killed, and the exit code.

    checks = Checks()
    checks.check(rc == 0, "what held", output)
    sys.exit(checks.run_and_clean_up(body, prefix="ps_my_test_"))

`body(tmp, procs)` gets a temporary folder and a list; every process it
appends (started with `spawn`) is SIGKILLed at the end if still running,
also on failure, and the folder is removed.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


class Checks:
    def __init__(self):
        self.failures = []

    def check(self, ok, what, output=""):
        if ok:
            print("ok: " + what)
        else:
            self.failures.append(what)
            print("FAIL: " + what + ("\n" + output if output else ""))

    def run_and_clean_up(self, body, prefix):
        """Runs body(tmp, procs); returns 0 when every check held, else 1."""
        tmp = tempfile.mkdtemp(prefix=prefix)
        procs = []
        try:
            body(tmp, procs)
        except subprocess.TimeoutExpired as e:
            self.check(False, "timeout: %s" % e)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            shutil.rmtree(tmp, ignore_errors=True)
        if self.failures:
            print("%d checks failed" % len(self.failures))
            return 1
        print("PASS")
        return 0


def run(cmd, timeout=30):
    """Runs cmd to its end: (exit code, stdout and stderr together)."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout


def spawn(cmd):
    """Starts cmd in a process group of its own, its output on a pipe."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def scrape(port):
    """The text a process serves at http://127.0.0.1:`port`/metrics, or None
    when nothing answers (no proxy, 1 s)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open("http://127.0.0.1:%d/metrics" % port, timeout=1) as r:
            return r.read().decode()
    except (OSError, urllib.error.URLError):
        return None


def watch_metrics(proc, wanted, seconds, tick=None):
    """While `proc` runs (at most `seconds`), reads the metrics of every port
    of `wanted` (port -> a series name) every 100 ms, and calls tick() once
    a round when given. Returns port -> the last text that held its series
    (None: never): after the job, the final values a process serves for
    metrics.linger_ms."""
    last = {port: None for port in wanted}
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        for port, series in wanted.items():
            text = scrape(port)
            if text and series in text:
                last[port] = text
        if tick is not None:
            tick()
        time.sleep(0.1)
    return last
