"""The private preconditioner: its sensitivity, that it is post-processing of one release, its map and
its unmap, the fits that take it, and what it buys on real data (fixed keys)."""

from __future__ import annotations

import math
import warnings
from unittest import mock

import numpy as np
import pytest

from dpstream.estimators import DPLinearRegression, DPLogisticRegression
from dpstream.models.moments import block_ssp_weights, moment_sums
from dpstream.noise import NoiseKey
from dpstream.preconditioner import PRECONDITIONER_SHARE, Whitening, release_whitening
from dpstream.privacy import NeighbouringRelation, mu_for_epsilon_delta

REPLACE, ZERO = NeighbouringRelation.REPLACE_ONE, NeighbouringRelation.ZERO_OUT


def _rows(rng: np.random.Generator, count: int, features: int) -> np.ndarray:
    """Model rows on the public scale: features in [−1, 1], the intercept column last."""
    return np.column_stack([rng.uniform(-1, 1, (count, features)), np.ones(count)])


def _extreme_rows(rng: np.random.Generator, count: int, features: int) -> np.ndarray:
    """Rows at the corners of the box (the largest norms), and some at 0."""
    rows = _rows(rng, count, features)
    rows[:, :features] = np.sign(rows[:, :features]) * (rng.random((count, features)) < 0.8)
    return rows


def person_moment(rows: np.ndarray) -> np.ndarray:
    """One person's contribution to the release: their rows' second moment, weighted as the release does
    (AdaSSP's statistics and person weights, ``dpstream.models.moments``)."""
    bound = math.sqrt(rows.shape[1])
    weights = block_ssp_weights(rows, np.zeros(len(rows), dtype=int), bound)[0]
    return moment_sums(rows, np.zeros(len(rows)), bound, 1.0, weights=weights)[0]


@pytest.mark.parametrize("relation", [REPLACE, ZERO])
def test_one_contribution_moves_the_second_moment_by_at_most_the_sensitivity(relation):
    """Replace-one: ‖xxᵀ − x'x'ᵀ‖_F ≤ √2·d; zero-out: ‖xxᵀ‖_F ≤ d; for a person's weighted rows too."""
    rng = np.random.default_rng(0)
    features = 5
    dim = features + 1
    bound = relation.gram_sensitivity(math.sqrt(dim))
    worst = 0.0
    for _ in range(2_000):
        k, k_other = rng.integers(1, 4, size=2)
        moment = person_moment(_extreme_rows(rng, k, features))
        if relation is REPLACE:
            change = moment - person_moment(_extreme_rows(rng, k_other, features))
        else:
            change = moment
        worst = max(worst, float(np.linalg.norm(change)))
    assert worst <= bound + 1e-9
    assert worst > 0.7 * bound  # the bound is not loose by much: corners reach near it


def test_without_noise_the_release_centres_and_whitens_exactly():
    """With the noise draws patched to 0 the release is the exact second moment: the centre is the column
    means, P C P = I, and the whitened rows' curvature is the intercept's 1."""
    rng = np.random.default_rng(1)
    features = np.column_stack([rng.normal(0.3, 0.2, 5_000), rng.normal(-0.5, 0.05, 5_000)])
    features[:, 1] += 0.1 * features[:, 0]  # correlated
    rows = np.column_stack([features, np.ones(len(features))])
    with mock.patch("dpstream.preconditioner.gaussian", lambda key, step, stream, size: np.zeros(size)):
        whitening = release_whitening(
            [(rows, np.zeros(len(rows)))], len(rows), 1.0, REPLACE, NoiseKey.generate(), 3.0
        )
    np.testing.assert_allclose(whitening.centre, features.mean(axis=0), atol=1e-12)
    covariance = np.cov(features, rowvar=False, bias=True)
    np.testing.assert_allclose(whitening.transform @ covariance @ whitening.transform, np.eye(2), atol=1e-8)
    assert whitening.curvature == pytest.approx(1.0, abs=1e-8)
    whitened = whitening.apply(features)
    assert np.all(np.abs(whitened) <= 1.0)
    np.testing.assert_allclose(whitened.std(axis=0), 1 / 3.0, rtol=0.05)  # few rows clipped at 3 sd


