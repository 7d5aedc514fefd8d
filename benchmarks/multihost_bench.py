#!/usr/bin/env python3
"""Training over hosts with 1 and 10 Gbit/s links, against the same job on one host.

  sudo python3 benchmarks/multihost_bench.py [--quick] [--only mlp sparse_lr]
      [--modes bsp ssp3 asp] [--networks onehost 10gbit 1gbit]
      [--wire fp32 bf16 fp16] [--seeds N]

Workloads (psbench/workloads.py, the settings of training_bench.py):
  mlp        Fashion-MNIST MLP 784-100-10, batch 64, sgd with momentum and
             cosine decay, 14,000 minibatches in all; every step pulls and
             pushes the whole 79,510-float model (318 KB each way).
             Target: test accuracy >= 0.86.
  sparse_lr  sparse logistic regression, 10^6 features, 200,000 samples,
             batch 500, adagrad; each step pulls and pushes only the ~10,000
             rows its minibatch touches. 1,600 minibatches in all.
             Target: test log-loss <= 0.535 (one process ends at 0.5276).

Each workload runs with 2 shards and 4 workers under bsp, ssp 3 and asp,
on three networks:
  one host   ps_launch, every server and worker on one host's loopback;
  10gbit     servers on hosts server0, server1 and workers on hosts
             worker0..3 (network namespaces, tests/multihost/netns_cluster.py),
             every link limited to 10 Gbit/s by tbf; servers named by host;
  1gbit      the same hosts with 1 Gbit/s links.
All processes share this machine's cores whatever the network, so the
comparison isolates what the links cost. Every worker's BLAS has 1 thread.

Per run: training samples/s of all workers together (each worker's last
progress row, evaluations excluded), seconds until worker 0's evaluation
first met the target (its training time, from the metrics CSV; "-" when
never), the final metric (mean of the last three evaluations) and the wall
time of the run. The table also gives each run's samples/s as a fraction
of the one-host run of the same workload and mode.

--wire runs each setting with every table's values on the wire in those
types (TableOptions::wire, both directions; default fp32 alone), and the
table adds each run's samples/s against fp32's of the same workload, mode
and network. --seeds N runs each setting with seeds 0..N-1 (tables' init,
data order; default: the workloads' own seeds, once) and reports medians
over them. --modes and --networks run a subset.

--quick: a twentieth of the steps, 3 evaluations; checks that every run
completes (ctest multihost_bench_quick). Needs root (network namespaces);
exit code 77 (skipped) without them or without Fashion-MNIST, 1 when a run
fails, 2 on missing binaries. Writes every run's job, logs and metrics CSV
under --out (default build/multihost_bench).
"""

import argparse
import csv
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "multihost"))
import yaml  # noqa: E402

import netns_cluster  # noqa: E402
import ps_job  # noqa: E402
from psbench import workloads  # noqa: E402

EXIT_SKIPPED = 77
SHARDS = 2
WORKERS = 4
MODES = [("bsp", "{ mode: bsp }"), ("ssp 3", "{ mode: ssp, staleness: 3 }"),
         ("asp", "{ mode: asp }")]
NETWORKS = [None, "10gbit", "1gbit"]   # None: one host, loopback
WIRE_TYPES = ["fp32", "bf16", "fp16"]
ONE_HOST = "onehost"
TARGETS = {"mlp": 0.86, "sparse_lr": 0.535}
RUN_TIMEOUT_S = 600


def job_dict(w, consistency, steps, evals, metrics_csv, quick, wire="fp32", seed=None):
    text = workloads.job_yaml(w, WORKERS, consistency, steps, evals, metrics_csv, quick,
                              seed=seed, shards=SHARDS)
    job = yaml.safe_load(text)
    if wire != "fp32":
        for table in job["tables"]:
            table["wire"] = {"pull": wire, "push": wire}
    return job


def time_to_target(name, metrics_csv, target):
    """Worker 0's training seconds at its first evaluation meeting the
    target, or None."""
    higher = workloads.higher_is_better(workloads.WORKLOADS[name])
    with open(metrics_csv) as f:
        for row in csv.DictReader(f):
            if row["worker"] == "0" and row["metric"]:
                m = float(row["metric"])
                if (m >= target) if higher else (m <= target):
                    return float(row["time_s"])
    return None


