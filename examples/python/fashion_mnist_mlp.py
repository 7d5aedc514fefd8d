#!/usr/bin/env python3
"""The Fashion-MNIST MLP 784-100-10 in PyTorch, trained through the
parameter server: a worker of a job started by ps_launch.

    build/bin/ps_launch --config examples/python/fashion_mnist_mlp.yaml

ps_launch starts the job's servers and runs this script once per rank with
ps_worker's flags appended (--config, --rank, --log-level, --cpu-threads).
The model is an ordinary torch.nn.Sequential; ps.torch.ParameterServer
keeps its four parameters in the job's tables (one per parameter, written
by ps.torch.tables_for), and the shards apply the job's optimizer to the
pushed gradients: there is no torch optimizer.

Worker r of M trains on the contiguous block [60000*r/M, 60000*(r+1)/M) of
the training images (as the C++ `mlp` program does), read from the gzipped
IDX files of the Debian package dataset-fashion-mnist, in a new random
order every epoch. Each step every worker pushes the gradient of its own
minibatch's mean loss; the job's `consistency: { mode: bsp, aggregate:
true }` makes each shard apply the mean of the workers' gradients once per
clock: one step of synchronous SGD on the global batch (M x --batch-size).
Without `aggregate` each worker's push would be applied on its own, a step
per worker and clock.

Worker 0 prints the test accuracy on the 10,000 test images every
--eval-every steps and at the end; every worker prints a progress line
every --log-every steps. --summary PREFIX writes PREFIX<rank>.json with
the run's figures (steps, samples, training seconds and samples/s without
the evaluations, and worker 0's final test accuracy).

The functions above main() (load_fashion_mnist, make_model, accuracy) are
also what benchmarks/torch_mlp_bench.py uses for its DistributedDataParallel
runs, so that both train the same model on the same data.
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
TRAIN_SAMPLES = 60000
TEST_SAMPLES = 10000
ROWS = COLS = 28
PIXELS = ROWS * COLS
CLASSES = 10
# Mean and standard deviation of the training images' pixels (in [0, 1]):
# inputs are standardized with them.
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530
INSTALL = ("install the Debian package dataset-fashion-mnist "
           "(apt-get install dataset-fashion-mnist), or pass --data-dir")


class DataError(Exception):
    """A Fashion-MNIST file that is missing or not what it should be; the
    message names the file and what to do."""


def read_idx(path, dims):
    """The unsigned bytes of the gzipped IDX file `path`, shaped `dims`.
    Raises DataError naming the file when it is missing, not gzip, or not
    an unsigned-byte IDX array of exactly these dimensions."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise DataError("%s: no such file; %s" % (path, INSTALL)) from None
    except (OSError, EOFError) as e:
        raise DataError("%s: cannot read it as gzip (%s); reinstall dataset-fashion-mnist "
                        "(apt-get install --reinstall dataset-fashion-mnist)" % (path, e)) from None
    header = 4 + 4 * len(dims)
    if len(data) < header or data[:3] != b"\x00\x00\x08" or data[3] != len(dims):
        raise DataError("%s: not an unsigned-byte IDX file of %d dimensions; reinstall "
                        "dataset-fashion-mnist" % (path, len(dims)))
    got = tuple(int(d) for d in np.frombuffer(data, ">u4", len(dims), 4))
    if got != tuple(dims) or len(data) != header + math.prod(dims):
        raise DataError("%s: IDX dimensions %s and %d payload bytes, expected %s; reinstall "
                        "dataset-fashion-mnist" % (path, got, len(data) - header, tuple(dims)))
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims)


def load_fashion_mnist(data_dir, split, rank=0, workers=1):
    """(images, labels) of worker `rank` of `workers`: the contiguous block
    [n*rank/workers, n*(rank+1)/workers) of the split ("train": n = 60000,
    "test": n = 10000). Images are float32 tensors (samples, 784),
    standardized; labels int64 tensors. Raises DataError."""
    prefix = os.path.join(data_dir, "train" if split == "train" else "t10k")
    n = TRAIN_SAMPLES if split == "train" else TEST_SAMPLES
    labels = read_idx(prefix + "-labels-idx1-ubyte.gz", (n,))
    images = read_idx(prefix + "-images-idx3-ubyte.gz", (n, ROWS, COLS))
    if labels.max() >= CLASSES:
        raise DataError("%s-labels-idx1-ubyte.gz: a label above 9; reinstall "
                        "dataset-fashion-mnist" % prefix)
    begin, end = n * rank // workers, n * (rank + 1) // workers
    x = images[begin:end].reshape(-1, PIXELS).astype(np.float32)
    x = (x / np.float32(255) - np.float32(PIXEL_MEAN)) / np.float32(PIXEL_STD)
    return torch.from_numpy(x), torch.from_numpy(labels[begin:end].astype(np.int64))


def make_model():
    """The MLP 784-100-10 (ReLU); its parameters are 0.weight, 0.bias,
    2.weight, 2.bias."""
    return torch.nn.Sequential(torch.nn.Linear(PIXELS, 100), torch.nn.ReLU(),
                               torch.nn.Linear(100, CLASSES))