def test_the_release_reads_only_the_noisy_moment_and_n():
    """Post-processing: the rows in another order and other blocks (the same second moment and N) give the
    same preconditioner under the same key, and the noise is the documented σ = Δ/μ."""
    rng = np.random.default_rng(2)
    rows = _rows(rng, 400, 3)
    other = rows[rng.permutation(400)]
    key = NoiseKey.generate()
    first = release_whitening([(rows, np.zeros(len(rows)))], 400, 0.5, REPLACE, key, 3.0)
    second = release_whitening(
        [(other[:150], np.zeros(150)), (other[150:], np.zeros(250))], 400, 0.5, REPLACE, key, 3.0
    )
    np.testing.assert_allclose(first.transform, second.transform, atol=1e-9)
    np.testing.assert_allclose(first.centre, second.centre, atol=1e-12)
    assert first.event.noise_std == pytest.approx(math.sqrt(2) * 4 / 0.5)
    assert first.event.sensitivity / first.event.noise_std == pytest.approx(0.5)
    again = release_whitening([(rows, np.zeros(len(rows)))], 400, 0.5, REPLACE, key, 3.0)
    np.testing.assert_array_equal(first.transform, again.transform)  # a retry releases the same values


def test_unmap_states_the_same_linear_model_on_the_public_scale():
    rng = np.random.default_rng(3)
    transform = rng.normal(size=(4, 4))
    transform = transform @ transform.T + np.eye(4)
    whitening = Whitening(rng.normal(size=4), transform, 1.0, None, 2.0)  # type: ignore[arg-type]
    weights, intercept = rng.normal(size=4), 0.7
    rows = rng.uniform(-1, 1, (50, 4))
    on_whitened = (rows - whitening.centre) @ whitening.transform / whitening.spread @ weights + intercept
    public_weights, public_intercept = whitening.unmap(weights, intercept)
    np.testing.assert_allclose(rows @ public_weights + public_intercept, on_whitened, atol=1e-10)


def _regression(rows: int = 30_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 5))
    X[:, 1] = 0.9 * X[:, 0] + 0.1 * X[:, 1] + 3.0  # correlated and far from the centre of its range
    y = X @ np.array([1.0, 2.0, -1.0, 0.5, 0.0]) + rng.normal(size=rows)
    return X, y


