"""PyTorch CPU tensors wherever Table's calls take an array, with no copy.

A torch.Tensor has no buffer protocol, so each call turns a tensor argument
into the numpy array that shares its memory (tensor.detach().numpy())
before the C++ side reads or writes it, and returns a tensor where one was
given: pull(out=tensor) returns that tensor, pull(ids_tensor) a tensor over
the new array (torch.from_numpy). Values must be float32 and contiguous on
the CPU; ids int64 (torch has no uint64), read as uint64 bit for bit.

torch is never imported here: a tensor can only exist once its caller
imported torch, so `import ps` works without it.
"""

import functools
import sys

import numpy as _np

from ps._ps import Table


def _torch():
    """The torch module when the program imported it, else None."""
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def _check(tensor, name, dtype, expected, convert, one_dimension=False):
    """Raises TypeError unless `tensor` is on the CPU with element type
    `dtype`, ValueError unless it is contiguous (and one-dimensional when
    asked); `expected` and `convert` word the dtype's message."""
    if tensor.device.type != "cpu":
        raise TypeError(
            "%s: expected a CPU tensor, got a tensor on %s (CUDA tensors are not accepted "
            "yet: pass %s.cpu() and copy the result back with .copy_())" % (name, tensor.device, name))
    if tensor.dtype != dtype:
        raise TypeError("%s: expected %s, got %s (convert with %s.%s())"
                        % (name, expected, tensor.dtype, name, convert))
    if one_dimension and tensor.dim() != 1:
        raise ValueError("%s: expected one dimension, got shape %s" % (name, tuple(tensor.shape)))
    if not tensor.is_contiguous():
        raise ValueError("%s: expected a contiguous tensor, got strides %s for shape %s (make "
                         "one with %s.contiguous())"
                         % (name, tuple(tensor.stride()), tuple(tensor.shape), name))


def float_array(obj, name):
    """`obj` itself, or the numpy array sharing a float32 CPU tensor's memory."""
    if not is_tensor(obj):
        return obj
    _check(obj, name, _torch().float32, "a float32 tensor (torch.float32)", "float")
    # detach(): the same memory without autograd's record (a parameter
    # requires grad, and .numpy() refuses those).
    return obj.detach().numpy()


def id_array(obj, name="ids"):
    """`obj` itself, or a uint64 numpy view of a one-dimensional int64 CPU tensor."""
    if not is_tensor(obj):
        return obj
    _check(obj, name, _torch().int64, "an int64 tensor (torch.int64, read as uint64)", "long",
           one_dimension=True)
    return obj.numpy().view(_np.uint64)


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


def _pull_args(ids, out):
    """(ids, out) as arrays, and what turns the pulled array into the result:
    None (the array), or a function giving the tensor."""
    result = None
    if is_tensor(out):
        tensor = out
        result = lambda array: tensor  # noqa: E731
    elif is_tensor(ids):
        result = _torch().from_numpy
    return id_array(ids), float_array(out, "out"), result


def _push_args(ids_or_grads, grads):
    if grads is None:
        return float_array(ids_or_grads, "grads"), None
    return id_array(ids_or_grads), float_array(grads, "grads")


def install():
    """Wraps Table's pull, pull_async, push and push_async (once)."""
    if getattr(Table, "_tensors_installed", False):
        return
    pull, pull_async, push, push_async = Table.pull, Table.pull_async, Table.push, Table.push_async
    note = ("\n\nCPU torch tensors are taken too (float32 values, int64 ids read as "
            "uint64), with no copy; pull returns a tensor where out= or ids is one.")

    @functools.wraps(pull)
    def pull_tensors(self, ids=None, *, out=None):
        ids, out, result = _pull_args(ids, out)
        array = pull(self, ids, out=out)
        return array if result is None else result(array)

    @functools.wraps(pull_async)
    def pull_async_tensors(self, ids=None, *, out=None):
        ids, out, result = _pull_args(ids, out)
        future = pull_async(self, ids, out=out)
        return future if result is None else TensorFuture(future, result)

    @functools.wraps(push)
    def push_tensors(self, ids_or_grads, grads=None):
        return push(self, *_push_args(ids_or_grads, grads))

    @functools.wraps(push_async)
    def push_async_tensors(self, ids_or_grads, grads=None):
        return push_async(self, *_push_args(ids_or_grads, grads))

    for name, wrapper in (("pull", pull_tensors), ("pull_async", pull_async_tensors),
                          ("push", push_tensors), ("push_async", push_async_tensors)):
        wrapper.__doc__ = (wrapper.__doc__ or "") + note
        setattr(Table, name, wrapper)
    Table._tensors_installed = True
