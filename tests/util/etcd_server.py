"""A real one-member etcd (/usr/bin/etcd, Debian's etcd-server) on loopback,
for the Python tests of what talks to etcd. The same as tests/util/etcd_server.h.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
    from etcd_server import EtcdServer

    with EtcdServer() as etcd:          # unittest.SkipTest when etcd is not installed
        job["replication"]["etcd"] = {"endpoints": [etcd.endpoint]}
        ...

etcd gets two free loopback ports (client and peer), a data folder in a
temporary folder of its own, and heartbeat 10 ms / election timeout 100 ms,
so it elects itself within a second and allows leases of 1 s. Its log (zap,
JSON lines) goes to etcd.log in the temporary folder. Starting, retries,
errors (EtcdError) and stopping by pid: tests/util/service_process.py.
"""

import os
import urllib.error
import urllib.request

from service_process import ServiceError, ServiceProcess, free_port  # noqa: F401


class EtcdError(ServiceError):
    """etcd did not start, or did not become healthy in time."""


class EtcdServer(ServiceProcess):
    """Starts etcd in the constructor; see the module comment."""

    NAME = "etcd"
    BINARY = "/usr/bin/etcd"
    NOT_INSTALLED = "etcd-server is not installed; ./ps setup installs it"
    ERROR = EtcdError
    LOG_FROM_STDOUT = False

    def __init__(self, timeout=15.0):
        super().__init__(timeout)

    @property
    def endpoint(self):
        """etcd's client address, "127.0.0.1:port"."""
        return self.address

    def _argv(self):
        client_port = free_port()
        peer_port = free_port()
        while peer_port == client_port:
            peer_port = free_port()
        self.address = "127.0.0.1:%d" % client_port
        client_url = "http://" + self.address
        peer_url = "http://127.0.0.1:%d" % peer_port
        return [self.BINARY, "--name", "test", "--data-dir", os.path.join(self.dir, "data"),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", "test=" + peer_url, "--heartbeat-interval", "10",
                "--election-timeout", "100", "--logger", "zap", "--log-outputs", self.log]

    def _ready(self):
        """GET /health says there is a leader (/version answers before the election)."""
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with no_proxy.open("http://%s/health" % self.address, timeout=1) as r:
                return b'"health":"true"' in r.read()
        except (OSError, urllib.error.URLError):
            return False


if __name__ == "__main__":
    # A self-check: start, show where, stop.
    with EtcdServer() as etcd:
        print("etcd pid %d serving at %s" % (etcd.pid, etcd.endpoint))
    print("stopped; folder removed")