def _fit(estimator, X, y, **fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimator.fit(X, y, **fit)


@pytest.mark.parametrize("algorithm", ["ambssgd", "srgd"])
def test_declared_algorithms_take_a_tenth_of_mu_squared_and_compose_to_the_budget(algorithm):
    X, y = _regression()
    model = _fit(DPLinearRegression(algorithm=algorithm, epsilon=1.0, noise_key=NoiseKey.generate()), X, y)
    whitening = model.preconditioner_
    assert whitening is not None
    mu = mu_for_epsilon_delta(1.0, 1e-6)
    assert whitening.event.sensitivity / whitening.event.noise_std == pytest.approx(
        math.sqrt(PRECONDITIONER_SHARE) * mu
    )
    assert model.privacy_report_.epsilon == pytest.approx(1.0, abs=1e-9)
    assert any(note.startswith("private preconditioner") for note in model.privacy_report_.notes)


@pytest.mark.parametrize(
    ("estimator", "fit"),
    [
        (DPLinearRegression(algorithm="ssp"), {}),
        (DPLinearRegression(algorithm="dpsgd", noise="lambda"), {}),
        (DPLinearRegression(algorithm="ambssgd", fit_intercept=False), {}),
        (DPLogisticRegression(algorithm="ambssgd"), {}),
    ],
    ids=["adassp", "dp-lambda-cgd", "no-intercept", "classifier"],
)
def test_other_fits_spend_nothing_on_it(estimator, fit):
    X, y = _regression()
    labels = y > np.median(y) if isinstance(estimator, DPLogisticRegression) else y
    model = _fit(estimator.set_params(noise_key=NoiseKey.generate()), X, labels, **fit)
    assert model.preconditioner_ is None
    assert not any(note.startswith("private preconditioner") for note in model.privacy_report_.notes)
    assert model.privacy_report_.epsilon == pytest.approx(1.0, abs=1e-9)


def test_person_level_fit_is_preconditioned_with_the_person_weights():
    X, y = _regression(rows=40_000)
    people = np.repeat(np.arange(10_000), 4)
    model = _fit(
        DPLinearRegression(algorithm="ambssgd", max_rows_per_user=4, noise_key=NoiseKey.generate()),
        X,
        y,
        groups=people,
    )
    assert model.preconditioner_ is not None
    assert model.privacy_report_.epsilon == pytest.approx(1.0, abs=1e-9)
    assert "user" in model.privacy_report_.ledger_unit


def test_the_guard_judges_the_published_model_on_the_public_scale():
    """The release guard compares the model as published (linear in the features, the whitening mapped
    back) over the rows on the public scale, not the whitened, clipped rows training read."""
    from dpstream.estimators import guarding

    X, y = _regression(rows=20_000, seed=5)
    seen = {}

    def spy(guard, model, params, blocks, *rest):
        blocks = list(blocks)
        seen["params"], seen["rows"] = params, blocks[0][0]
        return original(guard, model, params, iter(blocks), *rest)

    original = guarding.guard_decision
    with mock.patch.object(guarding, "guard_decision", spy):
        fitted = _fit(DPLinearRegression(algorithm="ambssgd", noise_key=NoiseKey.generate()), X, y)
    assert fitted.preconditioner_ is not None
    rows = seen["rows"]
    np.testing.assert_allclose(rows[:, :-1], fitted.feature_bounds_.to_unit(X[: len(rows)]), atol=1e-12)
    on_public_scale = rows @ seen["params"]
    predicted = fitted.label_bounds_.to_unit(fitted.predict(X[: len(rows)]))
    np.testing.assert_allclose(np.clip(on_public_scale, -1, 1), predicted, atol=1e-9)


def test_a_fit_predicts_with_the_unmapped_weights():
    """coef_ and intercept_ are the whitened model stated in the user's units, linear in the features
    (the training clip at the spread is not applied at prediction)."""
    X, y = _regression(rows=20_000, seed=4)
    model = _fit(DPLinearRegression(algorithm="srgd", noise_key=NoiseKey.generate()), X, y)
    assert model.released_ == "model"
    residual = model.predict(X) - y
    assert np.sqrt(np.mean(residual**2)) < 0.5 * np.std(y)


def test_private_preconditioner_helps_dp_ambssgd_on_california():
    """California housing, documented bounds, ε = 1, 3 fixed keys: DP-AMBSSGD's median held-out RMSE ÷ the
    constant's is 0.929 without the preconditioner and 0.677 with it (``python -m benchmarks.preconditioner
    --fits 20``; worst of 20 fits 0.706). Held: with it at most 0.72 and at least 0.15 better."""
    from benchmarks.never_worse import evaluate_cell, prepare
    from benchmarks.preconditioner import without_preconditioner
    from benchmarks.real_datasets import load

    prepared = prepare(load("california"))
    with without_preconditioner():
        before = evaluate_cell(prepared, "ambssgd", "documented", "row", fits=3)
    after = evaluate_cell(prepared, "ambssgd", "documented", "row", fits=3)
    assert after.median() / prepared.constant <= 0.72
    assert before.median() - after.median() >= 0.15 * prepared.constant


def test_dp_ambssgd_within_twice_adassps_excess_and_srgd_gains_on_diamonds():
    """diamonds (43,152 training rows), ε = 1, 3 fixed keys (``python -m benchmarks.preconditioner``, 20
    fits): DP-AMBSSGD with private bounds at 0.83× AdaSSP's excess (9.4× without); SRGD with documented
    bounds 0.580 → 0.417 of the constant's RMSE. Held: within 2×, and a gain of at least 0.1."""
    from benchmarks.never_worse import evaluate_cell, excess_ratio, prepare
    from benchmarks.preconditioner import without_preconditioner
    from benchmarks.real_datasets import load

    prepared = prepare(load("diamonds"))
    reference = evaluate_cell(prepared, "ssp", "private", "row", fits=3)
    ambssgd = evaluate_cell(prepared, "ambssgd", "private", "row", fits=3)
    assert excess_ratio(ambssgd, reference) <= 2.0
    with without_preconditioner():
        before = evaluate_cell(prepared, "srgd", "documented", "row", fits=3)
    after = evaluate_cell(prepared, "srgd", "documented", "row", fits=3)
    assert (before.median() - after.median()) / prepared.constant >= 0.1
