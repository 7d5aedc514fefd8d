"""Type hints of the ps package."""

from typing import List, Optional, Tuple

from ps._ps import *  # noqa: F401,F403
from ps._ps import Worker

def worker_from_argv(argv: Optional[List[str]] = None,
                     **kwargs: object) -> Tuple[Worker, List[str]]: ...
