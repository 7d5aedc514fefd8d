"""Backup workers (consistency.backup_workers), with the real binaries.

    backup_workers_job_test.py BIN_DIR

A sparse logistic regression job under bsp with aggregation, 2 shards and
4 workers of which one is a backup (each clock's update the mean of the
first 3 gradients to reach a shard), worker 3 slowed 3x (stragglers
slow_factor 3, a 4 ms step), runs under ps_launch. While it runs,
`ps_ctl status --json` is read every 200 ms (until it shows 20 late
pushes of the slow worker) and each process's metrics endpoint every 100 ms (the last read is its final values: metrics.linger_ms
keeps them served after the end). Then:

  - the job succeeds and worker 0's loss goes down;
  - the slow worker logged that it continues at the job's clock, and a
    shard logged one of its pushes dropped as late;
  - its metrics count late pushes and skipped clocks, and ps_ctl status
    showed its late pushes while the job ran, more than any other worker's;
  - the shards' final per-worker late-push counts add up to the workers'
    own counts.

No timing is asserted; benchmarks/README.md ("Backup workers") measures
what it buys.
"""

import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "util"))
import job_checks  # noqa: E402
from service_process import free_port, free_port_run  # noqa: E402

checks = job_checks.Checks()
check = checks.check
WORKERS = 4
SLOW = 3


def job_yaml(servers, metrics_port):
    return """cluster:
  servers: [%s]
  workers: %d
tables:
  - name: weights
    rows: 100000
    optimizer: { type: adagrad, lr: 0.15, l2: 0.0001 }
consistency: { mode: bsp, aggregate: true, backup_workers: 1 }
stragglers: { slow_worker: %d, slow_factor: 3, step_ms: 4 }
metrics: { port: %d, interval_ms: 100, linger_ms: 3000 }
train:
  program: sparse_logistic_regression
  table: weights
  samples_per_worker: 50000
  test_samples: 5000
  batch_size: 200
  iterations: 400
  eval_every: 200
  log_every: 100
""" % (", ".join('"%s"' % s for s in servers), WORKERS, SLOW, metrics_port)


def value(text, name, label=None):
    """The sample of `name` (with `label`, e.g. 'worker="3"', among its
    labels when given) in a metrics text, or None."""
    labels = r"\{[^}]*\}" if label is None else r"\{[^}]*%s[^}]*\}" % re.escape(label)
    m = re.search(r"^%s(?:%s)? (\S+)$" % (re.escape(name), labels), text or "", re.M)
    return float(m.group(1)) if m else None


def body(tmp, procs):
    bin_dir = sys.argv[1]
    servers = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()]
    # Metrics ports: the shards first, then the workers.
    first = free_port_run(6)
    shard_ports = [first, first + 1]
    worker_ports = [first + 2 + r for r in range(WORKERS)]
    config = os.path.join(tmp, "job.yaml")
    with open(config, "w") as f:
        f.write(job_yaml(servers, first))
    launch = subprocess.Popen([os.path.join(bin_dir, "ps_launch"), "--config", config],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    procs.append(launch)
    status = None  # the ps_ctl status that showed the slow worker's late pushes
    next_status = [0.0]

    def ask_status():
        # Asked until it shows the slow worker well behind in late pushes:
        # afterwards the loop only reads the metrics, fast enough to catch
        # the final values the processes serve after the end.
        nonlocal status
        if status is not None or time.monotonic() < next_status[0]:
            return
        next_status[0] = time.monotonic() + 0.2
        rc, out = job_checks.run([os.path.join(bin_dir, "ps_ctl"), "status", "--config",
                                  config, "--json"], timeout=10)
        try:
            view = json.loads(out) if rc == 0 else None
        except ValueError:
            view = None
        if view and view.get("workers") and \
                (view["workers"][SLOW].get("late_pushes") or 0) >= 20:
            status = view

    wanted = {p: "ps_worker_steps_total" for p in worker_ports}
    wanted.update({p: "ps_server_worker_late_pushes_total" for p in shard_ports})
    texts = job_checks.watch_metrics(launch, wanted, 180, tick=ask_status)
    last = [texts[p] for p in worker_ports]
    last_shard = [texts[p] for p in shard_ports]
    out = launch.communicate(timeout=30)[0]
    check(launch.returncode == 0, "the job with a backup worker succeeded (exit %s)" %
          launch.returncode, out[-3000:])
    losses = re.findall(r"\[worker 0\].*done: first loss ([0-9.]+), last loss ([0-9.]+)", out)
    check(len(losses) == 1 and float(losses[0][1]) < float(losses[0][0]),
          "worker 0's loss went down: %s" % losses)
    check(re.search(r"\[worker %d\].*continues there \(consistency.backup_workers" % SLOW, out),
          "the slow worker logged that it continues at the job's clock", out[-2000:])
    check(re.search(r"\[server \d\].*worker \d's push of clock \d+ came after 3 of the 4 "
                    r"workers' gradients.*dropped", out),
          "a shard logged a push dropped as late", out[-2000:])

    late = [value(t, "ps_worker_late_pushes_total") for t in last]
    skipped = [value(t, "ps_worker_clocks_skipped_total") for t in last]
    check(None not in late and None not in skipped and late[SLOW] + skipped[SLOW] > 0,
          "the slow worker's metrics count late pushes (%s) and skipped clocks (%s)" %
          (late, skipped))
    check(status is not None, "ps_ctl status showed the slow worker's late pushes while the "
          "job ran")
    if status is not None:
        counts = [w.get("late_pushes") for w in status["workers"]]
        check(all(c is not None for c in counts) and
              counts[SLOW] == max(counts),
              "ps_ctl status: the slow worker has the most late pushes: %s" % counts)
    per_shard = [[value(t, "ps_server_worker_late_pushes_total", 'worker="%d"' % r)
                  for r in range(WORKERS)] for t in last_shard]
    if None not in late and all(None not in row for row in per_shard):
        totals = [sum(row[r] for row in per_shard) for r in range(WORKERS)]
        check(totals == late, "the shards' late pushes per worker %s are the workers' own %s" %
              (totals, late))
    else:
        check(False, "every shard and worker served its late-push counts: %s %s" %
              (per_shard, late))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: backup_workers_job_test.py BIN_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(checks.run_and_clean_up(body, prefix="ps_backup_workers_test_"))
