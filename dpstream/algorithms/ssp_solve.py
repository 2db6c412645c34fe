"""AdaSSP's post-processing (``dpstream.algorithms.ssp``): the model from the noisy release of XᵀX + E, Xᵀy
+ noise and the ridge λ. Everything here reads the noisy values and public quantities only.

``ridge_solve`` is (P(A) + λI)⁻¹b, P the projection onto the positive semidefinite cone, the eigenvalues
of the sum raised to at least σ_G (the reasons are in the ``ssp`` module docstring).

Intercept (``intercept_index`` = k, the column holding the public constant 1). In regression the ridge
is not applied to the intercept, as in scikit-learn's Ridge: with the noisy column sums
s = (XᵀX)_{·k}, the noisy label sum m = (Xᵀy)_k and the public N, the features are centred,
C = (XᵀX)_{−k,−k} − s sᵀ/N and c = (Xᵀy)_{−k} − s m/N, then w = (C + λI)⁻¹c and b = (m − sᵀw)/N.
Post-processing again; with a large λ the model tends to the noisy label mean, the constant predictor,
instead of to 0. λ_min(XᵀX) is a lower bound on λ_min(C) (the Schur complement: vᵀ(XᵀX)v ≤ uᵀCu for
v = (u, −sᵀu/N)/‖·‖), so the ridge rule stays conservative.

In classification the intercept is penalised like every other coefficient (Wang's plain system). A
classifier is the sign of the margin: where the ridge outweighs XᵀX, θ ≈ Xᵀy/λ, the direction of the
class-mean difference with the intercept shrunk by the same factor, a sound nearest-centroid rule. An
unpenalised intercept would stay at the label mean while the ridge shrinks the weights, and the classifier
would predict the majority class: measured on the 2016 CCES survey (30,072 training rows, 76 features,
ε = 1, 21 fits) held-out accuracy 0.790 median and 0.716 at the 10th percentile centred, 0.889 and 0.887
penalised (non-private logistic regression 0.895); on the Watson churn table (5,625 rows, 40 features)
0.765 / 0.744 centred, 0.788 / 0.780 penalised (BENCHMARKS.md, "Real data in its own units").

Classification (``link="logistic"``): labels y ∈ {−1, +1}; the degree-2 approximation of the logistic
loss at 0, log(1 + e^{−ym}) ≈ log 2 − ym/2 + m²/8 (PASS-GLM, Huggins et al. 2017, with the Taylor
coefficients), has the minimiser 2·(XᵀX)⁻¹Xᵀy, so the same statistics give the classifier θ = 2·θ_LS.

K classes (``link="softmax"``): W = K·(P(XᵀX + E) + λI)⁻¹(XᵀT + noise)Uᵀ, flattened row-major, with the
contrast basis U (``dpstream.models.multinomial``); with an intercept column and enough rows per class
(``AdaSSP.uses_discriminants``), linear discriminant analysis from the same release instead
(``discriminants``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpstream.models.multinomial import contrast_basis

__all__ = ["model", "solve", "ridge_solve", "penalised_system", "discriminants"]


def model(algorithm: Any, gram: np.ndarray, moment: np.ndarray, ridge: float, plan: Any) -> np.ndarray:
    """The parameters ``algorithm`` (an ``AdaSSP``) returns from its noisy release under ``plan``: LDA for K
    classes where it ``uses_discriminants``, else the ridge solution (``solve``), times 2 for the logistic
    link and mapped to the K classes' weights W = K·θUᵀ for the softmax."""
    if algorithm.uses_discriminants(plan):
        return discriminants(
            gram,
            moment,
            ridge,
            plan.gram_std,
            algorithm.intercept_index,
            algorithm.num_classes,
            algorithm.count(gram, plan),
            max(1.0, plan.moment_std),
        )
    params = solve(algorithm, gram, moment, ridge, plan)
    if algorithm.link == "logistic":
        return 2.0 * params
    if algorithm.link == "softmax" and params.ndim == 2:
        return (algorithm.num_classes * params @ contrast_basis(algorithm.num_classes).T).ravel()
    return params


