"""The K-class softmax model and its one-release AdaSSP: contrasts, sensitivities (stated, attained, never
exceeded), clipped gradient sums against per-example brute force, and the solve from the noisy release."""

import math

import numpy as np
import pytest

from dpstream.algorithms import AdaSSP
from dpstream.algorithms.ssp import symmetric_noise
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import MultinomialLogisticModel, StatsRequest
from dpstream.models.multinomial import contrast_basis
from dpstream.noise import NoiseKey, gaussian
from dpstream.privacy import NeighbouringRelation

KEY = NoiseKey.from_secret(b"m" * 32)
REPLACE, ZERO = NeighbouringRelation.REPLACE_ONE, NeighbouringRelation.ZERO_OUT


@pytest.mark.parametrize("classes", [3, 5, 10])
def test_contrast_basis_spans_the_centred_vectors_with_rows_of_equal_norm(classes):
    basis = contrast_basis(classes)
    np.testing.assert_allclose(basis @ basis.T, np.eye(classes) - 1.0 / classes, atol=1e-12)
    np.testing.assert_allclose(basis.T @ basis, np.eye(classes - 1), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(basis, axis=1), math.sqrt(1 - 1 / classes))


def one_row_moment(model, x, label, bound):
    request = StatsRequest(np.zeros(model.num_params(len(x))), kind="moments", row_norm_bound=bound,
                           label_bound=model.target_bound)  # fmt: skip
    return model.block_stats(x[None, :], np.array([float(label)]), request).moment


@pytest.mark.parametrize("classes", [3, 6])
def test_contrast_moment_sensitivity_holds_and_is_attained(classes):
    """One row changes XᵀT by ≤ 2·B·sqrt(1 − 1/K) (replace-one) and B·sqrt(1 − 1/K) (zero-out), the sensitivities
    AdaSSP calibrates to, over random rows of any norm (clipped to B) and classes; equality at x' = −x."""
    model, bound, dim = MultinomialLogisticModel(num_classes=classes), 2.0, 4
    algorithm = AdaSSP(1.0, 1e-6, row_norm_bound=bound, link="softmax", num_classes=classes)
    stated = REPLACE.moment_sensitivity(bound, algorithm.target_bound)
    assert stated == pytest.approx(2 * bound * math.sqrt(1 - 1 / classes))
    rng = np.random.default_rng(classes)
    worst = 0.0
    for _ in range(1000):
        x, x2 = (rng.standard_normal(dim) * rng.uniform(0.1, 4) for _ in range(2))
        c, c2 = rng.integers(classes, size=2)
        worst = max(
            worst, np.linalg.norm(one_row_moment(model, x, c, bound) - one_row_moment(model, x2, c2, bound))
        )
    assert worst <= stated + 1e-12
    x = np.full(dim, bound / math.sqrt(dim))
    attained = np.linalg.norm(one_row_moment(model, x, 1, bound) - one_row_moment(model, -x, 1, bound))
    assert attained == pytest.approx(stated)
    assert np.linalg.norm(one_row_moment(model, x, 0, bound)) == pytest.approx(
        ZERO.moment_sensitivity(bound, algorithm.target_bound)
    )
    event = algorithm.event(algorithm.plan(1000, dim * classes)).events[2]
    assert event.sensitivity == pytest.approx(stated)


def test_clipped_gradient_sums_match_per_example_brute_force():
    rng = np.random.default_rng(1)
    model = MultinomialLogisticModel(num_classes=4)
    X, y = rng.uniform(-1, 1, (300, 3)), rng.integers(4, size=300).astype(float)
    params = rng.standard_normal(12)
    clip_norms = np.array([0.3, 1.0, np.inf])
    stats = model.block_stats(X, y, StatsRequest(params, clip_norms=clip_norms))
    weights = params.reshape(3, 4)
    expected = np.zeros((3, 12))
    for x, label in zip(X, y.astype(int), strict=True):
        p = np.exp(x @ weights - np.max(x @ weights))
        p /= p.sum()
        gradient = np.outer(x, p - np.eye(4)[label]).ravel()
        norm = np.linalg.norm(gradient)
        for k, clip in enumerate(clip_norms):
            expected[k] += gradient * min(1.0, clip / norm)
    np.testing.assert_allclose(stats.clipped_sums, expected, rtol=1e-10, atol=1e-12)
    assert stats.row_count == 300 and stats.clipped_rows[2] == 0
    thresholds = np.array([0.1, 0.5, 2.0])
    histogram = model.block_stats(
        X, y, StatsRequest(params, thresholds=thresholds, statistic="gradient_norm"), role="stat"
    ).histogram
    assert histogram.tolist() == sorted(histogram.tolist()) and histogram[-1] <= 300


