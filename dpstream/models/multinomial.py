"""Multinomial (softmax) logistic regression over K ≥ 3 classes: one model, one pass, no ε/K split.

Parameters W ∈ R^{d×K} (flattened row-major: ``params[j·K + k]`` is feature j's weight for class k), margins
m = Wᵀx, probabilities p = softmax(m), loss φ(m, c) = log Σ_k e^{m_k} − m_c for class index c ∈ {0..K−1}.

Iterative algorithms (DP-SGD, DP-AMBSSGD, SRGD). The per-example gradient is rank one,
g_i = x_i (p_i − e_{c_i})ᵀ, so ‖g_i‖_F = ‖x_i‖·‖p_i − e_{c_i}‖ and the clipped sum for clip norm C is one
product, Σ_i clip(g_i, C) = Xᵀ((P − Y) ⊙ f) with f_i = min(1, C/‖g_i‖): the GLM construction of
``dpstream.models.glm`` with a K-column derivative. The Hessian of φ in m is diag(p) − ppᵀ, whose largest
eigenvalue is at most 1/2, so the per-example smoothness is ‖x‖²/2 (``curvature``).

Sufficient statistics (AdaSSP). The degree-2 Taylor expansion of φ at W = 0 (PASS-GLM, Huggins et al.
2017, generalised to K classes): ∇_m φ(0, c) = 1/K − e_c and ∇²_m φ(0) = H = I/K − 11ᵀ/K², so

    Σ_i φ(Wᵀx_i, c_i) ≈ N log K − ⟨W, XᵀY − (Xᵀ1)1ᵀ/K⟩ + ½ tr(W H Wᵀ XᵀX),    Y the one-hot labels.

H is singular along 1 (adding one vector to every class's weights changes no probability); on the
identifiable subspace W1 = 0, WH = W/K, and the minimiser is W = K (XᵀX)⁻¹ XᵀY (I − 11ᵀ/K). Write
I − 11ᵀ/K = UUᵀ with U ∈ R^{K×(K−1)} orthonormal (the Helmert contrasts, ``contrast_basis``): the data
enter only through XᵀX and XᵀT, where row i of T is t_i = Uᵀe_{c_i}, the class's contrast vector, with
‖t_i‖ = sqrt(1 − 1/K) for every class. So one private release of XᵀX and of XᵀT (d × (K−1)) serves all K
classes, and W = K (XᵀX + λI)⁻¹ XᵀT Uᵀ (``dpstream.algorithms.ssp``, ``link="softmax"``).

Sensitivity of XᵀT (the neighbouring relation is the algorithm's, over rows): one row contributes
x tᵀ with ‖x tᵀ‖_F = ‖x‖‖t‖ ≤ B_x sqrt(1 − 1/K) after row clipping, so replacing one row changes XᵀT by
at most 2 B_x sqrt(1 − 1/K) in Frobenius norm (zero-out: B_x sqrt(1 − 1/K)): a binary Xᵀy with labels
bounded by sqrt(1 − 1/K) < 1, released as K − 1 columns. At K = 2 this is exactly the binary PASS-GLM
classifier θ = 2(XᵀX)⁻¹Xᵀs (s = ±1) with the same noise, so nothing is lost against the binary model;
one-vs-rest with ε/K per class (diffprivlib) spends K releases of XᵀX instead of one.

Statistics are computed with NumPy on the host (a CuPy backend is accepted and transfers the block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.special import logsumexp, softmax

from dpstream.backend import array_module, to_host
from dpstream.models.clipping import clip_factors
from dpstream.models.glm import _cumulative_counts
from dpstream.models.moments import block_ssp_weights, moment_sums
from dpstream.models.stats import BatchStats, StatsRequest
from dpstream.models.users import not_combined

__all__ = ["MultinomialLogisticModel", "contrast_basis"]


def contrast_basis(num_classes: int) -> np.ndarray:
    """U ∈ R^{K×(K−1)}: orthonormal columns spanning the vectors that sum to 0 (Helmert contrasts), so
    UUᵀ = I − 11ᵀ/K and every row has norm sqrt(1 − 1/K)."""
    basis = np.zeros((num_classes, num_classes - 1))
    for column in range(1, num_classes):
        basis[:column, column - 1] = 1.0
        basis[column, column - 1] = -float(column)
        basis[:, column - 1] /= math.sqrt(column * (column + 1))
    return basis


@dataclass(frozen=True)
class MultinomialLogisticModel:
    num_classes: int = 3
    backend: str = "numpy"
    name: ClassVar[str] = "logistic"
    supports_moments: ClassVar[bool] = True
    curvature: ClassVar[float] = 0.5  # λ_max(diag(p) − ppᵀ) ≤ 1/2
    link: ClassVar[str] = "softmax"

    def __post_init__(self) -> None:
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, (int, np.integer)):
            raise ValueError(f"num_classes must be an integer ≥ 3, got {self.num_classes!r}")
        if self.num_classes < 3:
            raise ValueError(
                f"num_classes must be ≥ 3, got {self.num_classes}; two classes use LogisticRegressionModel"
            )
        array_module(self.backend)

    @property
    def outputs(self) -> int:
        return int(self.num_classes)

    @property
    def target_bound(self) -> float:
        """‖t_c‖ = sqrt(1 − 1/K): the norm of every class's contrast vector (module docstring)."""
        return math.sqrt(1.0 - 1.0 / self.num_classes)

    def num_params(self, num_features: int) -> int:
        return num_features * self.num_classes

    def init_params(self, num_features: int) -> np.ndarray:
        return np.zeros(self.num_params(num_features))

    def weights(self, params: np.ndarray, num_features: int) -> np.ndarray:
        return np.asarray(params, dtype=np.float64).reshape(num_features, self.num_classes)

    def predict_margin(self, X: np.ndarray, params: np.ndarray) -> np.ndarray:
        """(rows, K) margins Wᵀx."""
        X = np.asarray(X)
        return X @ self.weights(params, X.shape[1]).astype(X.dtype, copy=False)

    def probabilities(self, margins: np.ndarray) -> np.ndarray:
        return softmax(np.asarray(margins, dtype=np.float64), axis=1)

    def targets(self, y: Any) -> np.ndarray:
        """Class indices 0..K−1 from a block's label column; anything else is refused (the lake's label
        contract, checked by ``dpstream validate`` before any release)."""
        labels = np.asarray(to_host(y), dtype=np.float64)
        indices = labels.astype(np.int64)
        bad = (indices != labels) | (indices < 0) | (indices >= self.num_classes)
        if bad.any():
            raise ValueError(
                f"label {float(labels[int(np.argmax(bad))])!r} is not a class index 0..{self.num_classes - 1}; "
                "a K-class model reads each label as its position in the public class list"
            )
        return indices

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        margins = np.asarray(margins, dtype=np.float64)
        return self._loss(margins, self.targets(y))

    @staticmethod
    def _loss(margins: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """φ(m, c) = log Σ_k e^{m_k} − m_c for checked class indices."""
        return logsumexp(margins, axis=1) - margins[np.arange(len(indices)), indices]

    def _derivatives(self, margins: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """∂φ/∂m = p − e_c, (rows, K)."""
        derivatives = self.probabilities(margins)
        derivatives[np.arange(len(indices)), indices] -= 1.0
        return derivatives

    def block_stats(
        self, X: np.ndarray, y: np.ndarray, request: StatsRequest, role: str = "gradient", users: Any = None
    ) -> BatchStats:
        """The block's clipped statistics (module docstring); merged across blocks with ``BatchStats.merge``.
        ``users``: the user unit's combination of a user's rows (AdaSSP's statistics only, as the GLMs)."""
        if users is not None and request.kind != "moments":
            raise ValueError(
                not_combined("the multi-class model's gradient (it trains on AdaSSP's statistics)")
            )
        if role not in ("gradient", "stat"):
            raise ValueError(f"role must be 'gradient' or 'stat', got {role!r}")
        X = np.asarray(to_host(X))
        X = X.astype(X.dtype if X.dtype in (np.float32, np.float64) else np.float64, copy=False)
        indices = self.targets(y)
        if X.ndim != 2 or indices.shape != (X.shape[0],):
            raise ValueError(
                f"expected X of shape (rows, features) and y of shape (rows,), got {X.shape} and {indices.shape}"
            )
        num_features = X.shape[1]
        if request.kind == "moments":
            contrasts = contrast_basis(self.num_classes)[indices]
            weights = None if users is None else block_ssp_weights(X, users, request.row_norm_bound)[0]
            gram, moment, clipped = moment_sums(
                X, contrasts, request.row_norm_bound, request.label_bound, weights=weights
            )
            return BatchStats(
                clipped_sums=np.zeros((len(request.clip_norms), self.num_params(num_features))),
                row_count=X.shape[0],
                clipped_rows=np.full(len(request.clip_norms), clipped, dtype=np.int64),
                gram=gram,
                moment=moment,
            )
        stats = BatchStats.zeros(
            len(request.clip_norms),
            self.num_params(num_features),
            None if role == "gradient" else len(request.thresholds),
        )
        stats.row_count = X.shape[0]
        X64 = X.astype(np.float64, copy=False)
        margins = X64 @ self.weights(request.params, num_features)
        scalars = self._derivatives(margins, indices)
        stats.loss_sum += float(self._loss(margins, indices).sum())
        if request.previous_params is not None and request.previous_weight != 0.0:
            previous = self._derivatives(X64 @ self.weights(request.previous_params, num_features), indices)
            # SRGD's η_t φ'(m_t) − η_{t−1} φ'(m_{t−1}) in the cancellation-safe form of dpstream.models.glm
            scalars = (
                request.weight * (scalars - previous) + (request.weight - request.previous_weight) * previous
            )
        elif request.weight != 1.0:
            scalars = request.weight * scalars
        gradient_norms = np.linalg.norm(scalars, axis=1) * np.linalg.norm(X64, axis=1)
        if role == "stat":
            if request.statistic != "gradient_norm":
                raise ValueError(
                    "a K-class model has no scalar residual; DP-STAT uses statistic='gradient_norm'"
                )
            stats.histogram += _cumulative_counts(gradient_norms, request.thresholds)
            return stats
        factors = clip_factors(gradient_norms, request.clip_norms)
        for k in range(len(request.clip_norms)):
            stats.clipped_sums[k] += (X64.T @ (scalars * factors[:, k : k + 1])).ravel()
        stats.clipped_rows += (factors < 1.0).sum(axis=0)
        return stats
