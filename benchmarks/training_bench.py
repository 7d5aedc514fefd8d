#!/usr/bin/env python3
"""Accuracy and speed of the training programs, distributed vs one process.

  python3 benchmarks/training_bench.py accuracy [--quick] [--only NAME ...]
  python3 benchmarks/training_bench.py speed [--runs 3]
  python3 benchmarks/training_bench.py curve [--runs 3]
  python3 benchmarks/training_bench.py replication [--runs 5]
  python3 benchmarks/training_bench.py evaluator [--runs 3]
  python3 benchmarks/training_bench.py ctr [--runs 3]

accuracy: every workload (psbench/workloads.py) with 1, 2 and 4 workers
under bsp and ssp 3 (2 shards), each run with ps_launch, plus the same job
in one process with no parameter server (ps_worker --standalone). Every
configuration processes the same data for the same total number of
minibatches, so the runs differ only in how the work is distributed. The
score of a run is the mean of worker 0's last three evaluations (not a
lucky one), read from its metrics CSV.

speed: training samples per second of the MLP 784-100-10 on Fashion-MNIST
with 1, 2 and 4 workers (all workers together; evaluations excluded) against
the same model, backend and batch in one process with no parameter server,
side by side in one run, median of --runs.

curve: the same MLP runs (1, 2 and 4 workers, ssp 3) with security.mode
none and curve side by side in each round (keys from ps_ctl keygen):
samples/s of all workers and the ratio curve/none, median of --runs.

replication: the same MLP under bsp with aggregation (2 shards, 2 and 4
workers) with replication.factor 1 against factor 2, the backups getting
every push (after_aggregation: false) or each clock's sums once
(after_aggregation: true), the three side by side in each round (their
order turned round by round): samples/s of all workers and each factor 2
variant's ratio to factor 1, median of --runs.

evaluator: the convergence suite's bsp runs of sparse logistic regression
and the MLP (4 workers, 2 shards, the suite's steps and evaluations) with
worker 0 evaluating between its steps against an evaluator process
(cluster.evaluator), side by side in each round: the job's milliseconds
per clock (worker 1's training time over its clocks: under bsp every worker
waits for the slowest, worker 0 while it evaluates), the evaluation at the
last clock, and the ratio evaluator / worker 0, median of --runs.

ctr: the click-through-rate program (hashed embeddings and an MLP, one
pass over 2 x 10^6 generated samples) in one process and with 1, 2 and 4
workers under bsp and ssp 3 (2 shards), side by side in each round:
samples/s of all workers against one process, and the test AUC after the
last step against one process's (target: within 0.002), median of --runs.

Needs the binaries in build/bin (./ps build). Writes a markdown table to
stdout and every run's metrics CSV and log under --out (default
build/training_bench). Exit code 1 when a run fails or misses its target.
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from psbench.workloads import (ROOT, WORKLOADS, higher_is_better, job_yaml,  # noqa: E402
                               missing_binaries, read_metrics, run_job)

MODES = [("bsp", "{ mode: bsp }"), ("ssp 3", "{ mode: ssp, staleness: 3 }")]
WORKERS = [1, 2, 4]


def verdict(w, score, sequential):
    kind, value = w["target"]
    if kind == "at_least":
        return score >= value, ">= %.2f" % value
    if kind == "about":
        return score >= value - 0.01, "about %.2f" % value
    if kind == "within_abs_of_sequential":
        gap = sequential - score if higher_is_better(w) else score - sequential
        return gap <= value, "within %g of 1 process" % value
    lower_is_better = not higher_is_better(w)
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
            seq, _, secs = run_job(args.bin, out, "standalone",
                                   job_yaml(w, 1, "{ mode: bsp }", steps, evals,
                                            os.path.join(out, "standalone.csv"), args.quick),
                                   True)
            print("%s: 1 process %.4f (%.0f s)" % (name, seq, secs), file=sys.stderr)
            for mode, consistency in MODES:
                for n in WORKERS:
                    tag = "%s_%dw" % (mode.replace(" ", ""), n)
                    score, _, secs = run_job(args.bin, out, tag,
                                             job_yaml(w, n, consistency, steps, evals,
                                                      os.path.join(out, tag + ".csv"),
                                                      args.quick),
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
        one = run_job(args.bin, out, "standalone",
                      job_yaml(w, 1, "{ mode: asp }", steps, 1,
                               os.path.join(out, "standalone.csv"), args.quick), True)[1]
        for n in WORKERS:
            # Every worker runs the full step count: throughput, not a fixed job.
            total = run_job(args.bin, out, "ssp3_%dw" % n,
                            job_yaml(w, n, "{ mode: ssp, staleness: 3 }", steps * n, 1,
                                     os.path.join(out, "ssp3_%dw.csv" % n), args.quick),
                            False)[1]
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


def curve(args):
    w = WORKLOADS["mlp"]
    steps = 1200 if args.quick else 8000
    out = os.path.join(args.out, "curve")
    keys = os.path.join(out, "keys")
    os.makedirs(out, exist_ok=True)
    keygen_job = os.path.join(out, "keygen.yaml")
    with open(keygen_job, "w") as f:
        f.write(job_yaml(w, max(WORKERS), "{ mode: asp }", 1, 1, "", True))
    subprocess.run([os.path.join(args.bin, "ps_ctl"), "keygen", "--config", keygen_job,
                    "--dir", keys, "--force"], check=True, stdout=subprocess.DEVNULL)
    rows = {n: [] for n in WORKERS}
    for r in range(args.runs):
        for n in WORKERS:
            got = {}
            for mode in ("none", "curve"):
                yaml_text = job_yaml(w, n, "{ mode: ssp, staleness: 3 }", steps * n, 1,
                                     os.path.join(out, "%s_%dw.csv" % (mode, n)), args.quick)
                if mode == "curve":
                    yaml_text += "security: { mode: curve, keys_dir: %s }\n" % keys
                got[mode] = run_job(args.bin, out, "%s_%dw" % (mode, n), yaml_text, False)[1]
            rows[n].append((got["none"], got["curve"]))
            print("round %d: %d workers: none %.0f samples/s, curve %.0f samples/s" %
                  (r + 1, n, got["none"], got["curve"]), file=sys.stderr)
    print("| workers | samples/s, mode none | samples/s, mode curve | ratio curve/none |")
    print("|---|---|---|---|")
    for n in WORKERS:
        ratio = statistics.median(c / p for p, c in rows[n])
        print("| %d | %.0f | %.0f | %.2fx |" % (n, statistics.median(p for p, _ in rows[n]),
                                                 statistics.median(c for _, c in rows[n]), ratio))
    return 0


# replication: (label, replication.factor, replication.after_aggregation).
REPLICATION_VARIANTS = [("factor 1", 1, None), ("factor 2, per push", 2, False),
                        ("factor 2, after aggregation", 2, True)]


def replication(args):
    w = WORKLOADS["mlp"]
    steps = 600 if args.quick else 6000
    workers = [2] if args.quick else [2, 4]
    out = os.path.join(args.out, "replication")
    rows = {n: {v[0]: [] for v in REPLICATION_VARIANTS} for n in workers}
    for r in range(args.runs):
        for n in workers:
            # Each variant first in a third of the rounds: the machine's drift
            # is not always charged to the same one.
            turn = r % len(REPLICATION_VARIANTS)
            for label, factor, after in REPLICATION_VARIANTS[turn:] + REPLICATION_VARIANTS[:turn]:
                tag = "f%d%s_%dw" % (factor, {None: "", False: "_push", True: "_agg"}[after], n)
                yaml_text = job_yaml(w, n, "{ mode: bsp, aggregate: true }", steps * n, 1,
                                     os.path.join(out, tag + ".csv"), args.quick,
                                     replication=factor, after_aggregation=after)
                got = run_job(args.bin, out, tag, yaml_text, False)[1]
                rows[n][label].append(got)
                print("round %d: %d workers, %s: %.0f samples/s" % (r + 1, n, label, got),
                      file=sys.stderr)
    base = REPLICATION_VARIANTS[0][0]
    print("| workers | " + " | ".join("%s samples/s" % v[0] for v in REPLICATION_VARIANTS) +
          " | " + " | ".join("%s / factor 1" % v[0] for v in REPLICATION_VARIANTS[1:]) + " |")
    print("|---" * (1 + 2 * len(REPLICATION_VARIANTS) - 1) + "|")
    for n in workers:
        medians = [statistics.median(rows[n][v[0]]) for v in REPLICATION_VARIANTS]
        # The ratio of each round's pair, then the median: not the ratio of medians.
        ratios = [statistics.median(a / b for a, b in zip(rows[n][v[0]], rows[n][base]))
                  for v in REPLICATION_VARIANTS[1:]]
        print("| %d | %s | %s |" % (n, " | ".join("%.0f" % m for m in medians),
                                    " | ".join("%.2fx" % x for x in ratios)))
    return 0


def ms_per_clock(metrics_csv, worker="1"):
    """`worker`'s wall seconds at its last row over its clock, in ms."""
    last = None
    with open(metrics_csv) as f:
        for row in csv.DictReader(f):
            if row["worker"] == worker:
                last = row
    return 1000.0 * float(last["time_s"]) / int(last["clock"])


