"""Array backends: NumPy everywhere, CuPy when a GPU is present (``backend="numpy" | "cupy" | "auto"``).

Models compute their batch statistics with an array module ``xp``; with CuPy a data block is copied to
the GPU once and the copy lives as long as the host block (a Dask worker's block cache keeps both),
so a block revisited by later steps is not transferred again. Results come back to the host as NumPy
float64, so statistics merge and noise is added on the coordinator exactly as on the CPU path.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import numpy as np

__all__ = ["BACKENDS", "resolve_backend", "array_module", "gpu_status", "to_device", "to_host"]

BACKENDS = ("numpy", "cupy", "auto")
_DEVICE_COPIES: dict[int, Any] = {}  # id(host block) -> its device copy, dropped when the block is freed


@functools.lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """(usable, reason): whether CuPy imports and sees a CUDA device, and why not."""
    try:
        import cupy
    except Exception as error:  # ImportError, or a CUDA library that fails to load
        return (
            False,
            f"CuPy is not installed or fails to import ({type(error).__name__}); pip install 'dpstream[gpu]'",
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:
        return False, f"no usable CUDA device ({type(error).__name__}: {error})"
    if count < 1:
        return False, "no CUDA device visible"
    return True, f"{count} CUDA device(s)"


def resolve_backend(backend: str) -> str:
    """ "numpy" or "cupy"; "auto" picks CuPy when a GPU is usable. "cupy" without one is an error."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if backend == "numpy":
        return "numpy"
    usable, reason = gpu_status()
    if backend == "auto":
        return "cupy" if usable else "numpy"
    if not usable:
        raise RuntimeError(f"backend='cupy' needs a GPU: {reason}; use backend='numpy' or 'auto'")
    return "cupy"


def array_module(backend: str) -> Any:
    if resolve_backend(backend) == "cupy":
        import cupy

        return cupy
    return np


def to_device(block: np.ndarray, xp: Any) -> Any:
    """The block on ``xp``'s device; for CuPy copied once per host block, row-major (the GPU kernels
    read a row per warp; blocks decoded from Parquet are often column-major), and reused."""
    if xp is np:
        return block
    key = id(block)
    copy = _DEVICE_COPIES.get(key)
    if copy is None:
        copy = xp.ascontiguousarray(xp.asarray(block))
        _DEVICE_COPIES[key] = copy
        weakref.finalize(block, _DEVICE_COPIES.pop, key, None)
    return copy


def to_host(array: Any) -> np.ndarray:
    return array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else np.asarray(array)
