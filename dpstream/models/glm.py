"""Generalised linear models: per-example clipped statistics without per-example gradients.

For a loss f(w; x, y) = φ(⟨x, w⟩, y) the per-example gradient is g_i = φ'(m_i, y_i) x_i with margin
m_i = ⟨x_i, w⟩, so ‖g_i‖ = |φ'(m_i, y_i)|·‖x_i‖ and the clipped sum for clip norm C is one
transposed product (docs/design.md, note A8):

    Σ_i clip(g_i, C) = Xᵀ (φ' ⊙ f),   f_i = min(1, C / (|φ'_i| ‖x_i‖))   (f_i = 1 when the norm is 0).

Several candidate clip norms cost one GEMM instead of a GEMV. For SRGD (Choquette-Choo, Ganesh &
Thakurta, "Smooth DP-SCO with a Single Epoch", arXiv:2406.02716, §3; docs/design.md, note C4) the
clipped quantity is the weighted difference u_i = [η_t φ'(m_t) − η_{t−1} φ'(m_{t−1})] x_i, again a
scalar times x_i, evaluated in the cancellation-safe form
η_t(φ'(m_t) − φ'(m_{t−1})) + (η_t − η_{t−1})φ'(m_{t−1}).

On a CPU the statistics come from the Numba kernels of ``dpstream.models.glm_cpu`` (one read of each
value for the margins and the norms); on a GPU from the CUDA kernel of ``dpstream.models.glm_cuda``.
Precision: rows are processed in chunks of ``CHUNK_ROWS``; float32 data stay float32 inside a chunk's
sums (no copy of the block), and chunk results are accumulated in float64.

Losses: squared loss φ(m, y) = (m − y)²/2 and logistic loss φ(m, y) = log(1 + exp(−y m)) with
labels y ∈ {−1, +1}: ``targets`` maps a label > 0 to +1 and anything else to −1 (estimators map any two
classes onto ±1 first). The kernels compute the loss a model's ``loss_kind`` names, declared once for both
(``dpstream.models.losses``); a GLM with another loss subclasses ``GLM`` and declares its loss there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.special import expit, log1p
from threadpoolctl import ThreadpoolController

from dpstream.backend import array_module, to_device, to_host
from dpstream.models import glm_cpu, glm_cuda
from dpstream.models.clipping import clip_factors, clip_labels
from dpstream.models.moments import block_ssp_weights, moment_sums
from dpstream.models.stats import BatchStats, StatsRequest
from dpstream.models.user_gradients import user_gradient_statistics, user_mean
from dpstream.models.users import not_combined

__all__ = ["GLM", "LinearRegressionModel", "LogisticRegressionModel", "CHUNK_ROWS"]

CHUNK_ROWS = glm_cpu.CHUNK_ROWS  # rows per float32 partial sum, on CPU and GPU fallback alike
DEVICE_CHUNK_ROWS = 262_144  # GPU fallback path: rows per float32 product before accumulating in float64
# One BLAS thread inside the kernel: a multi-threaded BLAS splits reductions differently with the
# thread count, and the statistics must be bit-for-bit identical on a 1-thread Dask worker and a
# many-core coordinator. Parallelism comes from processing blocks concurrently instead.
_BLAS = ThreadpoolController()


@dataclass(frozen=True)
class GLM:
    """Base class: subclasses give the loss φ and its derivative φ' in the margin.

    ``backend="cupy"`` (or ``"auto"`` on a machine with a GPU) computes the statistics on the GPU
    (``_accumulate_on_device``): the block is copied once, products run in the block's dtype per
    chunk and accumulate in float64, so results equal the CPU path within float32 rounding.
    """

    backend: str = "numpy"
    name: ClassVar[str] = "glm"
    supports_moments: ClassVar[bool] = True  # XᵀX and Xᵀy of clipped rows (AdaSSP), kind="moments"
    curvature: ClassVar[float] = 1.0  # L ≥ φ''(m, y) for every margin: the per-example smoothness is L·‖x‖²
    link: ClassVar[str] = "identity"  # what AdaSSP's statistics fit: least squares, or PASS-GLM's "logistic"
    loss_kind: ClassVar[str | None] = None  # the declared loss the kernels compute (dpstream.models.losses)
    outputs: ClassVar[int] = 1  # margins per row
    # Under the user unit a person's gradient is their rows' mean, clipped once (dpstream.models.user_gradients).
    combines_user_gradients: ClassVar[bool] = True

    def __post_init__(self) -> None:
        array_module(self.backend)  # an unknown backend, or "cupy" without a GPU, fails here naming the fix

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def derivative(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def targets(self, y: Any) -> Any:
        """The labels the loss expects, from a block's label column (regression: as they are)."""
        return y

    def num_params(self, num_features: int) -> int:
        return num_features

    def init_params(self, num_features: int) -> np.ndarray:
        return np.zeros(num_features)

    def predict_margin(self, X: np.ndarray, params: np.ndarray) -> np.ndarray:
        return np.asarray(X) @ params.astype(X.dtype, copy=False)

    def block_stats(
        self, X: np.ndarray, y: np.ndarray, request: StatsRequest, role: str = "gradient", users: Any = None
    ) -> BatchStats:
        """Statistics of one block of rows.

        ``role="gradient"`` fills the clipped sums (one per candidate clip norm); ``role="stat"``
        fills the DP-STAT histogram of the requested statistic over ``request.thresholds``. ``users``
        (the user unit: each row's user, whole users per block) combines a user's rows into one
        contribution: AdaSSP's weighted sufficient statistics (``dpstream.models.users``), a person's
        mean gradient clipped once (``dpstream.models.user_gradients``), a person's DP-STAT value.
        """
        if users is not None and request.previous_params is not None:  # SRGD's differences: not per person
            raise ValueError(not_combined("the difference of two iterates' gradients (SRGD)"))
        if role not in ("gradient", "stat"):
            raise ValueError(f"role must be 'gradient' or 'stat', got {role!r}")
        X = np.asarray(X)
        y = np.asarray(y)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(
                f"expected X of shape (rows, features) and y of shape (rows,), got {X.shape} and {y.shape}"
            )
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
        X = X.astype(dtype, copy=False)
        xp = array_module(self.backend)
        if request.kind == "moments":
            return self._moment_stats(X, y, request, xp, users)
        stats = BatchStats.zeros(
            len(request.clip_norms), X.shape[1], None if role == "gradient" else len(request.thresholds)
        )
        stats.row_count = X.shape[0]
        if users is None and xp is not np:
            self._accumulate_on_device(X, y, request, role, stats, xp)
            return stats
        if users is not None:
            sums, loss_sum, clipped_rows, values = self._user_statistics(X, y, request, role, users)
        else:
            sums, loss_sum, clipped_rows, values = glm_cpu.block_statistics(
                X,
                self.targets(y.astype(np.float64, copy=False)),
                request.params,
                request.clip_norms,
                self.loss_kind,
                request.previous_params,
                request.weight,
                request.previous_weight,
                statistic_kind=-1 if role == "gradient" else glm_cpu.STATISTIC_KINDS[request.statistic],
            )
        stats.loss_sum += loss_sum
        if role == "stat":
            stats.histogram += _cumulative_counts(values, request.thresholds)
        else:
            stats.clipped_sums += sums
            stats.clipped_rows += clipped_rows
        return stats

    def _user_statistics(
        self, X: np.ndarray, y: np.ndarray, request: StatsRequest, role: str, users: Any
    ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray | None]:
        """``glm_cpu.block_statistics``' outputs under the user unit: each person's mean gradient clipped
        once, or one DP-STAT value per person (``dpstream.models.user_gradients``; NumPy)."""
        if array_module(self.backend) is not np:
            raise ValueError("user-level gradients are computed on the NumPy backend; set backend='numpy'")
        labels = self.targets(np.asarray(y, dtype=np.float64))
        margins = X.astype(np.float64, copy=False) @ np.asarray(request.params, dtype=np.float64)
        derivatives = self.derivative(margins, labels)
        loss_sum = float(self.loss(margins, labels).sum())
        if role == "stat" and request.statistic == "residual":  # no gradient needed: the mean |s_i|
            return None, loss_sum, None, user_mean(np.abs(derivatives), users)
        sums, clipped, norms = user_gradient_statistics(derivatives[:, None], X, request.clip_norms, users)
        return sums, loss_sum, clipped, norms if role == "stat" else None

    def _moment_stats(
        self, X: np.ndarray, y: np.ndarray, request: StatsRequest, xp: Any, users: Any = None
    ) -> BatchStats:
        """XᵀX and Xᵀy of clipped rows and clipped targets (AdaSSP); ``clipped_rows`` is operator only."""
        X = to_device(X, xp)
        labels = self.targets(xp.asarray(y, dtype=xp.float64))
        weights = None if users is None else block_ssp_weights(X, users, request.row_norm_bound)
        with _BLAS.limit(limits=1, user_api="blas"):
            gram, moment, clipped = moment_sums(
                X,
                labels,
                request.row_norm_bound,
                request.label_bound,
                xp,
                None if weights is None else weights[0],
            )
        # Σ clip(y) on its own: what a label-mean-only plan releases, whatever the rows' columns hold (a
        # user's mean label under the user unit: |Σ| ≤ B_y per user)
        clipped_labels = clip_labels(labels, request.label_bound, xp)
        if weights is not None:
            clipped_labels = clipped_labels * weights[1]
        label_sum = float(to_host(clipped_labels.sum()))
        return BatchStats(
            clipped_sums=np.zeros((len(request.clip_norms), X.shape[1])),
            row_count=X.shape[0],
            clipped_rows=np.full(len(request.clip_norms), clipped, dtype=np.int64),
            gram=gram,
            moment=moment,
            label_sum=label_sum,
        )

    def device_terms(self, margins: Any, y: Any, xp: Any) -> tuple[Any, Any]:
        """(φ'(m, y), Σ φ(m, y)) with array module ``xp`` (NumPy or CuPy); overridden where the
        NumPy path uses SciPy."""
        derivatives = self.derivative(margins, y)
        return derivatives, self.loss(margins, y).sum()

    def _accumulate_on_device(
        self, X, y, request, role, stats, xp, chunk_rows: int = DEVICE_CHUNK_ROWS
    ) -> None:
        """The statistics of ``_accumulate`` with array module ``xp`` (CuPy on a GPU): the fused one-pass
        kernel (``dpstream.models.glm_cuda``) where it covers the shape, else ``chunk_rows`` rows at a time."""
        X = to_device(X, xp)
        y_device = to_device(np.asarray(y, dtype=np.float64), xp)
        if (
            xp is not np
            and self.loss_kind is not None
            and glm_cuda.supports(X.shape[1], len(request.clip_norms), X.dtype)
        ):
            statistic_kind = -1 if role == "gradient" else (1 if request.statistic == "residual" else 0)
            sums, loss_sum, clipped_rows, values = glm_cuda.collect(
                glm_cuda.launch_fused(
                    X,
                    y_device,
                    request.params,
                    request.clip_norms,
                    self.loss_kind,
                    request.previous_params,
                    request.weight,
                    request.previous_weight,
                    statistic_kind,
                ),
                statistic_kind,
            )
            stats.loss_sum += loss_sum
            if role == "stat":
                stats.histogram += _cumulative_counts(to_host(values), request.thresholds)
                return
            stats.clipped_sums += sums
            stats.clipped_rows += clipped_rows
            return
        dtype = X.dtype
        labels_all = self.targets(y_device)
        params = xp.asarray(request.params, dtype=dtype)
        previous = (
            None if request.previous_params is None else xp.asarray(request.previous_params, dtype=dtype)
        )
        clip_norms = xp.asarray(request.clip_norms)
        sums = xp.zeros(stats.clipped_sums.shape)
        clipped_rows = xp.zeros(len(request.clip_norms), dtype=xp.int64)
        loss_total = xp.zeros(())
        for start in range(0, X.shape[0], chunk_rows):
            chunk, labels = X[start : start + chunk_rows], labels_all[start : start + chunk_rows]
            margins = (chunk @ params).astype(xp.float64)
            scalars, loss_sum = self.device_terms(margins, labels, xp)
            loss_total += loss_sum
            if previous is not None and request.previous_weight != 0.0:
                previous_scalars, _ = self.device_terms((chunk @ previous).astype(xp.float64), labels, xp)
                scalars = (
                    request.weight * (scalars - previous_scalars)
                    + (request.weight - request.previous_weight) * previous_scalars
                )
            elif request.weight != 1.0:
                scalars = request.weight * scalars
            gradient_norms = xp.abs(scalars) * xp.sqrt((chunk.astype(xp.float64) ** 2).sum(axis=1))
            if role == "stat":
                values = xp.abs(margins - labels) if request.statistic == "residual" else gradient_norms
                stats.histogram += _cumulative_counts(to_host(values), request.thresholds)
                continue
            factors = clip_factors(gradient_norms, clip_norms, xp)
            sums += (chunk.T @ (scalars[:, None] * factors).astype(dtype)).T.astype(xp.float64)
            clipped_rows += (factors < 1.0).sum(axis=0)
        # One transfer per block, not per chunk: each would synchronise the device.
        stats.loss_sum += float(loss_total)
        stats.clipped_sums += to_host(sums)
        stats.clipped_rows += to_host(clipped_rows).astype(np.int64)


