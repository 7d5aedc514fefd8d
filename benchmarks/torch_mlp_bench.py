#!/usr/bin/env python3
"""The PyTorch MLP through the parameter server against the C++ mlp
program and PyTorch's own DistributedDataParallel, on one job.

  /usr/bin/python3 benchmarks/torch_mlp_bench.py [--samples 120000] [--workers 1 2 4]
                                                 [--runs 1] [--out build/torch_mlp_bench]

The job: the MLP 784-100-10 on Fashion-MNIST (the Debian package
dataset-fashion-mnist), W workers, each taking minibatches of
--batch-size (64) from its own block of the 60,000 training images, for
--samples training samples in all (--samples / (64 W) steps a worker), one
step of synchronous SGD per step on the global batch of 64 W: the mean of
the workers' gradients, sgd with momentum 0.9 at lr 0.05, cosine decay to
0 over the run. Three ways to run it, each with 1, 2 and 4 workers:

  ps-python  examples/python/fashion_mnist_mlp.py: torch.nn through
             ps.torch.ParameterServer, 2 shards (ps_launch), bsp with
             aggregate (each shard applies the workers' mean gradient once
             a clock), the optimizer on the shards.
  ps-c++     the C++ `mlp` program (ps_worker, OpenBLAS), the same job
             file but for train.program: mlp, 2 shards, bsp with aggregate.
             It reads pixels in [0, 1] where the PyTorch runs standardize
             them, and starts from uniform +-0.05 where they start from
             PyTorch's +-1/sqrt(fan_in).
  ddp        the same PyTorch model and data (the example's functions) in
             W processes under torch.nn.parallel.DistributedDataParallel
             with the gloo backend on 127.0.0.1 (its all-reduce averages
             the gradients), torch.optim.SGD with the same schedule; no
             servers.

Every worker computes with --threads threads (1: the model is small, and
a second thread that waits for a busy core costs far more than it gains;
2 threads made one PyTorch process 30x slower on 2 busy cores). A run's
samples/s is the sum of its workers' training samples per second
(each worker's steps x batch over its training loop's time, from after
its start-up to its last step, evaluation excluded); its accuracy is
worker 0's test accuracy on the 10,000 test images after the last step.
Runs of one round go side by side (W = 1, 2, 4, each of the three in
turn); with --runs R the table gives medians. On a machine with fewer
cores than 2 shards + W workers the processes share the cores, and the
table says so.

Every process it starts runs in a session of its own and is stopped
(SIGTERM, then SIGKILL) when it overstays --timeout seconds, when another
fails, and at the end. Exit code 1 when a run fails.
"""

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from psbench.workloads import (ROOT, free_port, missing_binaries,  # noqa: E402
                               read_metrics)

EXAMPLES = os.path.join(ROOT, "examples", "python")
MLP_EXAMPLE = os.path.join(EXAMPLES, "fashion_mnist_mlp.py")
LR, MOMENTUM = 0.05, 0.9
KINDS = ("ps-python", "ps-c++", "ddp")
STOP_GRACE_S = 5


def steps_per_worker(samples, workers, batch):
    return samples // workers // batch


def optimizer_yaml(decay_clocks):
    return ("optimizer: { type: sgd, lr: %r, momentum: %r, decay: cosine, decay_clocks: %d }\n"
            % (LR, MOMENTUM, decay_clocks))


def servers_yaml(workers):
    return ("cluster:\n  servers: [\"127.0.0.1:%d\", \"127.0.0.1:%d\"]\n  workers: %d\n"
            % (free_port(), free_port(), workers))


def python_job(workers, steps, args, summary):
    """The example's job file for `workers`: its tables, this run's steps."""
    import yaml
    with open(os.path.join(EXAMPLES, "fashion_mnist_mlp.yaml")) as f:
        tables = yaml.safe_dump({"tables": yaml.safe_load(f)["tables"]}, sort_keys=False)
    command = [sys.executable, MLP_EXAMPLE, "--steps", str(steps),
               "--batch-size", str(args.batch_size), "--threads", str(args.threads),
               "--eval-every", "0", "--log-every", "0", "--summary", summary]
    # The example's ParameterServer spends one clock reading the initial values.
    return (servers_yaml(workers) + tables + optimizer_yaml(steps + 1) +
            "consistency: { mode: bsp, aggregate: true }\n" +
            "train:\n  command: %s\n" % json.dumps(command))


