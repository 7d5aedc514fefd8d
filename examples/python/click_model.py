#!/usr/bin/env python3
"""A click-through-rate model with an embedding table, in PyTorch, trained
through the parameter server: a worker of a job started by ps_launch.

    build/bin/ps_launch --config examples/python/click_model.yaml

Each sample is one value of each of --fields categorical fields (an ad, a
site, a device, ...: value v of field f is the 64-bit id f * 2^32 + v,
drawn from a Zipf law over --vocabulary values) and --dense dense features,
with a click (1) or none (0). The model looks each id up in one embedding
table, ps.torch.Embedding over the job's hashed table `embeddings` (keys:
hashed: any 64-bit id, a row made on its first push), concatenates the
embeddings and the dense features, and puts them through an MLP with one
logit (its parameters in range tables, kept by ps.torch.ParameterServer).
Each step pulls only the rows of the minibatch's distinct ids, and the
backward pass pushes only their gradients; the shards apply the job's
optimizer (adagrad) to both.

The data is generated from a planted teacher that every worker draws alike
(--teacher-seed): each id has a bias and a vector of 4, and the click's
logit is the sum of the biases, the dot products of every pair of fields'
vectors and a linear term of the dense features. Worker r draws its own
samples (--seed and its rank); worker 0 also draws --test-samples held-out
ones and prints their log-loss and AUC every --eval-every steps and at the
end, beside the teacher's own (the best any model can do). Every worker
prints its mean training log-loss every --log-every steps. --summary
PREFIX writes PREFIX<rank>.json with the run's figures.

The functions above main() (Teacher, ClickModel, log_loss, auc) are also
what tests/python/ uses to compare the model trained by several workers
with one PyTorch process (ClickModel takes torch.nn.Embedding there).
"""

import argparse
import json
import sys
import time

import numpy as np
import torch

FIELD_SHIFT = 32  # id = field << FIELD_SHIFT | value
TEACHER_DIM = 4


class Teacher:
    """The planted model clicks are drawn from. Every process that builds
    it with the same arguments draws the same teacher (numpy's default
    generator seeded by `seed`)."""

    def __init__(self, fields, vocabulary, dense, seed, zipf_exponent=1.1):
        rng = np.random.default_rng(seed)
        self.fields, self.vocabulary, self.dense = fields, vocabulary, dense
        popularity = 1.0 / np.arange(1, vocabulary + 1) ** zipf_exponent
        self.popularity = popularity / popularity.sum()
        # Value v of field f: index v - 1 of these.
        self.bias = rng.normal(0.0, 0.5, (fields, vocabulary))
        self.vectors = rng.normal(0.0, 0.6, (fields, vocabulary, TEACHER_DIM))
        self.weights = rng.normal(0.0, 0.5, dense)
        self.offset = -1.0

    def logits(self, values, features):
        """The teacher's logit of each sample: `values` (samples, fields)
        in 1..vocabulary, `features` (samples, dense)."""
        rows = np.arange(self.fields)
        bias = self.bias[rows, values - 1].sum(axis=1)
        vectors = self.vectors[rows, values - 1]  # (samples, fields, 4)
        total = vectors.sum(axis=1)
        # Sum over pairs f < g of u_f . u_g = (|sum u|^2 - sum |u|^2) / 2.
        pairs = 0.5 * ((total ** 2).sum(axis=1) - (vectors ** 2).sum(axis=(1, 2)))
        return self.offset + bias + pairs / np.sqrt(self.fields) + features @ self.weights

    def samples(self, count, seed):
        """`count` samples drawn with numpy's generator seeded by `seed`:
        (ids int64 (count, fields), dense float32 (count, dense), clicks
        float32 (count,), the teacher's logits float64 (count,))."""
        rng = np.random.default_rng(seed)
        values = rng.choice(np.arange(1, self.vocabulary + 1), (count, self.fields),
                            p=self.popularity)
        features = rng.standard_normal((count, self.dense))
        logits = self.logits(values, features)
        clicks = (rng.random(count) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
        ids = (np.arange(self.fields, dtype=np.int64) << FIELD_SHIFT) + values
        return (torch.from_numpy(ids), torch.from_numpy(features.astype(np.float32)),
                torch.from_numpy(clicks), logits)


class ClickModel(torch.nn.Module):
    """logit = MLP(concat(embedding of each field's id, dense features)).
    `embedding` maps an int64 tensor of ids (samples, fields) to (samples,
    fields, dim): ps.torch.Embedding, or torch.nn.Embedding over ids made
    compact. The MLP's parameters are mlp.0.weight, mlp.0.bias,
    mlp.2.weight and mlp.2.bias."""

    def __init__(self, embedding, fields, dim, dense, hidden=32):
        super().__init__()
        self.embedding = embedding
        self.mlp = torch.nn.Sequential(torch.nn.Linear(fields * dim + dense, hidden),
                                       torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def forward(self, ids, dense):
        rows = self.embedding(ids).flatten(1)
        return self.mlp(torch.cat([rows, dense], dim=1)).squeeze(1)


def log_loss(logits, clicks):
    """Mean binary cross-entropy of the logits (numpy or torch)."""
    logits = torch.as_tensor(logits, dtype=torch.float64)
    clicks = torch.as_tensor(clicks, dtype=torch.float64)
    return float(torch.nn.functional.binary_cross_entropy_with_logits(logits, clicks))


def auc(scores, clicks):
    """The area under the ROC curve: the chance that a random click scores
    above a random non-click (ties count half)."""
    scores = np.asarray(scores, np.float64)
    clicks = np.asarray(clicks) > 0.5
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores))
    # Average ranks over ties.
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    positives = int(clicks.sum())
    negatives = len(scores) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    return (ranks[clicks].sum() - positives * (positives + 1) / 2.0) / (positives * negatives)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="A worker of the click model job (started by ps_launch, which adds "
                    "--config and --rank).")
    parser.add_argument("--table", default="embeddings", help="the embedding table")
    parser.add_argument("--fields", type=int, default=6)
    parser.add_argument("--vocabulary", type=int, default=20000, help="values of each field")
    parser.add_argument("--dense", type=int, default=4, help="dense features")
    parser.add_argument("--samples", type=int, default=200000, help="training samples a worker")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--test-samples", type=int, default=20000)
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--teacher-seed", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1, help="of the training samples")
    parser.add_argument("--summary", help="write the run's figures to SUMMARY<rank>.json")
    return parser.parse_args(argv)


