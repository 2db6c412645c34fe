"""The public-range map of preprocessing, in one pass.

Each bounded column is mapped from its public range [lo, hi] onto the scale range [t_lo, t_hi]:

    x' = t_lo + (t_hi − t_lo)·(clip(x, lo, hi) − lo)/(hi − lo)

(``dpstream.pipelines.convert_spec.convert_rows``; README, "A lake in its own units"). Written as NumPy
expressions that is five passes over the column and one more to store it in the prepared width, for
every batch that validation, the shuffle and scoring read. ``map_range`` does it in one pass: a Numba
loop (no fast-math, so every operation is the IEEE operation of the expression, in its order, with
NumPy's clip: NaN kept, ±∞ to the bounds), bit for bit what the expression gives
(``tests/pipelines/test_convert.py``). Where Numba cannot build, compile or load it, the NumPy
expression runs (widened to float64 first).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpstream.pipelines.memory import pool_astype, pool_empty

__all__ = ["map_range", "map_range_numpy", "compile_all"]


def _map_loop(
    values: Any, low: float, high: float, target_low: float, span: float, width: float, out: Any
) -> None:
    for index in range(values.shape[0]):
        value = np.float64(values[index])
        if value != value:  # NaN: np.clip keeps it
            out[index] = value
            continue
        # NumPy's clip keeps x itself where it equals a bound (a −0.0 against a bound of +0.0 stays −0.0).
        clipped = low if value < low else value
        clipped = high if clipped > high else clipped
        out[index] = target_low + (span * (clipped - low)) / width


@functools.cache
def _compiled() -> Any:
    """The loop, compiled on first use and cached on disk where a cache location is writable (as the
    statistics kernels, ``dpstream.models.glm_cpu``); None where Numba cannot compile it."""
    try:
        import numba

        try:
            return numba.njit(_map_loop, cache=True, nogil=True, fastmath=False, error_model="numpy")
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(_map_loop, cache=False, nogil=True, fastmath=False, error_model="numpy")
    except Exception:  # noqa: BLE001 -- any failure to build the loop leaves the NumPy expression
        return None


def map_range_numpy(
    values: np.ndarray, bounds: Sequence[float], scale_range: Sequence[float], dtype: Any = np.float64
) -> np.ndarray:
    """The map as the NumPy expression, in place in one float64 array from Arrow's pool, then stored in
    ``dtype``."""
    (low, high), (target_low, target_high) = bounds, scale_range
    mapped = pool_empty(values.shape, np.float64)
    mapped[...] = values  # widened first: a float32 clip would round the bounds to float32
    np.clip(mapped, low, high, out=mapped)
    mapped -= low
    np.multiply(target_high - target_low, mapped, out=mapped)
    mapped /= high - low
    mapped += target_low
    return pool_astype(mapped, dtype)


def map_range(
    values: np.ndarray, bounds: Sequence[float], scale_range: Sequence[float], dtype: Any = np.float64
) -> np.ndarray:
    """``values`` (one-dimensional, float32 or float64) mapped from ``bounds`` onto ``scale_range`` and
    stored in ``dtype`` (float64 or float32), in an array from Arrow's pool (module docstring)."""
    global _compile_failed
    loop = None if _compile_failed else _compiled()
    dtype = np.dtype(dtype)
    if (
        loop is None
        or values.ndim != 1
        or values.dtype not in (np.float32, np.float64)
        or dtype not in (np.float32, np.float64)
    ):
        return map_range_numpy(values, bounds, scale_range, dtype)
    (low, high), (target_low, target_high) = bounds, scale_range
    out = pool_empty(values.shape, dtype)
    arguments = (
        float(low),
        float(high),
        float(target_low),
        float(target_high - target_low),
        float(high - low),
    )
    try:
        loop(values, *arguments, out)
    except Exception:  # noqa: BLE001 -- Numba compiles at the first call: any failure there leaves NumPy
        _compile_failed = True
        return map_range_numpy(values, bounds, scale_range, dtype)
    return out


_compile_failed = False  # once a call failed to compile: the NumPy expression from then on


def compile_all() -> None:
    """Compile (and cache on disk) the loop for every input and output type ``convert_rows`` passes, in
    one process: ``make test``, ``demo`` and the benchmarks run it before any worker starts, since Numba's cache
    index is not safe against several processes adding specializations to it at once."""
    for source in (np.float32, np.float64):
        for dtype in (np.float32, np.float64):
            values = np.zeros(2, dtype=source)
            map_range(values, (0.0, 1.0), (-1.0, 1.0), dtype)
            values.flags.writeable = False  # zero-copy Arrow columns arrive read-only
            map_range(values, (0.0, 1.0), (-1.0, 1.0), dtype)
