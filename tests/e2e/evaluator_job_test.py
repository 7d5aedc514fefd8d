"""The evaluator process (cluster.evaluator), with the real binaries.

    evaluator_job_test.py BIN_DIR

1. The same sparse logistic regression job (bsp with consistency.aggregate,
   whose arithmetic is the same in every run; 2 shards, 2 workers) runs
   under ps_launch twice: worker 0 evaluating between its steps, then with
   an evaluator. The evaluator's test log-loss at clocks 100, 200 and 300
   equals worker 0's at those clocks in the first run, digit for digit: it
   reads the model of exactly the clocks below the one it names. Worker 0
   of the second run evaluates nothing; the metrics CSV holds the
   evaluator's rows; its metrics endpoint serves ps_evaluator_*; the
   shards exit only after the evaluator left.
2. The evaluator is killed (SIGKILL) after its first evaluation: ps_launch
   starts it again, it evaluates from the job's current clock on, the
   last clock included, and the job succeeds. (Past
   liveness.worker_restarts the job ends with exit 1 saying the evaluator
   failed: tests/tools/launcher_test.cc.)
3. Under security.mode curve the evaluator reads with its own key
   (evaluator.secret from ps_ctl keygen); without it, it fails naming the
   file.
4. Refused with exit 2 and a message naming what to change: --evaluator
   on a job without cluster.evaluator; --evaluator with --rank; a
   program that has no held-out data (linear_regression) with
   cluster.evaluator.
"""

import csv
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "util"))
import job_checks  # noqa: E402
from service_process import free_port, free_port_run  # noqa: E402

checks = job_checks.Checks()
check = checks.check
RUN_TIMEOUT_S = 180


def job_yaml(tmp, name, evaluator, iterations=300, metrics_port=0, extra=""):
    servers = ", ".join('"127.0.0.1:%d"' % free_port() for _ in range(2))
    return """cluster:
  servers: [%s]
  workers: 2
  evaluator: %s
tables:
  - name: weights
    rows: 100000
    optimizer: { type: adagrad, lr: 0.05, l2: 0.0001 }
consistency: { mode: bsp, aggregate: true }
metrics: { port: %d, interval_ms: 100, linger_ms: %d }
%s
train:
  program: sparse_logistic_regression
  table: weights
  samples_per_worker: 20000
  test_samples: 4000
  batch_size: 200
  iterations: %d
  eval_every: 100
  log_every: 100
  metrics_csv: %s
""" % (servers, "true" if evaluator else "false", metrics_port, 2000 if metrics_port else 0,
       extra, iterations, os.path.join(tmp, name + ".csv"))


def write(tmp, name, text):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def metrics_rows(path, worker):
    """{clock: metric text} of `worker`'s rows that hold an evaluation."""
    with open(path) as f:
        return {int(r["clock"]): r["metric"] for r in csv.DictReader(f)
                if r["worker"] == worker and r["metric"]}


def same_numbers(tmp, procs, bin_dir):
    launch = os.path.join(bin_dir, "ps_launch")
    plain = write(tmp, "plain", job_yaml(tmp, "plain", evaluator=False))
    rc, out = job_checks.run([launch, "--config", plain], timeout=RUN_TIMEOUT_S)
    check(rc == 0, "the job without an evaluator succeeds", out[-3000:])
    reference = metrics_rows(os.path.join(tmp, "plain.csv"), "0")
    check(sorted(reference) == [100, 200, 300],
          "worker 0 evaluated at clocks 100, 200, 300: %s" % reference)

    port = free_port_run(5)
    evaluator_port = port + 2 + 2  # after the 2 shards and 2 workers (common/metrics.h)
    config = write(tmp, "evaluated", job_yaml(tmp, "evaluated", evaluator=True, metrics_port=port))
    p = job_checks.spawn([launch, "--config", config])
    procs.append(p)
    scraped = None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while p.poll() is None and time.monotonic() < deadline:
        text = job_checks.scrape(evaluator_port)
        if text and "ps_evaluator_evaluations_total" in text:
            scraped = text
        time.sleep(0.1)
    out = p.communicate(timeout=30)[0]
    check(p.returncode == 0, "the job with an evaluator succeeds (exit %s)" % p.returncode,
          out[-3000:])
    got = metrics_rows(os.path.join(tmp, "evaluated.csv"), "evaluator")
    check(got == reference,
          "the evaluator's test log-loss equals worker 0's at every clock: %s against %s" %
          (got, reference))
    check(not metrics_rows(os.path.join(tmp, "evaluated.csv"), "0"),
          "worker 0 evaluated nothing")
    check(re.search(r"\[worker 0\].*done: first loss [0-9.]+, last loss [0-9.]+, [0-9]+ "
                    r"samples/s, [0-9.]+ s waiting on staleness, step [0-9.]+ ms: [^|]*?, push "
                    r"[0-9.]+, metrics", out) is not None,
          "worker 0's summary has no test metric", out[-2000:])
    check(re.search(r"\[evaluator\].*done: 3 evaluations, test log-loss", out) is not None,
          "the evaluator's summary counts 3 evaluations", out[-2000:])
    for shard in (0, 1):
        left = out.find("[server %d] " % shard)
        gone = re.search(r"\[server %d\].*shard %d: the evaluator left the job" % (shard, shard),
                         out)
        exits = re.search(r"\[server %d\].*every worker has left the job, and so has the "
                          r"evaluator; the shard exits" % shard, out)
        check(left >= 0 and gone is not None and exits is not None and
              gone.start() < exits.start(),
              "shard %d exits only after the evaluator left" % shard, out[-3000:])
    check(scraped is not None and
          re.search(r"^ps_evaluator_evaluations_total 3$", scraped, re.M) is not None and
          re.search(r'^ps_evaluator_test_metric\{metric="test log-loss"\} ', scraped, re.M)
          is not None and re.search(r"^ps_evaluator_clock 300$", scraped, re.M) is not None,
          "the evaluator's metrics endpoint serves its evaluations", scraped or "(nothing)")


