"""Type hints of the ps package."""

import os
from typing import Dict, List, Literal, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from ps._ps import *  # noqa: F401,F403
from ps._ps import Worker

def worker_from_argv(argv: Optional[List[str]] = None,
                     **kwargs: object) -> Tuple[Worker, List[str]]: ...

class CheckpointTable:
    """One table of a checkpoint generation as plain arrays."""
    name: str
    kind: Literal["range", "hashed"]
    rows: int
    dim: int
    values: npt.NDArray[np.float32]
    ids: Optional[npt.NDArray[np.uint64]]
    state: Dict[str, npt.NDArray[np.float32]]
    optimizer: str
    optimizer_settings: str
    slots: List[str]
    hash_slots: Optional[int]
    clock: int

def read_checkpoint(checkpoint_dir: Union[str, os.PathLike[str]],
                    clock: Optional[int] = None) -> Dict[str, CheckpointTable]: ...
def load_export(out_dir: Union[str, os.PathLike[str]],
                mmap_mode: Optional[Literal["r", "r+", "c"]] = None) -> Dict[str, CheckpointTable]: ...
