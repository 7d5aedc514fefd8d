"""Work that follows speed (stragglers.balance), with the real binaries.

    balance_job_test.py BIN_DIR

A sparse logistic regression job under bsp, 2 shards and 4 workers, worker
3 slowed 3x per sample (stragglers.slow_factor 3 with a 4 ms step), runs
under ps_launch with stragglers.balance. While it runs, each worker's
metrics endpoint is read every 100 ms (the last read is its final values:
metrics.linger_ms keeps them served after the end). Then:

  - the job succeeds and its loss goes down;
  - every worker logged a balance decision, and all took the same number;
  - at the last decision (the same clock on every worker: bsp) the four
    batches sum to the job's 4 x 200 samples per clock exactly;
  - the slow worker's batch is below half the nominal 200 and the smallest,
    and the other three together take more than their 3 x 200 (each one's
    share depends on how the other tests load the machine, so only their
    sum is checked).

No timing is asserted; benchmarks/README.md measures what it buys.
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "util"))
import job_checks  # noqa: E402
from service_process import free_port, free_port_run  # noqa: E402

checks = job_checks.Checks()
check = checks.check
WORKERS = 4
BATCH = 200


def job_yaml(servers, metrics_port):
    return """cluster:
  servers: [%s]
  workers: %d
tables:
  - name: weights
    rows: 100000
    optimizer: { type: adagrad, lr: 0.05, l2: 0.0001 }
consistency: { mode: bsp }
stragglers: { slow_worker: 3, slow_factor: 3, step_ms: 4, balance: true, balance_window: 10 }
metrics: { port: %d, interval_ms: 100, linger_ms: 3000 }
train:
  program: sparse_logistic_regression
  table: weights
  samples_per_worker: 50000
  test_samples: 5000
  batch_size: %d
  iterations: 400
  eval_every: 200
  log_every: 200
""" % (", ".join('"%s"' % s for s in servers), WORKERS, metrics_port, BATCH)


def value(text, name):
    m = re.search(r"^%s\{[^}]*\} (\S+)$" % name, text or "", re.M)
    return float(m.group(1)) if m else None


def body(tmp, procs):
    bin_dir = sys.argv[1]
    servers = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()]
    # Metrics ports: shards first, then the workers.
    first = free_port_run(6)
    worker_ports = [first + 2 + r for r in range(WORKERS)]
    config = os.path.join(tmp, "job.yaml")
    with open(config, "w") as f:
        f.write(job_yaml(servers, first))
    launch = subprocess.Popen([os.path.join(bin_dir, "ps_launch"), "--config", config],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    procs.append(launch)
    texts = job_checks.watch_metrics(launch, {p: "ps_worker_steps_total" for p in worker_ports},
                                     180)
    last = [texts[p] for p in worker_ports]
    out = launch.communicate(timeout=30)[0]
    check(launch.returncode == 0, "the balanced job succeeded (exit %s)" % launch.returncode,
          out[-3000:])
    decisions = {r: len(re.findall(r"\[worker %d\].*balance at clock" % r, out))
                 for r in range(WORKERS)}
    check(all(n >= 1 for n in decisions.values()),
          "every worker logged a balance decision: %s" % decisions, out[-2000:])
    counts = [value(t, "ps_worker_balance_decisions_total") for t in last]
    batches = [value(t, "ps_worker_batch_size") for t in last]
    check(None not in counts and len(set(counts)) == 1 and counts[0] >= 30,
          "all workers took the same decisions (%s of 39 windows)" % counts)
    check(None not in batches and sum(batches) == WORKERS * BATCH,
          "the last split gives the job's %d samples per clock: %s" % (WORKERS * BATCH, batches))
    check(None not in batches and batches[3] < BATCH / 2 and
          all(b > batches[3] for b in batches[:3]) and sum(batches[:3]) > 3 * BATCH,
          "the slow worker 3 takes under half a batch and the least, the others more "
          "than their 3 batches together: %s" % batches)
    losses = re.findall(r"\[worker 0\].*done: first loss ([0-9.]+), last loss ([0-9.]+)", out)
    check(len(losses) == 1 and float(losses[0][1]) < float(losses[0][0]),
          "worker 0's loss went down: %s" % losses)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: balance_job_test.py BIN_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(checks.run_and_clean_up(body, prefix="ps_balance_test_"))
