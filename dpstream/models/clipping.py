"""Clipping: the code every sensitivity in dpstream rests on. PRIVACY-CRITICAL.

Each released sum is Σ_i v_i with one record's contribution v_i scaled into a ball of public radius
C, so a record changes the sum by at most 2C (replace-one) or C (zero-out):
``NeighbouringRelation.clipped_sum_sensitivity``, ``gram_sensitivity``, ``moment_sensitivity``.

    clip_factors:  f_i = min(1, C / ‖v_i‖), 1 where ‖v_i‖ = 0   (so ‖f_i v_i‖ ≤ C)
    clip_rows:     x̄_i = f_i x_i with C = B_x                  (AdaSSP's rows, dpstream.models.moments)
    clip_labels:   ȳ_i = clip(y_i, −B_y, B_y)                  (AdaSSP's labels; a vector target
                   is scaled into the ball of radius B_y, as a row)

The fused kernels for the GLMs compute the same factors per row, on a CPU in Numba
(``dpstream.models.glm_cpu``, s·(C/g) in float64) and on a GPU in CUDA (``dpstream.models.glm_cuda``,
C·(1/‖v‖) in float64, within an ulp of C/‖v‖); they are privacy-critical for the same reason.
The GLMs (CuPy fallback path) and the KAN compute their per-example gradient norms ‖g_i‖ without
forming g_i (rank-one gradients) and scale each row's term by ``clip_factors``; AdaSSP clips rows and
labels here. Every function takes the array module ``xp`` (NumPy or CuPy). A change here changes the
privacy guarantee: ``tests/models/test_clipping.py`` checks the bound directly, and the audit
(``dpstream audit``, ``tests/test_audit.py``) checks the whole mechanisms empirically.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["clip_factors", "clip_rows", "clip_labels", "certainly_within"]


def clip_factors(norms: Any, clip_norms: Any, xp: Any = np) -> Any:
    """(rows, K) factors min(1, C_k / ‖v_i‖) for K candidate clip norms; 1 where ‖v_i‖ = 0 (C/0 = inf)."""
    with np.errstate(divide="ignore"):
        return xp.minimum(1.0, xp.asarray(clip_norms)[None, :] / norms[:, None])


def clip_rows(X: Any, row_norm_bound: float, xp: Any = np) -> tuple[Any, int]:
    """(x_i · min(1, B/‖x_i‖) for every row, number of rows that were scaled down). Rows already within
    the bound (the usual case on the public scale) are returned as they are, without a copy.

    The norms are computed in float64. First, a cheaper look decides the usual case without float64
    copies of the block (``certainly_within``); the result is identical either way."""
    if certainly_within(X, row_norm_bound, xp):
        return X, 0
    norms = xp.sqrt((X.astype(xp.float64) ** 2).sum(axis=1))
    factors = clip_factors(norms, np.array([row_norm_bound]), xp)[:, 0]
    clipped = int((factors < 1.0).sum())
    if clipped == 0:
        return X, 0
    return X * factors[:, None].astype(X.dtype), clipped


def certainly_within(X: Any, bound: float, xp: Any = np) -> bool:
    """Whether every row of ``X`` has ‖x_i‖ ≤ ``bound``, decided from ŝ_i = Σ_j x_ij² in ``X``'s own
    precision (one pass, no copy of ``X``): True only when ŝ_i ≤ B²(1 − 4(d + 2)u) for every row, u the
    unit roundoff. The d rounded squares and their sum in any order give ŝ_i ≥ s_i(1 − u)(1 − γ_{d−1}),
    γ_n = nu/(1 − nu) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.4 and
    §4.2: non-negative terms), so s_i < B²(1 − 2(d + 2)u): the float64 norm ``clip_rows`` computes is then
    within B as well and it would scale no row. A NaN, an infinity (or an overflowing square), a bound
    whose square is not a normal number of X's type (B ≤ 1e-15, or B ≥ √max / 2), or an array not on
    NumPy answers False, and the caller computes the norms in float64."""
    # NumPy only: CuPy's einsum is a batched cuBLAS product, whose float32 precision follows CuPy's
    # compute type (TF32 keeps 10 bits, far outside the margin); there the float64 norms decide.
    if xp is not np or X.ndim != 2 or X.shape[0] == 0 or X.dtype not in (np.float32, np.float64):
        return False
    dim, info = X.shape[1], np.finfo(X.dtype)
    if not 1e-15 < float(bound) < np.sqrt(float(info.max)) / 2:  # its square a normal number of X's type
        return False
    limit = float(bound) ** 2 * (1.0 - 4.0 * (dim + 2) * float(info.eps) / 2)
    # The limit in X's precision, rounded down: the comparison below runs in that precision (NEP 50).
    typed = X.dtype.type(limit)
    if float(typed) > limit:
        typed = np.nextafter(typed, X.dtype.type(0))
    squares = np.einsum("ij,ij->i", X, X)
    return bool(np.all(squares <= typed))


def clip_labels(labels: Any, label_bound: float, xp: Any = np) -> Any:
    """Labels clipped into [−B_y, B_y]; (rows, K) vector targets scaled to norm at most B_y per row."""
    if labels.ndim == 2:
        return clip_rows(labels, label_bound, xp)[0]
    return xp.clip(labels, -label_bound, label_bound)