def run_one(cluster, args, name, mode, consistency, network, wire="fp32", seed=None):
    w = workloads.WORKLOADS[name]
    steps = w.get("quick_steps", w["total_steps"] // 20) if args.quick else w["total_steps"]
    evals = 3 if args.quick else w["evals"]
    tag = "%s_%s_%s_%s%s" % (name, mode.replace(" ", ""), network or ONE_HOST, wire,
                             "" if seed is None else "_seed%d" % seed)
    out = os.path.join(args.out, tag)
    os.makedirs(out, exist_ok=True)
    cluster.log_dir = out
    metrics = os.path.join(out, "metrics.csv")
    workloads.clear_metrics(metrics)
    base = job_dict(w, consistency, steps, evals, metrics, args.quick, wire, seed)
    start = time.monotonic()
    if network is None:
        config = ps_job.write_yaml(ps_job.job_from(base, ps_job.loopback_servers(SHARDS),
                                                   WORKERS), os.path.join(out, "job.yaml"))
        ps_job.run_one_host(cluster, ONE_HOST, args.bin, config, RUN_TIMEOUT_S)
    else:
        for h in cluster.hosts:
            if h != ONE_HOST:
                cluster.set_rate(h, network)
        config = ps_job.write_yaml(ps_job.job_from(base, ps_job.host_servers(SHARDS), WORKERS),
                                   os.path.join(out, "job.yaml"))
        ps_job.DistributedJob(cluster, args.bin, config, SHARDS, WORKERS).run(RUN_TIMEOUT_S)
    wall = time.monotonic() - start
    evaluations, rates = workloads.read_metrics(metrics)
    return {"samples_s": sum(rates.values()), "final": workloads.tail_mean(evaluations),
            "ttt": time_to_target(name, metrics, TARGETS[name]), "wall": wall}


def unmet_needs(args):
    """None when this machine can run the benchmark, else (exit code, why)."""
    missing = workloads.missing_binaries("multihost_bench", args.bin)
    if missing:
        return 2, missing
    problem = netns_cluster.check_prerequisites()
    if problem is None and "mlp" in args.only and \
            not os.path.isdir(workloads.FASHION_MNIST_DIR):
        problem = "no Fashion-MNIST in " + workloads.FASHION_MNIST_DIR
    return None if problem is None else (EXIT_SKIPPED, "multihost_bench: skipped: " + problem)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="a twentieth of the steps: checks that every run completes")
    p.add_argument("--only", nargs="+", choices=sorted(TARGETS), default=sorted(TARGETS),
                   help="these workloads")
    p.add_argument("--modes", nargs="+", choices=[m.replace(" ", "") for m, _ in MODES],
                   default=[m.replace(" ", "") for m, _ in MODES], help="these modes")
    p.add_argument("--networks", nargs="+", choices=["onehost", "10gbit", "1gbit"],
                   default=["onehost", "10gbit", "1gbit"], help="these networks")
    p.add_argument("--wire", nargs="+", choices=WIRE_TYPES, default=["fp32"],
                   help="value types on the wire (every table, both directions)")
    p.add_argument("--seeds", type=int, default=0,
                   help="run each setting with seeds 0..N-1 (0: the workloads' own, once)")
    for flag, default in (("--bin", "bin"), ("--out", "multihost_bench")):
        p.add_argument(flag, default=os.path.join(workloads.ROOT, "build", default))
    args = p.parse_args()
    unmet = unmet_needs(args)
    if unmet:
        print(unmet[1], file=sys.stderr)
        return unmet[0]
    names = args.only
    args.bin = os.path.abspath(args.bin)
    args.out = os.path.abspath(args.out)
    netns_cluster.handle_signals()
    hosts = ([ps_job.server_host(i) for i in range(SHARDS)] +
             [ps_job.worker_host(r) for r in range(WORKERS)])
    modes = [(m, c) for m, c in MODES if m.replace(" ", "") in args.modes]
    networks = [n for n in NETWORKS if (n or "onehost") in args.networks]
    seeds = list(range(args.seeds)) if args.seeds > 0 else [None]
    results, failed = {}, []
    os.makedirs(args.out, exist_ok=True)
    with netns_cluster.Cluster(hosts + [ONE_HOST], log_dir=args.out) as cluster:
        # Seeds outermost: an interruption leaves every setting measured alike.
        for seed in seeds:
            for name in names:
                for mode, consistency in modes:
                    for network in networks:
                        for wire in args.wire:
                            key = (name, mode, network, wire)
                            what = "%s %s %s %s%s" % (name, mode, network or ONE_HOST, wire,
                                                      "" if seed is None else " seed %d" % seed)
                            try:
                                r = run_one(cluster, args, name, mode, consistency, network,
                                            wire, seed)
                                results.setdefault(key, []).append(r)
                                print("%s: %.0f samples/s, final %.4f, target %s, %.1f s" %
                                      (what, r["samples_s"], r["final"],
                                       "-" if r["ttt"] is None else "at %.1f s" % r["ttt"],
                                       r["wall"]), file=sys.stderr, flush=True)
                            except (ps_job.JobFailed, RuntimeError, OSError) as e:
                                failed.append(key)
                                print("%s: failed: %s" % (what, e), file=sys.stderr, flush=True)

    def summary(runs):
        reached = [r["ttt"] for r in runs if r["ttt"] is not None]
        return {"samples_s": statistics.median([r["samples_s"] for r in runs]),
                "final": statistics.median([r["final"] for r in runs]),
                "ttt": statistics.median(reached) if len(reached) == len(runs) else None,
                "reached": len(reached), "runs": len(runs),
                "wall": statistics.median([r["wall"] for r in runs])}

    table = {key: summary(runs) for key, runs in results.items()}
    print("| workload | mode | network | wire | samples/s | vs one host | vs fp32 | "
          "time to target s | final metric | run s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (name, mode, network, wire), r in table.items():
        one = table.get((name, mode, None, wire))
        fp32 = table.get((name, mode, network, "fp32"))
        ratio = "%.2fx" % (r["samples_s"] / one["samples_s"]) if one else "-"
        vs_fp32 = "%.2fx" % (r["samples_s"] / fp32["samples_s"]) if fp32 else "-"
        ttt = "-" if r["ttt"] is None else "%.1f" % r["ttt"]
        if r["runs"] > 1 and r["ttt"] is None:
            ttt = "%d of %d reached" % (r["reached"], r["runs"])
        print("| %s | %s | %s | %s | %.0f | %s | %s | %s | %.4f | %.1f |" %
              (name, mode, network or "one host", wire, r["samples_s"], ratio, vs_fp32, ttt,
               r["final"], r["wall"]))
    if len(seeds) > 1:
        print("\nMedians over seeds %s." % ", ".join(map(str, seeds)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
