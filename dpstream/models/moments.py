"""Least-squares sufficient statistics of clipped rows: what AdaSSP releases (privacy-critical).

For rows x_i and labels y_i of one block, with public bounds B_x and B_y,

    x̄_i = x_i · min(1, B_x / ‖x_i‖),   ȳ_i = clip(y_i, −B_y, B_y),
    XᵀX = Σ_i x̄_i x̄_iᵀ,   Xᵀy = Σ_i x̄_i ȳ_i.

The clipping (``dpstream.models.clipping``) is what bounds one record's contribution, so these sums carry the sensitivities of
``NeighbouringRelation.gram_sensitivity`` / ``moment_sensitivity``. Both are plain sums: statistics of
disjoint blocks add, in any grouping (``BatchStats`` is a monoid), so the whole lake is one map-reduce.

Chunks of ``CHUNK_ROWS`` rows are multiplied in the block's dtype and accumulated in float64.

Under the user unit (``users``: each row's user, every user's rows in the block) each user's clipped rows
and targets are weighted by √w_u so that the user adds w_u Σ x̄ x̄ᵀ and w_u Σ x̄ ȳ, one row's bounds
(``dpstream.models.users.ssp_user_weights``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpstream.backend import to_host
from dpstream.models.clipping import clip_labels, clip_rows
from dpstream.models.users import ssp_user_weights

__all__ = ["moment_sums", "block_ssp_weights"]

CHUNK_ROWS = 16384


def block_ssp_weights(X: Any, users: Any, row_norm_bound: float) -> tuple[np.ndarray, np.ndarray]:
    """(w, v) per row of a block holding whole users (``ssp_user_weights`` of the clipped rows' norms)."""
    if not isinstance(X, np.ndarray):
        raise ValueError("user-level sufficient statistics run on the NumPy backend: use backend='numpy'")
    _, local = np.unique(np.asarray(users), return_inverse=True)
    norms = np.minimum(np.linalg.norm(np.asarray(X, dtype=np.float64), axis=1), row_norm_bound)
    return ssp_user_weights(norms, local.ravel(), row_norm_bound)


def _clipped_targets(labels: Any, label_bound: float, dtype: Any, xp: Any) -> Any:
    """``clip_labels`` in the rows' precision. Scalar labels on NumPy are clipped straight into a buffer
    of that precision (the same values as clipping, then converting): Dask workers return freed memory at
    once (MALLOC_TRIM_THRESHOLD_), so every chunk-sized float64 temporary costs fresh pages."""
    if xp is np and labels.ndim == 1:
        return np.clip(
            labels, -label_bound, label_bound, out=np.empty(labels.shape, dtype), casting="same_kind"
        )
    return clip_labels(labels, label_bound, xp).astype(dtype)


def moment_sums(
    X: Any, labels: Any, row_norm_bound: float, label_bound: float, xp: Any = np, weights: Any = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """(XᵀX, Xᵀy, rows clipped) of one block after clipping rows to B_x and labels to [−B_y, B_y]; for
    vector targets (rows, K) (a K-class model's contrast vectors) each target row is clipped to norm B_y
    and Xᵀy is (d, K). With ``weights`` (the user unit's w per row, ``block_ssp_weights``) each user's
    rows are weighted (module docstring)."""
    dim = X.shape[1]
    gram, moment, clipped = np.zeros((dim, dim)), np.zeros((dim, *labels.shape[1:])), 0
    roots = None if weights is None else np.sqrt(weights)
    for start in range(0, X.shape[0], CHUNK_ROWS):
        rows, count = clip_rows(X[start : start + CHUNK_ROWS], row_norm_bound, xp)
        targets = _clipped_targets(labels[start : start + CHUNK_ROWS], label_bound, rows.dtype, xp)
        if roots is not None:  # √w_u on a user's rows and on its targets: w_u on each product
            root = roots[start : start + CHUNK_ROWS].astype(rows.dtype)
            rows = rows * root[:, None]
            targets = targets * (root if targets.ndim == 1 else root[:, None])
        gram += to_host(rows.T @ rows).astype(np.float64)
        moment += to_host(rows.T @ targets).astype(np.float64)
        clipped += count
    return gram, moment, clipped