def accuracy(model, images, labels, batch=2000):
    """The fraction of `images` that `model` classifies right."""
    right = 0
    with torch.no_grad():
        for first in range(0, len(labels), batch):
            logits = model(images[first:first + batch])
            right += int((logits.argmax(1) == labels[first:first + batch]).sum())
    return right / len(labels)


def minibatches(samples, batch, steps, seed):
    """`steps` index tensors of `batch` samples out of `samples`: the samples
    in a new random order every epoch (the generator seeded by `seed`), an
    epoch's last incomplete batch left out."""
    generator = torch.Generator().manual_seed(seed)
    order, at = torch.randperm(samples, generator=generator), 0
    for _ in range(steps):
        if at + batch > samples:
            order, at = torch.randperm(samples, generator=generator), 0
        yield order[at:at + batch]
        at += batch


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="A worker of the PyTorch Fashion-MNIST MLP job (started by ps_launch, "
                    "which adds --config and --rank).")
    parser.add_argument("--epochs", type=float, default=4.0,
                        help="passes over this worker's share of the training images")
    parser.add_argument("--steps", type=int,
                        help="steps a worker, instead of --epochs (benchmarks/torch_mlp_bench.py)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples a step and worker")
    parser.add_argument("--eval-every", type=int, default=250,
                        help="worker 0: the test accuracy every this many steps (0: at the end)")
    parser.add_argument("--log-every", type=int, default=250,
                        help="a progress line every this many steps (0: at the end)")
    parser.add_argument("--threads", type=int,
                        help="torch's threads (default: ps_launch's share of the cores, "
                             "--cpu-threads)")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--seed", type=int, default=1, help="of the minibatch order")
    parser.add_argument("--summary", help="write the run's figures to SUMMARY<rank>.json")
    return parser.parse_args(argv)


def main():
    import ps  # here, not above: the DDP runs of the benchmark import this file without it
    import ps.torch

    worker, rest = ps.worker_from_argv()
    args = parse_args(rest)
    if args.epochs <= 0 or args.batch_size < 1:
        sys.exit("--epochs must be > 0 and --batch-size >= 1")
    threads = args.threads or worker.cpu_threads  # ps_launch's share of the cores
    if threads:
        torch.set_num_threads(threads)
    rank, workers = worker.rank, worker.num_workers

    def say(text):
        print("worker %d: %s" % (rank, text), flush=True)

    try:
        images, labels = load_fashion_mnist(args.data_dir, "train", rank, workers)
        test = load_fashion_mnist(args.data_dir, "test") if rank == 0 else None
    except DataError as e:
        sys.exit("worker %d: %s" % (rank, e))
    # Every worker takes the same number of steps (the shares differ by at
    # most one sample): under bsp each clock waits for every worker.
    steps = args.steps or int(args.epochs * (TRAIN_SAMPLES // workers) // args.batch_size)
    if steps < 1:
        sys.exit("--epochs %g of %d samples in batches of %d is no step" % (
            args.epochs, TRAIN_SAMPLES // workers, args.batch_size))
    model = make_model()
    evaluations = []

    def evaluate(step):
        acc = accuracy(model, *test)
        evaluations.append((step, acc))
        say("step %d/%d test accuracy %.4f" % (step, steps, acc))
        return acc

    with worker as w:
        server = ps.torch.ParameterServer(w, model)  # checks the tables, pulls their init
        say("MLP 784-100-10, %d training images, batch %d, %d steps (%.2f epochs), "
            "%d workers, %d shards" % (len(labels), args.batch_size, steps,
                                       steps * args.batch_size / len(labels), workers,
                                       w.num_servers))
        if rank == 0:
            evaluate(0)
        train_s, losses = 0.0, []
        started = time.monotonic()
        for step, rows in enumerate(minibatches(len(labels), args.batch_size, steps,
                                                args.seed * 1000 + rank), start=1):
            loss = torch.nn.functional.cross_entropy(model(images[rows]), labels[rows])
            server.zero_grad()
            loss.backward()
            server.step()  # push the gradients, clock, pull the new parameters
            losses.append(loss.item())
            if args.log_every and step % args.log_every == 0 and step < steps:
                now = time.monotonic()
                train_s += now - started
                say("step %d/%d epoch %.2f loss %.4f samples/s %.0f" % (
                    step, steps, step * args.batch_size / len(labels),
                    sum(losses) / len(losses), step * args.batch_size / train_s))
                losses = []
                started = now
            if rank == 0 and args.eval_every and step % args.eval_every == 0 and step < steps:
                train_s += time.monotonic() - started
                evaluate(step)
                started = time.monotonic()
        train_s += time.monotonic() - started
        samples_per_s = steps * args.batch_size / train_s
        say("trained %d steps in %.1f s, %.0f samples/s, last loss %.4f" % (
            steps, train_s, samples_per_s, sum(losses) / max(1, len(losses))))
        final = evaluate(steps) if rank == 0 else None
        if rank == 0:
            say("final test accuracy %.4f" % final)
    if args.summary:
        with open("%s%d.json" % (args.summary, rank), "w") as f:
            json.dump({"rank": rank, "workers": workers, "steps": steps,
                       "batch_size": args.batch_size, "samples": steps * args.batch_size,
                       "train_seconds": train_s, "samples_per_s": samples_per_s,
                       "test_accuracy": final, "evaluations": evaluations}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
