"""Two-layer B-spline KAN with a trained first layer (Wang et al., "KANs Trained by DP-SGD with Correlated
Noise", arXiv:2605.12648, §3.1; docs/design.md, notes D1 and D2).

    f_W(x) = (1/√m) cᵀ h(σ((1/√d) W h(x))),

with h the p = G + 3 uniform cubic B-splines on [−1, 1] (``dpstream.models.bspline``) applied to each
coordinate, W ∈ R^{m × dp} trained from W₀ ~ N(0, I), the second layer c ∈ R^{m × p} drawn once from
N(0, I) and fixed, σ = tanh (or the logistic sigmoid), and the logistic loss ℓ(y f) = log(1 + e^{−y f})
with labels y ∈ {−1, +1} (a label > 0 is +1, anything else −1, so {0, 1} lakes work too). W₀ and c
come from the public ``seed``: they are data-independent.

Inputs are mapped with public bounds, never with bounds measured on the data: each feature is clipped
to [low, high] and scaled to [−1, 1]; with ``input_map="cube"`` (the default) it is used as is, with
``"ball"`` (the paper's X ⊆ unit ball) it is divided by √d (the cube uses more of the spline grid;
privacy does not depend on the map, only on the clipping below).

Per-example gradients are rank one (the paper's Lemma B.6; docs/design.md, note D2): with z = (1/√d) W h(x),
u = σ(z), a_j = σ'(z_j)⟨c_j, h'(u_j)⟩ and β = ℓ'(y f)·y = −y/(1 + e^{y f}),

    ∇_W ℓ = β/√(md) · a h(x)ᵀ,        ‖∇_W ℓ‖_F = |β| ‖a‖ ‖h(x)‖ / √(md),

so the clipped batch sum is one product, Σ_i clip(∇ℓ_i, C) = (1/√(md)) Aᵀ diag(φ) H with
φ_i = β_i min(1, C/‖∇ℓ_i‖): no per-example gradient is formed. Computation is in float64 on the chosen
backend (NumPy with the Numba output layer of ``dpstream.models.kan_cpu``, or CuPy on a GPU), in chunks
bounded by ``CHUNK_ELEMENTS``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpstream.backend import array_module, to_device, to_host
from dpstream.models.bspline import dense_basis, num_basis
from dpstream.models.clipping import clip_factors
from dpstream.models.glm import _BLAS, _cumulative_counts
from dpstream.models.kan_cpu import output_layer
from dpstream.models.stats import BatchStats, StatsRequest
from dpstream.models.user_gradients import user_gradient_statistics, user_starts

__all__ = ["KANModel", "CHUNK_ELEMENTS"]

# b_r(s) = Σ_e BLENDING[r, e] s^e: the uniform cubic B-spline pieces of dpstream.models.bspline
BLENDING = (
    np.array([[1.0, -3.0, 3.0, -1.0], [4.0, 0.0, -6.0, 3.0], [1.0, 3.0, 3.0, -3.0], [0.0, 0.0, 0.0, 1.0]])
    / 6.0
)
CHUNK_ELEMENTS = 1 << 19  # rows × hidden units per chunk: ~4 MiB per (rows, m) float64 temporary
# On a GPU each chunk costs ~40 kernel launches whatever its size: 128 MiB temporaries keep them busy
# (a 256-row chunk ran at 90k rows/s on an H100, launch-bound).
DEVICE_CHUNK_ELEMENTS = 1 << 24

# The output layer per (row, hidden unit) in one pass on a GPU, the same arithmetic as the CPU kernel
# (``dpstream.models.kan_cpu``): activation, spline interval, Horner value and derivative (a_j without
# the row sum).
_OUTPUT_LAYER_SOURCE = r"""
double u, slope;
if (sigmoid) { u = 0.5 * (1.0 + tanh(0.5 * z)); slope = u * (1.0 - u); }
else { u = tanh(z); slope = 1.0 - u * u; }
const double half_grid = grid / 2.0;
const double position = (fmin(fmax(u, -1.0), 1.0) + 1.0) * half_grid;
const double first = fmin(floor(position), (double)(grid - 1));
const double s = position - first;
const long long index = (long long)first + unit * grid;
const double p0 = P[index], p1 = P[total + index], p2 = P[2 * total + index], p3 = P[3 * total + index];
value = ((p3 * s + p2) * s + p1) * s + p0;
a = slope * ((3.0 * p3 * s + 2.0 * p2) * s + p1) * half_grid;
"""


@functools.lru_cache(maxsize=1)
def _output_layer_kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "float64 z, int64 unit, raw float64 P, int64 grid, int64 total, int32 sigmoid",
        "float64 value, float64 a",
        _OUTPUT_LAYER_SOURCE,
        "dpstream_kan_output_layer",
    )


@functools.lru_cache(maxsize=8)
def _second_layer(seed: int, num_hidden: int, p: int) -> np.ndarray:
    return np.random.default_rng([seed, 1]).standard_normal((num_hidden, p))


@dataclass(frozen=True)
class KANModel:
    num_hidden: int = 64
    grid_size: int = 5
    activation: str = "tanh"  # "tanh" | "sigmoid"
    feature_low: float | tuple[float, ...] = -1.0  # public per-feature bounds (or one for all)
    feature_high: float | tuple[float, ...] = 1.0
    # "cube" | "ball": "cube" beat the paper's ball on both real datasets (BENCHMARKS.md, "Defaults on real data")
    input_map: str = "cube"
    seed: int = 0  # public: W₀ and c
    backend: str = "numpy"  # "numpy" | "cupy" | "auto"
    name: ClassVar[str] = "kan"
    outputs: ClassVar[int] = 1  # one margin per row
    combines_user_gradients: ClassVar[bool] = True  # a person's mean gradient, clipped once (user unit)

    def __post_init__(self) -> None:
        for field_name in ("num_hidden", "grid_size"):
            value = getattr(self, field_name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{field_name} must be a positive integer, got {value!r}")
        if self.activation not in ("tanh", "sigmoid"):
            raise ValueError(f"activation must be 'tanh' or 'sigmoid', got {self.activation!r}")
        if self.input_map not in ("ball", "cube"):
            raise ValueError(f"input_map must be 'ball' or 'cube', got {self.input_map!r}")
        low, high = (
            np.atleast_1d(self.feature_low).astype(float),
            np.atleast_1d(self.feature_high).astype(float),
        )
        if low.shape != high.shape and 1 not in (low.size, high.size):
            raise ValueError(
                f"feature_low and feature_high have {low.size} and {high.size} entries; give one per feature or one for all"
            )
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
            raise ValueError(
                "feature_low < feature_high must hold for every feature, with finite public bounds"
            )
        array_module(self.backend)  # "cupy" without a GPU fails here, naming the fix
        low, high = self.margin_reach()
        if not low < 0.0 < high:  # the release guard's constant must be able to predict either class
            raise ValueError(
                f"a KAN with num_hidden={self.num_hidden}, grid_size={self.grid_size}, activation="
                f"{self.activation!r} and seed {self.seed} has an output layer (public, from the seed) whose "
                f"margins, on weights that ignore the input, only reach [{low:.3g}, {high:.3g}]: it cannot "
                "publish the majority class when the release guard chooses it. Use more hidden units or "
                "another seed (random_state)"
            )

    @property
    def num_basis(self) -> int:
        return num_basis(self.grid_size)

    def num_params(self, num_features: int) -> int:
        return self.num_hidden * num_features * self.num_basis

    def init_params(self, num_features: int) -> np.ndarray:
        """W₀ ~ N(0, I_{mdp}) from the public seed."""
        return np.random.default_rng([self.seed, 0]).standard_normal(self.num_params(num_features))

    def second_layer(self) -> np.ndarray:
        """c ~ N(0, I_{mp}), drawn once from the public seed and never trained."""
        return _second_layer(int(self.seed), int(self.num_hidden), self.num_basis)

    def _unit_outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """(a grid of hidden values u inside σ's range, g_j(u) = ⟨c_j, h(u)⟩ on it for every unit j)."""
        u_low, u_high = (-0.999, 0.999) if self.activation == "tanh" else (0.0005, 0.9995)
        grid = np.linspace(u_low, u_high, 2001)
        return grid, dense_basis(grid, self.grid_size) @ self.second_layer().T

    def margin_reach(self) -> tuple[float, float]:
        """The least and largest margin a constant-margin W reaches (``constant_margin_params``): public."""
        _, outputs = self._unit_outputs()
        scale = 1.0 / math.sqrt(self.num_hidden)
        return scale * float(outputs.min(axis=0).sum()), scale * float(outputs.max(axis=0).sum())

    def constant_margin_params(self, num_features: int, margin: float) -> np.ndarray:
        """Parameters W whose margin is ``margin`` on every row (clamped into ``margin_reach``, which holds
        margins of both signs: ``__post_init__``), for publishing a constant predictor
        (``dpstream.release_guard.constant_params``).

        The B-splines on [−1, 1] sum to 1 there (partition of unity) and ``map_inputs`` keeps every
        coordinate in [−1, 1], so a W whose row j is the constant v_j gives (1/√d)(W h(x))_j = √d·v_j for
        every x: hidden unit j outputs g_j(u_j) = ⟨c_j, h(u_j)⟩ at u_j = σ(√d·v_j) whatever the row. Each
        u_j moves on a path from the minimum of g_j to its maximum (t ∈ [0, 1]); the margin
        (1/√m) Σ_j g_j(u_j(t)) is continuous in t, and bisection finds the t that gives ``margin``. A
        function of ``margin`` and the public seed only."""
        grid, outputs = self._unit_outputs()
        start, end = grid[outputs.argmin(axis=0)], grid[outputs.argmax(axis=0)]
        scale = 1.0 / math.sqrt(self.num_hidden)

        def margin_at(t: float) -> float:
            units = (1 - t) * start + t * end
            return scale * float(np.sum(dense_basis(units, self.grid_size) * self.second_layer()))

        low, high = 0.0, 1.0
        target = min(max(margin, margin_at(low)), margin_at(high))
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if margin_at(middle) < target else (low, middle)
        units = (1 - high) * start + high * end
        hidden = np.arctanh(units) if self.activation == "tanh" else np.log(units / (1 - units))
        rows = hidden / math.sqrt(num_features)  # v_j = z_j / √d
        return np.repeat(rows[:, None], num_features * self.num_basis, axis=1).ravel()

    def map_inputs(self, X: Any, xp: Any = np) -> Any:
        """Public bounds → [−1, 1] per feature, then into the unit ball for ``input_map="ball"``."""
        d = X.shape[1]
        low = xp.asarray(np.broadcast_to(np.atleast_1d(self.feature_low).astype(float), (d,)))
        high = xp.asarray(np.broadcast_to(np.atleast_1d(self.feature_high).astype(float), (d,)))
        unit = 2.0 * (xp.clip(X, low, high) - low) / (high - low) - 1.0
        return unit / math.sqrt(d) if self.input_map == "ball" else unit

    def output_polynomials(self, xp: Any = np) -> Any:
        """(4, m·G): on interval i of hidden unit j, Σ_k c_{j,k} b_k(u) = Σ_e P[e, jG + i] s^e (s the
        local coordinate), P = [c_{j,i} … c_{j,i+3}] · BLENDING. Precomputing it turns the second
        layer into one gather and a Horner evaluation per (row, unit) instead of four basis values."""
        c, G = xp.asarray(self.second_layer()), self.grid_size
        windows = xp.stack([c[:, r : r + G] for r in range(4)], axis=-1)  # (m, G, 4): c[j, i + r]
        return xp.ascontiguousarray(
            (windows @ xp.asarray(BLENDING)).reshape(-1, 4).T
        )  # one row per power: fast takes

    def _forward(
        self, X: Any, W: Any, polynomials: Any, xp: Any, gradient: bool
    ) -> tuple[Any, Any, Any, Any]:
        """(margins f, features H (n, dp), a (n, m) and ‖a_i‖² (n,), or None twice) for a chunk of raw
        rows X: one product, then the output layer in one pass (``kan_cpu`` on a CPU, a CuPy elementwise
        kernel on a GPU)."""
        n, d = X.shape
        m, G = self.num_hidden, self.grid_size
        H = dense_basis(self.map_inputs(X.astype(xp.float64), xp), G, xp).reshape(n, -1)
        sigmoid = self.activation == "sigmoid"
        if xp is np:
            margins, a, a_square_norms = output_layer(
                H @ W.T, polynomials, G, 1.0 / math.sqrt(d), sigmoid, gradient
            )
            return margins, H, a, a_square_norms
        values, a = _output_layer_kernel()(
            (H @ W.T) / math.sqrt(d),
            xp.arange(m),
            polynomials,
            np.int64(G),
            np.int64(m * G),
            np.int32(sigmoid),
        )
        margins = values.sum(axis=1) / math.sqrt(m)
        return (margins, H, a, (a * a).sum(axis=1)) if gradient else (margins, H, None, None)

    def _chunk_rows(self, xp: Any = np) -> int:
        return max(16, (CHUNK_ELEMENTS if xp is np else DEVICE_CHUNK_ELEMENTS) // self.num_hidden)

    def predict_margin(self, X: np.ndarray, params: np.ndarray) -> np.ndarray:
        xp = array_module(self.backend)
        X = to_device(np.asarray(X), xp)
        W, c = self._device_params(params, X.shape[1], xp)
        step = self._chunk_rows(xp)
        return np.concatenate(
            [to_host(self._forward(X[i : i + step], W, c, xp, False)[0]) for i in range(0, X.shape[0], step)]
        )

    def _device_params(self, params: np.ndarray, num_features: int, xp: Any) -> tuple[Any, Any]:
        """(W as (m, dp), the second layer's polynomials) on ``xp``'s device."""
        params = np.asarray(params, dtype=np.float64)
        if params.size != self.num_params(num_features):
            raise ValueError(
                f"KAN parameters have {params.size} entries, expected m·d·p = {self.num_params(num_features)}"
            )
        return xp.asarray(params.reshape(self.num_hidden, -1)), self.output_polynomials(xp)

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.logaddexp(0.0, -y * margins)

    def block_stats(
        self, X: np.ndarray, y: np.ndarray, request: StatsRequest, role: str = "gradient", users: Any = None
    ) -> BatchStats:
        """Clipped sums of the per-example gradients for each candidate clip norm (``role="gradient"``)
        or the DP-STAT histogram of their norms (``role="stat"``), from one forward pass per chunk.
        ``users`` (the user unit, whole people per block): each person's mean gradient clipped once, and
        its norm as the person's DP-STAT value (``dpstream.models.user_gradients``; NumPy)."""
        if role not in ("gradient", "stat"):
            raise ValueError(f"role must be 'gradient' or 'stat', got {role!r}")
        if request.kind != "clipped_gradient":
            raise ValueError(
                "the KAN trains with DP-SGD (any noise process); sufficient statistics (algorithm 'ssp') "
                "are for linear models only"
            )
        if request.previous_params is not None:
            raise ValueError(
                "the KAN trains with DP-SGD (any noise process); Accelerated-DP-SRGD supports linear models only"
            )
        if role == "stat" and request.statistic != "gradient_norm":
            raise ValueError("DP-STAT on a KAN counts gradient norms; use statistic='gradient_norm'")
        X, y = np.asarray(X), np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(
                f"expected X of shape (rows, features) and y of shape (rows,), got {X.shape} and {y.shape}"
            )
        xp = array_module(self.backend)
        if users is not None:
            return self._user_stats(X, y, request, role, users, xp)
        n, d = X.shape
        W, c = self._device_params(request.params, d, xp)
        clip_norms = xp.asarray(request.clip_norms)
        scale = 1.0 / math.sqrt(self.num_hidden * d)
        sums = xp.zeros((len(request.clip_norms), W.size))
        histogram = None if role == "gradient" else np.zeros(len(request.thresholds), dtype=np.int64)
        clipped_rows, loss_sum = np.zeros(len(request.clip_norms), dtype=np.int64), 0.0
        X_device, y_device = to_device(X, xp), (xp.asarray(y) > 0) * 2.0 - 1.0  # label > 0 is +1, else −1
        step = self._chunk_rows(xp)
        with _BLAS.limit(limits=1, user_api="blas"):  # identical sums on any worker (see glm._BLAS)
            for start in range(0, n, step):
                labels = y_device[start : start + step]
                margins, H, a, a_square_norms = self._forward(X_device[start : start + step], W, c, xp, True)
                loss_sum += float(xp.logaddexp(0.0, -labels * margins).sum())
                beta = -labels / (1.0 + xp.exp(xp.clip(labels * margins, -700.0, 700.0)))
                norms = xp.abs(beta) * xp.sqrt(a_square_norms) * xp.sqrt((H * H).sum(axis=1)) * scale
                if role == "stat":
                    histogram += _cumulative_counts(to_host(norms), request.thresholds)
                    continue
                factors = clip_factors(norms, clip_norms, xp)  # (rows, K); 1 where the norm is 0
                clipped_rows += to_host((factors < 1.0).sum(axis=0)).astype(np.int64)
                for k in range(factors.shape[1]):
                    sums[k] += ((a * (beta * factors[:, k])[:, None]).T @ H).ravel() * scale
        return BatchStats(
            clipped_sums=to_host(sums),
            row_count=n,
            histogram=histogram,
            loss_sum=loss_sum,
            clipped_rows=clipped_rows,
        )

    def _user_stats(
        self, X: np.ndarray, y: np.ndarray, request: StatsRequest, role: str, users: Any, xp: Any
    ) -> BatchStats:
        """The user unit's statistics: a person's per-row gradients β_i a_i ⊗ h(x_i)/√(md) (rank one, as
        in ``block_stats``) averaged and clipped once (``user_gradient_statistics``)."""
        if xp is not np:
            raise ValueError("user-level gradients are computed on the NumPy backend; set backend='numpy'")
        n, d = X.shape
        W, c = self._device_params(request.params, d, xp)
        labels = (y > 0) * 2.0 - 1.0  # label > 0 is +1, else −1
        scale = 1.0 / math.sqrt(self.num_hidden * d)
        clip_norms = np.asarray(request.clip_norms, dtype=np.float64)
        sums = np.zeros((clip_norms.size, W.size))
        clipped = np.zeros(clip_norms.size, dtype=np.int64)
        norms, loss_sum = [], 0.0
        starts = user_starts(users)
        ends = np.append(starts[1:], n)
        first = 0
        while first < starts.size:  # chunks of whole people, as the row path's chunks of rows
            last = max(first + 1, int(np.searchsorted(ends, starts[first] + self._chunk_rows(), "right")))
            lo, hi = int(starts[first]), int(ends[last - 1])
            with _BLAS.limit(limits=1, user_api="blas"):
                margins, H, a, _ = self._forward(X[lo:hi], W, c, xp, True)
            chunk_labels = labels[lo:hi]
            loss_sum += float(np.logaddexp(0.0, -chunk_labels * margins).sum())
            beta = -chunk_labels / (1.0 + np.exp(np.clip(chunk_labels * margins, -700.0, 700.0)))
            chunk = user_gradient_statistics(a * (beta * scale)[:, None], H, clip_norms, users[lo:hi])
            sums += chunk[0]
            clipped += chunk[1]
            norms.append(chunk[2])
            first = last
        histogram = None
        if role == "stat":
            histogram = _cumulative_counts(np.concatenate(norms or [np.zeros(0)]), request.thresholds)
            sums, clipped = np.zeros_like(sums), np.zeros_like(clipped)
        return BatchStats(
            clipped_sums=sums,
            row_count=n,
            histogram=histogram,
            loss_sum=loss_sum,
            clipped_rows=clipped,
        )
