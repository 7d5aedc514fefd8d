"""A torch.nn.Module's parameters kept by the parameter server.

    import torch
    import ps, ps.torch

    model = torch.nn.Sequential(torch.nn.Linear(784, 100), torch.nn.ReLU(),
                                torch.nn.Linear(100, 10))
    print(ps.torch.tables_for(model, optimizer={"type": "sgd", "lr": 0.1}))  # for job.yaml

    worker, _ = ps.worker_from_argv()
    with worker as w:
        server = ps.torch.ParameterServer(w, model)   # checks the tables, pulls
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            server.zero_grad()
            loss.backward()
            server.step()          # push the gradients, clock, pull the new values

One range table per parameter, named as the parameter
(model.named_parameters(): "0.weight", "2.bias"), with rows = the
parameter's first dimension and dim = the product of the others (a 0-d
parameter is 1 x 1): a weight of shape (out, in) is `out` rows of `in`
floats, spread over the shards by row. The shards apply the job's
optimizer to the pushed gradients, so no torch optimizer is needed, and
hold the parameters' initial values (the tables' `init`): the first pull
replaces the module's own initialization.

Parameters are float32 and contiguous. CPU parameters are read and written
in place through numpy views of their memory; CUDA parameters through a
pinned host buffer per table (ps/_tensors.py).

Embedding and EmbeddingBag are modules over a table of rows looked up by id
(range or hashed): the forward pass pulls the batch's distinct ids, the
backward pass pushes their gradients. tables_for writes their tables too.
"""

import math

import numpy as _np
import torch  # noqa: F401 (ps.torch needs it; `import ps` alone does not)

from ps import _tensors

# What tables_for writes when not told otherwise.
from ps._embedding import DEFAULT_OPTIMIZER  # noqa: E402 (one default for both)


def table_shape(parameter):
    """(rows, dim) of the table that holds `parameter`: its first dimension,
    and the product of the others (1 x 1 for a 0-d parameter)."""
    shape = tuple(parameter.shape)
    if not shape:
        return 1, 1
    return shape[0], math.prod(shape[1:])


def _yaml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value if value.replace("_", "").isalnum() else '"%s"' % value
    raise TypeError("expected a number, bool or string option value, got %r" % (value,))


def _yaml_map(options):
    return "{ %s }" % ", ".join("%s: %s" % (k, _yaml_value(v)) for k, v in options.items())


def _default_init(dim, seed):
    """PyTorch's own scale for nn.Linear and nn.Conv* weights: uniform in
    [-1/sqrt(fan_in), 1/sqrt(fan_in)], fan_in = dim."""
    return {"type": "uniform", "scale": 1.0 / math.sqrt(dim), "seed": seed}


def tables_for(model, optimizer=None, init=None, prefix=""):
    """The YAML text of a job file's `tables:` section: one range table per
    parameter of `model` (a torch.nn.Module), named `prefix` + the
    parameter's name, then the table of each Embedding and EmbeddingBag
    module of the model, named as the module names it (no prefix), as the
    module declares it (rows= or max_rows= / max_mb=, and dim=; two modules
    may share a table they declare alike).

    optimizer: the tables' update rule, as the job file writes it (a dict:
    {"type": "sgd", "lr": 0.1} by default; "adam", "adagrad", ... with their
    keys). init: the tables' initial values as a dict ({"type": "normal",
    "stddev": 0.01}), or None: uniform in +-1/sqrt(fan_in) (PyTorch's scale
    for Linear and Conv weights) for parameters of two or more dimensions,
    zeros for the others, normal with stddev 1 (PyTorch's for embeddings)
    for the embedding tables, each table with a seed of its own. A module's
    own init= and optimizer= win over both. Raises ValueError for a module
    that does not declare its table, or two that declare one table
    differently.
    """
    optimizer = DEFAULT_OPTIMIZER if optimizer is None else optimizer
    lines = ["tables:"]
    names = set()
    for index, (name, parameter) in enumerate(model.named_parameters()):
        rows, dim = table_shape(parameter)
        if init is not None:
            table_init = init
        elif parameter.dim() >= 2:
            table_init = _default_init(dim, index + 1)
        else:
            table_init = None
        names.add(prefix + name)
        lines.append('  - name: "%s%s"' % (prefix, name))
        lines.append("    rows: %d" % rows)
        lines.append("    dim: %d" % dim)
        if table_init is not None:
            lines.append("    init: %s" % _yaml_map(table_init))
        lines.append("    optimizer: %s" % _yaml_map(optimizer))
    written = {}  # table name -> (its options, its seed)
    for module in _table_modules(model):
        if module.name in written:
            first, seed = written[module.name]
            options = module.table_options(init, optimizer, seed)
            if options != first:
                raise ValueError("%s %r: declared as %s by one module and as %s by another"
                                 % (module._kind, module.name, first, options))
            continue
        if module.name in names:
            raise ValueError("%s %r: a parameter's table has that name already"
                             % (module._kind, module.name))
        seed = len(names) + len(written) + 1  # the table's place, as a parameter's
        options = module.table_options(init, optimizer, seed)
        written[module.name] = (dict(options), seed)
        name = options.pop("name")
        lines.append('  - name: "%s"' % name)
        for key, value in options.items():
            text = _yaml_map(value) if isinstance(value, dict) else _yaml_value(value)
            lines.append("    %s: %s" % (key, text))
    return "\n".join(lines) + "\n"


