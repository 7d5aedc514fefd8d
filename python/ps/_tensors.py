"""PyTorch tensors wherever Table's calls (and Worker.push_batch) take an
array: CPU tensors with no copy, CUDA tensors through a host staging buffer.

A torch.Tensor has no buffer protocol, so each call turns a CPU tensor
argument into the numpy array that shares its memory
(tensor.detach().numpy()) before the C++ side reads or writes it, and
returns a tensor where one was given: pull(out=tensor) returns that tensor,
pull(ids_tensor) a tensor over the new array (torch.from_numpy). Values
must be float32 and contiguous; ids int64 (torch has no uint64), read as
uint64 bit for bit.

CUDA tensors go through pinned host memory, one buffer per table and
direction (pull or push) of the worker, grown to the largest call and
reused:
  - pull(out=cuda_tensor): the shards' rows land in the buffer, then one
    copy with non_blocking=True uploads them on the current CUDA stream;
    work queued after the call on that stream sees them. The buffer is not
    written again before an event recorded after that copy has passed.
  - push(cuda_tensor): a copy with non_blocking=True downloads the values
    into the buffer, then an event recorded after it is waited for (the
    client reads host memory), then the push is sent from the buffer. The
    buffer is not written again before that push is done.
A second call of the same table and direction therefore waits for the
first one's buffer. ids on a CUDA device are copied to the host.
Tensors on other devices are refused with TypeError.

torch is never imported here: a tensor can only exist once its caller
imported torch, so `import ps` works without it.
"""

import functools
import sys
import weakref

import numpy as _np

from ps._ps import Table, Worker

# Device types whose tensors pass through a host staging buffer. "cpu" is
# added only by tests, to run the staging path without a GPU.
STAGED_DEVICES = {"cuda"}


def _torch():
    """The torch module when the program imported it, else None."""
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def staged(tensor):
    """True when `tensor`'s values go through a staging buffer (a CUDA
    tensor); False for a CPU tensor, read in place; None for another
    device (which the calls refuse)."""
    # is_cuda and is_cpu, not device.type: they make no device object.
    if tensor.is_cuda:
        return "cuda" in STAGED_DEVICES
    if tensor.is_cpu:
        return "cpu" in STAGED_DEVICES
    return None


def _check(tensor, name, dtype, expected, convert, one_dimension=False):
    """Raises TypeError unless `tensor` is on the CPU or a CUDA device with
    element type `dtype`, ValueError unless it is contiguous (and
    one-dimensional when asked); `expected` and `convert` word the dtype's
    message. Returns staged(tensor)."""
    where = staged(tensor)
    if where is None:
        raise TypeError(
            "%s: expected a CPU or CUDA tensor, got a tensor on %s (move it with %s.cpu() and "
            "copy the result back with .copy_())" % (name, tensor.device, name))
    if tensor.dtype is not dtype:
        raise TypeError("%s: expected %s, got %s (convert with %s.%s())"
                        % (name, expected, tensor.dtype, name, convert))
    if one_dimension and tensor.dim() != 1:
        raise ValueError("%s: expected one dimension, got shape %s" % (name, tuple(tensor.shape)))
    if not tensor.is_contiguous():
        raise ValueError("%s: expected a contiguous tensor, got strides %s for shape %s (make "
                         "one with %s.contiguous())"
                         % (name, tuple(tensor.stride()), tuple(tensor.shape), name))
    return where


# The numpy views of CPU tensors by id(tensor): (a weak reference to the
# tensor, its view, the data_ptr and shape it was made for). Making a view
# (tensor.detach().numpy()) costs a few microseconds, a good part of a
# 4 KiB pull; a training loop passes the same tensors (out=, parameters)
# call after call. An entry goes when its tensor does, and is made anew
# when the tensor's memory or shape changed (set_, resize_).
_views = {}
_FLOAT32 = _np.dtype(_np.float32)


def _forget_view(key, ref):
    entry = _views.get(key)
    if entry is not None and entry[0] is ref:
        del _views[key]


def _kept_view(tensor):
    """The kept view of `tensor` when its memory, shape and strides are
    still those it was made for, else None."""
    entry = _views.get(id(tensor))
    if (entry is not None and entry[0]() is tensor and entry[2] == tensor.data_ptr()
            and entry[3] == tensor.shape and entry[4] == tensor.stride()):
        return entry[1]
    return None


def _view(tensor):
    """The numpy array over a CPU tensor's memory (without autograd's record:
    a parameter requires grad, and .numpy() refuses those)."""
    array = _kept_view(tensor)
    if array is not None:
        return array
    array = tensor.detach().numpy()
    key = id(tensor)
    ref = weakref.ref(tensor, lambda ref, key=key: _forget_view(key, ref))
    _views[key] = (ref, array, tensor.data_ptr(), tensor.shape, tensor.stride())
    return array


