"""A Python worker for torch_test.py: the click model of
examples/python/click_model.py (a ps.torch.Embedding over the hashed table
`embeddings`, an MLP on top) trained through the parameter server, started
like ps_worker.

    torch_embedding_worker.py --config job.yaml --rank R --out PREFIX
        [--barrier --sum --slow-rank K]

Step s of every worker takes its 1/workers share of the step's batch of
generated data (the same in every process) and pushes the gradients of
its mean loss; the job's bsp with aggregate applies their mean once a
clock with the tables' sgd: one step of plain SGD on the whole batch.
Writes PREFIX<rank>.pt: every id the job's batches name, their rows and
the MLP's parameters before the first step and after the last. The data
and sizes are also what the test's one-process run uses.

--barrier: ParameterServer(barrier=True), for plain bsp, where the shards
sum the pushes: with --sum each worker pushes the gradient of its mean
loss divided by the worker count. --slow-rank K: worker K sleeps 50 ms
before each forward pass, so that the others run ahead of it.
"""

import argparse
import os
import sys
import time

import torch

import ps
import ps.torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "python"))
import click_model  # noqa: E402

FIELDS, VOCABULARY, DENSE, DIM, HIDDEN = 3, 40, 2, 4, 8
STEPS, BATCH = 12, 32
LR = 0.5


def make_data():
    """(ids, dense, clicks) of every step's batch, one after another."""
    teacher = click_model.Teacher(FIELDS, VOCABULARY, DENSE, seed=3)
    ids, dense, clicks, _ = teacher.samples(STEPS * BATCH, seed=4)
    return ids, dense, clicks


def batch(data, step, rank=0, workers=1):
    """Rows of step `step` that worker `rank` of `workers` trains on."""
    part = BATCH // workers
    rows = slice(step * BATCH + rank * part, step * BATCH + (rank + 1) * part)
    return tuple(x[rows] for x in data)


def make_model(embedding):
    return click_model.ClickModel(embedding, FIELDS, DIM, DENSE, HIDDEN)


def snapshot(model, table, ids):
    with torch.no_grad():
        return {"rows": table.pull(ids).clone(),
                "mlp": {n: p.detach().clone() for n, p in model.named_parameters()}}


def main():
    worker, rest = ps.worker_from_argv()
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--barrier", action="store_true")
    parser.add_argument("--sum", action="store_true")
    parser.add_argument("--slow-rank", type=int, default=-1)
    args = parser.parse_args(rest)
    out = args.out
    torch.set_num_threads(1)
    data = make_data()
    every_id = torch.unique(data[0])
    with worker as w:
        embedding = ps.torch.Embedding(w, "embeddings")
        model = make_model(embedding)
        server = ps.torch.ParameterServer(w, model, barrier=args.barrier)
        # Nothing is applied before every worker finished its first step.
        initial = snapshot(model, embedding.table, every_id)
        for step in range(STEPS):
            ids, dense, clicks = batch(data, step, w.rank, w.num_workers)
            if w.rank == args.slow_rank:
                time.sleep(0.05)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(ids, dense), clicks)
            if args.sum:
                loss = loss / w.num_workers
            server.zero_grad()
            loss.backward()
            server.step()
        final = snapshot(model, embedding.table, every_id)
        torch.save({"ids": every_id, "initial": initial, "final": final},
                   "%s%d.pt" % (out, w.rank))
        print("trained %d steps" % STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
