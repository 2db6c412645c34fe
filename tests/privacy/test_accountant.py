"""Events, the exact accountant, calibration, and dp_accounting (PLD) as an independent oracle."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.privacy import (
    ComposedEvent,
    DisjointUnionEvent,
    GaussianEvent,
    GdpAccountant,
    MatrixMechanismEvent,
    NeighbouringRelation,
    PldAccountant,
    PoissonSampledGaussianEvent,
    SelfComposedEvent,
    UnsupportedEventError,
    calibrate_clipped_sum,
    calibrate_gaussian,
    epsilon_for_delta,
)

REPLACE = NeighbouringRelation.REPLACE_ONE
ZERO = NeighbouringRelation.ZERO_OUT


def test_relation_sensitivities():
    assert REPLACE.clipped_sum_sensitivity(1.5) == 3.0
    assert ZERO.clipped_sum_sensitivity(1.5) == 1.5
    assert REPLACE.count_sensitivity() == ZERO.count_sensitivity() == 1.0
    assert NeighbouringRelation.parse("zero_out") is ZERO
    with pytest.raises(ValueError, match="relation must be one of"):
        NeighbouringRelation.parse("add-remove")
    with pytest.raises(ValueError, match="clip_norm"):
        REPLACE.clipped_sum_sensitivity(0.0)


def test_single_gaussian_release_peers_vector():
    accountant = GdpAccountant(ZERO).compose(GaussianEvent(1.0, 1.0, ZERO))
    assert accountant.get_epsilon(1e-5) == pytest.approx(4.377178, abs=1e-6)
    assert accountant.rho == pytest.approx(0.5)


def test_composition_rules():
    g = GaussianEvent(1.0, 2.0)
    assert GdpAccountant().compose(SelfComposedEvent(g, 16)).mu == pytest.approx(2.0)
    assert GdpAccountant().compose(g, count=16).mu == pytest.approx(2.0)
    assert GdpAccountant().compose(ComposedEvent((g, g, g, g))).mu == pytest.approx(1.0)
    # A single pass: each record is in one of the disjoint batches, so the worst batch counts.
    batches = DisjointUnionEvent(tuple(GaussianEvent(1.0, s) for s in (4.0, 2.0, 8.0)))
    assert GdpAccountant().compose(batches).mu == pytest.approx(0.5)


def test_dpstat_plus_gradient_step_matches_the_papers_rho():
    # Varshney et al., "Optimal Private Linear Regression via Adaptive Clipping", arXiv:2207.04686
    # (Lemma 3.10, Thm 3.6; docs/design.md, note A6): K counts with variance Kα² and a step with
    # sensitivity 2ηζ/b, std 2ηζα/b: each half is 1/(2α²)-zCDP, one round 1/α²-zCDP, so μ² = 2/α².
    alpha, K, zeta, b = 7.5, 24, 3.0, 1000
    counts = SelfComposedEvent(GaussianEvent(1.0, math.sqrt(K) * alpha), K)
    step = GaussianEvent(REPLACE.clipped_sum_sensitivity(zeta) / b, 2 * zeta * alpha / b)
    accountant = GdpAccountant().compose(ComposedEvent((counts, step)))
    assert accountant.rho == pytest.approx(1 / alpha**2)


def test_matrix_mechanism_event():
    event = MatrixMechanismEvent(
        row_sensitivity=2.0, noise_std=4.0, max_column_norm=math.sqrt(10), num_steps=1000
    )
    assert event.mu == pytest.approx(math.sqrt(10) / 2)
    assert event.noise_multiplier == pytest.approx(1 / event.mu)


def test_mixed_relations_refused():
    with pytest.raises(ValueError, match="different neighbouring relations"):
        ComposedEvent((GaussianEvent(1, 1, REPLACE), GaussianEvent(1, 1, ZERO)))
    with pytest.raises(ValueError, match="stated under zero-out"):
        GdpAccountant(REPLACE).compose(GaussianEvent(1, 1, ZERO))


def test_gdp_refuses_sampled_events_pld_handles_them():
    event = PoissonSampledGaussianEvent(noise_multiplier=1.0, sampling_rate=0.01, count=1000, relation=ZERO)
    with pytest.raises(UnsupportedEventError, match="PldAccountant"):
        GdpAccountant(ZERO).compose(event)
    # dp_accounting 0.6.0's PLD (pessimistic, grid 1e-4) gives ε = 1.828244 (add/remove ≡ zero-out here).
    assert PldAccountant(ZERO).compose(event).get_epsilon(1e-5) == pytest.approx(1.828244, abs=2e-4)


PLD_GRID = [(ZERO, mu, delta) for mu in (0.1, 0.5, 1.0, 2.5, 5.0) for delta in (1e-10, 1e-6, 1e-3)] + [
    (REPLACE, 0.3, 1e-6),
    (REPLACE, 1.0, 1e-10),
    (REPLACE, 3.0, 1e-3),
]


@pytest.mark.parametrize("relation, mu, delta", PLD_GRID)
def test_pld_oracle_grid(relation, mu, delta):
    """dp_accounting's PLD (a numerical upper bound) agrees with the closed form on a (μ, δ) grid."""
    event = GaussianEvent(sensitivity=mu, noise_std=1.0, relation=relation)
    exact = GdpAccountant(relation).compose(event).get_epsilon(delta)
    pld = PldAccountant(relation).compose(event).get_epsilon(delta)
    # PLD is pessimistic (never certifies less than the truth, up to its root finder's precision)
    # and its discretisation interval (1e-4) bounds how much more it may certify.
    assert exact <= pld * (1 + 1e-9) + 1e-9
    assert pld - exact <= 1e-3 * (1 + exact)


