"""The training workloads, their job YAML, and running one job.

WORKLOADS are the jobs training_bench.py, kill_restart_bench.py and the
convergence suite train; job_yaml() writes one as a job file for a worker
count, consistency mode, seed and straggler setting; run_job() runs it with
ps_launch (or ps_worker --standalone) and reads worker 0's evaluations from
its metrics CSV.
"""

import csv
import json
import os
import re
import subprocess
import sys
import time

# The repository root.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The loopback ports the tests use too (below the kernel's ephemeral range).
sys.path.insert(0, os.path.join(ROOT, "tests", "util"))
from ports import free_port, port_free  # noqa: E402,F401 (re-exported to the benchmarks)
# What every script needs in its --bin folder.
BINARIES = ("ps_launch", "ps_worker", "ps_server")
# Where the mlp program reads Fashion-MNIST when train.data_dir is unset
# (the Debian package dataset-fashion-mnist).
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

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
    "ctr": {
        "what": "ctr: 8 fields x 20,000 values (hashed embeddings, dim 16) + 4 dense, "
                "MLP 132-64-32-1, 2 x 10^6 samples, one pass",
        "metric": "test AUC",
        "target": ("within_abs_of_sequential", 0.002),
        "total_steps": 7800,
        "evals": 6,
        "tables": "  - { name: embeddings, keys: hashed, dim: 16, max_rows: 200000,\n"
                  "      evict: { policy: lru }, init: { type: normal, stddev: 0.01, seed: 5 },\n"
                  "      optimizer: { type: adagrad, lr: 0.1 } }\n"
                  "  - { name: mlp, rows: 10625, init: { type: uniform, scale: 0.1, seed: 6 },\n"
                  "      optimizer: { type: adagrad, lr: 0.02 } }\n",
        "train": "  program: ctr\n  table: mlp\n  samples_per_worker: {samples_per_worker}\n"
                 "  test_samples: 20000\n  batch_size: 256\n"
                 "  ctr: { embedding_table: embeddings, fields: 8, dense: 4, vocabulary: 20000,\n"
                 "         hidden: [64, 32] }\n",
        "samples": 2000000,
    },
}


def higher_is_better(w):
    """True when a higher metric of workload `w` is better (accuracy, AUC),
    False for a loss or an error."""
    return w["metric"] in ("test accuracy", "test AUC")


def free_replica_ports(shards, factor):
    """`shards` free loopback ports and a replication.port_offset whose
    backup ports (port + j * offset, j < factor) are free too."""
    for _ in range(100):
        ports = [free_port() for _ in range(shards)]
        if len(set(ports)) < shards:
            continue
        for offset in range(1000, 20000, 97):
            backups = [p + j * offset for p in ports for j in range(1, factor)]
            if all(b <= 65535 and b not in ports and port_free(b) for b in backups):
                return ports, offset
    raise RuntimeError("no free loopback ports for %d shards of %d replicas" % (shards, factor))


def missing_binaries(tool, bin_dir):
    """None when ps_launch, ps_worker and ps_server are in bin_dir, else the
    message `tool` prints before it exits with 2."""
    for b in BINARIES:
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            return ("%s: %s not found in %s; build first (./ps build, or cmake --build build) "
                    "or pass --bin" % (tool, b, bin_dir))
    return None


