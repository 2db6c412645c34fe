"""Uniform cubic B-splines on [−1, 1], the KAN basis (Wang et al., "KANs Trained by DP-SGD with Correlated
Noise", arXiv:2605.12648, Assumption 3.2; docs/design.md, note D1).

With G intervals of width h = 2/G the knots are t_j = −1 + (j − 3)h for j = 0, …, G + 6, which gives
p = G + 3 basis functions b_0 … b_{p−1} forming a partition of unity on [−1, 1]. On the interval
[−1 + i h, −1 + (i + 1) h] with local coordinate s ∈ [0, 1] exactly four are non-zero,
b_i … b_{i+3}, and they are the uniform cubic blending polynomials (the closed form of the
Cox–de Boor recursion for equally spaced knots):

    b_i = (1 − s)³/6,  b_{i+1} = (3s³ − 6s² + 4)/6,  b_{i+2} = (−3s³ + 3s² + 3s + 1)/6,  b_{i+3} = s³/6,

with derivatives d/dv = (1/h)·d/ds. The right end point v = 1 is evaluated in the last interval
(otherwise every basis function would vanish there); values outside [−1, 1] are clamped onto it.
Constants (docs/design.md, note D1): max b = 2/3, Σ_k b_k(v)² ∈ [0.4601, 0.5].

Everything takes an array module ``xp`` (NumPy or CuPy) so the same code runs on either backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["num_basis", "knots", "spline_pieces", "dense_basis"]


def num_basis(grid_size: int) -> int:
    """p = G + 3 cubic basis functions on a grid of G intervals."""
    return int(grid_size) + 3


def knots(grid_size: int) -> np.ndarray:
    """t_j = −1 + (j − 3)·2/G, j = 0, …, G + 6."""
    h = 2.0 / grid_size
    return -1.0 + (np.arange(grid_size + 7) - 3) * h


def spline_pieces(
    v: Any, grid_size: int, xp: Any = np, derivative: bool = False
) -> tuple[Any, Any, Any | None]:
    """The four non-zero basis values of each entry of ``v``.

    Returns ``(first, values, derivatives)``: ``first`` (int, shape of v) is the index of the first
    non-zero basis function, ``values`` (shape of v + (4,)) are b_first … b_{first+3}, and
    ``derivatives`` the same for b' (None unless ``derivative``).
    """
    h = 2.0 / grid_size
    position = (xp.clip(v, -1.0, 1.0) + 1.0) / h
    first = xp.minimum(xp.floor(position), grid_size - 1).astype(xp.int64)
    s = position - first
    s2 = s * s
    s3 = s2 * s
    one_minus = 1.0 - s
    values = (
        xp.stack(
            [
                one_minus * one_minus * one_minus,
                3.0 * s3 - 6.0 * s2 + 4.0,
                -3.0 * s3 + 3.0 * s2 + 3.0 * s + 1.0,
                s3,
            ],
            axis=-1,
        )
        / 6.0
    )
    if not derivative:
        return first, values, None
    derivatives = xp.stack(
        [-one_minus * one_minus, 3.0 * s2 - 4.0 * s, -3.0 * s2 + 2.0 * s + 1.0, s2], axis=-1
    ) / (2.0 * h)
    return first, values, derivatives


def dense_basis(v: Any, grid_size: int, xp: Any = np) -> Any:
    """h(v): shape v.shape + (p,), the dense basis (mostly zeros), e.g. the rows of H (docs/design.md,
    note D2)."""
    first, values, _ = spline_pieces(v, grid_size, xp)
    columns = xp.arange(num_basis(grid_size))
    offset = columns - first[..., None]  # which of the four pieces lands in each column (0..3), if any
    dense = xp.zeros(offset.shape, dtype=values.dtype)
    for piece in range(4):
        dense += xp.where(offset == piece, values[..., piece : piece + 1], 0.0)
    return dense
