"""Exact Gaussian differential privacy (μ-GDP) and its conversions.

A mechanism is μ-GDP (Dong, Roth & Su 2022, "Gaussian Differential Privacy", Def. 2.6) when
distinguishing neighbours is no easier than telling N(0, 1) from N(μ, 1). A Gaussian mechanism with
L2 sensitivity Δ and noise standard deviation s is exactly μ-GDP with μ = Δ / s, and μ-GDP is
*equivalent* to (ε, δ(ε))-DP for every ε ≥ 0 with (Dong et al. Cor. 2.13; Balle & Wang 2018, Thm. 8)

    δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε · Φ(−ε/μ − μ/2).

Composition of μ_i-GDP mechanisms is exactly sqrt(Σ μ_i²)-GDP (Dong et al. Cor. 3.3), and a
Gaussian mechanism is ρ-zCDP with ρ = μ²/2 (Bun & Steinke 2016, Prop. 1.6), which is how the
papers' zCDP statements map onto this module.

Numerics: both terms of δ(ε) are evaluated in log space with ``scipy.special.log_ndtr`` and combined as
Φ(a)·(1 − exp(ε + log Φ(b) − log Φ(a))), so the cancellation at large ε (up to 100) and tiny δ (down
to 1e-15) costs no precision. ε(δ) and μ(ε, δ) are found with Brent's method on log δ, which is
monotone in both arguments.
"""

from __future__ import annotations

import math

from scipy.special import log_ndtr

from dpstream.validation import check_positive, check_probability

__all__ = [
    "delta_for_epsilon",
    "epsilon_for_delta",
    "mu_for_epsilon_delta",
    "compose_mu",
    "rho_from_mu",
    "mu_from_rho",
    "zcdp_epsilon",
    "zcdp_epsilon_bun_steinke",
    "zcdp_rho_for_epsilon",
]

# Bracket limits for the root finders: μ above 1e3 means "no privacy" for any meaningful δ, and
# calibrating against such a budget is refused; ε is searched up to 1e12 (μ ≈ 1.4e6).
_MU_MAX = 1e3
_EPSILON_MAX = 1e12
_MU_MIN = 1e-12
_RTOL = 1e-15


def log_delta_for_epsilon(epsilon: float, mu: float) -> float:
    """log δ(ε; μ) for a μ-GDP mechanism (−inf when μ = 0)."""
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    mu = check_positive("mu", mu, allow_zero=True)
    if mu == 0.0:
        return -math.inf
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    log_phi_a = float(log_ndtr(a))
    log_ratio = epsilon + float(log_ndtr(b)) - log_phi_a
    # log_ratio < 0 always (δ > 0); guard the float edge where it rounds to 0.
    if log_ratio >= 0.0:
        return -math.inf
    return log_phi_a + math.log(-math.expm1(log_ratio))


def delta_for_epsilon(epsilon: float, mu: float) -> float:
    """δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), the exact privacy profile of μ-GDP."""
    return math.exp(log_delta_for_epsilon(epsilon, mu))


def epsilon_for_delta(delta: float, mu: float) -> float:
    """The smallest ε ≥ 0 with δ(ε; μ) ≤ δ for a μ-GDP mechanism."""
    delta = check_probability("delta", delta)
    mu = check_positive("mu", mu, allow_zero=True)
    if mu == 0.0:
        return 0.0
    target = math.log(delta)
    if log_delta_for_epsilon(0.0, mu) <= target:
        return 0.0

    def gap(epsilon: float) -> float:
        return log_delta_for_epsilon(epsilon, mu) - target

    upper = max(1.0, mu * mu)
    while gap(upper) > 0.0:
        upper *= 2.0
        if upper > _EPSILON_MAX:
            raise ValueError(
                f"mu={mu:g} gives epsilon above {_EPSILON_MAX:g} at delta={delta:g}: "
                "the release is not private in any meaningful sense; add more noise"
            )
    from scipy.optimize import brentq  # imported here: scipy.optimize adds ~1 s to every CLI start

    return float(brentq(gap, 0.0, upper, xtol=1e-15, rtol=_RTOL, maxiter=500))


