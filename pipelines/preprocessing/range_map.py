"""The public-range map of preprocessing, in one pass.

Each bounded column is mapped from its public range [lo, hi] onto the scale range [t_lo, t_hi]:

    x' = t_lo + (t_hi − t_lo)·(clip(x, lo, hi) − lo)/(hi − lo)

(``dpstream.pipelines.preprocessing.rows.convert_rows``; docs/lakes.md, "A lake in its own units"). Written as NumPy
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

from dpstream.pipelines.memory import pool_astype, pool_empty, sum_is_finite

__all__ = ["map_range", "map_range_numpy", "map_rows_into", "compile_all"]


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


def _rows_loop(
    stacked: Any, lows: Any, highs: Any, bounded: Any, target_low: float, span: float, X: Any
) -> None:
    """Each row j of ``stacked`` (a column) mapped in place as ``_map_loop`` maps it, where ``bounded[j]``
    (stored in its own width: float32 rounds), then X[i, j] = stacked[j, i], and 1 in X's columns after
    the last (an intercept)."""
    columns, rows = stacked.shape
    for column in range(columns):
        if bounded[column]:
            low, high = lows[column], highs[column]
            width = high - low
            values = stacked[column]
            for index in range(rows):
                value = np.float64(values[index])
                clipped = low if value < low else value
                clipped = high if clipped > high else clipped
                values[index] = target_low + (span * (clipped - low)) / width
    for row in range(rows):
        for column in range(columns):
            X[row, column] = stacked[column, row]
        for column in range(columns, X.shape[1]):
            X[row, column] = 1.0


def _compile(loop: Any) -> Any:
    """``loop`` compiled on first use and cached on disk where a cache location is writable (as the
    statistics kernels, ``dpstream.models.glm_cpu``); None where Numba cannot compile it (the caller then
    takes its NumPy path)."""
    try:
        import numba

        try:
            return numba.njit(loop, cache=True, nogil=True, fastmath=False, error_model="numpy")
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(loop, cache=False, nogil=True, fastmath=False, error_model="numpy")
    except Exception:  # noqa: BLE001 -- any failure to build the loop leaves the NumPy path
        return None


@functools.cache
def _compiled() -> Any:
    return _compile(_map_loop)


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


@functools.cache
def _compiled_rows() -> Any:
    return _compile(_rows_loop)


def map_rows_into(
    columns: list[np.ndarray],
    bounds: list[tuple[float, float] | None],
    scale_range: Sequence[float],
    X: np.ndarray,
) -> bool:
    """Fill the row-major float64 ``X`` with ``columns`` (one-dimensional, all float32 or all float64), each
    mapped from its ``bounds`` onto ``scale_range`` (None: kept as it is) in its own width, and X's columns
    after them with 1 (an intercept): bit for bit what ``convert_rows`` (features prepared in float32 when
    every column is float32, else float64) then ``X[:, j] = column`` give (``predict.score_file``), in
    two passes instead of six. False, with X unspecified, where it cannot: a NaN or ±∞ (the usual path
    imputes or refuses them), mixed or other types, or no compiled loop."""
    global _compile_failed_rows
    loop = None if _compile_failed_rows else _compiled_rows()
    types = {column.dtype for column in columns}
    if loop is None or len(types) != 1 or types.pop() not in (np.float32, np.float64):
        return False
    stacked = pool_empty((len(columns), X.shape[0]), columns[0].dtype)
    np.stack(columns, out=stacked)
    if not sum_is_finite(stacked):  # a NaN or ±∞ (or finite values whose sum overflows): the usual path
        return False
    lows = np.array([bound[0] if bound else 0.0 for bound in bounds], dtype=np.float64)
    highs = np.array([bound[1] if bound else 1.0 for bound in bounds], dtype=np.float64)
    bounded = np.array([bound is not None for bound in bounds])
    target_low, target_high = (float(end) for end in scale_range)
    try:
        loop(stacked, lows, highs, bounded, target_low, target_high - target_low, X)
    except Exception:  # noqa: BLE001 -- Numba compiles at the first call: any failure leaves the usual path
        _compile_failed_rows = True
        return False
    return True


_compile_failed_rows = False


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
        map_rows_into([np.zeros(2, dtype=source)] * 2, [(0.0, 1.0), None], (-1.0, 1.0), np.empty((2, 3)))