def evaluator(args):
    names = ["sparse_lr", "mlp"]
    # The convergence suite's steps and evaluations (suites/convergence.yaml).
    plan = {"sparse_lr": (1600, 32), "mlp": (14000, 40)}
    out = os.path.join(args.out, "evaluator")
    rows = {n: {False: [], True: []} for n in names}
    for r in range(args.runs):
        for name in names:
            steps, evals = plan[name]
            if args.quick:
                steps, evals = steps // 20, 3
            for on in ([False, True] if r % 2 == 0 else [True, False]):
                tag = "%s_%s" % (name, "evaluator" if on else "worker0")
                csv_path = os.path.join(out, tag + ".csv")
                yaml_text = job_yaml(WORKLOADS[name], 4, "{ mode: bsp }", steps, evals,
                                     csv_path, args.quick, evaluator=on)
                run_job(args.bin, out, tag, yaml_text, False)
                final = read_metrics(csv_path)[0][-1]  # the evaluation at the last clock
                ms = ms_per_clock(csv_path)
                rows[name][on].append((ms, final))
                print("round %d: %s, %s: %.2f ms per clock, final %.4f" %
                      (r + 1, name, "evaluator" if on else "worker 0 evaluating", ms, final),
                      file=sys.stderr)
    print("| workload | ms per clock, worker 0 evaluating | ms per clock, evaluator | "
          "evaluator / worker 0 | final metric, worker 0 | final metric, evaluator |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        off, on = rows[name][False], rows[name][True]
        ratio = statistics.median(b[0] / a[0] for a, b in zip(off, on))
        print("| %s | %.2f | %.2f | %.2fx | %.4f | %.4f |" %
              (name, statistics.median(x[0] for x in off), statistics.median(x[0] for x in on),
               ratio, statistics.median(x[1] for x in off), statistics.median(x[1] for x in on)))
    return 0


def ctr(args):
    w = WORKLOADS["ctr"]
    steps = w["total_steps"] // 20 if args.quick else w["total_steps"]
    evals = 3 if args.quick else w["evals"]
    out = os.path.join(args.out, "ctr")
    settings = [("1 process", None, 1)] + [(m, c, n) for m, c in MODES for n in WORKERS]
    rows = {name_of(s): [] for s in settings}
    failed = False
    for r in range(args.runs):
        # Side by side: every setting in each round, the same data and steps.
        for mode, consistency, n in settings:
            tag = name_of((mode, consistency, n))
            csv_path = os.path.join(out, tag.replace(" ", "_") + ".csv")
            yaml_text = job_yaml(w, n, consistency or "{ mode: bsp }", steps, evals, csv_path,
                                 args.quick)
            _, rate, secs = run_job(args.bin, out, tag.replace(" ", "_"), yaml_text,
                                    consistency is None)
            final = read_metrics(csv_path)[0][-1]  # the AUC after the last step
            rows[tag].append((rate, final))
            print("round %d: %s: %.0f samples/s, AUC %.4f (%.0f s)" % (r + 1, tag, rate, final,
                                                                     secs), file=sys.stderr)
    one = rows[name_of(settings[0])]
    print("| setting | samples/s, all workers | / 1 process | final test AUC | - 1 process |")
    print("|---|---:|---:|---:|---:|")
    for setting in settings:
        tag = name_of(setting)
        rates = [x[0] for x in rows[tag]]
        aucs = [x[1] for x in rows[tag]]
        ratio = statistics.median(a[0] / b[0] for a, b in zip(rows[tag], one))
        gap = statistics.median(a[1] - b[1] for a, b in zip(rows[tag], one))
        ok, _ = verdict(w, statistics.median(aucs), statistics.median(x[1] for x in one))
        failed = failed or (not ok and not args.quick)
        print("| %s | %.0f | %.2fx | %.4f | %+.4f%s |" %
              (tag, statistics.median(rates), ratio, statistics.median(aucs), gap,
               "" if ok or args.quick else " (missed)"))
    return 1 if failed else 0


def name_of(setting):
    mode, consistency, n = setting
    return mode if consistency is None else "%s, %d worker%s" % (mode, n, "s" if n > 1 else "")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what",
                   choices=["accuracy", "speed", "curve", "replication", "evaluator", "ctr"])
    p.add_argument("--quick", action="store_true",
                   help="a twentieth of the steps: checks that every run completes")
    p.add_argument("--only", nargs="+", choices=list(WORKLOADS), help="accuracy: these workloads")
    p.add_argument("--runs", type=int, default=3,
                   help="speed, curve, replication, evaluator, ctr: rounds (median reported)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--out", default=os.path.join(ROOT, "build", "training_bench"))
    args = p.parse_args()
    missing = missing_binaries("training_bench", args.bin)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    return {"accuracy": accuracy, "speed": speed, "curve": curve,
            "replication": replication, "evaluator": evaluator, "ctr": ctr}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
