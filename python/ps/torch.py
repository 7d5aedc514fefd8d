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
floats, spread over the shards by row, and an embedding's rows are its ids.
The shards apply the job's optimizer to the pushed gradients, so no torch
optimizer is needed, and hold the parameters' initial values (the tables'
`init`): the first pull replaces the module's own initialization.

Parameters are read and written in place through numpy views of their
memory: they must be float32, contiguous and on the CPU.

Embedding is a module over a table of rows looked up by id (range or
hashed): the forward pass pulls the batch's distinct ids, the backward
pass pushes their gradients.
"""

import math

import numpy as _np
import torch  # noqa: F401 (ps.torch needs it; `import ps` alone does not)

from ps import _tensors

# What tables_for writes when not told otherwise.
DEFAULT_OPTIMIZER = {"type": "sgd", "lr": 0.1}


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
    """The YAML text of a job file's `tables:` section with one range table
    per parameter of `model` (a torch.nn.Module), named `prefix` + the
    parameter's name.

    optimizer: the tables' update rule, as the job file writes it (a dict:
    {"type": "sgd", "lr": 0.1} by default; "adam", "adagrad", ... with their
    keys). init: the tables' initial values as a dict ({"type": "normal",
    "stddev": 0.01}), or None: uniform in +-1/sqrt(fan_in) (PyTorch's scale
    for Linear and Conv weights) for parameters of two or more dimensions,
    zeros for the others, each table with a seed of its own.
    """
    optimizer = DEFAULT_OPTIMIZER if optimizer is None else optimizer
    lines = ["tables:"]
    for index, (name, parameter) in enumerate(model.named_parameters()):
        rows, dim = table_shape(parameter)
        if init is not None:
            table_init = init
        elif parameter.dim() >= 2:
            table_init = _default_init(dim, index + 1)
        else:
            table_init = None
        lines.append('  - name: "%s%s"' % (prefix, name))
        lines.append("    rows: %d" % rows)
        lines.append("    dim: %d" % dim)
        if table_init is not None:
            lines.append("    init: %s" % _yaml_map(table_init))
        lines.append("    optimizer: %s" % _yaml_map(optimizer))
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


class Embedding(torch.nn.Module):
    """Rows of a table of `worker`'s job looked up by id, as
    torch.nn.Embedding does, with the rows kept by the servers: forward(ids)
    pulls the batch's distinct ids once each (any int64 tensor; a hashed
    table takes any id, read as uint64), and the backward pass pushes their
    gradients, summed over repeats, for the table's optimizer to apply. The
    module holds no torch parameter; the table is the job file's (a range
    table of rows x dim, or keys: hashed).

    The pushes start during the backward pass; wait() waits for them, and a
    ParameterServer over a model holding this module does in step().
    Raises ValueError when the job has no table `name`. Not thread-safe.
    """

    def __init__(self, worker, name):
        super().__init__()
        if name not in worker.tables:
            raise ValueError("Embedding: %s has no table %r (tables: %s)"
                             % (worker.config, name, ", ".join(worker.tables)))
        self.table = worker.tables[name]
        self.dim = self.table.dim
        self._in_flight = []

    def forward(self, ids):
        distinct, where = torch.unique(ids.reshape(-1), return_inverse=True)
        rows = self.table.pull(distinct)  # a tensor: ids is one (ps/_tensors.py)
        if torch.is_grad_enabled():
            rows.requires_grad_()
            rows.register_hook(lambda grad: self._in_flight.append(
                self.table.push_async(distinct, grad.contiguous())))
        return rows[where].reshape(*ids.shape, self.dim)

    def wait(self):
        """Waits until the shards accepted every push the backward passes
        started; raises the first one's error."""
        futures, self._in_flight = self._in_flight, []
        for future in futures:
            future.wait()

    def extra_repr(self):
        return "table=%r, dim=%d" % (self.table.name, self.dim)