def solve(algorithm: Any, gram: np.ndarray, moment: np.ndarray, ridge: float, plan: Any) -> np.ndarray:
    """The ridge solution from the noisy statistics: (P(XᵀX + E) + λI)⁻¹(Xᵀy + noise), or in regression
    with an intercept w = (C + λI)⁻¹c on the centred system and b = (m − sᵀw)/N (module docstring)."""
    if not algorithm.centres:
        return ridge_solve(gram, moment, ridge, plan.gram_std)
    k, count = algorithm.intercept_index, algorithm.count(gram, plan)
    params = np.zeros(plan.num_params)
    if algorithm.unit.is_user and algorithm.noise_bound(plan.gram_std, plan.num_params) > count:
        # The plan's λ₀ > N rule, on the users' weighted count (known only after the release, so applied
        # here as post-processing): the noise outweighs the data, predict the weighted label mean.
        params[k] = moment[k] / count
        return params
    rest, sums, matrix = penalised_system(gram, k, count)
    weights = ridge_solve(matrix, moment[rest] - sums * moment[k] / count, ridge, plan.gram_std)
    params[rest], params[k] = weights, (moment[k] - sums @ weights) / count
    return params


def ridge_solve(matrix: np.ndarray, vector: np.ndarray, ridge: float, floor: float) -> np.ndarray:
    """(P(matrix) + ridge·I)⁻¹·vector: P sets the symmetric matrix's negative eigenvalues to 0, and the
    eigenvalues of the sum are raised to at least ``floor``."""
    values, vectors = np.linalg.eigh(matrix)
    scale = np.maximum(np.maximum(values, 0.0) + ridge, floor)
    return vectors @ ((vectors.T @ vector) / (scale if np.ndim(vector) == 1 else scale[:, None]))


def penalised_system(
    gram: np.ndarray, intercept_index: int | None, count: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(penalised columns, their sums with the intercept column, the matrix the ridge is added to): all of
    XᵀX where ``intercept_index`` is None (no intercept, or classification); else the centred
    C = (XᵀX)_{−k,−k} − s sᵀ/N with N = ``count``."""
    dim = gram.shape[0]
    if intercept_index is None:
        return np.arange(dim), np.zeros(dim), gram
    rest = np.delete(np.arange(dim), intercept_index)
    sums = gram[rest, intercept_index]
    return rest, sums, gram[np.ix_(rest, rest)] - np.outer(sums, sums) / count


def discriminants(
    gram: np.ndarray,
    contrasts: np.ndarray,
    ridge: float,
    floor: float,
    intercept_index: int,
    num_classes: int,
    count: float,
    count_floor: float,
) -> np.ndarray:
    """Linear discriminant analysis from the noisy release (Hastie et al., ESL §4.3): with the intercept
    column k, XᵀY = XᵀT Uᵀ + (Xᵀ1)1ᵀ/K (one-hot rows sum to 1, Xᵀ1 = the noisy (XᵀX)_{·k}); row k of XᵀY
    holds the class counts N_c (floored at ``count_floor``), the others the class sums S_c, so
    μ_c = S_c/N_c and N·Σ_W = (XᵀX)_{−k,−k} − Σ_c S_c S_cᵀ/N_c, with N = ``count``. The discriminant of
    class c is N·xᵀ(NΣ_W + λI)⁻¹μ_c − ½N·μ_cᵀ(NΣ_W + λI)⁻¹μ_c + log(N_c/ΣN), the ridge λ and the PSD
    projection applied as in ``ridge_solve``. Unlike the quadratic surrogate it does not mask classes
    whose mean lies between others' (an ordinal grade's middle levels). Returns the (d, K) weights
    flattened row-major."""
    k, classes = intercept_index, num_classes
    moment = contrasts @ contrast_basis(classes).T + np.outer(gram[:, k], np.ones(classes)) / classes
    rest = np.delete(np.arange(gram.shape[0]), k)
    counts = np.maximum(moment[k], count_floor)
    sums = moment[rest]
    means = sums / counts
    within = gram[np.ix_(rest, rest)] - means @ sums.T
    directions = count * ridge_solve(within, means, ridge, floor)
    params = np.empty((gram.shape[0], classes))
    params[rest] = directions
    params[k] = -0.5 * np.sum(means * directions, axis=0) + np.log(counts / counts.sum())
    return params.ravel()
