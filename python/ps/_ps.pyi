"""Type hints of the ps module (python/module.cc)."""

from typing import Dict, Optional, Sequence, Tuple, TypeVar, Union, overload

import numpy as np
import numpy.typing as npt
import torch

Floats = npt.NDArray[np.float32]
Ids = npt.NDArray[np.uint64]
# Torch tensors are taken too (ps/_tensors.py): float32 values, int64 ids
# read as uint64; CPU tensors in place, CUDA tensors through a pinned host
# buffer per table; a pull returns a tensor where out= or ids is one (on
# the ids' device).
FloatsIn = Union[Floats, torch.Tensor]
IdsIn = Union[Ids, torch.Tensor]
Out = TypeVar("Out", Floats, torch.Tensor)
# A push of Worker.push_batch: (table, grads) or (table, ids, grads).
BatchPush = Union[Tuple["Table", FloatsIn], Tuple["Table", IdsIn, FloatsIn]]

class Error(Exception):
    """An error of the C++ side: str(e) is "<CodeName>: <message>"."""
    code: int
    code_name: str
    message: str
    retryable: bool

class CancelledError(Error): ...
class UnknownError(Error): ...
class InvalidArgumentError(Error, ValueError): ...
class DeadlineExceededError(Error, TimeoutError): ...
class NotFoundError(Error): ...
class AlreadyExistsError(Error): ...
class PermissionDeniedError(Error): ...
class ResourceExhaustedError(Error): ...
class FailedPreconditionError(Error): ...
class AbortedError(Error): ...
class OutOfRangeError(Error): ...
class UnimplementedError(Error): ...
class InternalError(Error): ...
class UnavailableError(Error): ...
class DataLossError(Error): ...

class Future:
    """The result of a *_async call."""
    def wait(self) -> Union[Floats, torch.Tensor, None]:
        """Waits (GIL released); a pull's array (its tensor, where out= or ids
        was one), or None. Raises the call's error."""
    def done(self) -> bool:
        """True when wait() would return at once."""

class Table:
    """A table of the job: w.tables[name]."""
    @property
    def name(self) -> str: ...
    @property
    def id(self) -> int: ...
    @property
    def worker(self) -> "Worker":
        """The Worker it belongs to."""
    @property
    def kind(self) -> str:
        """"range" or "hashed"."""
    @property
    def rows(self) -> Optional[int]:
        """Row count of a range table; None for a hashed one."""
    @property
    def dim(self) -> int: ...
    @property
    def shape(self) -> Tuple[Optional[int], int]: ...
    @property
    def wire_pull(self) -> str:
        """"fp32", "bf16" or "fp16"."""
    @property
    def wire_push(self) -> str: ...
    @overload
    def pull(self, ids: Optional[IdsIn] = None, *, out: Out) -> Out:
        """The whole table (ids None) or the rows `ids`, shape (n, dim), into `out`."""
    @overload
    def pull(self, ids: Optional[Ids] = None) -> Floats:
        """The whole table (ids None) or the rows `ids`, shape (n, dim)."""
    @overload
    def pull(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows `ids` (int64), as a tensor over the pulled array."""
    def pull_async(self, ids: Optional[IdsIn] = None, *,
                   out: Optional[FloatsIn] = None) -> Future: ...
    @overload
    def push(self, ids_or_grads: FloatsIn) -> None:
        """Pushes grads for the whole table, shape (rows, dim)."""
    @overload
    def push(self, ids_or_grads: IdsIn, grads: FloatsIn) -> None:
        """Pushes grads for the rows `ids`, shape (len(ids), dim)."""
    @overload
    def push_async(self, ids_or_grads: FloatsIn) -> Future: ...
    @overload
    def push_async(self, ids_or_grads: IdsIn, grads: FloatsIn) -> Future: ...

class Worker:
    """One worker of a job; `with Worker(...) as w:` joins and leaves."""
    # Set by ps.worker_from_argv: the launcher's --cpu-threads, or None.
    cpu_threads: Optional[int]
    def __init__(self, config: str, rank: Optional[int] = None, *,
                 rank_from_hostname: bool = False, log_level: str = "info") -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def rank_source(self) -> str: ...
    @property
    def config(self) -> str: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def num_servers(self) -> int: ...
    @property
    def tables(self) -> Dict[str, Table]: ...
    @property
    def joined(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def current_clock(self) -> int: ...
    def join(self) -> None: ...
    def close(self) -> None: ...
    def clock(self) -> None: ...
    def clock_async(self) -> Future: ...
    def push_batch(self, pushes: Sequence[BatchPush]) -> None:
        """(table, grads) and (table, ids, grads) pushes issued in one call;
        waits until every shard accepted every one."""
    def push_batch_async(self, pushes: Sequence[BatchPush]) -> Future:
        """As push_batch(), without waiting: one Future for all of them."""
    def __enter__(self) -> "Worker": ...
    def __exit__(self, *exc: object) -> None: ...

def _read_checkpoint(checkpoint_dir: str, clock: Optional[int] = None) -> Dict[str, Dict[str, object]]:
    """A checkpoint generation as dicts of fields and numpy arrays (ps.read_checkpoint)."""
    ...
