"""A third-party service (etcd, Prometheus) that a test starts itself on
loopback ports, with its state in a temporary folder of its own, and stops
by pid. The base of tests/util/etcd_server.py and prometheus_server.py.

A subclass names the program (NAME, BINARY, NOT_INSTALLED, ERROR) and says
how to start it on fresh ports (_argv, which sets self.address) and when it
is ready (_ready). The constructor starts it: unittest.SkipTest when the
program is not installed; a start that loses a port to another process is
tried again on new ones; a start that fails or is not ready in time raises
ERROR with the last lines of its log (<folder>/<NAME>.log). Leaving the
with-block (also on an exception) or close() stops it (SIGTERM, SIGKILL
after 5 s, reaped) and removes the folder. Not thread-safe.
"""

import os
import shutil
import signal
import random
import socket
import subprocess
import tempfile
import time
import unittest

STOP_GRACE_S = 5
ATTEMPTS = 3


class ServiceError(RuntimeError):
    """The service did not start, or was not ready in time."""


def free_port():
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_run(n):
    """The first of `n` consecutive loopback TCP ports that were free a
    moment ago (metrics ports: shards, then workers). Drawn below the
    kernel's ephemeral range, where free_port() and every connection's own
    port come from, so that ports other tests are given do not fall inside
    the run."""
    rng = random.SystemRandom()
    for _ in range(100):
        first = rng.randrange(20000, 32000 - n)
        socks = []
        try:
            for p in range(first, first + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no %d consecutive free loopback ports in 20000-32000" % n)


class ServiceProcess:
    NAME = "service"
    BINARY = None
    NOT_INSTALLED = "not installed"
    ERROR = ServiceError
    # True: the program's stdout and stderr are its log; False: it writes
    # the log itself (_argv passes the path).
    LOG_FROM_STDOUT = True

    def __init__(self, timeout):
        if not os.access(self.BINARY, os.X_OK):
            raise unittest.SkipTest(self.NOT_INSTALLED)
        self.dir = tempfile.mkdtemp(prefix="ps-%s-" % self.NAME)
        self.log = os.path.join(self.dir, self.NAME + ".log")
        self.process = None
        self.address = None
        try:
            self._prepare()
            for attempt in range(ATTEMPTS):
                if self._launch(timeout, last=attempt + 1 == ATTEMPTS):
                    return
        except BaseException:
            self.close()
            raise

    @property
    def pid(self):
        return self.process.pid if self.process else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Stops the service (SIGTERM, SIGKILL after 5 s) and removes its folder. Idempotent."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log_tail(self, lines=30):
        """The last `lines` lines of the service's log, indented."""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return "".join("  " + line for line in f.readlines()[-lines:])
        except OSError as e:
            return "  (no log: %s)\n" % e

    def _prepare(self):
        """Before the first start (config files in self.dir)."""

    def _argv(self):
        """The command line of one start on fresh ports; sets self.address."""
        raise NotImplementedError

    def _ready(self):
        """True once the service answers as ready."""
        raise NotImplementedError

    def _launch(self, timeout, last):
        """One start: True once ready, False when a port was taken (and this is
        not the last attempt); raises ERROR otherwise."""
        shutil.rmtree(os.path.join(self.dir, "data"), ignore_errors=True)
        argv = self._argv()
        with open(self.log, "a") as log:
            out = log if self.LOG_FROM_STDOUT else subprocess.DEVNULL
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=out, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                tail = self.log_tail()
                if "address already in use" in tail and not last:
                    return False
                raise self.ERROR("%s %s exited with code %d while starting; its log %s ends:\n%s"
                                 % (self.NAME, self.address, code, self.log, tail))
            if self._ready():
                return True
            time.sleep(0.02)
        raise self.ERROR("%s %s not ready after %.0f s; its log %s ends:\n%s"
                         % (self.NAME, self.address, timeout, self.log, self.log_tail()))
