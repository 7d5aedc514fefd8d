"""Type hints of ps.torch (python/ps/torch.py)."""

from typing import Any, Dict, Mapping, Optional, Tuple

import torch

from ps._ps import Table, Worker

DEFAULT_OPTIMIZER: Dict[str, Any]

def table_shape(parameter: torch.Tensor) -> Tuple[int, int]:
    """(rows, dim): the first dimension and the product of the others."""
def tables_for(model: torch.nn.Module, optimizer: Optional[Mapping[str, Any]] = None,
               init: Optional[Mapping[str, Any]] = None, prefix: str = "") -> str:
    """The YAML `tables:` section with one range table per parameter."""
def check_tables(worker: Worker, model: torch.nn.Module, prefix: str = "") -> Dict[str, Table]:
    """Raises ValueError naming a parameter whose table is missing or of another shape."""

class Embedding(torch.nn.Module):
    """Rows of table `name` by id; pulls the distinct ids, pushes their summed gradients."""
    table: Table
    dim: int
    def __init__(self, worker: Worker, name: str) -> None: ...
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: int64, any shape; returns shape ids.shape + (dim,)."""
    def wait(self) -> None:
        """Waits for the pushes the backward passes started."""

class ParameterServer:
    """A module's parameters kept on the servers of a joined worker's job."""
    worker: Worker
    model: torch.nn.Module
    # Each step() also waits until every worker pulled (synchronous SGD under bsp).
    barrier: bool
    # Each parameter's gradient pushed from a hook during the backward pass.
    overlap: bool
    def __init__(self, worker: Worker, model: torch.nn.Module, prefix: str = "",
                 pull: bool = True, barrier: bool = False, overlap: bool = False) -> None: ...
    def pull(self) -> None:
        """The servers' values into the parameters, in place."""
    def push_gradients(self) -> None:
        """Every parameter's .grad to its table; waits until accepted."""
    def step(self) -> None:
        """push_gradients(), clock, pull()."""
    def zero_grad(self) -> None: ...
    def close(self) -> None:
        """Removes overlap's hooks; waits for their pushes in flight."""
    def parameters(self) -> Dict[str, Table]: ...
