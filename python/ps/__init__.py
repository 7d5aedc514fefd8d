"""The parameter server from Python: a worker over the C++ client.

    import numpy as np
    import ps

    with ps.Worker("job.yaml") as w:          # rank from --rank or the launcher
        t = w.tables["weights"]
        values = t.pull()                     # the whole table, (rows, dim) float32
        t.push(np.ones(t.shape, np.float32))  # gradients, applied by the shards
        w.clock()

Everything here is the C++ client's (client/client.h): the same protocol,
rank sources, rendezvous, consistency and errors. Arrays are float32 values
and uint64 ids, read and written in place through the buffer protocol;
torch tensors too (float32, int64 ids): CPU ones in place, CUDA ones
through a pinned host buffer. ps.torch keeps a
torch.nn.Module's parameters on the servers (import ps.torch).
Errors of the C++ side are ps.Error subclasses carrying the status code and
the whole message. See docs/python.md.
"""

import argparse as _argparse

from ps._ps import *  # noqa: F401,F403
from ps._ps import Error, Future, Table, Worker  # noqa: F401
from ps import _tensors

_tensors.install()  # torch tensors wherever an array is taken (ps/_tensors.py)


def worker_from_argv(argv=None, **kwargs):
    """A Worker from ps_worker's own flags in `argv` (sys.argv[1:] when
    None): --config FILE, --rank N, --rank-from-hostname, and the two
    ps_launch adds, --log-level LEVEL (the Worker's log_level, unless
    `kwargs` names one) and --cpu-threads N (this worker's share of the
    host's cores, as the worker's `cpu_threads` attribute: e.g. for
    torch.set_num_threads). Flags it does not know are left for the
    program. Returns (worker, the remaining args).

    A launcher starts a Python worker with the flags it gives ps_worker, so
    a training script written this way runs under ps_launch (train.command),
    mpirun, Slurm and Kubernetes alike. `kwargs` go to Worker.
    """
    parser = _argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config", required=True, help="job YAML file")
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--rank-from-hostname", action="store_true")
    parser.add_argument("--log-level", default=None)
    parser.add_argument("--cpu-threads", type=int, default=None)
    args, rest = parser.parse_known_args(argv)
    if args.log_level is not None:
        kwargs.setdefault("log_level", args.log_level)
    worker = Worker(args.config, args.rank, rank_from_hostname=args.rank_from_hostname, **kwargs)
    worker.cpu_threads = args.cpu_threads
    return worker, rest
