"""Type hints of ps.torch (python/ps/torch.py)."""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from ps._ps import Table, Worker

DEFAULT_OPTIMIZER: Dict[str, Any]
# ParameterServer's bucket size when not told, MiB.
DEFAULT_BUCKET_MB: float

def table_shape(parameter: torch.Tensor) -> Tuple[int, int]:
    """(rows, dim): the first dimension and the product of the others."""
def tables_for(model: torch.nn.Module, optimizer: Optional[Mapping[str, Any]] = None,
               init: Optional[Mapping[str, Any]] = None, prefix: str = "") -> str:
    """The YAML `tables:` section: one range table per parameter, then the
    tables the model's Embedding and EmbeddingBag modules declare."""
def check_tables(worker: Worker, model: torch.nn.Module, prefix: str = "") -> Dict[str, Table]:
    """Raises ValueError naming a parameter whose table is missing or of another shape."""
def make_buckets(sizes: Sequence[int], bucket_mb: float) -> List[List[int]]:
    """Parameter indices grouped into buckets of at most bucket_mb MiB, in reverse order."""

class _TableModule(torch.nn.Module):
    name: str
    # None until declared or bound.
    rows: Optional[int]
    dim: Optional[int]
    max_rows: Optional[int]
    max_mb: Optional[int]
    init: Optional[Mapping[str, Any]]
    optimizer: Optional[Mapping[str, Any]]
    # None until bound to a worker.
    table: Optional[Table]
    @property
    def hashed(self) -> Optional[bool]:
        """True for a hashed table, False for a range one, None when undeclared."""
    def bind(self, worker: Worker) -> "_TableModule":
        """Binds the module to the worker's table, checking the declaration."""
    def table_options(self, init: Optional[Mapping[str, Any]] = None,
                      optimizer: Optional[Mapping[str, Any]] = None,
                      seed: int = 1) -> Dict[str, Any]:
        """The job file's options of the table, as tables_for writes them."""
    def wait(self) -> None:
        """Waits for the pushes the backward passes started."""

class Embedding(_TableModule):
    """Rows of table `name` by id; pulls the distinct ids, pushes their summed gradients."""
    def __init__(self, worker: Optional[Worker], name: str, *, rows: Optional[int] = None,
                 dim: Optional[int] = None, max_rows: Optional[int] = None,
                 max_mb: Optional[int] = None, init: Optional[Mapping[str, Any]] = None,
                 optimizer: Optional[Mapping[str, Any]] = None) -> None: ...
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: int64, any shape; returns shape ids.shape + (dim,)."""

class EmbeddingBag(_TableModule):
    """Bags of rows of table `name` reduced as torch.nn.EmbeddingBag does."""
    mode: str
    include_last_offset: bool
    def __init__(self, worker: Optional[Worker], name: str, *, mode: str = "mean",
                 include_last_offset: bool = False, rows: Optional[int] = None,
                 dim: Optional[int] = None, max_rows: Optional[int] = None,
                 max_mb: Optional[int] = None, init: Optional[Mapping[str, Any]] = None,
                 optimizer: Optional[Mapping[str, Any]] = None) -> None: ...
    def forward(self, input: torch.Tensor, offsets: Optional[torch.Tensor] = None,
                per_sample_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        """input: int64, 2-D equal bags or 1-D cut at offsets; returns (bags, dim)."""

class ParameterServer:
    """A module's parameters kept on the servers of a joined worker's job."""
    worker: Worker
    model: torch.nn.Module
    # Each step() also waits until every worker pulled (synchronous SGD under bsp).
    barrier: bool
    # Gradients pushed from hooks during the backward pass, a bucket at a time.
    overlap: bool
    # The buckets' size, MiB (0: a bucket per parameter).
    bucket_mb: float
    def __init__(self, worker: Worker, model: torch.nn.Module, prefix: str = "",
                 pull: bool = True, barrier: bool = False, overlap: bool = False,
                 bucket_mb: float = ...) -> None: ...
    @property
    def buckets(self) -> List[List[str]]:
        """overlap's buckets as parameter names, in the order they fill."""
    def pull(self) -> None:
        """The servers' values into the parameters, in place."""
    def push_gradients(self) -> None:
        """Every parameter's .grad to its table; waits until accepted."""
    def step(self) -> None:
        """push_gradients(), clock, pull()."""
    def zero_grad(self) -> None: ...
    def close(self) -> None:
        """Removes overlap's hooks; pushes incomplete buckets, waits for every push."""
    def parameters(self) -> Dict[str, Table]: ...