def _values_view(tensor, name):
    """The numpy array over the memory of float32 values `tensor`, a CPU
    tensor, or None for a staged one; raises as _check does. A tensor whose
    view is kept passed the checks when it was made, and its memory, shape
    and strides say it still would."""
    array = _kept_view(tensor)
    if array is not None and array.dtype == _FLOAT32 and "cpu" not in STAGED_DEVICES:
        return array
    return None if _check_values(tensor, name) else _view(tensor)


def _check_values(tensor, name):
    return _check(tensor, name, _torch().float32, "a float32 tensor (torch.float32)", "float")


def check_values(obj, name):
    """Raises as a call would for float32 values `obj` (a tensor) that are
    not a contiguous float32 CPU or CUDA tensor; anything else passes.
    Returns staged(obj) for a tensor, None otherwise."""
    return _check_values(obj, name) if is_tensor(obj) else None


def id_array(obj, name="ids"):
    """`obj` itself, or a uint64 numpy view of a one-dimensional int64 tensor
    (a CUDA tensor's ids copied to the host first)."""
    if not is_tensor(obj):
        return obj
    _check(obj, name, _torch().int64, "an int64 tensor (torch.int64, read as uint64)", "long",
           one_dimension=True)
    if not obj.is_cpu:
        obj = obj.to("cpu")
    return _view(obj).view(_np.uint64)


class _Staging:
    """A host buffer of one table and direction of a worker, reused by its
    staged calls (see the module's doc). Not thread-safe, as the calls."""

    __slots__ = ("buffer", "busy", "event")

    def __init__(self):
        self.buffer = None  # float32, one dimension, pinned for CUDA
        self.busy = None    # the last call that reads or writes the buffer
        self.event = None   # after the last upload from the buffer (a pull's)

    def take(self, count, device):
        """The first `count` floats of the buffer, once no earlier call uses
        them; grows the buffer (pinned for a CUDA device) when too small."""
        busy, self.busy = self.busy, None
        if busy is not None:
            try:
                busy.wait()
            except Exception:  # noqa: BLE001 (the error is that call's own, raised by its future)
                pass
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        if self.buffer is None or self.buffer.numel() < count:
            torch = _torch()
            self.buffer = torch.empty(max(count, 1), dtype=torch.float32,
                                      pin_memory=device.type == "cuda")
        return self.buffer[:count]


def _staging(table, direction):
    """The _Staging of `table` and `direction` ("pull" or "push"), kept on
    the table's worker."""
    worker = table.worker
    buffers = getattr(worker, "_staging", None)
    if buffers is None:
        buffers = worker._staging = {}
    key = (table.id, direction)
    if key not in buffers:
        buffers[key] = _Staging()
    return buffers[key]


def _after_copy(device):
    """An event recorded on `device`'s current stream after the copies
    queued so far, or None when copies there are synchronous (the CPU)."""
    if device.type != "cuda":
        return None
    torch = _torch()
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def stage_values(table, values, name):
    """The host array a push of `values` sends: the numpy view of a CPU
    tensor, or, for a CUDA tensor, the table's push buffer holding a copy
    (downloaded with non_blocking=True, then waited for). Returns (array,
    staging or None); the caller sets staging.busy to the push's future."""
    if not is_tensor(values):
        return values, None
    array = _values_view(values, name)
    if array is not None:
        return array, None
    staging = _staging(table, "push")
    host = staging.take(values.numel(), values.device).view(values.shape)
    host.copy_(values.detach(), non_blocking=True)
    event = _after_copy(values.device)
    if event is not None:
        event.synchronize()  # the client reads the host memory next
    return host.numpy(), staging


class TensorFuture:
    """A Future whose wait() returns the tensor a pull wrote (see Future)."""

    __slots__ = ("_future", "_result")

    def __init__(self, future, result):
        self._future = future
        self._result = result

    def wait(self):
        """Waits (GIL released) until the call completed; returns the tensor.
        Raises the call's error."""
        array = self._future.wait()
        return array if self._result is None else self._result(array)

    def done(self):
        """True when wait() would return at once."""
        return self._future.done()


class StagedPull:
    """The future of a pull into a staged (CUDA) tensor: wait() waits for
    the pull into the host buffer, then queues the upload into the tensor
    (once) and returns it."""

    __slots__ = ("_future", "_host", "_out", "_staging", "_uploaded")

    def __init__(self, future, host, out, staging):
        self._future = future
        self._host = host
        self._out = out
        self._staging = staging
        self._uploaded = False

    def wait(self):
        """Waits for the pull, then uploads the rows into the tensor (on the
        current stream, non_blocking) and returns it. Raises the pull's error."""
        self._future.wait()
        if not self._uploaded:
            self._uploaded = True
            self._out.detach().copy_(self._host.view(self._out.shape), non_blocking=True)
            self._staging.event = _after_copy(self._out.device)
        return self._out

    def done(self):
        """True when wait() would return at once (the upload is queued then)."""
        return self._future.done()


