"""A real Prometheus (/usr/bin/prometheus, Debian's prometheus) on loopback,
for the tests of the metrics endpoints.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
    from prometheus_server import PrometheusServer

    with PrometheusServer(["127.0.0.1:9100", ...], scrape_interval="1s") as prom:
        prom.wait_for_targets()               # unittest.SkipTest above when not installed
        prom.query('last_over_time(up[5m])')  # the result list of the HTTP API

Prometheus gets a free loopback port (a start that loses it to another
process is tried again on a new one), a scrape config generated for the
targets given (one job, "ps"), and its database in a temporary folder of
its own; its log goes to prometheus.log there. Starting, retries, errors
(PrometheusError) and stopping by pid: tests/util/service_process.py.
"""

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from service_process import ServiceError, ServiceProcess, free_port  # noqa: F401


class PrometheusError(ServiceError):
    """Prometheus did not start, did not get ready in time, or refused a query."""


class PrometheusServer(ServiceProcess):
    """Starts Prometheus in the constructor; see the module comment."""

    NAME = "prometheus"
    BINARY = "/usr/bin/prometheus"
    NOT_INSTALLED = "prometheus is not installed; ./ps setup installs it"
    ERROR = PrometheusError

    def __init__(self, targets, scrape_interval="1s", timeout=30.0):
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        super().__init__(timeout)

    def _prepare(self):
        self.config = os.path.join(self.dir, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write("global:\n  scrape_interval: %s\n  scrape_timeout: %s\n"
                    "scrape_configs:\n  - job_name: ps\n    static_configs:\n"
                    "      - targets: [%s]\n" %
                    (self.scrape_interval, self.scrape_interval,
                     ", ".join('"%s"' % t for t in self.targets)))

    def _argv(self):
        self.address = "127.0.0.1:%d" % free_port()
        return [self.BINARY, "--config.file", self.config,
                "--storage.tsdb.path", os.path.join(self.dir, "data"),
                "--web.listen-address", self.address]

    def _ready(self):
        try:
            with self._open("http://%s/-/ready" % self.address, timeout=1) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def query(self, expr):
        """The result list of an instant query (/api/v1/query); each item has
        'metric' (labels) and 'value' ([time, "text"])."""
        url = "http://%s/api/v1/query?%s" % (self.address,
                                             urllib.parse.urlencode({"query": expr}))
        try:
            with self._open(url, timeout=10) as r:
                reply = json.loads(r.read().decode())
        except (OSError, urllib.error.URLError, ValueError) as e:
            raise PrometheusError("query %r: %s" % (expr, e))
        if reply.get("status") != "success":
            raise PrometheusError("query %r: %s" % (expr, reply))
        return reply["data"]["result"]

    def wait_for_targets(self, timeout=30.0):
        """Returns once every target is in the scrape pool (Prometheus applies
        a new config's targets some seconds after it is ready); raises
        PrometheusError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self._open("http://%s/api/v1/targets" % self.address, timeout=5) as r:
                    active = json.loads(r.read().decode())["data"]["activeTargets"]
                if len(active) >= len(self.targets):
                    return
            except (OSError, urllib.error.URLError, ValueError, KeyError):
                pass
            time.sleep(0.1)
        raise PrometheusError("prometheus %s: the %d targets not in its scrape pool after %.0f s;"
                              " its log %s ends:\n%s" % (self.address, len(self.targets), timeout,
                                                          self.log, self.log_tail()))

    def metric_names(self):
        """Every metric name Prometheus has stored (/api/v1/label/__name__/values)."""
        try:
            with self._open("http://%s/api/v1/label/__name__/values" % self.address,
                            timeout=10) as r:
                reply = json.loads(r.read().decode())
        except (OSError, urllib.error.URLError, ValueError) as e:
            raise PrometheusError("metric names: %s" % e)
        return set(reply.get("data", []))

    def values(self, expr, by):
        """{label `by`'s value: float} of an instant query's result."""
        return {item["metric"].get(by, ""): float(item["value"][1]) for item in self.query(expr)}

    @staticmethod
    def _open(url, timeout):
        return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            url, timeout=timeout)


if __name__ == "__main__":
    with PrometheusServer(["127.0.0.1:1"]) as prom:
        print("prometheus pid %d at %s" % (prom.pid, prom.address))
    print("stopped; folder removed")