def yaml_scalar(v):
    """A YAML flow rendering of a scalar or a list of scalars."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[%s]" % ", ".join(yaml_scalar(x) for x in v)
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v) if isinstance(v, float) else str(v)


def job_yaml(w, workers, consistency, steps, evals, metrics_csv, quick, seed=None,
             stragglers=None, shards=2, replication=1, after_aggregation=None,
             evaluator=False, backup_workers=0, lr_scale=1):
    """The YAML of `w` for `workers` workers, each running steps / workers.

    seed: None keeps the workload's seeds; an integer s moves every table's
    init seed from N to N + 1000 * s and sets train.seed (generated data and
    minibatch order where the program uses them) and stragglers.seed to s.
    stragglers: None, or the YAML flow map of the `stragglers` section
    without its braces (e.g. "slow_worker: 3, slow_factor: 3").
    replication: replication.factor (1: no backups).
    after_aggregation: None keeps replication.after_aggregation's default;
    True or False sets it (factor >= 2).
    evaluator: cluster.evaluator (an evaluator process evaluates instead of
    worker 0).
    backup_workers: the job runs workers + backup_workers workers (the
    consistency section sets consistency.backup_workers), each running
    steps / workers: every clock's update is the mean of `workers`
    gradients, as without backups; the data is split over all of them.
    lr_scale: every table's learning rate times this (under
    consistency.aggregate a clock applies the mean of the workers'
    gradients once where bsp applies each: the linear scaling rule sets
    lr_scale to the workers).
    """
    per_worker = max(1, steps // workers)
    every = max(1, per_worker // evals)
    workers += backup_workers
    ports, offset = free_replica_ports(shards, replication)
    servers = ", ".join('"127.0.0.1:%d"' % p for p in ports)
    tables = w["tables"].replace("DECAY", str(per_worker))
    if lr_scale != 1:
        tables = re.sub(r"\blr: ([0-9.]+)",
                        lambda m: "lr: %s" % yaml_scalar(float(m.group(1)) * lr_scale), tables)
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
    return ("cluster: { servers: [%s], workers: %d%s }\n" %
            (servers, workers, ", evaluator: true" if evaluator else "") +
            "tables:\n" + tables +
            "consistency: %s\n" % consistency +
            "liveness: { heartbeat_ms: 500, timeout_ms: 60000 }\n" +
            # A pull waiting for a slow worker outlives the dead-worker timeout.
            "client: { request_timeout_ms: 61000 }\n" + sections +
            ("replication: { factor: %d, port_offset: %d%s }\n" %
             (replication, offset, "" if after_aggregation is None else
              ", after_aggregation: %s" % yaml_scalar(after_aggregation))
             if replication > 1 else "") +
            "train:\n" + train +
            "  iterations: %d\n  eval_every: %d\n  log_every: %d\n" % (per_worker, every, every) +
            "  metrics_csv: %s\n" % metrics_csv)


def clear_metrics(path):
    """Removes the metrics CSV at `path` and the .prev copy ps_worker set
    aside from an earlier run, so that what is read afterwards is the new run's."""
    for p in (path, path + ".prev"):
        if os.path.exists(p):
            os.remove(p)


def read_metrics(path):
    """The job's evaluations (the evaluator's, cluster.evaluator, else worker
    0's) and every worker's last samples/s; RuntimeError when there are no
    evaluations."""
    evaluations, evaluator, last_rate = [], [], {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["worker"] == "evaluator":
                if row["metric"]:
                    evaluator.append(float(row["metric"]))
                continue
            last_rate[row["worker"]] = float(row["samples_per_s"])
            if row["worker"] == "0" and row["metric"]:
                evaluations.append(float(row["metric"]))
    evaluations = evaluator or evaluations
    if not evaluations:
        raise RuntimeError("no evaluations in " + path)
    return evaluations, last_rate


def tail_mean(evaluations):
    """The score of a run: the mean of its last three evaluations (not a lucky one)."""
    tail = evaluations[-3:]
    return sum(tail) / len(tail)


def run_job(bin_dir, out_dir, name, yaml_text, standalone, timeout=None):
    """Runs one job; returns (tail mean of the metric, samples/s of all workers, seconds).

    Writes <name>.yaml, .csv and .log under out_dir. timeout: seconds, or None
    for no limit. A run past it gets SIGTERM (ps_launch then stops its servers
    and workers), SIGKILL 15 s later, and raises.
    """
    os.makedirs(out_dir, exist_ok=True)
    config = os.path.join(out_dir, name + ".yaml")
    with open(config, "w") as f:
        f.write(yaml_text)
    metrics = os.path.join(out_dir, name + ".csv")
    clear_metrics(metrics)
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
    return tail_mean(evaluations), sum(rates.values()), seconds
