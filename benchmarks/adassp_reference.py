"""An independent AdaSSP, written from Wang (2018), Algorithm 2, as the benchmarks' baseline.

It shares nothing with ``dpstream.algorithms.ssp`` but the exact GDP calibration (μ from (ε, δ)):
rows [x, 1] with x mapped onto [−1, 1] by public bounds and clipped to ‖·‖ ≤ B = sqrt(d + 1), labels
mapped onto [−1, 1] (classification: ±1), and with the budget split μ² = (0.1, 0.6, 0.3)·μ² over

    λ̃_min = max(0, λ_min(XᵀX) + σ_λ·z − σ_λ·sqrt(2 ln(1/ρ))),        σ_λ = B² / μ_λ,
    λ = max(0, σ_G·sqrt(d ln(2d²/ρ)) − λ̃_min),                       σ_G = √2·B² / μ_G,
    θ = (XᵀX + E + λI)⁻¹ (Xᵀy + e),                                   σ_v = 2·B / μ_v,

E symmetric with N(0, σ_G²) upper-triangle entries (replace-one sensitivities), ρ = 0.05. The solve
is Wang's plain ridge with the intercept penalised like every other weight, and no PSD projection: the
textbook algorithm, against which dpstream's variant (PSD projection, centred regression intercept,
label-mean fallback) is measured. Classification is least squares on ±1 labels (sign of the margin).
"""

from __future__ import annotations

import math

import numpy as np

from dpstream.privacy import mu_for_epsilon_delta

BUDGET_SPLIT = (0.1, 0.6, 0.3)
RHO = 0.05


def fit(
    rows: np.ndarray, labels: np.ndarray, epsilon: float, delta: float, rng: np.random.Generator
) -> np.ndarray:
    """θ over [x, 1] from rows already on [−1, 1] and labels on [−1, 1]."""
    Z = np.hstack([rows, np.ones((len(rows), 1))])
    dim = Z.shape[1]
    bound = math.sqrt(dim)
    Z = Z * np.minimum(1.0, bound / np.maximum(np.linalg.norm(Z, axis=1), 1e-300))[:, None]
    labels = np.clip(labels, -1.0, 1.0)
    mu = mu_for_epsilon_delta(epsilon, delta)
    eigen_std, gram_std, moment_std = (
        sensitivity / (mu * math.sqrt(share))
        for sensitivity, share in zip(
            (bound**2, math.sqrt(2) * bound**2, 2 * bound), BUDGET_SPLIT, strict=True
        )
    )
    gram = Z.T @ Z
    smallest = max(
        0.0,
        np.linalg.eigvalsh(gram)[0]
        + eigen_std * rng.standard_normal()
        - eigen_std * math.sqrt(2 * math.log(1 / RHO)),
    )
    ridge = max(0.0, gram_std * math.sqrt(dim * math.log(2 * dim * dim / RHO)) - smallest)
    noise = np.zeros((dim, dim))
    noise[np.triu_indices(dim)] = gram_std * rng.standard_normal(dim * (dim + 1) // 2)
    noise = noise + np.triu(noise, 1).T
    moment = Z.T @ labels + moment_std * rng.standard_normal(dim)
    return np.linalg.solve(gram + noise + ridge * np.eye(dim), moment)


def predict(theta: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return rows @ theta[:-1] + theta[-1]