def _pull(calls, table, ids, out, sync):
    """A pull through `calls` (the C++ (pull, pull_async)): when `sync`, its
    result (an array, or a tensor where out= or ids is one); else its
    future: a Future, a TensorFuture (a CPU tensor result) or a StagedPull
    (a staged tensor result)."""
    pull, pull_async = calls
    torch = _torch()
    if torch is None or not (isinstance(out, torch.Tensor) or isinstance(ids, torch.Tensor)):
        return pull(table, ids, out=out) if sync else pull_async(table, ids, out=out)
    ids_tensor = None
    if isinstance(ids, torch.Tensor):
        ids_tensor, ids = ids, id_array(ids)
    if out is None and ids_tensor is not None and staged(ids_tensor):
        # The rows of ids on a CUDA device land on that device.
        out = torch.empty((ids.shape[0], table.dim), dtype=torch.float32,
                          device=ids_tensor.device)
    if isinstance(out, torch.Tensor):
        tensor = out
        array = _values_view(tensor, "out")
        if array is None:
            staging = _staging(table, "pull")
            host = staging.take(tensor.numel(), tensor.device).view(tensor.shape)
            # The C++ side checks the shape: the buffer has the tensor's.
            future = StagedPull(pull_async(table, ids, out=host.numpy()), host, tensor, staging)
            staging.busy = future
            return future.wait() if sync else future
        if sync:
            pull(table, ids, out=array)
            return tensor
        return TensorFuture(pull_async(table, ids, out=array), lambda _: tensor)
    if sync:
        return torch.from_numpy(pull(table, ids, out=out))
    return TensorFuture(pull_async(table, ids, out=out), torch.from_numpy)


def _push(call, table, ids_or_grads, grads):
    """A push through `call` (the C++ push or push_async): its result."""
    torch = _torch()
    if torch is None or not (isinstance(ids_or_grads, torch.Tensor)
                             or isinstance(grads, torch.Tensor)):
        return call(table, ids_or_grads, grads)
    if grads is None:
        values, staging = stage_values(table, ids_or_grads, "grads")
        result = call(table, values)
    else:
        ids = id_array(ids_or_grads)
        values, staging = stage_values(table, grads, "grads")
        result = call(table, ids, values)
    if staging is not None:
        # A push that waited is done: the buffer is free again.
        staging.busy = result
    return result


def _push_batch(call, worker, pushes):
    """A batch of pushes through `call` (the C++ push_batch or
    push_batch_async): its result."""
    converted, stagings = [], []
    for i, entry in enumerate(pushes):
        if not isinstance(entry, tuple) or len(entry) not in (2, 3):
            converted.append(entry)  # the C++ side words the error
            continue
        name = "pushes[%d].grads" % i
        if len(entry) == 2:
            values, staging = stage_values(entry[0], entry[1], name)
            converted.append((entry[0], values))
        else:
            ids = id_array(entry[1], "pushes[%d].ids" % i)
            values, staging = stage_values(entry[0], entry[2], name)
            converted.append((entry[0], ids, values))
        if staging is not None:
            stagings.append(staging)
    result = call(worker, converted)
    for staging in stagings:
        staging.busy = result
    return result


def install():
    """Wraps Table's pull, pull_async, push and push_async and Worker's
    push_batch and push_batch_async (once)."""
    if getattr(Table, "_tensors_installed", False):
        return
    pulls = (Table.pull, Table.pull_async)
    push, push_async = Table.push, Table.push_async
    push_batch, push_batch_async = Worker.push_batch, Worker.push_batch_async
    note = ("\n\nTorch tensors are taken too (float32 values, int64 ids read as uint64): "
            "CPU tensors with no copy, CUDA tensors through a pinned host buffer; pull "
            "returns a tensor where out= or ids is one.")

    @functools.wraps(Table.pull)
    def pull_tensors(self, ids=None, *, out=None):
        return _pull(pulls, self, ids, out, sync=True)

    @functools.wraps(Table.pull_async)
    def pull_async_tensors(self, ids=None, *, out=None):
        return _pull(pulls, self, ids, out, sync=False)

    @functools.wraps(push)
    def push_tensors(self, ids_or_grads, grads=None):
        return _push(push, self, ids_or_grads, grads)

    @functools.wraps(push_async)
    def push_async_tensors(self, ids_or_grads, grads=None):
        return _push(push_async, self, ids_or_grads, grads)

    @functools.wraps(push_batch)
    def push_batch_tensors(self, pushes):
        return _push_batch(push_batch, self, pushes)

    @functools.wraps(push_batch_async)
    def push_batch_async_tensors(self, pushes):
        return _push_batch(push_batch_async, self, pushes)

    for cls, name, wrapper in (
            (Table, "pull", pull_tensors), (Table, "pull_async", pull_async_tensors),
            (Table, "push", push_tensors), (Table, "push_async", push_async_tensors),
            (Worker, "push_batch", push_batch_tensors),
            (Worker, "push_batch_async", push_batch_async_tensors)):
        wrapper.__doc__ = (wrapper.__doc__ or "") + note
        setattr(cls, name, wrapper)
    Table._tensors_installed = True
