"""Every server and worker serves Prometheus metrics, checked through a real
Prometheus (Debian's prometheus) that this test starts on a loopback port,
with a generated scrape config and its database in a temporary folder, and
stops by pid.

    metrics_prometheus_test.py BIN_DIR

A sparse logistic regression job (2 shards, 2 workers, ssp 2) runs under
ps_launch with metrics.port set, renewing its metrics every 200 ms and
serving the final values for 4 s after the end (metrics.linger_ms), while
Prometheus scrapes all four processes every second. Then, through
Prometheus's HTTP query API, the series must agree with the job's own
counts: each shard's pushes and pulls with the shard's last log line (and
its hottest rows are rows it holds), each
worker's steps and samples with the job file, every shard's clock of every
worker with the steps, worker 0's test metric with its last log line, the
request histograms' counts with the request counters. A second job whose
metrics port is taken must fail at start with a message naming the port.
Exits 77 (skipped) when prometheus is not installed.
"""

import os
import re
import socket
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "util"))
import job_checks  # noqa: E402
from prometheus_server import PrometheusServer, free_port  # noqa: E402
from service_process import free_port_run  # noqa: E402

checks = job_checks.Checks()
check = checks.check
STEPS = 600
BATCH = 200


def job_yaml(servers, metrics_port):
    return """cluster:
  servers: [%s]
  workers: 2
tables:
  - name: weights
    rows: 100000
    optimizer: { type: adagrad, lr: 0.05 }
consistency: { mode: ssp, staleness: 2 }
metrics: { port: %d, interval_ms: 200, linger_ms: 4000 }
train:
  program: sparse_logistic_regression
  table: weights
  samples_per_worker: 60000
  test_samples: 5000
  batch_size: %d
  iterations: %d
  eval_every: 150
  log_every: 150
""" % (", ".join('"%s"' % s for s in servers), metrics_port, BATCH, STEPS)


