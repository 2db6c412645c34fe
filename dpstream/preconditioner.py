"""A private preconditioner: centre and whiten the rows from one noisy second-moment release.

The iterative algorithms step along the gradient of the mean loss, whose curvature on the public scale
is E[xxᵀ] (squared loss; L·E[xxᵀ] in general). There the columns are uncentred (one eigenvalue near
d/2, along the mean) and correlated, and the stable step 1/(L·R²) is set by the worst row: a step that
cannot grow past the largest eigenvalue and a condition number κ that needs κ·log N steps, which a
single pass of DP-AMBSSGD (4 ln N steps) does not have. Whitening makes E[zzᵀ] close to the identity,
so the same steps go much further.

The release (one Gaussian mechanism, the same as AdaSSP's XᵀX: Wang, "Revisiting differentially private
linear regression: optimal and adaptive prediction & estimation in unbounded domain", arXiv:1803.02596,
Alg. 2): over the model rows x = (x₁..x_q, 1) on the public scale, ‖x‖² ≤ d = q + 1,

    G̃ = Σ w_i x_i x_iᵀ + E,   E symmetric with N(0, σ²) upper-triangle entries, σ = Δ / μ_pre,

with w_i = 1 (rows) or AdaSSP's person weight w_u = min(1, √d / Σ_u‖x_i‖) (``dpstream.models.moments``,
``dpstream.models.users.ssp_user_weights``), so each contribution is a PSD matrix of Frobenius norm
≤ d: Δ = √2·d replace-one (‖A − B‖²_F ≤ ‖A‖² + ‖B‖² for PSD A, B) and d zero-out. Everything below
is post-processing of G̃ and the public count N:

    m̃ = G̃[:q, q] / N                        (the noisy column means)
    C̃ = G̃[:q, :q] / N − m̃ m̃ᵀ              (the noisy covariance)
    P = V diag(max(λ_j, τ))^{-1/2} Vᵀ         (C̃ = V diag(λ) Vᵀ; τ = 2σ√q / N, the noise's spectral
                                                scale, so pure-noise directions are not blown up)
    z = clip((x − m̃) P / s, −1, 1)             (s, the spread, declared by the algorithm: whitened
                                                columns have unit variance, so coordinates beyond s
                                                standard deviations are clipped; rows stay in the box
                                                [−1, 1]^q)

The algorithm trains on (z, 1), whose row norm bound is still √d, so every clip norm and sensitivity
of the algorithm holds unchanged. An algorithm with a step size (DP-AMBSSGD) defaults to 1/(L·λ̃) with
λ̃ = max(1, λ_max(Tᵀ G̃ T / N)), T the map (x, 1) ↦ (z, 1) without the clip: the curvature the whitened
rows show through the release, at least the intercept's 1 (a DP value; with s ≥ 1.5 the intercept's 1
is the largest, so the step is 1/L). A model w on (z, 1) is, on the public scale, weights P w / s and
intercept b − m̃ᵀ P w / s (``Whitening.unmap``): the published model, linear in the features, which the
release guard judges (``dpstream.estimators.preconditioning``); the training clip at s is not applied
at prediction. At s = 1.5 most rows have a clipped coordinate, so the published model differs from
the one trained on clipped rows; on the suite's real sets it predicted as well or better, and the guard
keeps it from losing to the constant.

When: the estimators make the release only where τ ≤ ``MAX_NOISE_FLOOR`` at the release's μ (public:
N, d, ε, δ): with fewer rows per input the noisy covariance is mostly noise and the share is lost.

What it buys (``python -m benchmarks.preconditioner``, BENCHMARKS.md "A private preconditioner"):
DP-AMBSSGD gains most, Accelerated-DP-SRGD a little; DP-SGD with λ-correlated noise lost a little, and
is not preconditioned (``AlgorithmDeclaration.whitening_spread``, with each algorithm's measured spread).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpstream.models.moments import block_ssp_weights, moment_sums
from dpstream.noise import NoiseKey, gaussian, symmetric_noise
from dpstream.privacy import GaussianEvent, NeighbouringRelation

__all__ = [
    "MAX_NOISE_FLOOR",
    "PRECONDITIONER_SHARE",
    "Whitening",
    "noise_floor",
    "release_whitening",
    "whitens_at",
    "worth_releasing",
]

PRECONDITIONER_SHARE = 0.1  # of the fit's μ²; 0.1 and 0.2 measured alike, BENCHMARKS.md
# The largest noise floor τ at which the release is made: measured gains at τ ≤ 0.27 on the suite's
# regression sets, losses from τ = 0.67 (BENCHMARKS.md "A private preconditioner")
MAX_NOISE_FLOOR = 0.3
NOISE_STREAM = "preconditioner-gram"


@dataclass(frozen=True)
class Whitening:
    """The released preconditioner: z = clip((x − centre) · transform / spread, −1, 1) (module docstring).
    All fields are DP outputs."""

    centre: np.ndarray  # m̃, (q,)
    transform: np.ndarray  # P, (q, q), symmetric
    curvature: float  # λ̃ ≥ 1: the whitened rows' noisy largest eigenvalue, intercept included
    event: GaussianEvent
    spread: float

    def apply(self, block: np.ndarray) -> np.ndarray:
        """A block of feature rows on the public scale (no intercept column), whitened into [−1, 1]."""
        whitened = (block - self.centre) @ self.transform / self.spread
        return np.clip(whitened, -1.0, 1.0).astype(block.dtype, copy=False)

    def unmap(self, weights: np.ndarray, intercept: float) -> tuple[np.ndarray, float]:
        """(weights, intercept) on the public scale of a linear model trained on whitened rows."""
        scaled = self.transform @ np.asarray(weights, dtype=np.float64) / self.spread
        return scaled, float(intercept) - float(scaled @ self.centre)


def noise_floor(dim: int, contributions: int, mu: float, relation: NeighbouringRelation) -> float:
    """τ = 2σ·sqrt(q)/N: the spectral scale of the release's noise in E[xxᵀ] (σ = Δ/μ, Δ the second
    moment's sensitivity for ‖x‖ ≤ √dim, q = dim − 1 features), below which the noisy covariance's
    eigenvalues are not told from noise. Public."""
    sensitivity = relation.gram_sensitivity(math.sqrt(dim))
    return 2.0 * sensitivity / mu * math.sqrt(dim - 1) / max(contributions, 1)


def worth_releasing(dim: int, contributions: int, mu: float, relation: NeighbouringRelation) -> bool:
    """Whether the release at ``mu`` resolves the covariance of rows on [−1, 1] (τ ≤ ``MAX_NOISE_FLOOR``;
    a column's variance there is at most 1, typically 0.05–0.3): decided from public quantities."""
    return dim > 1 and noise_floor(dim, contributions, mu, relation) <= MAX_NOISE_FLOOR


def whitens_at(dim: int, contributions: int, fit_mu: float, relation: NeighbouringRelation) -> bool:
    """``worth_releasing`` at the release's share of a fit at ``fit_mu``: whether that fit is whitened
    (the estimators' rule, and the one "auto" reads: ``dpstream.algorithms.choice``)."""
    return worth_releasing(dim, contributions, math.sqrt(PRECONDITIONER_SHARE) * fit_mu, relation)


def release_whitening(
    blocks: Iterable[tuple[np.ndarray, ...]],
    contributions: int,
    mu: float,
    relation: NeighbouringRelation,
    key: NoiseKey,
    spread: float,
) -> Whitening:
    """The preconditioner released at ``mu`` from ``blocks`` of model rows (the intercept column last,
    the targets second, a block's user codes third under the user unit), mapping ``spread`` whitened
    standard deviations onto [−1, 1]; ``contributions`` is N."""
    gram = None
    for rows, targets, *users in blocks:
        # AdaSSP's statistics: rows clipped to ‖x‖ ≤ √d (on the public scale they already are), a person's
        # rows weighted as one row's bounds allow; the label moment is not used
        rows, bound = np.asarray(rows, dtype=np.float64), math.sqrt(rows.shape[1])
        weights = block_ssp_weights(rows, users[0], bound)[0] if users else None
        block_gram, _, _ = moment_sums(
            rows, np.asarray(targets, dtype=np.float64), bound, 1.0, weights=weights
        )
        gram = block_gram if gram is None else gram + block_gram
    if gram is None:
        raise ValueError("the preconditioner needs at least one row")
    dim = gram.shape[0]
    sensitivity = relation.gram_sensitivity(math.sqrt(dim))
    std = sensitivity / mu
    draws = gaussian(key, 0, NOISE_STREAM, dim * (dim + 1) // 2)
    noisy = (gram + std * symmetric_noise(draws, dim)) / max(contributions, 1)
    event = GaussianEvent(sensitivity, std, relation, "private preconditioner: second moment of the rows")
    return _whitening(noisy, noise_floor(dim, contributions, mu, relation), event, spread)


def _whitening(moment: np.ndarray, floor: float, event: GaussianEvent, spread: float) -> Whitening:
    """The preconditioner from the noisy E[xxᵀ] ``moment`` (intercept last), eigenvalues floored at ``floor``."""
    features = moment.shape[0] - 1
    centre = moment[:features, features]
    covariance = moment[:features, :features] - np.outer(centre, centre)
    eigenvalues, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
    floor = max(floor, 1e-12, 1e-9 * float(eigenvalues.max(initial=0.0)))
    transform = (vectors / np.sqrt(np.maximum(eigenvalues, floor))) @ vectors.T
    to_whitened = np.zeros_like(moment)  # T: (x, 1) ↦ ((x − m̃) P / s, 1), row vectors on the left
    to_whitened[:features, :features] = transform / spread
    to_whitened[features, :features] = -centre @ transform / spread
    to_whitened[features, features] = 1.0
    curvature = float(np.linalg.eigvalsh(to_whitened.T @ moment @ to_whitened)[-1])
    return Whitening(centre, transform, max(curvature, 1.0), event, spread)
