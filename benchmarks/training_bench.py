#!/usr/bin/env python3
"""Accuracy and speed of the training programs, distributed vs one process.

  python3 benchmarks/training_bench.py accuracy [--quick] [--only NAME ...]
  python3 benchmarks/training_bench.py speed [--runs 3]

accuracy: every workload below with 1, 2 and 4 workers under bsp and ssp 3
(2 shards), each run with ps_launch, plus the same job in one process with no
parameter server (ps_worker --standalone). Every configuration processes the
same data for the same total number of minibatches, so the runs differ only
in how the work is distributed. The score of a run is the mean of worker 0's
last three evaluations (not a lucky one), read from its metrics CSV.

speed: training samples per second of the MLP 784-100-10 on Fashion-MNIST
with 1, 2 and 4 workers (all workers together; evaluations excluded) against
the same model, backend and batch in one process with no parameter server,
side by side in one run, median of --runs.

Needs the binaries in build/bin (./ps build). Writes a markdown table to
stdout and every run's metrics CSV and log under --out (default
build/training_bench). Exit code 1 when a run fails or misses its target.
"""

import argparse
import csv
import os
import re
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> workload. total_steps: minibatches of the whole job (each of W
# workers runs total_steps / W; --quick: quick_steps, default a twentieth);
# evals: evaluations over the run. `tables`
# and `train` are YAML text; {samples_per_worker} is filled per worker count
# so that the data set is the same for every W.
WORKLOADS = {
    "softmax": {
        "what": "Fashion-MNIST softmax regression 784-10",
        "metric": "test accuracy",
        "target": ("at_least", 0.84),
        "total_steps": 14000,
        "evals": 14,
        "tables": "  - { name: model, rows: 7850, init: { type: uniform, scale: 0.01, seed: 7 },\n"
                  "      optimizer: { type: sgd, lr: 0.02, momentum: 0.9,\n"
                  "                   decay: cosine, decay_clocks: DECAY } }\n",
        "train": "  program: mlp\n  table: model\n  layers: [784, 10]\n  batch_size: 64\n",
    },
    "mlp": {
        "what": "Fashion-MNIST MLP 784-100-10",
        "metric": "test accuracy",
        "target": ("at_least", 0.87),
        "total_steps": 14000,
        "evals": 14,
        "tables": "  - { name: model, rows: 79510, init: { type: uniform, scale: 0.05, seed: 7 },\n"
                  "      optimizer: { type: sgd, lr: 0.015, momentum: 0.9,\n"
                  "                   decay: cosine, decay_clocks: DECAY } }\n",
        "train": "  program: mlp\n  table: model\n  layers: [784, 100, 10]\n  batch_size: 64\n",
    },
    "mlp_wide": {
        "what": "Fashion-MNIST MLP 784-256-10",
        "metric": "test accuracy",
        "target": ("about", 0.89),
        "total_steps": 28000,
        "evals": 14,
        "tables": "  - { name: model, rows: 203530, init: { type: uniform, scale: 0.05, seed: 7 },\n"
                  "      optimizer: { type: sgd, lr: 0.02, momentum: 0.9,\n"
                  "                   decay: cosine, decay_clocks: DECAY } }\n",
        "train": "  program: mlp\n  table: model\n  layers: [784, 256, 10]\n  batch_size: 64\n",
    },
    "sparse_lr": {
        "what": "sparse logistic regression, 10^6 features, 200k samples",
        "metric": "test log-loss",
        "target": ("within_of_sequential", 0.02),
        "total_steps": 1600,
        "evals": 8,
        "tables": "  - { name: weights, rows: 1000000,\n"
                  "      optimizer: { type: adagrad, lr: 0.05, l2: 0.0001 } }\n",
        "train": "  program: sparse_logistic_regression\n  table: weights\n"
                 "  samples_per_worker: {samples_per_worker}\n  test_samples: 20000\n"
                 "  batch_size: 500\n",
        "samples": 200000,
    },
    "mf": {
        "what": "matrix factorization rank 5, 2000 x 1000, 5% observed, noise 0.1",
        "metric": "test RMSE",
        "target": ("within_of_sequential", 0.05),
        "total_steps": 27000,
        "quick_steps": 4500,  # past the first plateau, where the loss starts to fall
        "evals": 9,
        "tables": "  - { name: users, rows: 2000, dim: 5, init: { type: normal, stddev: 0.1, seed: 3 },\n"
                  "      optimizer: { type: sgd, lr: 8 } }\n"
                  "  - { name: items, rows: 1000, dim: 5, init: { type: normal, stddev: 0.1, seed: 4 },\n"
                  "      optimizer: { type: sgd, lr: 8 } }\n",
        "train": "  program: matrix_factorization\n  observe_probability: 0.05\n  noise: 0.1\n"
                 "  test_fraction: 0.1\n  batch_size: 100\n",
    },
}

MODES = [("bsp", "{ mode: bsp }"), ("ssp 3", "{ mode: ssp, staleness: 3 }")]
WORKERS = [1, 2, 4]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_binaries(tool, bin_dir):
    """None when ps_launch, ps_worker and ps_server are in bin_dir, else the
    message `tool` prints before it exits with 2."""
    for b in ("ps_launch", "ps_worker", "ps_server"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            return ("%s: %s not found in %s; build first (./ps build, or cmake --build build) "
                    "or pass --bin" % (tool, b, bin_dir))
    return None


def job_yaml(w, workers, consistency, steps, evals, metrics_csv, quick, seed=None,
             stragglers=None, shards=2):
    """The YAML of `w` for `workers` workers, each running steps / workers.

    seed: None keeps the workload's seeds; an integer s moves every table's
    init seed from N to N + 1000 * s and sets train.seed (generated data and
    minibatch order where the program uses them) and stragglers.seed to s.
    stragglers: None, or the YAML flow map of the `stragglers` section
    without its braces (e.g. "slow_worker: 3, slow_factor: 3").
    """
    per_worker = max(1, steps // workers)
    every = max(1, per_worker // evals)
    servers = ", ".join('"127.0.0.1:%d"' % free_port() for _ in range(shards))
    tables = w["tables"].replace("DECAY", str(per_worker))
    train = w["train"].replace("{samples_per_worker}",
                               str(max(1000, w.get("samples", 0) // workers)))
    if seed is not None:
        tables = re.sub(r"seed: (\d+)", lambda m: "seed: %d" % (int(m.group(1)) + 1000 * seed),
                        tables)
        train += "  seed: %d\n" % seed
    sections = ""
    if stragglers or seed is not None:
        parts = [p for p in (stragglers, None if seed is None else "seed: %d" % seed) if p]
        sections = "stragglers: { %s }\n" % ", ".join(parts)
    return ("cluster: { servers: [%s], workers: %d }\n" % (servers, workers) +
            "tables:\n" + tables +
            "consistency: %s\n" % consistency +
            "liveness: { heartbeat_ms: 500, timeout_ms: 60000 }\n" + sections +
            "train:\n" + train +
            "  iterations: %d\n  eval_every: %d\n  log_every: %d\n" % (per_worker, every, every) +
            "  metrics_csv: %s\n" % metrics_csv)


def read_metrics(path):
    """Worker 0's evaluations and every worker's last samples/s."""
    evaluations, last_rate = [], {}
    with open(path) as f:
        for row in csv.DictReader(f):
            last_rate[row["worker"]] = float(row["samples_per_s"])
            if row["worker"] == "0" and row["metric"]:
                evaluations.append(float(row["metric"]))
    return evaluations, last_rate


def run(bin_dir, out_dir, name, yaml_text, standalone, timeout=None):
    """Runs one job; returns (tail mean of the metric, samples/s of all workers, seconds).

    timeout: seconds, or None for no limit. A run past it gets SIGTERM (ps_launch
    then stops its servers and workers), SIGKILL 15 s later, and raises.
    """
    os.makedirs(out_dir, exist_ok=True)
    config = os.path.join(out_dir, name + ".yaml")
    with open(config, "w") as f:
        f.write(yaml_text)
    metrics = os.path.join(out_dir, name + ".csv")
    for p in (metrics, metrics + ".prev"):
        if os.path.exists(p):
            os.remove(p)
    if standalone:
        cmd = [os.path.join(bin_dir, "ps_worker"), "--config", config, "--standalone"]
    else:
        cmd = [os.path.join(bin_dir, "ps_launch"), "--config", config]
    start = time.monotonic()
    with open(os.path.join(out_dir, name + ".log"), "w") as log:
        with subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT) as proc:
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise RuntimeError("%s ran past %.0f s and was stopped; see %s.log" %
                                   (" ".join(cmd), timeout, os.path.join(out_dir, name)))
    seconds = time.monotonic() - start
    if code != 0:
        raise RuntimeError("%s exited with %d; see %s.log" % (" ".join(cmd), code,
                                                             os.path.join(out_dir, name)))
    evaluations, rates = read_metrics(metrics)
    if not evaluations:
        raise RuntimeError("no evaluations in " + metrics)
    tail = evaluations[-3:]
    return sum(tail) / len(tail), sum(rates.values()), seconds


def verdict(w, score, sequential):
    kind, value = w["target"]
    if kind == "at_least":
        return score >= value, ">= %.2f" % value
    if kind == "about":
        return score >= value - 0.01, "about %.2f" % value
    lower_is_better = w["metric"] != "test accuracy"
    limit = sequential * (1 + value) if lower_is_better else sequential * (1 - value)
    ok = score <= limit if lower_is_better else score >= limit
    return ok, "within %d%% of 1 process" % round(value * 100)


def accuracy(args):
    names = args.only or list(WORKLOADS)
    failed = False
    print("| workload | metric | target | 1 process | " +
          " | ".join("%s %dw" % (m, n) for m, _ in MODES for n in WORKERS) + " |")
    print("|---" * (4 + len(MODES) * len(WORKERS)) + "|")
    for name in names:
        w = WORKLOADS[name]
        steps = w.get("quick_steps", w["total_steps"] // 20) if args.quick else w["total_steps"]
        evals = 3 if args.quick else w["evals"]
        out = os.path.join(args.out, "accuracy", name)
        cells = []
        try:
            seq, _, secs = run(args.bin, out, "standalone",
                               job_yaml(w, 1, "{ mode: bsp }", steps, evals,
                                        os.path.join(out, "standalone.csv"), args.quick), True)
            print("%s: 1 process %.4f (%.0f s)" % (name, seq, secs), file=sys.stderr)
            for mode, consistency in MODES:
                for n in WORKERS:
                    tag = "%s_%dw" % (mode.replace(" ", ""), n)
                    score, _, secs = run(args.bin, out, tag,
                                         job_yaml(w, n, consistency, steps, evals,
                                                  os.path.join(out, tag + ".csv"), args.quick),
                                         False)
                    ok, target = verdict(w, score, seq)
                    if not args.quick and not ok:
                        failed = True
                    cells.append("%.4f%s" % (score, "" if ok or args.quick else " (missed)"))
                    print("%s: %s %d workers %.4f (%.0f s)" % (name, mode, n, score, secs),
                          file=sys.stderr)
        except RuntimeError as e:
            print("%s: %s" % (name, e), file=sys.stderr)
            failed = True
            continue
        _, target = verdict(w, seq, seq)
        print("| %s | %s | %s | %.4f | %s |" % (w["what"], w["metric"], target, seq,
                                                " | ".join(cells)))
        sys.stdout.flush()
    return 1 if failed else 0


def speed(args):
    w = WORKLOADS["mlp"]
    steps = 1200 if args.quick else 8000
    out = os.path.join(args.out, "speed")
    rows = {n: [] for n in WORKERS}
    for r in range(args.runs):
        # Side by side: the single process and each worker count in every round.
        one = run(args.bin, out, "standalone",
                  job_yaml(w, 1, "{ mode: asp }", steps, 1, os.path.join(out, "standalone.csv"),
                           args.quick), True)[1]
        for n in WORKERS:
            # Every worker runs the full step count: throughput, not a fixed job.
            total = run(args.bin, out, "ssp3_%dw" % n,
                        job_yaml(w, n, "{ mode: ssp, staleness: 3 }", steps * n, 1,
                                 os.path.join(out, "ssp3_%dw.csv" % n), args.quick), False)[1]
            rows[n].append((total, one))
            print("round %d: %d workers %.0f samples/s, 1 process %.0f samples/s" %
                  (r + 1, n, total, one), file=sys.stderr)
    print("| workers | samples/s, all workers | samples/s, 1 process, no PS | ratio |")
    print("|---|---|---|---|")
    for n in WORKERS:
        totals = [t for t, _ in rows[n]]
        ones = [o for _, o in rows[n]]
        ratio = statistics.median(t / o for t, o in rows[n])
        print("| %d | %.0f | %.0f | %.2fx |" % (n, statistics.median(totals),
                                                 statistics.median(ones), ratio))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["accuracy", "speed"])
    p.add_argument("--quick", action="store_true",
                   help="a twentieth of the steps: checks that every run completes")
    p.add_argument("--only", nargs="+", choices=list(WORKLOADS), help="accuracy: these workloads")
    p.add_argument("--runs", type=int, default=3, help="speed: rounds (median reported)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--out", default=os.path.join(ROOT, "build", "training_bench"))
    args = p.parse_args()
    missing = missing_binaries("training_bench", args.bin)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    return accuracy(args) if args.what == "accuracy" else speed(args)


if __name__ == "__main__":
    sys.exit(main())
