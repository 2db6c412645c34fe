"""One-pass GLM statistics on a CPU core: Numba kernels. PRIVACY-CRITICAL (they clip).

The same statistics as the GPU kernel (``dpstream.models.glm_cuda``) and the glm module's equations
(docs/design.md, note A8), for a block X of rows and K candidate clip norms C_k:

    per row i:  m_i = ⟨x_i, w⟩,  ‖x_i‖²,  s_i = φ'(m_i, y_i)  (or the SRGD difference, glm module doc),
                g_i = |s_i|·‖x_i‖,  coefficient c_ik = s_i·C_k/g_i if g_i > C_k else s_i,
    per block:  S_k = Σ_i c_ik x_i  (so ‖c_ik x_i‖ ≤ C_k: the sensitivity 2C_k or C_k rests on this),
                Σ_i φ(m_i, y_i),  #{i : g_i > C_k}.

c_ik = s_i·min(1, C_k/g_i) is ``dpstream.models.clipping.clip_factors`` written per row; g_i = ∞ gives
0, a NaN stays NaN (inputs are checked for NaN before training).

Why Numba: NumPy needs four passes over a chunk (the margins, a squared copy for the norms, its
product with ones, the transposed product) and about ten float64 temporaries for the scalars between
them; here the margins and the norms come from one read of each value and the scalars from one loop
(``benchmarks/kernel_speed.py``: 1.7–1.9× the NumPy path with one clip norm). Two layouts, one kernel each:

* rows contiguous (C order: arrays users pass): each row's dot products, scalars and K updates of the
  running sums in one visit;
* columns contiguous (F order: the blocks ``dpstream.pipelines.lake.files`` decodes from Parquet): per chunk of
  ``CHUNK_ROWS`` rows, margins and norms column by column, the scalars, then one dot product per column
  and clip norm.

φ is the declared loss the caller names (``dpstream.models.losses``): each loss gets its own compiled
copy of the kernels (``_compiled``), so no kernel branches on the loss.

Determinism (a retried step must release identical values): single-threaded loops in a fixed order;
``fastmath`` allows only reassociation and fused multiply-add, decided when the kernel is compiled, so
the same block on the same kind of CPU gives the same bits. Sums run in the block's dtype within a
chunk of ``CHUNK_ROWS`` rows (as BLAS did) and chunks are added in float64. ``tests/models/test_glm_cpu.py``
checks both layouts against a float64 NumPy statement of the equations, the clip counts and the bound.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import re
import types
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from dpstream.models.losses.base import LossDeclaration, declared_loss

__all__ = ["block_statistics", "STATISTIC_KINDS"]

CHUNK_ROWS = 4096
STATISTIC_KINDS = {"gradient_norm": 0, "residual": 1}  # DP-STAT values per row; -1: the gradient role
_FASTMATH = {"reassoc", "contract"}  # no "nnan"/"ninf": the clip comparisons must see NaN and ∞ as they are


def _derivative_and_loss(margin: float, label: float) -> tuple[float, float]:  # pragma: no cover - stand-in
    """(φ'(m, y), φ(m, y)) of the loss a kernel is compiled for: ``_compiled`` binds this name to the
    declaration's ``derivative_and_loss`` in each specialised copy of the functions that call it."""
    raise NotImplementedError


def _row_scalar(margin, previous_margin, label, has_previous, weight, previous_weight):
    """(s_i, φ(m_i, y_i)): the weighted SRGD difference when there is a previous iterate (glm module)."""
    scalar, loss = _derivative_and_loss(margin, label)
    if has_previous:
        previous_scalar, _ = _derivative_and_loss(previous_margin, label)
        scalar = weight * (scalar - previous_scalar) + (weight - previous_weight) * previous_scalar
    elif weight != 1.0:
        scalar = weight * scalar
    return scalar, loss


def _clipped_coefficient(scalar: float, gradient_norm: float, clip_norm: float) -> tuple[float, int]:
    """(c = s·min(1, C/g), 1 if the row is clipped else 0): ``clip_factors`` for one row and clip norm,
    the one place both kernels clip (a NaN norm compares False and stays in s)."""
    if gradient_norm > clip_norm:
        return scalar * (clip_norm / gradient_norm), 1
    return scalar, 0


def _rows_kernel(
    X, y, params, previous, has_previous, weight, previous_weight, clip_norms, statistic_kind, sums,
    clipped_rows, values,
):  # fmt: skip
    """C-order X: one visit per row. Returns the loss sum; fills ``sums`` (K, d) float64, ``clipped_rows``
    (K,) and, for DP-STAT (``statistic_kind`` ≥ 0), ``values`` (rows,) instead of the sums."""
    rows, dim = X.shape
    num_norms = clip_norms.shape[0]
    running = np.zeros((num_norms, dim), dtype=X.dtype)
    coefficients = np.zeros(num_norms, dtype=X.dtype)
    loss_sum = 0.0
    for i in range(rows):
        margin = X[i, 0] * params[0]  # the row's first terms start the sums in the block's dtype
        previous_margin = X[i, 0] * previous[0]
        square_norm = X[i, 0] * X[i, 0]
        for j in range(1, dim):
            value = X[i, j]
            margin += value * params[j]
            square_norm += value * value
            if has_previous:
                previous_margin += value * previous[j]
        scalar, loss = _row_scalar(
            float(margin), float(previous_margin), y[i], has_previous, weight, previous_weight
        )
        loss_sum += loss
        gradient_norm = abs(scalar) * math.sqrt(float(square_norm))
        if statistic_kind >= 0:
            values[i] = gradient_norm if statistic_kind == 0 else abs(float(margin) - y[i])
            continue
        for k in range(num_norms):
            coefficients[k], clipped = _clipped_coefficient(scalar, gradient_norm, clip_norms[k])
            clipped_rows[k] += clipped
        for k in range(num_norms):
            coefficient = coefficients[k]
            for j in range(dim):
                running[k, j] += coefficient * X[i, j]
        if (i + 1) % CHUNK_ROWS == 0 or i + 1 == rows:
            for k in range(num_norms):
                for j in range(dim):
                    sums[k, j] += float(running[k, j])
                    running[k, j] = 0.0
    return loss_sum


def _columns_dot(flat, column_stride, start, size, weights, margins, square_norms, with_norms):
    """margins[i] = Σ_j x_ij w_j (and square_norms[i] = Σ_j x_ij²) over rows start..start+size of the
    columns of ``flat``, eight columns per sweep: each sweep loads and stores the running sums once for
    eight columns, the blocking a column-major GEMV uses (one column per sweep is 2.3× slower)."""
    dim = weights.shape[0]
    margins[:size] = 0.0
    if with_norms:
        square_norms[:size] = 0.0
    j = 0
    while j < dim:
        width = min(8, dim - j)
        if width == 8:
            base = j * column_stride + start
            c0 = flat[base : base + size]
            c1 = flat[base + column_stride : base + column_stride + size]
            c2 = flat[base + 2 * column_stride : base + 2 * column_stride + size]
            c3 = flat[base + 3 * column_stride : base + 3 * column_stride + size]
            c4 = flat[base + 4 * column_stride : base + 4 * column_stride + size]
            c5 = flat[base + 5 * column_stride : base + 5 * column_stride + size]
            c6 = flat[base + 6 * column_stride : base + 6 * column_stride + size]
            c7 = flat[base + 7 * column_stride : base + 7 * column_stride + size]
            w0, w1, w2, w3 = weights[j], weights[j + 1], weights[j + 2], weights[j + 3]
            w4, w5, w6, w7 = weights[j + 4], weights[j + 5], weights[j + 6], weights[j + 7]
            for i in range(size):
                a0, a1, a2, a3, a4, a5, a6, a7 = c0[i], c1[i], c2[i], c3[i], c4[i], c5[i], c6[i], c7[i]
                margins[i] += ((a0 * w0 + a1 * w1) + (a2 * w2 + a3 * w3)) + (
                    (a4 * w4 + a5 * w5) + (a6 * w6 + a7 * w7)
                )
                if with_norms:
                    square_norms[i] += ((a0 * a0 + a1 * a1) + (a2 * a2 + a3 * a3)) + (
                        (a4 * a4 + a5 * a5) + (a6 * a6 + a7 * a7)
                    )
        else:
            for offset in range(width):
                column = flat[
                    (j + offset) * column_stride + start : (j + offset) * column_stride + start + size
                ]
                weight = weights[j + offset]
                for i in range(size):
                    margins[i] += column[i] * weight
                    if with_norms:
                        square_norms[i] += column[i] * column[i]
        j += width


def _columns_kernel(
    flat, column_stride, rows, y, params, previous, has_previous, weight, previous_weight, clip_norms,
    statistic_kind, sums, clipped_rows, values,
):  # fmt: skip
    """F-order X given as ``flat`` (X[i, j] = flat[i + j·column_stride]); the rest as ``_rows_kernel``."""
    dim = params.shape[0]
    num_norms = clip_norms.shape[0]
    chunk = min(CHUNK_ROWS, rows)
    margins = np.empty(chunk, dtype=flat.dtype)
    previous_margins = np.zeros(chunk, dtype=flat.dtype)  # read, unused, without a previous iterate
    square_norms = np.empty(chunk, dtype=flat.dtype)
    coefficients = np.empty((num_norms, chunk), dtype=flat.dtype)
    loss_sum = 0.0
    for start in range(0, rows, CHUNK_ROWS):
        size = min(CHUNK_ROWS, rows - start)
        _columns_dot(flat, column_stride, start, size, params, margins, square_norms, True)
        if has_previous:
            _columns_dot(flat, column_stride, start, size, previous, previous_margins, square_norms, False)
        for i in range(size):
            label = y[start + i]
            scalar, loss = _row_scalar(
                float(margins[i]), float(previous_margins[i]), label, has_previous, weight, previous_weight
            )
            loss_sum += loss
            gradient_norm = abs(scalar) * math.sqrt(float(square_norms[i]))
            if statistic_kind >= 0:
                values[start + i] = gradient_norm if statistic_kind == 0 else abs(float(margins[i]) - label)
                continue
            for k in range(num_norms):
                coefficients[k, i], clipped = _clipped_coefficient(scalar, gradient_norm, clip_norms[k])
                clipped_rows[k] += clipped
        if statistic_kind >= 0:
            continue
        for j in range(dim):  # each column once from memory, then K dot products from L1
            column = flat[j * column_stride + start : j * column_stride + start + size]
            for k in range(num_norms):
                total = coefficients[k, 0] * column[0]
                for i in range(1, size):
                    total += coefficients[k, i] * column[i]
                sums[k, j] += float(total)
    return loss_sum


@functools.cache
def _shared() -> dict[str, Any]:
    """The compiled helpers no loss enters: one copy for every loss's kernels."""
    return {"_clipped_coefficient": _jit(_clipped_coefficient), "_columns_dot": _jit(_columns_dot)}


@functools.cache
def _compiled(loss: LossDeclaration) -> tuple[Any, Any]:
    """The two kernels for ``loss``, compiled on first use (importing Numba costs ~0.4 s: not at import
    time) and cached on disk (beside this file, or in ``NUMBA_CACHE_DIR``), so worker processes load them
    instead of compiling. Where no cache location is writable they are compiled in each process.

    Each loss gets its own copies of ``_row_scalar`` and the kernels whose global ``_derivative_and_loss``
    is the loss's compiled function: Numba resolves a global when it compiles, so the loss is inlined into
    the row loop as if written there, with no branch or call through a pointer per row. A copy is named
    after the loss and a hash of the loss's source file, so its disk cache (keyed by name and stamped with
    this file) is never one compiled for another loss or an earlier version of it."""
    namespace = {**globals(), **_shared(), "_derivative_and_loss": _jit(loss.derivative_and_loss)}
    suffix = f"{re.sub(r'[^0-9A-Za-z]', '_', loss.name)}_{_source_hash(loss.derivative_and_loss)}"
    namespace["_row_scalar"] = _jit(_specialised(_row_scalar, namespace, suffix))
    return (
        _jit(_specialised(_rows_kernel, namespace, suffix)),
        _jit(_specialised(_columns_kernel, namespace, suffix)),
    )


def _specialised(function: Any, namespace: dict[str, Any], suffix: str) -> Any:
    """``function``'s code with ``namespace`` as its globals, named ``<name>__<suffix>``."""
    copy = types.FunctionType(function.__code__, namespace, f"{function.__name__}__{suffix}")
    copy.__qualname__ = copy.__name__
    return copy


def _source_hash(function: Any) -> str:
    """A short hash of the file that defines ``function`` (its code where there is no file)."""
    try:
        source = inspect.getsource(inspect.getmodule(function) or function).encode()
    except (OSError, TypeError):
        source = function.__code__.co_code
    return hashlib.blake2b(source, digest_size=6).hexdigest()


def _jit(function: Any) -> Any:
    """``function`` compiled by Numba, cached on disk where a cache location is writable."""
    import numba

    # error_model="numpy": IEEE division (C/0 = ∞, as clip_factors has it) without a Python check per
    # division, which would also stop the loops from vectorising.
    options = dict(fastmath=_FASTMATH, nogil=True, error_model="numpy")
    try:
        return numba.njit(function, cache=True, **options)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return numba.njit(function, cache=False, **options)


def block_statistics(
    X: np.ndarray,
    y: np.ndarray,
    params: np.ndarray,
    clip_norms: np.ndarray,
    loss: str,
    previous: np.ndarray | None = None,
    weight: float = 1.0,
    previous_weight: float = 0.0,
    statistic_kind: int = -1,
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray | None]:
    """(clipped sums (K, d) float64, loss sum, clipped-row counts (K,), per-row DP-STAT values or None)
    of a float32 or float64 block with the declared ``loss`` (``dpstream.models.losses``); ``y`` float64,
    the labels the loss reads (±1 for the logistic loss)."""
    rows_kernel, columns_kernel = _compiled(declared_loss(loss))
    rows, dim = X.shape
    params = np.ascontiguousarray(params, dtype=X.dtype)
    has_previous = previous is not None and previous_weight != 0.0
    previous = np.ascontiguousarray(previous if has_previous else params, dtype=X.dtype)
    clip_norms = np.ascontiguousarray(clip_norms, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    sums = np.zeros((len(clip_norms), dim))
    clipped_rows = np.zeros(len(clip_norms), dtype=np.int64)
    values = np.empty(rows if statistic_kind >= 0 else 0)
    common = (y, params, previous, has_previous, float(weight), float(previous_weight), clip_norms)
    if rows == 0:
        loss_sum = 0.0
    elif X.strides[0] == X.itemsize and dim > 1:  # columns contiguous: a view of the columns' memory
        stride = X.strides[1] // X.itemsize
        flat = as_strided(X, shape=((dim - 1) * stride + rows,), strides=(X.itemsize,), writeable=False)
        loss_sum = columns_kernel(flat, stride, rows, *common, statistic_kind, sums, clipped_rows, values)
    else:
        loss_sum = rows_kernel(np.ascontiguousarray(X), *common, statistic_kind, sums, clipped_rows, values)
    return sums, float(loss_sum), clipped_rows, values if statistic_kind >= 0 else None