def mu_for_epsilon_delta(epsilon: float, delta: float) -> float:
    """The largest μ such that μ-GDP implies (ε, δ)-DP: the inverse of δ(ε; μ) in μ."""
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    delta = check_probability("delta", delta)
    target = math.log(delta)

    def gap(mu: float) -> float:
        return log_delta_for_epsilon(epsilon, mu) - target

    lower, upper = _MU_MIN, 1.0
    if gap(lower) > 0.0:
        raise ValueError(f"no mu > {_MU_MIN:g} achieves (epsilon={epsilon:g}, delta={delta:g})")
    while gap(upper) < 0.0:
        lower, upper = upper, upper * 2.0
        if upper > _MU_MAX:
            raise ValueError(
                f"(epsilon={epsilon:g}, delta={delta:g}) allows mu above {_MU_MAX:g}; "
                "that budget is too loose to calibrate noise against"
            )
    from scipy.optimize import brentq

    return float(brentq(gap, lower, upper, xtol=1e-15, rtol=_RTOL, maxiter=500))


def compose_mu(*mus: float) -> float:
    """Exact composition: μ_1-, …, μ_k-GDP mechanisms together are sqrt(Σ μ_i²)-GDP."""
    return math.sqrt(math.fsum(check_positive("mu", mu, allow_zero=True) ** 2 for mu in mus))


def rho_from_mu(mu: float) -> float:
    """ρ-zCDP of a μ-GDP Gaussian mechanism: ρ = μ²/2 (Bun & Steinke 2016, Prop. 1.6)."""
    return check_positive("mu", mu, allow_zero=True) ** 2 / 2.0


def mu_from_rho(rho: float) -> float:
    """μ of the Gaussian mechanism that is exactly ρ-zCDP: μ = sqrt(2ρ).

    Valid as a GDP statement only for mechanisms that *are* Gaussian (the papers' zCDP claims for
    DP-AMBSSGD, DP-FTRL and the tree mechanism all are); a general ρ-zCDP mechanism is not μ-GDP.
    """
    rho = check_positive("rho", rho, allow_zero=True)
    return math.sqrt(2.0 * rho)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """(ε, δ) from ρ-zCDP by the conversion of Choquette-Choo et al., "Correlated Noise Provably Beats
    Independent Noise", arXiv:2310.06771 (App. A.2, after Balle et al. 2020):

        ε = inf_{α>1}  ρα + log(1/(αδ))/(α−1) + log(1 − 1/α).

    Tighter than Bun–Steinke's ρ + 2 sqrt(ρ log(1/δ)), looser than the exact GDP curve when the
    mechanism is Gaussian. Reported for comparison with the papers; never used for calibration.
    """
    rho = check_positive("rho", rho, allow_zero=True)
    delta = check_probability("delta", delta)
    if rho == 0.0:
        return 0.0

    def bound(alpha: float) -> float:
        return rho * alpha + math.log(1.0 / (alpha * delta)) / (alpha - 1.0) + math.log1p(-1.0 / alpha)

    # The bound is convex in α on (1, ∞); Brent's search over log(α − 1) is plenty.
    alpha_guess = 1.0 + math.sqrt(math.log(1.0 / delta) / rho)
    from scipy.optimize import minimize_scalar

    result = minimize_scalar(
        lambda log_a: bound(1.0 + math.exp(log_a)),
        bracket=(math.log(alpha_guess - 1.0) - 2.0, math.log(alpha_guess - 1.0) + 2.0),
        tol=1e-12,
    )
    return max(0.0, float(result.fun))


def zcdp_epsilon_bun_steinke(rho: float, delta: float) -> float:
    """ε = ρ + 2 sqrt(ρ log(1/δ)) (Bun & Steinke 2016, Prop. 1.3), the conversion of Varshney et al.,
    "Optimal Private Linear Regression via Adaptive Clipping", arXiv:2207.04686."""
    delta = check_probability("delta", delta)
    rho = check_positive("rho", rho, allow_zero=True)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def zcdp_rho_for_epsilon(epsilon: float, delta: float) -> float:
    """Inverse of Bun–Steinke: ρ = (sqrt(log(1/δ) + ε) − sqrt(log(1/δ)))² (Varshney et al.,
    arXiv:2207.04686, Thm 3.6)."""
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    log_inv_delta = math.log(1.0 / check_probability("delta", delta))
    return (epsilon / (math.sqrt(log_inv_delta + epsilon) + math.sqrt(log_inv_delta))) ** 2
