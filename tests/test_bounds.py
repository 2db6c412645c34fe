"""Private bounds: histogram sensitivity, the occupied-bin rule, and the estimators' "private" option."""

import math

import numpy as np
import pytest

from dpstream.bounds import PrivateBounds, default_edges
from dpstream.estimators import DPLinearRegression
from dpstream.noise import NoiseKey
from dpstream.privacy import mu_for_epsilon_delta

KEY = NoiseKey.from_secret(b"b" * 32)


@pytest.mark.parametrize("relation, factor", [("replace-one", 2.0), ("zero-out", 1.0)])
def test_histogram_sensitivity_is_attained_and_never_exceeded(relation, factor):
    mechanism = PrivateBounds(1.0, 1e-6, relation=relation)
    rng = np.random.default_rng(0)
    base = rng.normal(0, 100, (200, 4))
    worst = 0.0
    for _ in range(300):
        row, other = rng.normal(0, 10 ** rng.uniform(-3, 8), (2, 4))
        with_row = mechanism.histogram(np.vstack([base, row]))
        if relation == "replace-one":
            neighbour = mechanism.histogram(np.vstack([base, other]))
        else:
            neighbour = mechanism.histogram(base)  # the zero record is counted nowhere
        worst = max(worst, float(np.linalg.norm(with_row - neighbour)))
    assert worst <= mechanism.sensitivity(4) + 1e-12
    assert worst == pytest.approx(math.sqrt(factor * 4))  # some pair differs in every column
    assert mechanism.noise_std(4) == pytest.approx(math.sqrt(factor * 4) / mu_for_epsilon_delta(1.0, 1e-6))


def test_histograms_merge_over_disjoint_rows():
    mechanism = PrivateBounds(1.0, 1e-6)
    X = np.random.default_rng(1).lognormal(3, 2, (5000, 3))
    np.testing.assert_array_equal(
        mechanism.histogram(X[:1234]) + mechanism.histogram(X[1234:]), mechanism.histogram(X)
    )
    assert mechanism.histogram(X).sum(axis=1).tolist() == [5000] * 3


def test_bounds_cover_the_occupied_half_decades():
    # N(50, 10²), 20,000 rows: (10, 31.6] holds ≈ 660 rows and (100, 316] ≈ 0; at ε = 1 the threshold is
    # 5σ ≈ 30 rows, so the release is [10, 100] unless a noise draw exceeds 5σ (probability ~1e-5 per bin).
    column = np.random.default_rng(2).normal(50, 10, (20_000, 1))
    mechanism = PrivateBounds(1.0, 1e-6)
    low, high = mechanism.release(mechanism.histogram(column), KEY)
    assert (low[0], high[0]) == (10.0, 100.0)
    edges = default_edges()
    assert edges[0] == -1e9 and edges[-1] == 1e9 and 0.0 in edges


def test_too_few_rows_is_a_clear_error():
    mechanism = PrivateBounds(1.0, 1e-6)
    sparse = np.random.default_rng(3).lognormal(0, 6, (40, 1))  # 40 rows spread over many bins
    with pytest.raises(
        ValueError, match=r"too few rows for private bounds: no bin of column 0 .* Pass public bounds"
    ):
        mechanism.release(mechanism.histogram(sparse), KEY)
    assert mechanism.minimum_rows(1) == math.ceil(5 * mechanism.noise_std(1))


def test_estimator_private_bounds_use_a_disjoint_prefix_and_keep_epsilon():
    rng = np.random.default_rng(4)
    X = rng.uniform(0, 5000, (30_000, 3))
    y = 100_000 + X @ np.array([20.0, -10.0, 5.0]) + 5000 * rng.standard_normal(30_000)
    model = DPLinearRegression(feature_bounds="private", label_bounds="private", noise_key=KEY).fit(X, y)
    report = model.privacy_report_
    assert report.epsilon == pytest.approx(1.0, rel=1e-9)  # parallel composition: the run's ε is unchanged
    assert report.rows_per_step == 27_000  # the first 10 % went to the histograms
    assert (
        "private bounds (feature_bounds, label_bounds)" in report.notes[-1]
        and "first 3,000 rows" in report.notes[-1]
    )
    # Half-decade bounds: the features' support (0, 5000] rounds out to (0.001.., 10⁴] at worst.
    assert np.all(model.feature_bounds_.high >= 3162) and np.all(model.feature_bounds_.low <= 1000)
    assert model.score(X, y) > 0.8


def test_private_bounds_refuse_dask_inputs():
    da = pytest.importorskip("dask.array")
    X = da.from_array(np.ones((100, 2)), chunks=50)
    with pytest.raises(ValueError, match="feature_bounds='private' needs in-memory inputs"):
        DPLinearRegression(feature_bounds="private").fit(X, da.from_array(np.ones(100), chunks=50))


def test_data_beyond_the_grid_gets_the_outermost_step():
    mechanism = PrivateBounds(1.0, 1e-6)
    columns = np.column_stack([np.full(5000, 1e12), np.full(5000, -1e12), np.zeros(5000)])
    low, high = mechanism.release(mechanism.histogram(columns), KEY)
    np.testing.assert_allclose(low, [10**8.5, -1e9, -1e-3])
    np.testing.assert_allclose(high, [1e9, -(10**8.5), 0.0])
    assert np.all(high > low)