def killed_evaluator(tmp, procs, bin_dir):
    liveness = "liveness: { heartbeat_ms: 100, timeout_ms: 1500 }"
    config = write(tmp, "killed", job_yaml(tmp, "killed", evaluator=True, iterations=600,
                                           extra=liveness))
    p = job_checks.spawn([os.path.join(bin_dir, "ps_launch"), "--config", config])
    procs.append(p)
    out = ""
    pid = None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    # Reads lines until the evaluator's first evaluation, then kills it.
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        out += line
        m = re.search(r"started evaluator \(pid (\d+)\)", line)
        if m:
            pid = int(m.group(1))
        if pid is not None and re.search(r"\[evaluator\].*clock 100 of 600", line):
            os.kill(pid, signal.SIGKILL)
            break
    check(pid is not None, "the evaluator ran and evaluated clock 100", out[-2000:])
    rest = p.communicate(timeout=RUN_TIMEOUT_S)[0]
    out += rest
    check(p.returncode == 0, "the job succeeds, exit 0 (got %s)" % p.returncode, out[-3000:])
    check(re.search(r"\[launch\] evaluator killed by signal 9 \(Killed\); restarted it "
                    r"\(restart 1 of 3, pid \d+\): it evaluates from the job's current clock on",
                    out) is not None,
          "ps_launch starts the evaluator again", out[-3000:])
    check(re.search(r"\[evaluator\].*clock 600 of 600: test log-loss", out) is not None,
          "the evaluator started again makes the last evaluation", out[-3000:])
    check(re.search(r"\[worker 0\].*done: first loss", out) is not None and
          re.search(r"\[worker 1\].*done: first loss", out) is not None,
          "both workers finished", out[-3000:])
    # ps_launch stops the shards once the workers are done (it knows the
    # evaluator died); on their own they find it dead after
    # liveness.timeout_ms (tests/server/evaluator_test.cc).
    for shard in (0, 1):
        check("[launch] server %d exited with code 0" % shard in out,
              "shard %d exited cleanly" % shard, out[-3000:])
    check(out.rstrip().endswith("[launch] job succeeded: all 2 workers finished (exit 0)"),
          "the result line", out[-500:])


def under_curve(tmp, procs, bin_dir):
    keys = os.path.join(tmp, "keys")
    config = write(tmp, "curve", job_yaml(tmp, "curve", evaluator=True, iterations=200,
                                          extra="security: { mode: curve, keys_dir: %s }" %
                                          keys))
    rc, out = job_checks.run([os.path.join(bin_dir, "ps_ctl"), "keygen", "--config", config])
    check(rc == 0 and os.path.exists(os.path.join(keys, "evaluator.secret")),
          "ps_ctl keygen writes the evaluator's key pair", out)
    rc, out = job_checks.run([os.path.join(bin_dir, "ps_launch"), "--config", config],
                             timeout=RUN_TIMEOUT_S)
    check(rc == 0 and re.search(r"\[evaluator\].*clock 200 of 200: test log-loss", out) and
          "refused" not in out,
          "under curve the evaluator reads with its own key (exit %d)" % rc, out[-3000:])
    os.remove(os.path.join(keys, "evaluator.secret"))
    rc, out = job_checks.run([os.path.join(bin_dir, "ps_worker"), "--config", config,
                              "--evaluator"])
    check(rc != 0 and os.path.join(keys, "evaluator.secret") in out,
          "without evaluator.secret the evaluator fails naming it (exit %d)" % rc, out)


def refusals(tmp, bin_dir):
    worker = os.path.join(bin_dir, "ps_worker")
    plain = write(tmp, "noeval", job_yaml(tmp, "noeval", evaluator=False))
    rc, out = job_checks.run([worker, "--config", plain, "--evaluator"])
    check(rc == 2 and "cluster.evaluator: false; set it to true" in out,
          "--evaluator without cluster.evaluator is refused (exit %d)" % rc, out)
    evaluated = write(tmp, "witheval", job_yaml(tmp, "witheval", evaluator=True))
    rc, out = job_checks.run([worker, "--config", evaluated, "--evaluator", "--rank", "1"])
    check(rc == 2 and "--evaluator is a process of its own" in out,
          "--evaluator with --rank is refused (exit %d)" % rc, out)
    rc, out = job_checks.run([worker, "--config", evaluated, "--evaluator", "--check"])
    check(rc == 0 and "the evaluator, 2 servers" in out,
          "--evaluator --check says what would run (exit %d)" % rc, out)
    linear = write(tmp, "linear", """cluster: { servers: ["127.0.0.1:7990"], workers: 1,
  evaluator: true }
tables:
  - { name: weights, rows: 64, dim: 1 }
train: { program: linear_regression, table: weights, features: 64 }
""")
    rc, out = job_checks.run([worker, "--config", linear, "--check"])
    check(rc == 2 and "cluster.evaluator: got true, but train.program linear_regression has no "
                      "held-out data" in out,
          "a program without held-out data refuses cluster.evaluator (exit %d)" % rc, out)


def body(tmp, procs):
    bin_dir = sys.argv[1]
    refusals(tmp, bin_dir)
    same_numbers(tmp, procs, bin_dir)
    killed_evaluator(tmp, procs, bin_dir)
    under_curve(tmp, procs, bin_dir)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: evaluator_job_test.py BIN_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(checks.run_and_clean_up(body, prefix="ps_evaluator_test_"))
