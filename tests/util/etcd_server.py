"""A real one-member etcd (/usr/bin/etcd, Debian's etcd-server) on loopback,
for the Python tests of what talks to etcd. The same as tests/util/etcd_server.h.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
    from etcd_server import EtcdServer

    with EtcdServer() as etcd:          # unittest.SkipTest when etcd is not installed
        job["replication"]["etcd"] = {"endpoints": [etcd.endpoint]}
        ...

etcd gets two free loopback ports (client and peer; a start that loses them
to another process is tried again with new ones), a data folder in a
temporary folder of its own, and heartbeat 10 ms / election timeout 100 ms,
so it elects itself within a second and allows leases of 1 s. Its log (zap,
JSON lines) goes to etcd.log in the temporary folder; a failed start raises
EtcdError with its last lines. Leaving the with-block (also on an exception)
or close() stops it by pid (SIGTERM, SIGKILL after 5 s, reaped) and removes
the folder. Not thread-safe: one thread drives an EtcdServer.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

ETCD = "/usr/bin/etcd"
NOT_INSTALLED = "etcd-server is not installed; ./ps setup installs it"
STOP_GRACE_S = 5
ATTEMPTS = 3


class EtcdError(RuntimeError):
    """etcd did not start, or did not become healthy in time."""


def free_port():
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdServer:
    """Starts etcd in the constructor; see the module comment."""

    def __init__(self, timeout=15.0):
        if not os.access(ETCD, os.X_OK):
            raise unittest.SkipTest(NOT_INSTALLED)
        self.dir = tempfile.mkdtemp(prefix="ps-etcd-")
        self.log = os.path.join(self.dir, "etcd.log")
        self.process = None
        self.endpoint = None
        try:
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
        """Stops etcd (SIGTERM, SIGKILL after 5 s) and removes its folder. Idempotent."""
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
        """The last `lines` lines of etcd's log, indented."""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return "".join("  " + line for line in f.readlines()[-lines:])
        except OSError as e:
            return "  (no log: %s)\n" % e

    def _launch(self, timeout, last):
        """One start on new ports: True once healthy, False when a port was taken (and
        this is not the last attempt); raises EtcdError otherwise."""
        shutil.rmtree(os.path.join(self.dir, "data"), ignore_errors=True)
        client_port = free_port()
        peer_port = free_port()
        while peer_port == client_port:
            peer_port = free_port()
        self.endpoint = "127.0.0.1:%d" % client_port
        client_url = "http://" + self.endpoint
        peer_url = "http://127.0.0.1:%d" % peer_port
        argv = [ETCD, "--name", "test", "--data-dir", os.path.join(self.dir, "data"),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", "test=" + peer_url, "--heartbeat-interval", "10",
                "--election-timeout", "100", "--logger", "zap", "--log-outputs", self.log]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                tail = self.log_tail()
                if "address already in use" in tail and not last:
                    return False
                raise EtcdError("etcd %s exited with code %d while starting; its log %s ends:\n%s"
                                % (self.endpoint, code, self.log, tail))
            if self._healthy():
                return True
            time.sleep(0.02)
        raise EtcdError("etcd %s not healthy after %.0f s; its log %s ends:\n%s"
                        % (self.endpoint, timeout, self.log, self.log_tail()))

    def _healthy(self):
        """GET /health says there is a leader (/version answers before the election)."""
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with no_proxy.open("http://%s/health" % self.endpoint, timeout=1) as r:
                return b'"health":"true"' in r.read()
        except (OSError, urllib.error.URLError):
            return False


if __name__ == "__main__":
    # A self-check: start, show where, stop.
    with EtcdServer() as etcd:
        print("etcd pid %d serving at %s" % (etcd.pid, etcd.endpoint))
    print("stopped; folder removed")
