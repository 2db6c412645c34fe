"""Private bounds: both rounds' sensitivity, the occupied-bin and narrowing rules, the budget share, and
the estimators' default (bounds estimated inside the fit's own (ε, δ))."""

import math

import numpy as np
import pytest

from dpstream.bounds import SHARE_RANGE, PrivateBounds, TooFewRows, bounds_share, default_edges, tail_fraction
from dpstream.estimators import DPLinearRegression, DPLogisticRegression
from dpstream.noise import NoiseKey
from dpstream.privacy import event_mu, mu_for_epsilon_delta
from dpstream.scaling import PublicBounds

KEY = NoiseKey.from_secret(b"b" * 32)


@pytest.mark.parametrize("relation, factor", [("replace-one", 2.0), ("zero-out", 1.0)])
def test_both_rounds_attain_their_sensitivity_and_never_exceed_it(relation, factor):
    mechanism = PrivateBounds(1.0, relation=relation)
    rng = np.random.default_rng(0)
    base = rng.normal(0, 100, (200, 4))
    low, high = np.full(4, -300.0), np.full(4, 300.0)
    rounds = (mechanism.coarse_histogram, lambda rows: mechanism.fine_histogram(rows, low, high))
    for histogram in rounds:
        worst = 0.0
        for _ in range(300):
            row, other = rng.normal(0, 10 ** rng.uniform(-3, 8), (2, 4))
            with_row = histogram(np.vstack([base, row]))
            # zero-out: the zero record is counted nowhere
            neighbour = histogram(np.vstack([base, other])) if relation == "replace-one" else histogram(base)
            worst = max(worst, float(np.linalg.norm(with_row - neighbour)))
        assert worst <= mechanism.sensitivity(4) + 1e-12
        assert worst == pytest.approx(math.sqrt(factor * 4))  # some pair differs in every column
    assert mechanism.coarse_std(4) == pytest.approx(math.sqrt(factor * 4) / math.sqrt(0.5))
    # The two rounds compose to the mechanism's μ exactly.
    assert event_mu(mechanism.event(4)) == pytest.approx(1.0, rel=1e-12)
    budget = PrivateBounds.for_budget(1.0, 1e-6, relation)
    assert event_mu(budget.event(7)) == pytest.approx(mu_for_epsilon_delta(1.0, 1e-6), rel=1e-12)


def test_histograms_merge_over_disjoint_rows():
    mechanism = PrivateBounds(1.0)
    X = np.random.default_rng(1).lognormal(3, 2, (5000, 3))
    coarse = mechanism.coarse_histogram(X)
    np.testing.assert_array_equal(
        mechanism.coarse_histogram(X[:1234]) + mechanism.coarse_histogram(X[1234:]), coarse
    )
    assert coarse.sum(axis=1).tolist() == [5000] * 3
    low, high = np.full(3, 1.0), np.full(3, 1000.0)
    fine = mechanism.fine_histogram(X, low, high)
    np.testing.assert_array_equal(
        mechanism.fine_histogram(X[:77], low, high) + mechanism.fine_histogram(X[77:], low, high), fine
    )
    assert fine.shape == (3, mechanism.fine_bins) and fine.sum(axis=1).tolist() == [5000] * 3


def test_the_coarse_round_covers_the_occupied_half_decades_and_the_fine_round_closes_in():
    # N(50, 10²), 20,000 rows: (10, 31.6] holds ≈ 660 rows and (100, 316] ≈ 0; τ = 5σ₁ ≈ 38 rows at μ = 0.5,
    # so the coarse range is [10, 100] unless a noise draw exceeds 5σ (probability ~1e-5 per bin).
    column = np.random.default_rng(2).normal(50, 10, (20_000, 1))
    mechanism = PrivateBounds(0.5)
    assert mechanism.coarse_release(mechanism.coarse_histogram(column), KEY) == ([10.0], [100.0])
    low, high = mechanism.estimate(column, KEY)
    # q = 3/√N ≈ 0.021: the 2 % quantiles are 29.5 and 70.5; the fine bins are (100 − 10)/16 = 5.6 wide.
    assert 18.0 <= low[0] <= 30.0 and 70.0 <= high[0] <= 82.0
    assert tail_fraction(20_000) == pytest.approx(3 / math.sqrt(20_000)) and tail_fraction(100) == 0.2
    assert tail_fraction(100, label=True) == 0.02


