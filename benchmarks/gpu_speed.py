#!/usr/bin/env python3
"""Speed of GPU workers on the wide MLP against one process with no parameter server.

    benchmarks/gpu_speed.py --bin-dir DIR [--device cuda] [--gemm-log FILE] ...

Trains the MLP of config/fashion_mnist_wide_mlp.yaml (784-2048-2048-10,
minibatches of 512, sgd with momentum; its learning rate divided by the
workers, with 10 clocks of warm-up, so that 4 workers do not diverge) on
Fashion-MNIST, each run for --steps steps per worker under ssp 2:

  - one process with no parameter server (ps_worker --standalone: the model
    and the update in the same process, the reference);
  - ps_launch with 1, 2 and 4 workers (--workers) and 2 and 4 shards
    (--shards) on this machine, every worker on the same device.

Every worker writes the metrics CSV (train.metrics_csv), whose rows carry
each log interval's step breakdown (worker/progress.h StepBreakdown): step
time, and in it pull and push waits and the backend's busy time copying to
the device (h2d), computing and copying back (d2h). A worker's figures are
the medians of its intervals after the first (warm-up); a run's samples/s
is the sum over its workers of batch / step time. The table sets each run
against the one-process run.

The GEMM-bound floor: a step's floating-point operations (three products a
layer, two for the first: Mlp::TrainStepFlops) at the SGEMM rate measured
in the same session (--gemm-log, gemm_bench's output: its best rate on the
same device at the largest size) give the least compute time a step can
take; the table's compute column is set against it.

DIR holds ps_launch, ps_server and ps_worker (programs, or scripts that run
them). Every run is bounded (--run-timeout) and the whole by --budget: runs
that do not fit are reported as not run. Processes left by a run are killed.
Exit status 1 when a run failed, else 0; the figures are measurements, not
checks.

For a check of this script without a GPU (ctest gpu_speed_quick):
    --device cpu --layers 784,32,10 --batch 64 --steps 12 --workers 1,2 --shards 2
"""

import argparse
import csv
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"
# config/fashion_mnist_wide_mlp.yaml
LAYERS = [784, 2048, 2048, 10]
BATCH = 512
LR = 0.05
PHASES = ("pull_ms", "h2d_ms", "compute_ms", "d2h_ms", "push_ms")


def parse_int_list(text):
    return [int(v) for v in text.split(",") if v.strip()]


def free_ports(n):
    """n distinct free TCP ports of 127.0.0.1 (held open until all are found)."""
    held, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in held:
            s.close()
    return ports


def parameters(layers):
    return sum(a * b + b for a, b in zip(layers, layers[1:]))


def step_flops(layers, batch):
    """Floating-point operations of a training step (Mlp::TrainStepFlops)."""
    total = 0.0
    for i, (a, b) in enumerate(zip(layers, layers[1:])):
        total += 2.0 * batch * a * b * (2 if i == 0 else 3)
    return total


def job_yaml(args, workers, shards, csv_path):
    servers = ", ".join('"127.0.0.1:%d"' % p for p in free_ports(shards))
    # Each worker's push is applied on its own: the config's rate divided by
    # the workers keeps the update of a clock that of one worker (4 workers
    # at the config's rate diverge).
    lr = LR / workers
    return """# benchmarks/gpu_speed.py: config/fashion_mnist_wide_mlp.yaml, %d workers, %d shards
cluster:
  servers: [%s]
  workers: %d
tables:
  - name: mlp
    rows: %d
    dim: 1
    init: { type: uniform, scale: 0.05, seed: 7 }
    optimizer: { type: sgd, lr: %g, momentum: 0.9, warmup_clocks: 10 }
consistency: { mode: ssp, staleness: 2 }
worker: { device: %s }
train:
  program: mlp
  table: mlp
  layers: [%s]
  batch_size: %d
  iterations: %d
  eval_every: %d
  log_every: %d
  metrics_csv: "%s"
  data_dir: "%s"
""" % (workers, shards, servers, workers, parameters(args.layers), lr, args.device,
       ", ".join(map(str, args.layers)), args.batch, args.steps, args.steps, args.log_every,
       csv_path, args.data)


