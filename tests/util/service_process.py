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
import subprocess
import tempfile
import time
import unittest

from ports import free_port, free_port_run  # noqa: F401 (the tests' ports, re-exported)

STOP_GRACE_S = 5
ATTEMPTS = 3


class ServiceError(RuntimeError):
    """The service did not start, or was not ready in time."""


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