def test_fine_round_does_not_narrow_when_the_noise_forbids_it():
    column = np.random.default_rng(3).uniform(10, 100, (400, 1))
    mechanism = PrivateBounds(0.5)
    low, high = mechanism.coarse_release(mechanism.coarse_histogram(column), KEY)
    tail = mechanism.tails(400, 1)
    fine_low, fine_high = mechanism.fine_release(
        mechanism.fine_histogram(column, low, high), KEY, low, high, 400, tail
    )
    # σ₂ ≈ 4 rows per bin and q·N = 60: narrowing stops within a few of the 16 bins, never past the data.
    assert low[0] <= fine_low[0] <= 40.0 and 70.0 <= fine_high[0] <= high[0]


def test_indicator_and_zero_columns_keep_zero_as_their_lower_bound():
    rng = np.random.default_rng(4)
    columns = np.column_stack([rng.integers(0, 2, 5000), np.zeros(5000), rng.poisson(3.0, 5000)]).astype(
        float
    )
    low, high = PrivateBounds(1.0).estimate(columns, KEY)
    assert np.all(low == 0.0)  # 0 itself (printed as 0, not the float just below it): 0 maps onto −1 exactly
    # An all-zero column gets an indicator's range, narrowed by the fine round by at most 15 of 16 bins.
    assert high[0] == 1.0 and 1 / 16 <= high[1] <= 1.0 and high[2] > 5
    mapped = PublicBounds(low, high).to_unit(columns)
    assert set(np.unique(mapped[:, 0])) == {-1.0, 1.0}
    assert np.all(mapped[:, 1] == -1.0)
    edges = default_edges()
    assert edges[0] == -1e9 and edges[-1] == 1e9 and 0.0 in edges and np.all(np.diff(edges) > 0)


def test_data_beyond_the_grid_gets_the_outermost_step():
    mechanism = PrivateBounds(1.0)
    columns = np.column_stack([np.full(5000, 1e12), np.full(5000, -1e12)])
    low, high = mechanism.coarse_release(mechanism.coarse_histogram(columns), KEY)
    np.testing.assert_allclose(low, [10**8.5, -1e9])
    np.testing.assert_allclose(high, [1e9, -(10**8.5)])


def test_too_few_rows_names_the_column_and_the_threshold():
    mechanism = PrivateBounds(1.0)
    sparse = np.random.default_rng(5).lognormal(0, 6, (40, 1))  # 40 rows spread over many bins
    with pytest.raises(
        TooFewRows, match=r"no half-decade bin of column 'income' holds \d+ noisy rows"
    ) as caught:
        mechanism.coarse_release(mechanism.coarse_histogram(sparse), KEY, ("income",))
    assert isinstance(caught.value, ValueError) and caught.value.column == "income"
    assert caught.value.threshold == pytest.approx(5 * mechanism.coarse_std(1))
    assert mechanism.minimum_rows(1) == math.ceil(7 * mechanism.coarse_std(1))


def test_bounds_share_depends_on_public_quantities_and_stays_in_range():
    mu = mu_for_epsilon_delta(1.0, 1e-6)
    shares = [bounds_share(rows, 20, mu, "replace-one") for rows in (300, 3000, 30_000, 3_000_000)]
    assert shares == sorted(shares, reverse=True)  # more rows, a smaller share
    assert shares[0] == SHARE_RANGE[1] and shares[-1] == SHARE_RANGE[0]


def test_estimator_defaults_charge_private_bounds_within_epsilon():
    rng = np.random.default_rng(6)
    X = rng.uniform(0, 5000, (30_000, 3))
    y = 100_000 + X @ np.array([20.0, -10.0, 5.0]) + 5000 * rng.standard_normal(30_000)
    model = DPLinearRegression(noise_key=KEY).fit(X, y)
    report = model.privacy_report_
    assert report.epsilon == pytest.approx(1.0, rel=1e-9)  # bounds and training compose to the request
    assert report.rows_per_step == 30_000  # every row trains
    note = next(note for note in report.notes if note.startswith("private bounds"))
    assert "all 30,000 rows" in note and "10% of the fit's μ²" in note
    assert np.all(model.feature_bounds_.high >= 4000) and np.all(model.feature_bounds_.low <= 1000)
    assert model.score(X, y) > 0.8
    # Public bounds win and cost nothing: the whole μ goes to training.
    public = DPLinearRegression(noise_key=KEY, feature_bounds=(0, 5000), label_bounds=(0, 300_000)).fit(X, y)
    assert not any(note.startswith("private bounds") for note in public.privacy_report_.notes)
    assert public.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-9)
    # "private" names the default explicitly.
    explicit = DPLinearRegression(noise_key=KEY, feature_bounds="private", label_bounds="private").fit(X, y)
    np.testing.assert_allclose(explicit.coef_, model.coef_)