def check_tables(worker, model, prefix=""):
    """Raises ValueError naming the first parameter of `model` whose table
    (`prefix` + its name) is missing from the worker's job, is hashed, or
    has another shape than table_shape(parameter). Returns {parameter
    name: ps.Table}."""
    tables = {}
    for name, parameter in model.named_parameters():
        table_name = prefix + name
        expected = table_shape(parameter)
        if table_name not in worker.tables:
            raise ValueError(
                "parameter %r (shape %s) has no table %r in %s: add one with rows: %d and "
                "dim: %d (ps.torch.tables_for(model) writes the whole tables section)"
                % (name, tuple(parameter.shape), table_name, worker.config, *expected))
        table = worker.tables[table_name]
        if table.kind != "range" or table.shape != expected:
            got = ("a hashed table" if table.kind != "range"
                   else "rows: %d, dim: %d" % table.shape)
            raise ValueError(
                "parameter %r (shape %s) needs table %r of %s with rows: %d and dim: %d, got %s "
                "(ps.torch.tables_for(model) writes the tables section)"
                % (name, tuple(parameter.shape), table_name, worker.config, *expected, got))
        tables[name] = table
    return tables


from ps._embedding import Embedding, EmbeddingBag, _TableModule, _table_modules  # noqa: E402,F401


DEFAULT_BUCKET_MB = 1.0


class _Entry:
    """A parameter kept by a ParameterServer."""

    __slots__ = ("name", "parameter", "table", "values", "bucket", "grad", "pushed")

    def __init__(self, name, parameter, table, values):
        self.name = name
        self.parameter = parameter
        self.table = table
        self.values = values  # its memory as (rows, dim): a numpy view, or the CUDA tensor's view
        self.bucket = None    # its _Bucket
        self.grad = None      # overlap: this pass's gradient, waiting for its bucket
        self.pushed = False   # overlap: pushed with its bucket since the last step()


class _Bucket:
    """Parameters whose gradients are pushed together (overlap=True)."""

    __slots__ = ("entries", "ready", "future")

    def __init__(self, entries):
        self.entries = entries
        self.ready = 0       # gradients in this pass
        self.future = None   # the push of this pass, once sent


def make_buckets(sizes, bucket_mb):
    """Groups parameters of `sizes` (bytes each, in model.parameters()
    order) into buckets: lists of their indices, in the reverse order
    (the order backward passes mostly produce gradients in, as
    DistributedDataParallel assumes), each holding parameters until the next
    would take it past `bucket_mb` MiB. A parameter larger than that is a
    bucket of its own; bucket_mb=0 makes a bucket per parameter."""
    if bucket_mb < 0:
        raise ValueError("bucket_mb: expected a size >= 0 (MiB), got %r" % (bucket_mb,))
    cap = bucket_mb * 2**20
    buckets, current, size = [], [], 0
    for index in reversed(range(len(sizes))):
        if current and size + sizes[index] > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(index)
        size += sizes[index]
    if current:
        buckets.append(current)
    return buckets


def _memory(parameter, name, shape):
    """The parameter's memory as a (rows, dim) array: a numpy view of a CPU
    tensor, a view of a CUDA one (pulled through a staging buffer)."""
    _tensors.check_values(parameter, name)
    if _tensors.staged(parameter):
        return parameter.detach().view(shape)
    return parameter.detach().numpy().reshape(shape)