def main():
    import ps  # here, not above: the tests import this file's model without the module
    import ps.torch

    worker, rest = ps.worker_from_argv()
    args = parse_args(rest)
    if worker.cpu_threads:
        torch.set_num_threads(worker.cpu_threads)  # ps_launch's share of the cores
    rank = worker.rank

    def say(text):
        print("worker %d: %s" % (rank, text), flush=True)

    teacher = Teacher(args.fields, args.vocabulary, args.dense, args.teacher_seed)
    ids, dense, clicks, _ = teacher.samples(args.samples, args.seed * 1000 + rank)
    if rank == 0:
        test_ids, test_dense, test_clicks, test_logits = teacher.samples(
            args.test_samples, args.seed * 1000 + 999)
        say("teacher on the %d held-out samples: log-loss %.4f AUC %.4f (the best possible); "
            "click rate %.3f" % (args.test_samples, log_loss(test_logits, test_clicks),
                                  auc(test_logits, test_clicks), float(test_clicks.mean())))
    steps = int(args.epochs * args.samples) // args.batch_size
    evaluations = []
    with worker as w:
        embedding = ps.torch.Embedding(w, args.table)
        model = ClickModel(embedding, args.fields, embedding.dim, args.dense)
        # The MLP's tables; step() also waits for the embedding's pushes.
        server = ps.torch.ParameterServer(w, model)

        def evaluate(step):
            with torch.no_grad():  # pulls, pushes nothing
                logits = model(test_ids, test_dense)
            result = (step, log_loss(logits, test_clicks), auc(logits, test_clicks))
            evaluations.append(result)
            say("step %d/%d held-out log-loss %.4f AUC %.4f" % (step, steps, *result[1:]))

        say("%d fields of %d values (ids in hashed table %r, dim %d) and %d dense features, "
            "MLP %d-32-1; %d samples, batch %d, %d steps, %d workers" % (
                args.fields, args.vocabulary, args.table, embedding.dim, args.dense,
                args.fields * embedding.dim + args.dense, args.samples, args.batch_size, steps,
                w.num_workers))
        if rank == 0:
            evaluate(0)
        train_s, losses, interval_losses = 0.0, [], []
        started = time.monotonic()
        for step in range(1, steps + 1):
            first = ((step - 1) * args.batch_size) % (args.samples // args.batch_size
                                                       * args.batch_size)
            rows = slice(first, first + args.batch_size)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(ids[rows], dense[rows]), clicks[rows])
            server.zero_grad()
            loss.backward()  # pushes the embeddings' gradients as it goes
            server.step()    # the MLP's gradients, clock, pull
            interval_losses.append(loss.item())
            if args.log_every and step % args.log_every == 0:
                mean = sum(interval_losses) / len(interval_losses)
                losses.append((step, mean))
                say("step %d/%d training log-loss %.4f" % (step, steps, mean))
                interval_losses = []
            if rank == 0 and args.eval_every and step % args.eval_every == 0 and step < steps:
                train_s += time.monotonic() - started
                evaluate(step)
                started = time.monotonic()
        train_s += time.monotonic() - started
        say("trained %d steps in %.1f s, %.0f samples/s" % (
            steps, train_s, steps * args.batch_size / train_s))
        if rank == 0:
            evaluate(steps)
    if args.summary:
        with open("%s%d.json" % (args.summary, rank), "w") as f:
            json.dump({"rank": rank, "steps": steps, "train_seconds": train_s,
                       "training_losses": losses, "evaluations": evaluations}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