def test_labels_outside_the_class_positions_are_refused():
    model = MultinomialLogisticModel(num_classes=3)
    with pytest.raises(ValueError, match=r"label 3\.0 is not a class index 0\.\.2"):
        model.block_stats(np.zeros((2, 2)), np.array([0.0, 3.0]), StatsRequest(np.zeros(6)))
    with pytest.raises(ValueError, match="num_classes must be ≥ 3"):
        MultinomialLogisticModel(num_classes=2)


def test_softmax_release_is_the_exact_statistics_plus_the_keyed_noise():
    """Without an intercept: W = K·(P(XᵀX + E) + λI)⁻¹(XᵀT + N)Uᵀ, the noise drawn from the run's key; a
    retry over other blocks releases the same values."""
    rng = np.random.default_rng(3)
    classes, dim, rows = 3, 4, 5000
    X = rng.uniform(-1, 1, (rows, dim)) / 2
    y = rng.integers(classes, size=rows).astype(float)
    model = MultinomialLogisticModel(num_classes=classes)
    algorithm = AdaSSP(1.0, 1e-6, link="softmax", num_classes=classes)
    plan = algorithm.plan(rows, dim * classes)

    def fit(blocks):
        return run(algorithm, InMemoryExecutor(model, blocks), num_rows=rows, num_params=dim * classes,
                   initial_params=model.init_params(dim), key=KEY)  # fmt: skip

    result = fit([(X, y)])
    basis = contrast_basis(classes)
    noisy_gram = X.T @ X + plan.gram_std * symmetric_noise(
        gaussian(KEY, 0, "ssp-gram", dim * (dim + 1) // 2), dim
    )
    noisy_moment = X.T @ basis[y.astype(int)] + plan.moment_std * gaussian(
        KEY, 0, "ssp-moment", dim * 2
    ).reshape(dim, 2)
    values, vectors = np.linalg.eigh(noisy_gram)
    scale = np.maximum(np.maximum(values, 0) + result.state.ridge, plan.gram_std)
    expected = classes * (vectors @ ((vectors.T @ noisy_moment) / scale[:, None])) @ basis.T
    np.testing.assert_allclose(result.params, expected.ravel(), rtol=1e-8)
    np.testing.assert_allclose(
        expected.sum(axis=1), 0, atol=1e-9
    )  # identifiable: each feature's weights sum to 0
    again = fit([(X[:1234], y[:1234]), (X[1234:], y[1234:])])
    np.testing.assert_allclose(again.params, result.params, rtol=1e-10)


def test_one_release_learns_separable_classes_and_lda_takes_over_at_large_n():
    """Three Gaussian classes in their own corners: both solves reach the Bayes rule's accuracy; the plan
    picks LDA from public quantities only (N/K against the counts' noise)."""
    rng = np.random.default_rng(4)
    centres = np.array([[-0.5, -0.5], [0.5, -0.5], [0.0, 0.5]])
    for rows, expected_lda in ((600, False), (60_000, True)):
        labels = rng.integers(3, size=rows)
        X = np.hstack(
            [np.clip(centres[labels] + 0.15 * rng.standard_normal((rows, 2)), -1, 1), np.ones((rows, 1))]
        )
        model = MultinomialLogisticModel(num_classes=3)
        algorithm = AdaSSP(4.0, 1e-6, link="softmax", num_classes=3, intercept_index=2)
        plan = algorithm.plan(rows, 9)
        assert algorithm.uses_discriminants(plan) is expected_lda
        result = run(algorithm, InMemoryExecutor(model, [(X, labels.astype(float))]), num_rows=rows, num_params=9,
                     initial_params=np.zeros(9), key=KEY)  # fmt: skip
        accuracy = np.mean(np.argmax(model.predict_margin(X, result.params), axis=1) == labels)
        assert accuracy > 0.95, (rows, accuracy)