class ParameterServer:
    """Keeps the parameters of `model` (a torch.nn.Module) on the servers of
    `worker`'s job (a joined ps.Worker; both must outlive this object).

    pull() writes the servers' values into the parameters in place;
    push_gradients() pushes each parameter's .grad, which the shards apply
    with the table's optimizer; step() pushes, clocks and pulls, waiting as
    the job's consistency mode says (bsp: for every worker's pushes of this
    clock; ssp and asp: as far as their bound). Raises ValueError when a
    table is missing or of another shape (check_tables), TypeError for a
    parameter that is not a contiguous float32 tensor on the CPU or a CUDA
    device. The model's Embedding and EmbeddingBag modules that were
    declared without a worker are bound to this worker's tables.

    Under bsp a pull at clock c holds every worker's pushes of the clocks
    before c, and may hold some of clock c from workers already past their
    own pull. barrier=True rules that out: each step() then also spends a
    clock waiting until every worker pulled (a one-row pull), so that the
    workers compute exactly what one process would on the union of their
    batches (synchronous SGD), at the price of one more round trip a step.
    A model with Embedding or EmbeddingBag modules pulls their rows in the
    forward pass, after that wait: with barrier=True their gradients are
    then held until step(), which first spends one more clock waiting until
    every worker reached it (every forward pass of the step has pulled),
    and only then pushes them (three clocks a step).

    overlap=True pushes gradients from hooks during the backward pass,
    while the pass goes on with the layers before (as
    DistributedDataParallel overlaps its all-reduce with the backward
    pass), in buckets: a bucket is a group of parameters, taken in the
    reverse order of model.parameters() (the order backward mostly
    produces their gradients) up to `bucket_mb` MiB of float32 values
    (DEFAULT_BUCKET_MB, 1 MiB; a larger parameter is a bucket of its own,
    bucket_mb=0 a bucket per parameter). Each parameter keeps its own table;
    once every gradient of a bucket is in, and not before, the bucket's
    pushes, one per table, are issued together in one call of the client
    (Worker.push_batch_async). Smaller buckets start pushing sooner; larger
    ones cost fewer calls. step() pushes the buckets a pass left incomplete
    (a parameter it did not reach pushes nothing), then waits for every
    push. Each backward pass must be followed by step(): gradients are
    pushed as they come, not summed in .grad over several passes (a second
    gradient of a parameter before step() raises RuntimeError).
    Without overlap, push_gradients() pushes every .grad in one batch.

    Unless pull=False, the constructor reads the servers' values into the
    parameters and spends one clock so that every worker starts from the
    same values: a one-row pull at the next clock waits until every worker
    read them (bsp), and only then can this worker's first push follow.

    Not thread-safe: call it from the training loop's thread.
    """

    def __init__(self, worker, model, prefix="", pull=True, barrier=False, overlap=False,
                 bucket_mb=DEFAULT_BUCKET_MB):
        self.worker = worker
        self.model = model
        self.barrier = barrier
        self.overlap = overlap
        self.bucket_mb = bucket_mb
        self._hooks = []
        tables = check_tables(worker, model, prefix)
        self._entries = []
        for name, parameter in model.named_parameters():
            table = tables[name]
            values = _memory(parameter, "parameter %r" % name, table.shape)
            self._entries.append(_Entry(name, parameter, table, values))
        self._embeddings = _table_modules(model)
        for module in self._embeddings:
            if module.table is None:
                module.bind(worker)
            if barrier:
                module._held = []
        # Parameters that take no gradient are in no bucket.
        learned = [e for e in self._entries if e.parameter.requires_grad]
        self._buckets = [_Bucket([learned[i] for i in indices]) for indices in make_buckets(
            [e.parameter.numel() * 4 for e in learned], bucket_mb)]
        for bucket in self._buckets:
            for entry in bucket.entries:
                entry.bucket = bucket
        if self._entries:
            self._barrier_ids = _np.zeros(1, _np.uint64)
            self._barrier_out = _np.empty((1, self._entries[0].table.dim), _np.float32)
        if overlap:
            for entry in learned:
                self._hooks.append(entry.parameter.register_hook(self._push_when_ready(entry)))
        if pull:
            self.pull()
            # No worker's first push may reach a shard before every worker
            # read the initial values (under bsp; ssp lets workers this far
            # apart by design).
            self._wait_for_every_worker()

    @property
    def buckets(self):
        """The buckets of overlap=True: lists of parameter names, in the
        order they are expected to fill."""
        return [[e.name for e in bucket.entries] for bucket in self._buckets]

    def pull(self):
        """Writes every parameter's values from the servers into its own
        memory (the same tensors, no new ones); pulls of all tables in
        flight at once."""
        futures = [e.table.pull_async(out=e.values) for e in self._entries]
        for future in futures:
            future.wait()

    def push_gradients(self):
        """Pushes every parameter's .grad (parameters without one are
        skipped) in one batch, and waits until the shards accepted them.
        With overlap=True, pushes the buckets the backward pass left
        incomplete and waits for every bucket's push instead (a parameter
        the pass did not reach pushes nothing). Waits for the pushes of the
        model's Embedding and EmbeddingBag modules too."""
        for module in self._embeddings:
            module.wait()
        if self.overlap:
            self._flush_buckets()
            return
        pushes = [(e.table, e.parameter.grad.detach().contiguous().view(e.table.shape))
                  for e in self._entries if e.parameter.grad is not None]
        if pushes:
            self.worker.push_batch(pushes)

    def _push_bucket(self, bucket):
        pushes = []
        for entry in bucket.entries:
            if entry.grad is not None:
                pushes.append((entry.table, entry.grad))
                entry.grad = None
                entry.pushed = True
        bucket.future = self.worker.push_batch_async(pushes)

    def _flush_buckets(self):
        """Pushes the buckets holding gradients not sent yet, then waits
        for every bucket's push and makes them ready for the next pass."""
        for bucket in self._buckets:
            if bucket.future is None and bucket.ready > 0:
                self._push_bucket(bucket)
        futures = []
        for bucket in self._buckets:
            if bucket.future is not None:
                futures.append(bucket.future)
            bucket.future = None
            bucket.ready = 0
            for entry in bucket.entries:
                entry.pushed = False
        for future in futures:
            future.wait()

    def _push_when_ready(self, entry):
        """A hook for the parameter of `entry`: autograd calls it with the
        parameter's whole gradient of this backward pass, as soon as it is
        known; the parameter's bucket is pushed once it holds every
        gradient, while the pass goes on."""
        def hook(grad):
            if entry.grad is not None or entry.pushed:
                raise RuntimeError(
                    "parameter %r: a second gradient before step(); with overlap=True each "
                    "backward pass pushes its gradients, so call step() after each one (or "
                    "use overlap=False to accumulate .grad over several passes)" % entry.name)
            # A gradient may come transposed (the backward of a matmul): the
            # push needs it contiguous, and it must not change until sent.
            entry.grad = grad.detach().contiguous().view(entry.table.shape)
            bucket = entry.bucket
            bucket.ready += 1
            if bucket.ready == len(bucket.entries):
                self._push_bucket(bucket)
        return hook

    def close(self):
        """Removes the gradient hooks of overlap=True, pushes the gradients
        still waiting in an incomplete bucket (and those of Embedding and
        EmbeddingBag modules held for step()) and waits for every push in
        flight."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        for module in self._embeddings:
            module._release()
            module._held = None
            module.wait()
        self._flush_buckets()

    def step(self):
        """push_gradients(), then the worker's clock, then pull(); with
        barrier=True then one more clock and a one-row pull that waits until
        every worker finished this step's pull (and, for a model with
        Embedding or EmbeddingBag modules, before the pushes one more that
        waits until every worker reached this step() before their held
        gradients go)."""
        if self.barrier and self._embeddings:
            self._wait_for_every_worker()
            for module in self._embeddings:
                module._release()
        self.push_gradients()
        clocked = self.worker.clock_async()  # later pulls already carry the next clock
        self.pull()
        clocked.wait()
        if self.barrier:
            self._wait_for_every_worker()

    def _wait_for_every_worker(self):
        """Finishes this clock, and waits until every worker finished it
        (under bsp): a one-row pull at the next clock."""
        clocked = self.worker.clock_async()
        if self._entries:
            self._entries[0].table.pull(self._barrier_ids, out=self._barrier_out)
        clocked.wait()

    def zero_grad(self):
        """Sets every parameter's .grad to None (as torch optimizers do)."""
        for entry in self._entries:
            entry.parameter.grad = None

    def parameters(self):
        """{parameter name: ps.Table}."""
        return {e.name: e.table for e in self._entries}


__all__ = ["tables_for", "check_tables", "table_shape", "make_buckets", "Embedding",
           "EmbeddingBag", "ParameterServer", "DEFAULT_OPTIMIZER", "DEFAULT_BUCKET_MB"]