class ParameterServer:
    """Keeps the parameters of `model` (a torch.nn.Module) on the servers of
    `worker`'s job (a joined ps.Worker; both must outlive this object).

    pull() writes the servers' values into the parameters in place;
    push_gradients() pushes each parameter's .grad, which the shards apply
    with the table's optimizer; step() pushes, clocks and pulls, waiting as
    the job's consistency mode says (bsp: for every worker's pushes of this
    clock; ssp and asp: as far as their bound). Raises ValueError when a
    table is missing or of another shape (check_tables), TypeError for a
    parameter that is not a float32 CPU tensor.

    Under bsp a pull at clock c holds every worker's pushes of the clocks
    before c, and may hold some of clock c from workers already past their
    own pull. barrier=True rules that out: each step() then also spends a
    clock waiting until every worker pulled (a one-row pull), so that the
    workers compute exactly what one process would on the union of their
    batches (synchronous SGD), at the price of one more round trip a step.

    overlap=True pushes each parameter's gradient from a hook as soon as
    the backward pass has it, while the pass goes on with the layers before
    (as DistributedDataParallel overlaps its all-reduce with the backward
    pass; each parameter is a table, and its push a request of its own);
    step() then only waits for them. Each backward pass must then be
    followed by step(): gradients are pushed as they come, not summed in
    .grad over several passes.

    Unless pull=False, the constructor reads the servers' values into the
    parameters and spends one clock so that every worker starts from the
    same values: a one-row pull at the next clock waits until every worker
    read them (bsp), and only then can this worker's first push follow.

    Not thread-safe: call it from the training loop's thread.
    """

    def __init__(self, worker, model, prefix="", pull=True, barrier=False, overlap=False):
        self.worker = worker
        self.model = model
        self.barrier = barrier
        self.overlap = overlap
        self._hooks = []
        self._in_flight = {}  # parameter name -> its push, started by a hook
        tables = check_tables(worker, model, prefix)
        # (name, parameter, table, the parameter's memory as a (rows, dim) array)
        self._entries = []
        for name, parameter in model.named_parameters():
            table = tables[name]
            values = _tensors.float_array(parameter, "parameter %r" % name)
            self._entries.append((name, parameter, table, values.reshape(table.shape)))
        if self._entries:
            self._barrier_ids = _np.zeros(1, _np.uint64)
            self._barrier_out = _np.empty((1, self._entries[0][2].dim), _np.float32)
        if overlap:
            for name, parameter, table, _ in self._entries:
                self._hooks.append(parameter.register_hook(self._push_when_ready(name, table)))
        if pull:
            self.pull()
            # No worker's first push may reach a shard before every worker
            # read the initial values (under bsp; ssp lets workers this far
            # apart by design).
            self._wait_for_every_worker()

    def pull(self):
        """Writes every parameter's values from the servers into its own
        memory (the same tensors, no new ones); pulls of all tables in
        flight at once."""
        futures = [table.pull_async(out=values) for _, _, table, values in self._entries]
        for future in futures:
            future.wait()

    def push_gradients(self):
        """Pushes every parameter's .grad (parameters without one are
        skipped); pushes of all tables in flight at once, and waits until the
        shards accepted them. With overlap=True, waits for the pushes the
        backward pass started instead (a parameter the pass did not reach
        pushes nothing). Waits for the pushes of the model's Embedding
        modules too."""
        for module in self.model.modules():
            if isinstance(module, Embedding):
                module.wait()
        if self.overlap:
            futures = list(self._in_flight.values())
            self._in_flight = {}
        else:
            futures = []
            for name, parameter, table, _ in self._entries:
                if parameter.grad is not None:
                    futures.append(self._push(name, table, parameter.grad))
        for future in futures:
            future.wait()

    def _push(self, name, table, grad):
        grads = _tensors.float_array(grad, "gradient of %r" % name)
        return table.push_async(grads.reshape(table.shape))

    def _push_when_ready(self, name, table):
        """A hook for the parameter `name`: autograd calls it with the
        parameter's whole gradient of this backward pass, as soon as it is
        known, and the push starts while the pass goes on."""
        def hook(grad):
            if name in self._in_flight:
                raise RuntimeError(
                    "parameter %r: a second gradient before step(); with overlap=True each "
                    "backward pass pushes its gradients, so call step() after each one (or "
                    "use overlap=False to accumulate .grad over several passes)" % name)
            # A gradient may come transposed (the backward of a matmul): the
            # push needs it contiguous, and it must not change until sent.
            self._in_flight[name] = self._push(name, table, grad.contiguous())
        return hook

    def close(self):
        """Removes the gradient hooks of overlap=True and waits for their
        pushes in flight."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        futures, self._in_flight = list(self._in_flight.values()), {}
        for future in futures:
            future.wait()

    def step(self):
        """push_gradients(), then the worker's clock, then pull(); with
        barrier=True then one more clock and a one-row pull that waits until
        every worker finished this step's pull."""
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
            table = self._entries[0][2]
            table.pull(self._barrier_ids, out=self._barrier_out)
        clocked.wait()

    def zero_grad(self):
        """Sets every parameter's .grad to None (as torch optimizers do)."""
        for _, parameter, _, _ in self._entries:
            parameter.grad = None

    def parameters(self):
        """{parameter name: ps.Table}."""
        return {name: table for name, _, table, _ in self._entries}


__all__ = ["tables_for", "check_tables", "table_shape", "Embedding", "ParameterServer",
           "DEFAULT_OPTIMIZER"]