def cpp_job(workers, steps, args, metrics_csv):
    return (servers_yaml(workers) +
            "tables:\n"
            "  - { name: mlp, rows: 79510, init: { type: uniform, scale: 0.05, seed: 7 } }\n"
            + optimizer_yaml(steps) +
            "consistency: { mode: bsp, aggregate: true }\n" +
            "worker: { cpu_threads: %d }\n" % args.threads +
            "train:\n  program: mlp\n  table: mlp\n  layers: [784, 100, 10]\n"
            "  batch_size: %d\n  iterations: %d\n  eval_every: 0\n  log_every: %d\n"
            "  metrics_csv: %s\n" % (args.batch_size, steps, steps, metrics_csv))


def stop(process):
    """SIGTERM to the session of `process`, SIGKILL after STOP_GRACE_S; reaped."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


def run_all(commands, log_prefix, timeout, env=None):
    """Starts every command at once, each in a session of its own with its
    output in <log_prefix><i>.log, and waits until all exit, at most
    `timeout` seconds in all. Raises RuntimeError naming the first that
    failed or overstayed, after stopping every one still running."""
    processes = []
    try:
        for i, command in enumerate(commands):
            with open("%s%d.log" % (log_prefix, i), "w") as log:
                processes.append(subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=ROOT, start_new_session=True))
        deadline = time.monotonic() + timeout
        while True:
            for i, p in enumerate(processes):
                if p.poll() not in (None, 0):
                    raise RuntimeError("%s exited with %d; see %s%d.log" % (
                        " ".join(commands[i][:3]), p.returncode, log_prefix, i))
            if all(p.poll() == 0 for p in processes):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("%s ran past %d s; see %s*.log" % (
                    " ".join(commands[0][:3]), timeout, log_prefix))
            time.sleep(0.05)
    finally:
        for p in processes:
            stop(p)


def read_summaries(prefix, workers):
    summaries = []
    for rank in range(workers):
        with open("%s%d.json" % (prefix, rank)) as f:
            summaries.append(json.load(f))
    return summaries


def figures(summaries, steps):
    """(samples/s of all workers, worker 0's test accuracy) of a PyTorch run."""
    for s in summaries:
        if s["steps"] != steps:
            raise RuntimeError("worker %d ran %d steps, expected %d"
                               % (s["rank"], s["steps"], steps))
    return sum(s["samples_per_s"] for s in summaries), summaries[0]["test_accuracy"]


def run_ps_python(workers, steps, args, out):
    name = os.path.join(out, "ps-python_%dw" % workers)
    config = name + ".yaml"
    with open(config, "w") as f:
        f.write(python_job(workers, steps, args, name + "_summary"))
    run_all([[os.path.join(args.bin, "ps_launch"), "--config", config]], name, args.timeout)
    return figures(read_summaries(name + "_summary", workers), steps)


def run_cpp(workers, steps, args, out):
    name = os.path.join(out, "ps-cpp_%dw" % workers)
    config, metrics_csv = name + ".yaml", name + ".csv"
    for path in (metrics_csv, metrics_csv + ".prev"):
        if os.path.exists(path):
            os.remove(path)
    with open(config, "w") as f:
        f.write(cpp_job(workers, steps, args, metrics_csv))
    run_all([[os.path.join(args.bin, "ps_launch"), "--config", config]], name, args.timeout)
    evaluations, rates = read_metrics(metrics_csv)
    return sum(rates.values()), evaluations[-1]


def run_ddp(workers, steps, args, out):
    name = os.path.join(out, "ddp_%dw" % workers)
    port = free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    commands = [[sys.executable, os.path.abspath(__file__), "--ddp-worker",
                 "--rank", str(r), "--world", str(workers), "--port", str(port),
                 "--steps", str(steps), "--batch-size", str(args.batch_size),
                 "--threads", str(args.threads), "--summary", name + "_summary"]
                for r in range(workers)]
    run_all(commands, name, args.timeout, env)
    return figures(read_summaries(name + "_summary", workers), steps)


def ddp_worker(args):
    """One process of the DistributedDataParallel run (started by run_ddp)."""
    import torch
    import torch.distributed as dist
    sys.path.insert(0, EXAMPLES)
    import fashion_mnist_mlp as example

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port,
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=120))
    images, labels = example.load_fashion_mnist(example.DEFAULT_DATA_DIR, "train",
                                                args.rank, args.world)
    torch.manual_seed(0)  # DDP starts every process from rank 0's values anyway
    model = example.make_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    started = time.monotonic()
    for rows in example.minibatches(len(labels), args.batch_size, args.steps,
                                    1000 + args.rank):
        loss = torch.nn.functional.cross_entropy(ddp(images[rows]), labels[rows])
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the processes
        optimizer.step()
        schedule.step()
    train_s = time.monotonic() - started
    accuracy = None
    if args.rank == 0:
        accuracy = example.accuracy(model, *example.load_fashion_mnist(
            example.DEFAULT_DATA_DIR, "test"))
    dist.barrier()
    dist.destroy_process_group()
    with open("%s%d.json" % (args.summary, args.rank), "w") as f:
        json.dump({"rank": args.rank, "steps": args.steps,
                   "samples_per_s": args.steps * args.batch_size / train_s,
                   "test_accuracy": accuracy}, f)
    return 0


