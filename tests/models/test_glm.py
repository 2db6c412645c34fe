"""GLM batch statistics equal the materialised per-example computation, merge as a monoid, stay float32."""

import tracemalloc

import numpy as np
import pytest

from dpstream.models import BatchStats, LinearRegressionModel, LogisticRegressionModel, StatsRequest

MODELS = [LinearRegressionModel(), LogisticRegressionModel()]


def data(rows=9000, dim=7, dtype=np.float64, seed=0, classification=False):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((rows, dim)) * rng.uniform(0.1, 3, size=(rows, 1))).astype(dtype)
    X[5] = 0.0  # a zero row: norm 0, clip factor 1
    w = rng.standard_normal(dim)
    y = X.astype(np.float64) @ w + rng.standard_normal(rows)
    if classification:
        y = np.where(y > 0, 1.0, -1.0)
    return X, y, rng.standard_normal(dim) * 0.3


def per_example_gradients(model, X, y, w):
    margins = X.astype(np.float64) @ w
    return model.derivative(margins, y)[:, None] * X.astype(np.float64)


def explicit_clipped_sum(G, clip):
    norms = np.linalg.norm(G, axis=1)
    factors = np.where(norms > 0, np.minimum(1.0, clip / np.where(norms > 0, norms, 1.0)), 1.0)
    return (G * factors[:, None]).sum(axis=0), int(np.count_nonzero(norms > clip))


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-11), (np.float32, 2e-5)])
def test_clipped_sums_equal_materialised(model, dtype, rtol):
    X, y, w = data(dtype=dtype, classification=model.name == "logistic")
    clip_norms = np.array([0.05, 0.5, 2.0, np.inf])
    stats = model.block_stats(X, y, StatsRequest(w, clip_norms=clip_norms))
    G = per_example_gradients(model, X, y, w)
    for k, clip in enumerate(clip_norms):
        expected, clipped = explicit_clipped_sum(G, clip)
        scale = np.abs(G).sum(axis=0)  # bound on accumulated magnitude, for a relative tolerance
        assert np.all(np.abs(stats.clipped_sums[k] - expected) <= rtol * scale + 1e-12)
        assert stats.clipped_rows[k] == clipped
    # Single clip norm takes the GEMV path: the same sum up to rounding. The bound is relative to Σ|g| (as
    # above), not to the sum itself: with cancellation a float32 sum can differ by 1.5e-6 of its value
    # between GEMV and GEMM (measured in CI, where OpenBLAS's blocking also depends on operand alignment).
    single = model.block_stats(X, y, StatsRequest(w, clip_norms=[0.5]))
    scale = np.abs(G).sum(axis=0)
    assert np.all(np.abs(single.clipped_sums[0] - stats.clipped_sums[1]) <= rtol * scale + 1e-12)
    assert stats.row_count == X.shape[0]
    assert stats.loss_sum == pytest.approx(model.loss(X.astype(np.float64) @ w, y).sum(), rel=1e-5)


def test_clipped_norm_bound_and_identity_below():
    model = LinearRegressionModel()
    X, y, w = data(rows=50)
    for i in range(50):  # one row at a time: the clipped contribution itself
        stats = model.block_stats(X[i : i + 1], y[i : i + 1], StatsRequest(w, clip_norms=[1.0, 1e9]))
        assert np.linalg.norm(stats.clipped_sums[0]) <= 1.0 + 1e-12
        np.testing.assert_allclose(
            stats.clipped_sums[1], per_example_gradients(model, X[i : i + 1], y[i : i + 1], w)[0]
        )


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_srgd_weighted_difference(model):
    X, y, w = data(rows=3000, classification=model.name == "logistic")
    w_prev = w + 0.1
    eta, eta_prev, clip = 7.0, 6.0, 1.3
    stats = model.block_stats(
        X, y, StatsRequest(w, clip_norms=[clip], previous_params=w_prev, weight=eta, previous_weight=eta_prev)
    )
    U = eta * per_example_gradients(model, X, y, w) - eta_prev * per_example_gradients(model, X, y, w_prev)
    expected, _ = explicit_clipped_sum(U, clip)
    np.testing.assert_allclose(stats.clipped_sums[0], expected, rtol=1e-10, atol=1e-10)


