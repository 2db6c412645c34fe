"""Worker memory: after whole-file tasks, and for the arrays of every batch.

pyarrow's default allocator (mimalloc) keeps the pages a task freed for later allocations: after
reading and permuting one 72 MB source file a process held 401 MiB against 150 MiB with the system
allocator (BENCHMARKS.md, "A lake 20× the workers' memory"). Under a Dask memory limit that
retained memory counts as the worker's own, pauses it at 80 % and can leave it paused for good. Tasks
that hold a whole file (validation, the shuffle's scatter and gather, scoring) run through
``release_after``, which hands those pages back when the task ends. Training's blocks keep the pool as
it is: their decodes are small and 12 % faster with mimalloc than with the system allocator.

Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so the C allocator hands every freed
block of more than 64 KiB back to the operating system at once, and NumPy's next array of that size
pays fresh pages: in a worker, the float64 temporaries of AdaSSP's statistics made them 1.8× slower
than in a bare process (profiled). ``pool_empty`` takes an array's memory from Arrow's pool
instead, which keeps freed pages for the next batch; the hot loops (decoded blocks, the preprocessing
of each batch) allocate through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

__all__ = ["release_after", "pool_empty", "pool_astype", "sum_is_finite"]

T = TypeVar("T")


def release_after(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, then the memory Arrow's pool keeps unused returned to the operating system."""
    try:
        return function(*args)
    finally:
        pa.default_memory_pool().release_unused()


def pool_empty(shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised, writable C-ordered NumPy array in memory from Arrow's pool (64-byte aligned)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(pa.allocate_buffer(count * dtype.itemsize), dtype=dtype, count=count).reshape(shape)


def pool_astype(values: np.ndarray, dtype: Any) -> np.ndarray:
    """``values.astype(dtype)`` in memory from Arrow's pool (``values`` itself when already ``dtype``)."""
    if values.dtype == np.dtype(dtype):
        return values
    converted = pool_empty(values.shape, dtype)
    converted[...] = values
    return converted


def sum_is_finite(values: np.ndarray) -> bool:
    """Whether the sum of ``values`` is finite, which it is not where one is NaN or infinite: a first look
    before the elementwise checks (masks of the batch's size: fresh pages each in a Dask worker), which
    then run only on a batch that has such a value, or whose finite values overflow the sum."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(values.sum()))