def body(tmp, procs):
    bin_dir = sys.argv[1]
    servers = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()]
    port = free_port_run(4)
    targets = ["127.0.0.1:%d" % (port + i) for i in range(4)]
    config = os.path.join(tmp, "job.yaml")
    with open(config, "w") as f:
        f.write(job_yaml(servers, port))
    with PrometheusServer(targets, scrape_interval="1s") as prom:
        prom.wait_for_targets()
        print("prometheus %s scraping %s" % (prom.address, ", ".join(targets)))
        rc, out = job_checks.run([os.path.join(bin_dir, "ps_launch"), "--config", config],
                                 timeout=180)
        check(rc == 0, "the job succeeded (exit %d)" % rc, out[-3000:])
        pushes = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"shard (\d) stopped: (\d+) pushes, \d+ pulls", out)}
        pulls = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"shard (\d) stopped: \d+ pushes, (\d+) pulls", out)}
        finals = re.findall(r"\[worker 0\].*clock +%d .*test log-loss ([0-9.]+)" % STEPS, out)
        check(len(pushes) == 2 and len(pulls) == 2 and len(finals) == 1,
              "the log has each shard's counts and worker 0's last evaluation", out[-3000:])
        # Range selectors skip the stale markers Prometheus writes once a
        # process is gone: the last scraped value of each series.
        last = lambda m: "last_over_time(%s[5m])" % m  # noqa: E731

        up = prom.values("max_over_time(up[5m])", "instance")
        check(sorted(up) == sorted(targets) and all(v == 1 for v in up.values()),
              "Prometheus scraped all four processes: %s" % up)
        got = prom.values(last("ps_server_pushes_total"), "shard")
        check(got == {k: float(v) for k, v in pushes.items()},
              "pushes per shard agree with the shards' logs: %s vs %s" % (got, pushes))
        got = prom.values(last("ps_server_pulls_total"), "shard")
        check(got == {k: float(v) for k, v in pulls.items()},
              "pulls per shard agree with the shards' logs: %s vs %s" % (got, pulls))
        got = prom.values(last('ps_server_requests_total{op="push"}'), "shard")
        check(got == {k: float(v) for k, v in pushes.items()},
              "push requests per shard equal the pushes (none refused): %s" % got)
        count = prom.values(last('ps_server_request_duration_seconds_count{op="push"}'), "shard")
        inf = prom.values(last('ps_server_request_duration_seconds_bucket{op="push",le="+Inf"}'),
                          "shard")
        check(count == got and inf == got,
              "the push latency histogram counts every push: count %s, +Inf bucket %s" %
              (count, inf))
        clocks = prom.query(last("ps_server_worker_clock"))
        check(len(clocks) == 4 and all(float(c["value"][1]) == STEPS for c in clocks),
              "every shard has every worker at clock %d: %s" %
              (STEPS, [(c["metric"]["shard"], c["metric"]["worker"], c["value"][1])
                       for c in clocks]))
        got = prom.values(last("ps_server_departed_workers"), "shard")
        check(got == {"0": 2.0, "1": 2.0}, "both shards saw both workers leave: %s" % got)
        got = prom.values(last("ps_worker_steps_total"), "worker")
        check(got == {"0": STEPS, "1": STEPS}, "each worker did its %d steps: %s" % (STEPS, got))
        got = prom.values(last("ps_worker_samples_total"), "worker")
        check(got == {"0": STEPS * BATCH, "1": STEPS * BATCH},
              "each worker processed steps x batch samples: %s" % got)
        got = prom.values(last("ps_worker_step_duration_seconds_count"), "worker")
        check(got == {"0": STEPS, "1": STEPS}, "the step-time histogram counts each step: %s" % got)
        got = prom.values(last("ps_worker_test_metric"), "metric")
        check(finals and abs(got.get("test log-loss", -1) - float(finals[0])) < 1e-4,
              "worker 0's last test log-loss agrees with its log: %s vs %s" % (got, finals))
        hot = prom.query(last('ps_server_hot_row_pushes{table="weights"}'))
        shards_hot = {h["metric"]["shard"] for h in hot}
        in_range = all((int(h["metric"]["row"]) < 50000) == (h["metric"]["shard"] == "0")
                       for h in hot)
        # (Over the run the top 10 changed: every row that was in it is listed.)
        check(shards_hot == {"0", "1"} and in_range and
              all(float(h["value"][1]) > 0 for h in hot),
              "each shard names its hottest rows of the sparse pushes, its own rows: %s" %
              [(h["metric"]["shard"], h["metric"]["row"], h["value"][1]) for h in hot])
        # The Grafana dashboard asks only for series a job serves (those of
        # stragglers.balance aside: this job does not balance).
        with open(os.path.join(HERE, "..", "..", "deploy", "grafana", "ps_job.json")) as f:
            asked = set(re.findall(r"ps_(?:server|worker)_[a-z_]+", f.read()))
        stored = prom.metric_names()
        missing = sorted(n for n in asked - stored if n != "ps_worker_batch_size")
        check(not missing, "every series deploy/grafana/ps_job.json asks for was served "
              "(missing: %s)" % missing)
        got = prom.values(last("ps_worker_requests_total"), "worker")
        check(len(got) == 2 and all(v > 0 for v in got.values()),
              "each worker counted its requests: %s" % got)
        # Of hashed tables only, which this job has none of: served, and 0.
        for name in ("ps_worker_summed_rows_total", "ps_worker_residuals_dropped_total"):
            got = prom.values(last(name), "worker")
            check(len(got) == 2 and all(v == 0 for v in got.values()),
                  "each worker served %s, 0 without hashed tables: %s" % (name, got))

    # A taken metrics port: the process that needs it says so and fails.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        servers = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()]
        with open(config, "w") as f:
            f.write(job_yaml(servers, busy))
        rc, out = job_checks.run([os.path.join(bin_dir, "ps_server"), "--config", config,
                                  "--shard", "0"], timeout=30)
        check(rc == 1 and "cannot listen on 127.0.0.1:%d" % busy in out and
              "metrics.port" in out,
              "a shard whose metrics port is taken exits 1 naming it (exit %d)" % rc, out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: metrics_prometheus_test.py BIN_DIR", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(checks.run_and_clean_up(body, prefix="ps_metrics_test_"))
    except unittest.SkipTest as e:
        print("skipped: %s" % e)
        sys.exit(77)