def run_bounded(cmd, log_path, timeout):
    """Runs cmd in its own process group, output to log_path; kills the
    group on timeout or when it is left over. Returns the exit code (None
    on timeout)."""
    with open(log_path, "w") as log:
        log.write("# %s\n" % " ".join(cmd))
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        if code is None:
            proc.wait()
    return code


def worker_figures(csv_path):
    """{worker: {"step_ms": .., "pull_ms": .., ...}}: medians over each
    worker's intervals after the first (all when there is only one)."""
    rows = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            if row["worker"] == "evaluator":
                continue
            rows.setdefault(int(row["worker"]), []).append(row)
    figures = {}
    for w, rs in rows.items():
        rs.sort(key=lambda r: int(r["clock"]))
        use = rs[1:] if len(rs) > 1 else rs
        figures[w] = {k: statistics.median(float(r[k]) for r in use)
                      for k in ("step_ms",) + PHASES}
        figures[w]["accuracy"] = next((float(r["metric"]) for r in reversed(rs) if r["metric"]),
                                      None)
    return figures


def sgemm_gflops(path, device):
    """gemm_bench's GFLOP/s for `device` at its largest size: its header is
    "n  cpu GFLOP/s  cuda GFLOP/s ...", then a row per size."""
    if not path or not os.path.exists(path):
        return None
    column, best_n, best = None, 0, None
    with open(path) as f:
        for line in f:
            cells = line.split()
            if cells[:1] == ["n"]:
                names = [c for c in cells[1:] if c not in ("GFLOP/s", "cuda/cpu")]
                column = names.index(device) + 1 if device in names else None
            elif column is not None and len(cells) > column and cells[0].isdigit():
                try:
                    rate = float(cells[column])
                except ValueError:  # "error"
                    continue
                if int(cells[0]) >= best_n:
                    best_n, best = int(cells[0]), rate
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin-dir", required=True, help="folder of ps_launch, ps_server, ps_worker")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--data", default=DATA, help="Fashion-MNIST folder")
    p.add_argument("--layers", type=parse_int_list, default=LAYERS)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--steps", type=int, default=60, help="steps per worker and run")
    p.add_argument("--log-every", type=int, default=0,
                   help="interval of the breakdown rows (default steps / 6)")
    p.add_argument("--workers", type=parse_int_list, default=[1, 2, 4])
    p.add_argument("--shards", type=parse_int_list, default=[2, 4])
    p.add_argument("--gemm-log", help="gemm_bench output of this session (the floor)")
    p.add_argument("--run-timeout", type=float, default=90)
    p.add_argument("--budget", type=float, default=240, help="seconds for all runs")
    p.add_argument("--out", help="folder for the job files, logs and CSVs (default: a temp dir)")
    args = p.parse_args()
    if args.log_every <= 0:
        args.log_every = max(1, args.steps // 6)
    if args.layers[0] != 784 or args.layers[-1] != 10 or args.batch < 1 or args.steps < 2:
        p.error("layers must go from 784 to 10, batch and steps be positive (steps >= 2)")
    for prog in ("ps_launch", "ps_server", "ps_worker"):
        if not os.access(os.path.join(args.bin_dir, prog), os.X_OK):
            p.error("no %s in %s" % (prog, args.bin_dir))
    out = args.out or tempfile.mkdtemp(prefix="gpu_speed_")
    os.makedirs(out, exist_ok=True)
    deadline = time.monotonic() + args.budget
    bin_dir = os.path.abspath(args.bin_dir)

    runs = [("one process", 1, 0)] + [("ps", w, s) for s in args.shards for w in args.workers]
    results = []
    failed = False
    for kind, workers, shards in runs:
        name = "standalone" if kind == "one process" else "w%d_s%d" % (workers, shards)
        left = deadline - time.monotonic()
        if left < 10:
            results.append((kind, workers, shards, None, "not run (budget)"))
            continue
        csv_path = os.path.join(out, name + ".csv")
        if os.path.exists(csv_path):
            os.remove(csv_path)
        cfg = os.path.join(out, name + ".yaml")
        with open(cfg, "w") as f:
            f.write(job_yaml(args, workers, max(shards, 1), csv_path))
        if kind == "one process":
            cmd = [os.path.join(bin_dir, "ps_worker"), "--config", cfg, "--standalone"]
        else:
            cmd = [os.path.join(bin_dir, "ps_launch"), "--config", cfg, "--bin-dir", bin_dir,
                   "--grace-ms", "3000"]
        t0 = time.monotonic()
        code = run_bounded(cmd, os.path.join(out, name + ".log"), min(args.run_timeout, left))
        wall = time.monotonic() - t0
        if code != 0 or not os.path.exists(csv_path):
            failed = True
            why = "timed out" if code is None else "exit code %s" % code
            results.append((kind, workers, shards, None, "FAILED: %s (%s)" %
                            (why, os.path.join(out, name + ".log"))))
            continue
        figures = worker_figures(csv_path)
        if len(figures) != workers:
            failed = True
            results.append((kind, workers, shards, None,
                            "FAILED: rows of %d of %d workers" % (len(figures), workers)))
            continue
        results.append((kind, workers, shards, figures, "%.0f s" % wall))
        print("%s: %s" % (name, ", ".join("worker %d step %.2f ms" % (w, f["step_ms"])
                                         for w, f in sorted(figures.items()))),
              file=sys.stderr)

    reference = None
    if results and results[0][3]:
        reference = args.batch * 1000.0 / results[0][3][0]["step_ms"]
    print("Wide MLP %s, batch %d, %d steps per worker, ssp 2, device %s; per-step figures "
          "in ms, medians of the log intervals after the first (worker 0's)" %
          ("-".join(map(str, args.layers)), args.batch, args.steps, args.device))
    print()
    print("| run | workers | shards | samples/s | vs one process | step | pull | h2d | compute "
          "| d2h | push | wall |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, workers, shards, figures, note in results:
        if figures is None:
            print("| %s | %d | %s | %s |  |  |  |  |  |  |  |  |" %
                  (kind, workers, shards or "-", note))
            continue
        rate = sum(args.batch * 1000.0 / f["step_ms"] for f in figures.values())
        f0 = figures[0]
        ratio = "%.2fx" % (rate / reference) if reference else "-"
        print("| %s | %d | %s | %.0f | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |" %
              (kind, workers, shards or "-", rate, ratio, f0["step_ms"], f0["pull_ms"],
               f0["h2d_ms"], f0["compute_ms"], f0["d2h_ms"], f0["push_ms"], note))
    print()
    flops = step_flops(args.layers, args.batch)
    rate = sgemm_gflops(args.gemm_log, args.device)
    line = "Step: %.2f GFLOP" % (flops / 1e9)
    if rate:
        floor_ms = flops / (rate * 1e9) * 1000.0
        line += (" at the measured SGEMM rate of %.0f GFLOP/s: a GEMM-bound floor of %.3f ms" %
                 (rate, floor_ms))
        if reference:
            compute = results[0][3][0]["compute_ms"]
            line += ("; the one-process step computes for %.3f ms (%.0f%% of the SGEMM rate)" %
                     (compute, 100.0 * floor_ms / compute if compute > 0 else 0))
    else:
        line += " (no SGEMM rate: pass --gemm-log)"
    print(line + ".")
    one_worker = [r for r in results if r[0] == "ps" and r[1] == 1 and r[3]]
    if reference and one_worker:
        best = max(args.batch * 1000.0 / r[3][0]["step_ms"] for r in one_worker)
        print("One worker: %.2fx of one process (target 0.7x)." % (best / reference))
    print("Logs, job files and CSVs: %s" % out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