def _cumulative_counts(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """counts[k] = #{i : values_i <= thresholds_k} for increasing thresholds, in O(n log K)."""
    first = np.searchsorted(thresholds, values, side="left")  # values_i <= thresholds[k] iff k >= first_i
    return np.cumsum(np.bincount(first, minlength=len(thresholds) + 1)[: len(thresholds)])


@dataclass(frozen=True)
class LinearRegressionModel(GLM):
    """Squared loss φ(m, y) = (m − y)²/2; φ' = m − y (the residual)."""

    name: ClassVar[str] = "linear"
    loss_kind: ClassVar[str | None] = "squared"

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 0.5 * (margins - y) ** 2

    def derivative(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        return margins - y


@dataclass(frozen=True)
class LogisticRegressionModel(GLM):
    """Logistic loss φ(m, y) = log(1 + e^{−y m}) for y ∈ {−1, +1}; φ' = −y σ(−y m)."""

    name: ClassVar[str] = "logistic"
    loss_kind: ClassVar[str | None] = "logistic"
    curvature: ClassVar[float] = 0.25  # σ(m)(1 − σ(m)) ≤ 1/4
    link: ClassVar[str] = "logistic"

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        z = -y * margins
        return np.where(z > 0, z + log1p(np.exp(-np.abs(z))), log1p(np.exp(-np.abs(z))))

    def derivative(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        return -y * expit(-y * margins)

    def targets(self, y: Any) -> Any:
        """A label > 0 is the positive class +1, anything else −1: {0, 1} and {−1, +1} lakes both work."""
        return (y > 0) * 2.0 - 1.0

    def device_terms(self, margins: Any, y: Any, xp: Any) -> tuple[Any, Any]:
        z = -y * margins
        return -y * 0.5 * (1.0 + xp.tanh(0.5 * z)), xp.logaddexp(0.0, z).sum()  # expit(z) = (1 + tanh(z/2))/2
