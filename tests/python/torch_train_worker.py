"""A Python worker for torch_test.py: a small PyTorch MLP trained through
the parameter server (ps.torch.ParameterServer), started like ps_worker.

    torch_train_worker.py --config job.yaml --rank R --out PREFIX [--overlap [--bucket-mb M]]

Step s of every worker takes its 1/workers share of the step's batch of
generated data (the same in every process), pushes the gradient of its
mean loss divided by the worker count, clocks and pulls: under bsp with
the servers' sgd that is one step of plain SGD on the whole batch. Writes
PREFIX<rank>.pt: the parameters it started from (the servers' init) and
those it ended with. The data and model are also what the test's
one-process run uses (make_model, make_data, batch). --overlap: the
gradients are pushed from hooks during the backward pass, in buckets of
--bucket-mb MiB.
"""

import argparse
import sys

import torch

import ps
import ps.torch

IN, HIDDEN, OUT = 4, 8, 2
STEPS, BATCH = 20, 16
LR = 0.1


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, OUT))


def make_data():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS * BATCH, IN, generator=generator)
    y = torch.sin(x @ torch.randn(IN, OUT, generator=generator))
    return x, y


def batch(x, y, step, rank=0, workers=1):
    """Rows of step `step` that worker `rank` of `workers` trains on."""
    part = BATCH // workers
    rows = slice(step * BATCH + rank * part, step * BATCH + (rank + 1) * part)
    return x[rows], y[rows]


def snapshot(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def main():
    worker, rest = ps.worker_from_argv()
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--bucket-mb", type=float, default=ps.torch.DEFAULT_BUCKET_MB)
    args = parser.parse_args(rest)
    out = args.out
    torch.set_num_threads(1)
    model = make_model()
    x, y = make_data()
    with worker as w:
        server = ps.torch.ParameterServer(w, model, barrier=True, overlap=args.overlap,
                                          bucket_mb=args.bucket_mb)  # pulls the servers' init
        initial = snapshot(model)
        for step in range(STEPS):
            xb, yb = batch(x, y, step, w.rank, w.num_workers)
            loss = torch.nn.functional.mse_loss(model(xb), yb) / w.num_workers
            server.zero_grad()
            loss.backward()
            server.step()
        torch.save({"initial": initial, "final": snapshot(model)}, "%s%d.pt" % (out, w.rank))
        print("trained %d steps" % STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
