"""The KAN's output layer on a CPU core in one pass: a Numba kernel (the CPU twin of the CuPy
``_OUTPUT_LAYER_SOURCE`` in ``dpstream.models.kan``).

For pre-activations z = (1/√d) W h(x) of a chunk of rows, per row i and hidden unit j (``kan`` module doc;
Wang et al., "KANs Trained by DP-SGD with Correlated Noise", arXiv:2605.12648, §3.1 and Lemma B.6):

    u_ij = σ(z_ij),   interval t and local coordinate s of u_ij on the G-interval grid of [−1, 1],
    f_i = (1/√m) Σ_j Σ_e P[e, jG + t] s^e                       (the margin),
    a_ij = σ'(z_ij) · (G/2) Σ_e e P[e, jG + t] s^{e−1}         (a_j = σ'(z_j)⟨c_j, h'(u_j)⟩),

with P the per-interval cubic polynomials of the fixed second layer (``KANModel.output_polynomials``).
The kernel also returns ‖a_i‖², which the per-example gradient norm |β_i| ‖a_i‖ ‖h(x_i)‖ / √(md) needs.

Why: NumPy spends about 25 passes over each (rows × m) float64 temporary on this (activation, clip,
floor, four gathers, two Horner evaluations, the products and the row sums); here it is two: NumPy's
SIMD tanh in place, then one loop that reads each value once and writes each result once
(``benchmarks/kan_speed.py``). Single-threaded loops in a fixed order
with the GLM kernels' ``fastmath`` flags (``glm_cpu``): the same chunk gives the same bits on any worker.
The margins alone (``gradient=False``, for predictions) may differ from the training path's in the last
bits: the compiler vectorises that sum in another order.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from dpstream.models.glm_cpu import _jit

__all__ = ["output_layer"]


def _output_layer_kernel(
    T, polynomials, grid, sigmoid, gradient, margins, a, a_square_norms
):  # fmt: skip
    """From T = tanh(z) (tanh(z/2) for the sigmoid), fill ``margins`` (rows,), and with ``gradient``
    ``a`` (rows, m) and ``a_square_norms`` (rows,)."""
    rows, hidden = T.shape
    half_grid = grid / 2.0
    output_scale = 1.0 / math.sqrt(hidden)
    for i in range(rows):
        value_sum = 0.0
        square_norm = 0.0
        for j in range(hidden):
            if sigmoid:
                u = 0.5 * (1.0 + T[i, j])  # σ(z) = (1 + tanh(z/2))/2: no overflow
                slope = u * (1.0 - u)
            else:
                u = T[i, j]
                slope = 1.0 - u * u
            position = (min(max(u, -1.0), 1.0) + 1.0) * half_grid
            first = min(math.floor(position), grid - 1.0)
            if not first >= 0.0:  # NaN (NaN parameters): read interval 0 and let the NaN reach the outputs
                first = 0.0
            s = position - first
            index = int(first) + j * grid
            p0, p1 = polynomials[0, index], polynomials[1, index]
            p2, p3 = polynomials[2, index], polynomials[3, index]
            value_sum += ((p3 * s + p2) * s + p1) * s + p0
            if gradient:
                derivative = slope * ((3.0 * p3 * s + 2.0 * p2) * s + p1) * half_grid
                a[i, j] = derivative
                square_norm += derivative * derivative
        margins[i] = value_sum * output_scale
        if gradient:
            a_square_norms[i] = square_norm


@functools.cache
def _compiled() -> Any:
    """Compiled on first use and cached on disk as the GLM kernels are (``glm_cpu._compiled``)."""
    return _jit(_output_layer_kernel)


def output_layer(
    Z: np.ndarray, polynomials: np.ndarray, grid: int, scale: float, sigmoid: bool, gradient: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(margins (rows,), a (rows, m) or None, ‖a_i‖² (rows,) or None) for ``Z`` = W h(x) (rows, m)
    float64, the pre-activations being ``scale``·Z (scale = 1/√d). ``Z`` is overwritten.

    The tanh runs in NumPy, in place: its SIMD loop is ~10× the scalar libm tanh a Numba loop calls
    (1.7 ns against 16 ns per value measured), and tanh is most of the work."""
    rows, hidden = Z.shape
    if Z.dtype != np.float64 or not Z.flags.c_contiguous:
        Z = np.ascontiguousarray(Z, dtype=np.float64)
    np.multiply(Z, 0.5 * scale if sigmoid else scale, out=Z)
    np.tanh(Z, out=Z)
    margins = np.empty(rows)
    a = np.empty((rows, hidden) if gradient else (0, hidden))
    a_square_norms = np.empty(rows if gradient else 0)
    _compiled()(
        Z,
        np.ascontiguousarray(polynomials, dtype=np.float64),
        int(grid),
        bool(sigmoid),
        bool(gradient),
        margins,
        a,
        a_square_norms,
    )
    return margins, (a if gradient else None), (a_square_norms if gradient else None)
