"""Embedding and EmbeddingBag: torch modules over a table of the
parameter server's (ps.torch re-exports them; docs/python.md)."""

import torch

DEFAULT_OPTIMIZER = {"type": "sgd", "lr": 0.1}  # a table's optimizer when none is given


class _TableModule(torch.nn.Module):
    """What Embedding and EmbeddingBag share: a table of rows by id, declared
    (for tables_for) and bound to a worker's table, and the pushes of the
    backward passes."""

    def __init__(self, kind, worker, name, rows, dim, max_rows, max_mb, init, optimizer):
        super().__init__()
        if rows is not None and (max_rows is not None or max_mb is not None):
            raise ValueError("%s %r: rows= declares a range table, max_rows= and max_mb= a "
                             "hashed one: give one of them" % (kind, name))
        if max_rows is not None and max_mb is not None:
            raise ValueError("%s %r: give one of max_rows= and max_mb=" % (kind, name))
        for option, value in (("rows", rows), ("dim", dim), ("max_rows", max_rows),
                              ("max_mb", max_mb)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError("%s %r: %s: expected an integer >= 1, got %r"
                                 % (kind, name, option, value))
        self._kind = kind
        self.name = name
        self.rows = rows
        self.dim = dim
        self.max_rows = max_rows
        self.max_mb = max_mb
        self.init = init
        self.optimizer = optimizer
        self.table = None
        self._in_flight = []
        # None: gradients pushed as the backward pass produces them; a list:
        # held there until _release() (ParameterServer with barrier=True).
        self._held = None
        if worker is not None:
            self.bind(worker)

    @property
    def hashed(self):
        """True for a hashed table (max_rows= or max_mb=, or a bound hashed
        one), False for a range table (rows=), None when undeclared."""
        if self.table is not None:
            return self.table.kind == "hashed"
        if self.rows is not None:
            return False
        if self.max_rows is not None or self.max_mb is not None:
            return True
        return None

    def bind(self, worker):
        """Looks up the table in `worker`'s job (a ps.Worker) and checks it
        against what the module declared: ValueError when the job has no
        such table, or one of another kind, rows or dim. The undeclared
        rows and dim are the table's. Returns self."""
        if self.name not in worker.tables:
            raise ValueError("%s: %s has no table %r (tables: %s; ps.torch.tables_for(model) "
                             "writes it)" % (self._kind, worker.config, self.name,
                                             ", ".join(worker.tables)))
        table = worker.tables[self.name]
        declared_hashed = self.hashed
        wrong = []
        if declared_hashed is not None and declared_hashed != (table.kind == "hashed"):
            wrong.append("keys: %s" % table.kind)
        if self.dim is not None and self.dim != table.dim:
            wrong.append("dim: %d" % table.dim)
        if self.rows is not None and table.kind == "range" and self.rows != table.rows:
            wrong.append("rows: %d" % table.rows)
        if wrong:
            raise ValueError("%s: table %r of %s is declared %s, got %s"
                             % (self._kind, self.name, worker.config, self._declared(),
                                ", ".join(wrong)))
        self.table = table
        self.dim = table.dim
        if table.kind == "range":
            self.rows = table.rows
        return self

    def _declared(self):
        words = []
        if self.rows is not None:
            words.append("rows: %d" % self.rows)
        elif self.hashed:
            words.append("keys: hashed")
        if self.dim is not None:
            words.append("dim: %d" % self.dim)
        return ", ".join(words) or "(nothing)"

    def table_options(self, init=None, optimizer=None, seed=1):
        """The job file's options of the table as a dict (name, keys or rows,
        dim, max_rows or max_mb, init, optimizer), for tables_for: the
        module's own init and optimizer, else `init` and `optimizer`, else
        PyTorch's embedding init (normal, stddev 1, seeded with `seed`) and
        DEFAULT_OPTIMIZER. ValueError when the module does not say its dim,
        or, for a hashed table, its memory bound."""
        if self.dim is None:
            raise ValueError("%s %r: declare dim= (and rows= or max_rows=) for tables_for"
                             % (self._kind, self.name))
        options = {"name": self.name}
        if self.hashed:
            if self.max_rows is None and self.max_mb is None:
                raise ValueError("%s %r: a hashed table needs a memory bound: declare "
                                 "max_rows= or max_mb=" % (self._kind, self.name))
            options["keys"] = "hashed"
        elif self.rows is None:
            raise ValueError("%s %r: declare rows= (a range table) or max_rows= / max_mb= (a "
                             "hashed one) for tables_for" % (self._kind, self.name))
        else:
            options["rows"] = self.rows
        options["dim"] = self.dim
        if self.max_rows is not None:
            options["max_rows"] = self.max_rows
        if self.max_mb is not None:
            options["max_mb"] = self.max_mb
        options["init"] = (self.init if self.init is not None else init if init is not None
                           else {"type": "normal", "stddev": 1.0, "seed": seed})
        options["optimizer"] = (self.optimizer if self.optimizer is not None else optimizer
                                if optimizer is not None else DEFAULT_OPTIMIZER)
        return options

    def _rows(self, ids):
        """(rows, where): the rows of the distinct ids of `ids` (an int64
        tensor), pulled once each, and each id's index among them (shape of
        ids). With autograd on, the backward pass pushes the rows' gradient."""
        if self.table is None:
            raise RuntimeError("%s %r is not bound to a worker: pass one to the constructor, "
                               "call bind(worker), or hand the model to "
                               "ps.torch.ParameterServer" % (self._kind, self.name))
        if ids.dtype != torch.int64:
            raise TypeError("%s %r: expected int64 ids (torch.int64), got %s (convert with "
                            "ids.long())" % (self._kind, self.name, ids.dtype))
        distinct, where = torch.unique(ids.reshape(-1), return_inverse=True)
        if distinct.numel() == 0:
            return torch.zeros(0, self.dim, device=ids.device), where.reshape(ids.shape)
        rows = self.table.pull(distinct)  # a tensor: distinct is one (ps/_tensors.py)
        if torch.is_grad_enabled():
            rows.requires_grad_()
            rows.register_hook(lambda grad: self._push_rows(distinct, grad.contiguous()))
        return rows, where.reshape(ids.shape)

    def _push_rows(self, ids, grad):
        if self._held is not None:
            self._held.append((ids, grad))
        else:
            self._in_flight.append(self.table.push_async(ids, grad))

    def _release(self):
        """Starts the pushes held since the last call."""
        held, self._held = self._held or [], ([] if self._held is not None else None)
        for ids, grad in held:
            self._in_flight.append(self.table.push_async(ids, grad))

    def wait(self):
        """Waits until the shards accepted every push the backward passes
        started; raises the first one's error."""
        futures, self._in_flight = self._in_flight, []
        for future in futures:
            future.wait()

    def extra_repr(self):
        return "table=%r, %s" % (self.name, self._declared())


class Embedding(_TableModule):
    """Rows of a table of the job looked up by id, as torch.nn.Embedding
    does, with the rows kept by the servers: forward(ids) pulls the batch's
    distinct ids once each (any int64 tensor; a hashed table takes any id,
    read as uint64), and the backward pass pushes their gradients, summed
    over repeats, for the table's optimizer to apply. The module holds no
    torch parameter.

    Embedding(worker, name): the table `name` of `worker`'s job (a range
    table of rows x dim, or keys: hashed). Embedding(None, name, rows=...,
    dim=...) or (None, name, dim=..., max_rows=...) declares the table
    instead (range or hashed; init= and optimizer= as the job file writes
    them), so that ps.torch.tables_for(model) writes it; bind(worker), or a
    ParameterServer over the model, then binds it to the worker's table,
    checking what was declared. Raises ValueError for a missing table or
    one that differs from the declaration.

    The pushes start during the backward pass; wait() waits for them, and a
    ParameterServer over a model holding this module does in step().
    Not thread-safe.
    """

    def __init__(self, worker, name, *, rows=None, dim=None, max_rows=None, max_mb=None,
                 init=None, optimizer=None):
        super().__init__("Embedding", worker, name, rows, dim, max_rows, max_mb, init,
                         optimizer)

    def forward(self, ids):
        """ids: an int64 tensor of any shape; returns shape ids.shape + (dim,)."""
        rows, where = self._rows(ids)
        return rows[where]


class EmbeddingBag(_TableModule):
    """Sums, means or maxima of bags of rows of a table looked up by id, as
    torch.nn.EmbeddingBag computes them, with the rows kept by the servers:
    forward pulls the distinct ids of the whole batch once each, and the
    backward pass pushes their gradients, summed over every bag and repeat,
    for the table's optimizer to apply. The module holds no torch
    parameter.

    mode: "sum", "mean" (torch's default) or "max". The table is bound or
    declared as for Embedding. forward(input, offsets=None,
    per_sample_weights=None) takes torch.nn.EmbeddingBag's arguments: a 2-D
    int64 input of equal bags (one a row), or a 1-D input cut into bags at
    `offsets` (include_last_offset as torch's); per_sample_weights (mode
    "sum") weights each id. Returns (bags, dim). Not thread-safe.
    """

    def __init__(self, worker, name, *, mode="mean", include_last_offset=False, rows=None,
                 dim=None, max_rows=None, max_mb=None, init=None, optimizer=None):
        if mode not in ("sum", "mean", "max"):
            raise ValueError("EmbeddingBag %r: mode: expected \"sum\", \"mean\" or \"max\", "
                             "got %r" % (name, mode))
        super().__init__("EmbeddingBag", worker, name, rows, dim, max_rows, max_mb, init,
                         optimizer)
        self.mode = mode
        self.include_last_offset = include_last_offset

    def forward(self, input, offsets=None, per_sample_weights=None):  # noqa: A002 (torch's name)
        rows, where = self._rows(input)
        # torch's own bag reduction over the pulled rows, by their index:
        # its gradient is the rows' gradient, summed per distinct id.
        return torch.nn.functional.embedding_bag(
            where, rows, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset)

    def extra_repr(self):
        return "%s, mode=%r" % (super().extra_repr(), self.mode)


def _table_modules(model):
    """The Embedding and EmbeddingBag modules of `model`, in modules() order."""
    return [m for m in model.modules() if isinstance(m, _TableModule)]


# ParameterServer's default bucket size, MiB: see its doc.