def test_a_classifier_estimates_feature_bounds_only():
    rng = np.random.default_rng(7)
    X = rng.lognormal(2, 0.5, (10_000, 2))
    labels = np.where(X[:, 0] > np.median(X[:, 0]), "yes", "no")
    model = DPLogisticRegression(noise_key=KEY).fit(X, labels)
    assert model.label_bounds_ is None and model.feature_bounds_ is not None
    assert "private bounds (feature_bounds:" in " ".join(model.privacy_report_.notes)
    assert model.score(X, labels) > 0.8


def test_private_bounds_on_dask_inputs_match_in_memory_ones():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(8)
    X = rng.uniform(0, 100, (8000, 2))
    y = X @ np.array([1.0, -2.0]) + rng.standard_normal(8000)
    in_memory = DPLinearRegression(noise_key=KEY).fit(X, y)
    lazy = DPLinearRegression(noise_key=KEY).fit(
        da.from_array(X, chunks=(1000, 2)), da.from_array(y, chunks=1000)
    )
    np.testing.assert_allclose(lazy.feature_bounds_.low, in_memory.feature_bounds_.low)
    np.testing.assert_allclose(lazy.label_bounds_.high, in_memory.label_bounds_.high)
    # Uneven row chunks in X, other chunks in y: y follows X's chunks.
    uneven = DPLinearRegression(noise_key=KEY).fit(
        da.from_array(X, chunks=((1, 7999), (2,))), da.from_array(y, chunks=1000)
    )
    np.testing.assert_allclose(uneven.coef_, in_memory.coef_, rtol=1e-6)


def test_the_tail_allowance_uses_the_public_row_count():
    """``num_rows`` (public) sets q·N even where fewer rows are held (rows dropped for missing values)."""
    column = np.random.default_rng(9).normal(50, 10, (5000, 1))
    mechanism = PrivateBounds(2.0)
    narrow = mechanism.estimate(column, KEY, num_rows=5000)
    assert mechanism.estimate(column, KEY) == narrow  # the default: the rows held
    wide = mechanism.estimate(column, KEY, num_rows=10)  # q·N = 0.2·10 = 2 rows: hardly any narrowing
    assert wide[0][0] <= narrow[0][0] and wide[1][0] >= narrow[1][0]
    assert (wide[0][0], wide[1][0]) != (narrow[0][0], narrow[1][0])


def test_bounds_that_would_hold_a_minority_of_the_sample_are_refused():
    """382 sampled aircraft must not give a flight delay the bounds [−31.6, −10]: when only the heaviest
    half-decade passes τ and the rest of a column spreads thinly over many, the coarse bounds
    would hold a minority of the sample; with the public sample size that is refused, naming the column
    and the share, instead of clipping the rest away. Twenty times the rows resolve every half-decade."""
    from dpstream.bounds import MIN_KEPT_SHARE, TooSpread

    mechanism = PrivateBounds(mu_for_epsilon_delta(1.0, 1e-6))
    spread = [1.5 * 10 ** (k / 2) for k in range(13)]  # 20 rows in each half-decade from 1 to 10⁶

    def column(copies: int) -> np.ndarray:
        heavy = np.full(140 * copies, -20.0)  # 35 % in (−31.6, −10]
        return np.concatenate([heavy, np.repeat(spread, 20 * copies)]).reshape(-1, 1)

    small = column(1)
    threshold = mechanism.threshold_sigmas * mechanism.coarse_std(1)
    assert 20 < threshold < 140  # only the heavy bin can pass τ here
    with pytest.raises(
        TooSpread, match=r"column 'delay'.* hold only 3\d% of the sample.*clip the other 6\d%"
    ):
        mechanism.estimate(small, KEY, ("delay",), num_rows=small.shape[0])
    assert MIN_KEPT_SHARE == 0.5
    low, high = mechanism.estimate(column(20), KEY, ("delay",), num_rows=20 * small.shape[0])
    assert low[0] <= -20.0 and high[0] >= 1e5