def test_pld_composition_oracle():
    events = ComposedEvent(
        (SelfComposedEvent(GaussianEvent(1.0, 6.0), 9), MatrixMechanismEvent(2.0, 5.0, 1.3, 50))
    )
    exact = GdpAccountant().compose(events).get_epsilon(1e-6)
    pld = PldAccountant().compose(events).get_epsilon(1e-6)
    assert 0 <= pld - exact <= 2e-3


@pytest.mark.parametrize("relation", [REPLACE, ZERO])
@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-9), (1.0, 1e-6), (8.0, 1e-5), (60.0, 1e-12)])
def test_calibration_round_trip(relation, epsilon, delta):
    cal = calibrate_clipped_sum(epsilon, delta, clip_norm=0.7, max_column_norm=1.9, relation=relation)
    expected_sensitivity = 1.4 if relation is REPLACE else 0.7
    assert cal.row_sensitivity == expected_sensitivity
    achieved = GdpAccountant(relation).compose(cal.event(num_steps=100)).get_epsilon(delta)
    assert achieved == pytest.approx(epsilon, rel=1e-9)


def test_replace_one_needs_twice_the_noise():
    a = calibrate_clipped_sum(1.0, 1e-6, 1.0, relation=REPLACE)
    b = calibrate_clipped_sum(1.0, 1e-6, 1.0, relation=ZERO)
    assert a.noise_std == pytest.approx(2 * b.noise_std)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=0.0, delta=1e-6, sensitivity=1.0), "epsilon"),
        (dict(epsilon=-1.0, delta=1e-6, sensitivity=1.0), "epsilon"),
        (dict(epsilon=1.0, delta=1.0, sensitivity=1.0), "delta"),
        (dict(epsilon=1.0, delta=1e-6, sensitivity=0.0), "sensitivity"),
        (dict(epsilon=1.0, delta=1e-6, sensitivity=1.0, max_column_norm=-2.0), "max_column_norm"),
    ],
)
def test_calibration_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        calibrate_gaussian(**kwargs)


@settings(max_examples=100, deadline=None)
@given(
    epsilon=st.floats(0.01, 50.0),
    log10_delta=st.floats(-14.0, -2.0),
    sensitivity=st.floats(1e-3, 1e3),
    gamma=st.floats(1.0, 10.0),
)
def test_calibration_round_trip_property(epsilon, log10_delta, sensitivity, gamma):
    delta = 10.0**log10_delta
    cal = calibrate_gaussian(epsilon, delta, sensitivity, max_column_norm=gamma)
    mu = sensitivity * gamma / cal.noise_std
    assert epsilon_for_delta(delta, mu) == pytest.approx(epsilon, rel=1e-9)