def test_logistic_derivative_matches_finite_differences_and_loss_is_stable():
    model = LogisticRegressionModel()
    margins = np.linspace(-30, 30, 121)
    for label in (-1.0, 1.0):
        y = np.full_like(margins, label)
        h = 1e-6
        numeric = (model.loss(margins + h, y) - model.loss(margins - h, y)) / (2 * h)
        np.testing.assert_allclose(model.derivative(margins, y), numeric, atol=1e-8)
    big = model.loss(np.array([-800.0, 800.0]), np.array([1.0, 1.0]))
    assert np.all(np.isfinite(big)) and big[0] == pytest.approx(800.0) and big[1] == pytest.approx(0.0)


@pytest.mark.parametrize("statistic", ["residual", "gradient_norm"])
def test_dpstat_histogram(statistic):
    model = LinearRegressionModel()
    X, y, w = data(rows=5000)
    thresholds = 2.0 ** np.arange(-6, 6)
    stats = model.block_stats(X, y, StatsRequest(w, thresholds=thresholds, statistic=statistic), role="stat")
    residual = np.abs(X @ w - y)
    values = residual if statistic == "residual" else residual * np.linalg.norm(X, axis=1)
    np.testing.assert_array_equal(stats.histogram, [(values <= t).sum() for t in thresholds])
    assert not stats.clipped_sums.any()


def test_monoid_merge_is_order_fixed_and_matches_whole():
    model = LinearRegressionModel()
    X, y, w = data(rows=10_000)
    request = StatsRequest(w, clip_norms=[0.3, 3.0], thresholds=np.array([0.5, 1.0, 2.0]))
    whole = model.block_stats(X, y, request) + model.block_stats(X, y, request, role="stat")
    cuts = [0, 1234, 4096, 4097, 8000, 10_000]
    parts = [
        model.block_stats(X[a:b], y[a:b], request) + model.block_stats(X[a:b], y[a:b], request, role="stat")
        for a, b in zip(cuts, cuts[1:], strict=False)
    ]
    merged = parts[0]
    for part in parts[1:]:
        merged = merged + part
    np.testing.assert_allclose(merged.clipped_sums, whole.clipped_sums, rtol=1e-12)
    np.testing.assert_array_equal(merged.histogram, whole.histogram)
    assert merged.row_count == 2 * 10_000
    again = parts[0]
    for part in parts[1:]:
        again = again + part
    assert again.clipped_sums.tobytes() == merged.clipped_sums.tobytes()  # same order, same bits
    with pytest.raises(ValueError, match="cannot merge"):
        merged + BatchStats.zeros(1, 7)


def test_float32_block_is_not_copied_to_float64():
    model = LinearRegressionModel()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((65_536, 64)).astype(np.float32)  # 16.8 MB; a float64 copy is 33.6 MB
    y = rng.standard_normal(65_536)
    request = StatsRequest(np.zeros(64), clip_norms=[1.0])
    tracemalloc.start()
    model.block_stats(X, y, request)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8_000_000


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(clip_norms=[0.0]), "clip_norms"),
        (dict(clip_norms=[-1.0]), "clip_norms"),
        (dict(thresholds=[2.0, 1.0]), "thresholds"),
        (dict(statistic="max"), "statistic"),
    ],
)
def test_bad_requests(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StatsRequest(np.zeros(3), **kwargs)


def test_bad_shapes():
    with pytest.raises(ValueError, match="expected X of shape"):
        LinearRegressionModel().block_stats(np.zeros((3, 2)), np.zeros(4), StatsRequest(np.zeros(2)))
