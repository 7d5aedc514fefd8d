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
the whole message. ps.read_checkpoint reads a job's checkpoint folder into
numpy, ps.load_export what `ps_ctl export` wrote (docs/checkpoints.md).
See docs/python.md.
"""

import argparse as _argparse

from ps._ps import *  # noqa: F401,F403
from ps._ps import Error, Future, Table, Worker  # noqa: F401
from ps import _ps, _tensors

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


class CheckpointTable:
    """One table of a checkpoint generation, as plain arrays
    (ps.read_checkpoint, ps.load_export; docs/checkpoints.md).

    name, kind ('range' or 'hashed'), rows, dim; values: float32
    (rows, dim), a range table's whole table in row order, a hashed
    table's rows in the order of ids; ids: a hashed table's uint64 ids,
    ascending (None for a range table); state: the optimizer's state
    arrays by slot name (adam: first_moment, second_moment; ...), each
    like values; optimizer: the rule's name, optimizer_settings: its
    settings as the checkpoint keeps them; slots: the state's names in
    the checkpoint's order; hash_slots: a hashed table's (else None);
    clock: the generation's clock.
    """

    __slots__ = ("name", "kind", "rows", "dim", "values", "ids", "state", "optimizer",
                 "optimizer_settings", "slots", "hash_slots", "clock")

    def __init__(self, name, kind, rows, dim, values, ids, state, optimizer,
                 optimizer_settings, slots, hash_slots, clock):
        self.name = name
        self.kind = kind
        self.rows = rows
        self.dim = dim
        self.values = values
        self.ids = ids
        self.state = state
        self.optimizer = optimizer
        self.optimizer_settings = optimizer_settings
        self.slots = slots
        self.hash_slots = hash_slots
        self.clock = clock

    def __repr__(self):
        return ("CheckpointTable(name=%r, kind=%r, rows=%d, dim=%d, optimizer=%r, state=%r, "
                "clock=%d)" % (self.name, self.kind, self.rows, self.dim, self.optimizer,
                               list(self.state), self.clock))


def read_checkpoint(checkpoint_dir, clock=None):
    """Reads a job's checkpoint folder (its checkpoint.dir, holding
    shard-0, shard-1, ...) into numpy, without a running job: every
    shard's generation `clock` (None: the newest clock that every shard
    holds complete), put together by the C++ reader that ps_ctl export
    uses. Returns {table name: CheckpointTable}.

    Raises ps.NotFoundError when the folder, a shard's folder or a common
    generation is missing, ps.DataLossError for a corrupt generation
    (naming its path) or shard folders of different jobs. The whole model
    is held in memory once; for a model larger than memory, export it
    (ps_ctl export) and use load_export(..., mmap_mode="r").
    """
    raw = _ps._read_checkpoint(str(checkpoint_dir), clock)
    return {name: CheckpointTable(**fields) for name, fields in raw.items()}


_EXPORT_FORMAT = "ps-checkpoint-export"
_EXPORT_VERSION = 1


def load_export(out_dir, mmap_mode=None):
    """Reads what `ps_ctl export` wrote into `out_dir` with numpy alone (no
    parameter server code): manifest.json and each table's .npy files.
    Returns {table name: CheckpointTable}, as read_checkpoint does.
    `mmap_mode` goes to numpy.load ("r": the arrays are mapped, not read).

    Raises FileNotFoundError without a manifest.json (not an export, or one
    that did not finish) and ValueError for another format or version, or
    a file whose dtype or shape is not the manifest's.
    """
    import json
    import os

    import numpy as np

    path = os.path.join(os.fspath(out_dir), "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            "%s: no such file; %s is not a finished export (ps_ctl export writes the manifest "
            "last)" % (path, out_dir)) from None
    if manifest.get("format") != _EXPORT_FORMAT:
        raise ValueError("%s: format %r, not %r" % (path, manifest.get("format"), _EXPORT_FORMAT))
    if manifest.get("format_version") != _EXPORT_VERSION:
        raise ValueError("%s: format_version %r; this ps reads version %d" %
                         (path, manifest.get("format_version"), _EXPORT_VERSION))

    def load(name, dtype, shape):
        file = os.path.join(os.fspath(out_dir), name)
        array = np.load(file, mmap_mode=mmap_mode, allow_pickle=False)
        if array.dtype != np.dtype(dtype) or array.shape != tuple(shape):
            raise ValueError("%s: %s %s, but %s says %s %s" % (
                file, array.dtype, array.shape, path, np.dtype(dtype), tuple(shape)))
        return array

    tables = {}
    for t in manifest["tables"]:
        shape = (t["rows"], t["dim"])
        files = t["files"]
        ids = load(files["ids"], "<u8", (t["rows"],)) if t["kind"] == "hashed" else None
        state = {slot: load(files["state"][slot], "<f4", shape) for slot in t["slots"]}
        tables[t["name"]] = CheckpointTable(
            name=t["name"], kind=t["kind"], rows=t["rows"], dim=t["dim"],
            values=load(files["values"], "<f4", shape), ids=ids, state=state,
            optimizer=t["optimizer"], optimizer_settings=t["optimizer_settings"],
            slots=list(t["slots"]), hash_slots=t.get("hash_slots"), clock=manifest["clock"])
    return tables
