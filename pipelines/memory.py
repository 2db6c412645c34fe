"""Worker memory after whole-file tasks.

pyarrow's default allocator (mimalloc) keeps the pages a task freed for later allocations: after
reading and permuting one 72 MB source file a process held 401 MiB against 150 MiB with the system
allocator (issue 34; BENCHMARKS.md, "A lake 20× the workers' memory"). Under a Dask memory limit that
retained memory counts as the worker's own, pauses it at 80 % and can leave it paused for good. Tasks
that hold a whole file (validation, the shuffle's scatter and gather, scoring) run through
``release_after``, which hands those pages back when the task ends. Training's blocks keep the pool as
it is: their decodes are small and 12 % faster with mimalloc than with the system allocator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa

__all__ = ["release_after"]

T = TypeVar("T")


def release_after(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, then the memory Arrow's pool keeps unused returned to the operating system."""
    try:
        return function(*args)
    finally:
        pa.default_memory_pool().release_unused()