RUNNERS = {"ps-python": run_ps_python, "ps-c++": run_cpp, "ddp": run_ddp}


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def print_table(results, args):
    """The markdown table: medians over the rounds; a ratio is the median of
    the rounds' ratios (runs side by side share the machine's state)."""
    cores = os.cpu_count() or 1
    print("MLP 784-100-10 on Fashion-MNIST, %d samples a run, batch %d a worker, %d thread(s) "
          "a worker; %d cores; medians of %d round(s)\n"
          % (args.samples, args.batch_size, args.threads, cores, args.runs))
    print("| workers | steps a worker | ps-python samples/s | ps-c++ samples/s | ddp samples/s "
          "| ps-python / ddp | ps-python / ps-c++ | test accuracy ps-python | ps-c++ | ddp |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workers in args.workers:
        runs = {k: results[(k, workers)] for k in KINDS}
        rate = {k: median_of(r and r[0] for r in runs[k]) for k in KINDS}
        accuracy = {k: median_of(r and r[1] for r in runs[k]) for k in KINDS}

        def ratio(a, b):
            return median_of(x[0] / y[0] if x and y else None for x, y in zip(runs[a], runs[b]))

        note = " (%d workers on %d cores)" % (workers, cores) if workers > cores else ""
        print("| %d%s | %d | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.4f | %.4f | %.4f |" % (
            workers, note, steps_per_worker(args.samples, workers, args.batch_size),
            rate["ps-python"], rate["ps-c++"], rate["ddp"], ratio("ps-python", "ddp"),
            ratio("ps-python", "ps-c++"), accuracy["ps-python"], accuracy["ps-c++"],
            accuracy["ddp"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=120000,
                        help="training samples of a run, all workers together (120000: 2 epochs)")
    parser.add_argument("--batch-size", type=int, default=64, help="a worker's minibatch")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--runs", type=int, default=1, help="rounds; the table gives medians")
    parser.add_argument("--threads", type=int, default=1,
                        help="each worker's compute threads (torch's, OpenBLAS's)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a run may take")
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "torch_mlp_bench"))
    # A process of a DDP run (the benchmark starts these itself).
    parser.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--summary", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker:
        return ddp_worker(args)
    missing = missing_binaries("torch_mlp_bench", args.bin)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    args.bin, args.out = os.path.abspath(args.bin), os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    # (kind, workers) -> [(samples/s, accuracy) or None, one per round]
    results = {(kind, w): [] for kind in KINDS for w in args.workers}
    failed = False
    for round_ in range(args.runs):
        for workers in args.workers:
            steps = steps_per_worker(args.samples, workers, args.batch_size)
            for kind in KINDS:
                start = time.monotonic()
                try:
                    rate, accuracy = RUNNERS[kind](workers, steps, args, args.out)
                except (RuntimeError, OSError, ValueError, KeyError) as e:
                    print("round %d: %s, %d workers: FAILED: %s" % (round_ + 1, kind, workers, e),
                          file=sys.stderr)
                    results[(kind, workers)].append(None)
                    failed = True
                    continue
                results[(kind, workers)].append((rate, accuracy))
                print("round %d: %s, %d workers, %d steps each: %.0f samples/s, test accuracy "
                      "%.4f (%.1f s)" % (round_ + 1, kind, workers, steps, rate, accuracy,
                                         time.monotonic() - start), file=sys.stderr, flush=True)
    print_table(results, args)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
