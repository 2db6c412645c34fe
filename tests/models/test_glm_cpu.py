"""The CPU kernels of ``dpstream.models.glm_cpu`` (PRIVACY-CRITICAL: they clip) against a float64 NumPy
statement of the glm module's equations, in both memory layouts, for both losses, with and without
SRGD's previous iterate, and the clipping bound row by row."""

import numpy as np
import pytest
from scipy.special import expit

from dpstream.models import LinearRegressionModel, LogisticRegressionModel, StatsRequest
from dpstream.models.glm_cpu import CHUNK_ROWS, block_statistics

# The loss each model's kernels compute, by the model's name (the test's ``loss`` parameter).
KERNEL_LOSS = {model.name: model.loss_kind for model in (LinearRegressionModel, LogisticRegressionModel)}


def reference(X, y, params, clip_norms, loss, previous=None, weight=1.0, previous_weight=0.0):
    """(clipped sums, loss sum, clipped rows, gradient norms, residuals) in float64."""
    X = X.astype(np.float64)

    def derivative_and_loss(margins):
        if loss == "linear":
            return margins - y, 0.5 * (margins - y) ** 2
        z = -y * margins
        return -y * expit(z), np.logaddexp(0.0, z)

    margins = X @ params
    scalars, losses = derivative_and_loss(margins)
    if previous is not None and previous_weight != 0.0:
        previous_scalars, _ = derivative_and_loss(X @ previous)
        scalars = weight * (scalars - previous_scalars) + (weight - previous_weight) * previous_scalars
    else:
        scalars = weight * scalars
    norms = np.abs(scalars) * np.linalg.norm(X, axis=1)
    factors = np.minimum(1.0, np.asarray(clip_norms)[None, :] / norms[:, None])
    sums = (X.T @ (scalars[:, None] * factors)).T
    return sums, losses.sum(), (factors < 1.0).sum(axis=0), norms, np.abs(margins - y)


def data(rows, dim, loss, order, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    X = np.asarray(rng.standard_normal((rows, dim)).astype(dtype), order=order)
    y = np.sign(rng.standard_normal(rows)) if loss == "logistic" else rng.standard_normal(rows)
    return X, y, rng.standard_normal(dim) * 0.3, rng.standard_normal(dim) * 0.3


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("loss", ["linear", "logistic"])
@pytest.mark.parametrize("srgd", [False, True])
def test_kernels_match_the_equations(order, loss, srgd):
    # More than one chunk and a ragged last chunk; K = 5 clip norms spanning clipped and unclipped rows.
    X, y, params, previous = data(2 * CHUNK_ROWS + 123, 17, loss, order)
    clip_norms = np.array([0.05, 0.2, 1.0, 4.0, np.inf])
    extra = dict(previous=previous, weight=3.0, previous_weight=2.0) if srgd else {}
    sums, loss_sum, clipped, values = block_statistics(X, y, params, clip_norms, KERNEL_LOSS[loss], **extra)
    expected, expected_loss, expected_clipped, norms, _ = reference(X, y, params, clip_norms, loss, **extra)
    assert values is None
    # float32 sums over 4,096-row chunks: error ≲ chunk · ulp · |term|, far below this tolerance.
    scale = np.abs(expected).max()
    np.testing.assert_allclose(sums, expected, atol=2e-5 * scale)
    assert loss_sum == pytest.approx(expected_loss, rel=1e-5)
    # A row sits on a clip boundary only by accident; float32 norms may flip such a row, none here.
    np.testing.assert_array_equal(clipped, expected_clipped)
    assert clipped[-1] == 0 and clipped[0] > 0


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("statistic", ["gradient_norm", "residual"])
def test_dp_stat_values(order, statistic):
    X, y, params, _ = data(5000, 9, "linear", order)
    kind = 0 if statistic == "gradient_norm" else 1
    sums, _, clipped, values = block_statistics(X, y, params, np.array([1.0]), "squared", statistic_kind=kind)
    _, _, _, norms, residuals = reference(X, y, params, [1.0], "linear")
    expected = norms if statistic == "gradient_norm" else residuals
    # float32 margins: an absolute error of a few ulp of |m|, relative only away from zero.
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5 * expected.max())
    assert not sums.any() and not clipped.any()  # DP-STAT rows release counts only


@pytest.mark.parametrize("order", ["C", "F"])
def test_each_row_contributes_at_most_the_clip_norm(order):
    """The sensitivity argument, row by row: a block of one row has clipped sum c·x with ‖c·x‖ ≤ C."""
    X, y, params, _ = data(300, 6, "logistic", order, dtype=np.float64)
    X[::7] *= 1e6  # rows far outside any ball
    clip_norms = np.array([1e-3, 0.5, 2.0])
    for i in range(X.shape[0]):
        sums, *_ = block_statistics(X[i : i + 1], y[i : i + 1], params, clip_norms, "logistic")
        assert np.all(np.linalg.norm(sums, axis=1) <= clip_norms * (1 + 1e-12))


def test_layouts_and_views_agree_and_repeat_bit_for_bit():
    X, y, params, _ = data(CHUNK_ROWS + 77, 12, "linear", "F")
    first = block_statistics(X[10:], y[10:], params, np.array([0.5, 1.0]), "squared")
    again = block_statistics(X[10:], y[10:], params, np.array([0.5, 1.0]), "squared")
    assert first[0].tobytes() == again[0].tobytes()  # a retried step releases identical values
    row_major = block_statistics(
        np.ascontiguousarray(X[10:]), y[10:], params, np.array([0.5, 1.0]), "squared"
    )
    np.testing.assert_allclose(row_major[0], first[0], rtol=1e-5, atol=1e-5)
    strided = block_statistics(X[10:, ::2], y[10:], params[::2], np.array([1.0]), "squared")  # neither layout
    expected, *_ = reference(X[10:, ::2], y[10:], params[::2], [1.0], "linear")
    np.testing.assert_allclose(strided[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model", [LinearRegressionModel(), LogisticRegressionModel()], ids=lambda m: m.name)
def test_models_use_the_kernel(model):
    X, y, params, _ = data(1000, 5, model.name, "C")
    stats = model.block_stats(X, y, StatsRequest(params, clip_norms=[0.3, 3.0]))
    expected, expected_loss, expected_clipped, _, _ = reference(X, y, params, [0.3, 3.0], model.name)
    np.testing.assert_allclose(stats.clipped_sums, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(stats.clipped_rows, expected_clipped)
    assert stats.loss_sum == pytest.approx(expected_loss, rel=1e-5)
