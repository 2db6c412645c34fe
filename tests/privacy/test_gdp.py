"""Exact Gaussian-DP curve: reference numbers (dp_accounting 0.6.0's PLD accountant, the analytic Gaussian
mechanism, the papers' zCDP conversions) and numerical properties."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.privacy import gdp


@pytest.mark.parametrize(
    "mu, delta, expected",
    [
        (1.0, 1e-5, 4.377178),  # Δ = 1, σ = 1, one Gaussian release (also dp_accounting's PLD)
        (2.0, 1e-5, 9.997256),  # replace-one doubles Δ (σ = 0.5)
        (1 / 2, 1e-5, 1.9931),
        (1 / 3, 1e-5, 1.2711),
        (1 / 4, 1e-5, 0.9263),
        (1 / 8, 1e-5, 0.4344),
        (1 / 10, 1e-5, 0.3407),
        (math.sqrt(10), 1e-5, 17.857),  # 10 composed Gaussians, or a binary tree over T = 1000
        (math.sqrt(10) / 3, 1e-5, 4.653),
        (math.sqrt(10) / 5, 1e-5, 2.594),
    ],
)
def test_epsilon_matches_reference_numbers(mu, delta, expected):
    decimals = len(repr(expected).split(".")[1])
    assert gdp.epsilon_for_delta(delta, mu) == pytest.approx(expected, abs=0.6 * 10**-decimals)


@pytest.mark.parametrize(
    "epsilon, sigma",
    [(0.5, 7.0318), (1.0, 3.7306), (2.0, 1.9938), (4.0, 1.0812), (8.0, 0.6002)],
)
def test_noise_needed_for_target_epsilon(epsilon, sigma):
    # σ needed at δ = 1e-5 for Δ = 1 (one pass, each record in one batch: a single Gaussian).
    noise_multiplier = 1.0 / gdp.mu_for_epsilon_delta(epsilon, 1e-5)
    assert noise_multiplier == pytest.approx(sigma, abs=6e-5)


def test_exact_is_tighter_than_rdp_on_dp_accounting_vector():
    # dp_accounting's own RDP test asserts σ = 4.530877117 gives ε = 1 at δ = 1e-6.
    # The exact curve certifies less for the same noise; RDP is an upper bound on it.
    import dp_accounting

    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.GaussianDpEvent(4.530877117))
    assert rdp.get_epsilon(1e-6) == pytest.approx(1.0, abs=1e-6)
    exact = gdp.epsilon_for_delta(1e-6, 1 / 4.530877117)
    assert exact == pytest.approx(0.927392, abs=1e-6)
    assert exact < rdp.get_epsilon(1e-6)


def test_delta_closed_form_against_direct_evaluation():
    from scipy.stats import norm

    for mu, epsilon in [(0.3, 0.1), (1.0, 2.0), (3.0, 5.0)]:
        direct = norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2)
        assert gdp.delta_for_epsilon(epsilon, mu) == pytest.approx(direct, rel=1e-12)


def test_stable_at_extremes():
    # ε up to 100 and δ down to 1e-15: no NaN, no zero, exact round trips.
    for epsilon in [1e-3, 1.0, 10.0, 50.0, 100.0]:
        for delta in [1e-15, 1e-12, 1e-9, 1e-6, 1e-3]:
            mu = gdp.mu_for_epsilon_delta(epsilon, delta)
            assert math.isfinite(mu) and mu > 0
            assert gdp.delta_for_epsilon(epsilon, mu) == pytest.approx(delta, rel=1e-9)
            assert gdp.epsilon_for_delta(delta, mu) == pytest.approx(epsilon, rel=1e-9)


def test_delta_underflow_region_is_log_accurate():
    # At ε = 100, μ = 8.32 the two terms of δ cancel to ~1e-15: the log-space form keeps 9 digits.
    mu = gdp.mu_for_epsilon_delta(100.0, 1e-15)
    assert gdp.log_delta_for_epsilon(100.0, mu) == pytest.approx(math.log(1e-15), rel=1e-12)


def test_composition_and_zcdp_conversions():
    assert gdp.compose_mu(3.0, 4.0) == pytest.approx(5.0)
    assert gdp.rho_from_mu(1.0) == 0.5
    assert gdp.mu_from_rho(gdp.rho_from_mu(0.37)) == pytest.approx(0.37)
    # Bun–Steinke Prop. 1.3, and the App. A.2 conversion of Choquette-Choo et al. (arXiv:2310.06771).
    for rho, delta, bun_steinke, app_a2 in [
        (0.1, 1e-5, 2.2460, 1.9142),
        (0.5, 1e-5, 5.2985, 4.7284),
        (1.0, 1e-5, 7.7861, 7.0772),
        (2.0, 1e-6, 12.5130, 11.6886),
    ]:
        assert gdp.zcdp_epsilon_bun_steinke(rho, delta) == pytest.approx(bun_steinke, abs=6e-5)
        assert gdp.zcdp_epsilon(rho, delta) == pytest.approx(app_a2, abs=6e-5)
        # Exact GDP of the same Gaussian is never worse than either zCDP conversion.
        assert gdp.epsilon_for_delta(delta, gdp.mu_from_rho(rho)) < app_a2


@pytest.mark.parametrize(
    "epsilon, delta, alpha",
    [(1, 1e-5, 6.930), (1, 1e-6, 7.566), (0.5, 1e-6, 15.001), (2, 1e-5, 3.535), (8, 1e-5, 0.976)],
)
def test_zcdp_alpha_of_dp_ambssgd(epsilon, delta, alpha):
    # Varshney et al. (arXiv:2207.04686, Thm 3.6) through Bun–Steinke: α_exact = 1/sqrt(ρ), with
    # ρ + 2 sqrt(ρ L) = ε exactly (docs/design.md, note A6).
    rho = gdp.zcdp_rho_for_epsilon(epsilon, delta)
    alpha_from_rho = 1 / math.sqrt(rho)
    assert alpha_from_rho == pytest.approx(alpha, abs=6e-4)
    assert gdp.zcdp_epsilon_bun_steinke(rho, delta) == pytest.approx(epsilon, rel=1e-12)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_rejects_bad_mu(bad):
    with pytest.raises(ValueError, match="mu"):
        gdp.epsilon_for_delta(1e-5, bad)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 2.0, float("nan")])
def test_rejects_bad_delta(bad):
    with pytest.raises(ValueError, match="delta"):
        gdp.mu_for_epsilon_delta(1.0, bad)


def test_huge_mu_still_finite():
    # No privacy to speak of, but the curve is still evaluated rather than extrapolated:
    # ε ≈ μ²/2 + μ·sqrt(2 ln(1/δ)) to leading order.
    epsilon = gdp.epsilon_for_delta(1e-300, 400.0)
    assert math.isfinite(epsilon)
    assert 80_000 < epsilon < 80_000 + 400 * math.sqrt(2 * math.log(1e300)) + 10


@settings(max_examples=200, deadline=None)
@given(
    epsilon=st.floats(1e-3, 100.0),
    log10_delta=st.floats(-15.0, -1.0),
)
def test_round_trip_property(epsilon, log10_delta):
    delta = 10.0**log10_delta
    mu = gdp.mu_for_epsilon_delta(epsilon, delta)
    assert gdp.epsilon_for_delta(delta, mu) == pytest.approx(epsilon, rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    mu=st.floats(0.01, 20.0),
    epsilon=st.floats(0.0, 50.0),
    bump=st.floats(1e-3, 1.0),
)
def test_monotonicity_property(mu, epsilon, bump):
    # δ falls as ε grows, and rises as μ grows (more distinguishable).
    d = gdp.delta_for_epsilon(epsilon, mu)
    assert gdp.delta_for_epsilon(epsilon + bump, mu) <= d
    assert gdp.delta_for_epsilon(epsilon, mu * (1 + bump)) >= d
    assert 0.0 <= d <= 1.0
