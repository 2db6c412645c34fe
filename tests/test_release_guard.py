"""Never worse than the constant: the release guard (``dpstream.release_guard``) and the estimators that
end every fit with it (``dpstream.estimators.guarding``)."""

import math
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from dpstream.estimators import DPKANClassifier, DPLinearRegression, DPLogisticRegression
from dpstream.noise import NoiseKey
from dpstream.privacy import NeighbouringRelation, event_mu
from dpstream.release_guard import CONSTANT_SHARE, MARGIN_SIGMAS, RegressionGuard, release_guard


def key(seed: int) -> NoiseKey:
    return NoiseKey.from_secret(seed.to_bytes(32, "little"))


@pytest.mark.parametrize("relation", list(NeighbouringRelation))
@pytest.mark.parametrize("classes", [0, 2, 5])
def test_the_guard_releases_are_exactly_its_mu(relation, classes):
    """The constant takes CONSTANT_SHARE of the guard's μ², the comparison the rest: together μ."""
    guard = release_guard(0.37, relation, classes)
    targets = (
        np.array([0.2, -0.5, 0.9])
        if classes == 0
        else np.array([1.0, -1.0, 1.0] if classes == 2 else [0, 4, 2])
    )
    constant = guard.release_constant(guard.constant_sums(targets, None), key(0), 3)
    assert math.isclose(event_mu(constant.event), 0.37 * math.sqrt(CONSTANT_SHARE), rel_tol=1e-12)
    margins = np.array([0.1, -0.3, 0.4]) if classes in (0, 2) else np.eye(5)[[0, 4, 1]]
    decision = guard.decide(
        guard.comparison_sums(margins, targets, None, constant), constant, key(0), 3, (-0.6, 0.6)
    )
    assert math.isclose(event_mu(decision.event), 0.37, rel_tol=1e-12)


@pytest.mark.parametrize("relation", list(NeighbouringRelation))
def test_the_comparison_sensitivity_covers_every_row_the_model_and_labels_allow(relation):
    """d = (ŷ − y)² − (c − y)² over a grid of ŷ in the model's range and y in [−1, 1] never leaves the
    range the sensitivity is computed from."""
    guard = RegressionGuard(1.0, relation)
    for c, low, high in [(-0.9, -1.0, -0.5), (0.0, -1.0, 1.0), (0.3, 0.1, 0.2), (0.95, -0.2, 0.9)]:
        least, largest = guard.difference_range(c, low, high)
        grid_y, grid_p = np.meshgrid(np.linspace(-1, 1, 201), np.linspace(low, high, 201))
        values = (grid_p - grid_y) ** 2 - (c - grid_y) ** 2
        assert values.min() >= least - 1e-12 and values.max() <= largest + 1e-12
        assert values.min() == pytest.approx(least, abs=1e-3) and values.max() == pytest.approx(
            largest, abs=1e-3
        )


def test_a_model_no_better_than_the_constant_is_published_at_most_at_the_margin_rate():
    """A model exactly as good as the constant (D = 0): published only when the noise says it wins by
    MARGIN_SIGMAS stds, Φ(−z) of the time (± 3 binomial stds over 2,000 draws)."""
    guard = RegressionGuard(0.1, NeighbouringRelation.REPLACE_ONE)
    published = 0
    for seed in range(2_000):
        constant = guard.release_constant(np.array([-4_000.0]), key(seed), 10_000)
        published += guard.decide(np.array([0.0]), constant, key(seed), 10_000, (-0.8, 0.2)).model
    expected = norm.cdf(-MARGIN_SIGMAS)
    assert abs(published / 2_000 - expected) <= 3 * math.sqrt(expected * (1 - expected) / 2_000)


def test_the_decision_reads_only_the_releases_and_the_public_count(monkeypatch):
    """Whatever the rows, a fit whose guard saw the same sums makes the same decision and releases the
    same constant: the decision is post-processing of the two releases, the released model and N, never
    of the rows."""
    monkeypatch.setattr(RegressionGuard, "constant_sums", lambda self, targets, weights: np.array([-300.0]))
    monkeypatch.setattr(RegressionGuard, "comparison_sums", lambda self, *args: np.array([80.0]))
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (2_000, 3))
    decisions = []
    for y in (X @ np.array([0.5, -0.2, 0.3]), rng.uniform(-1, 1, 2_000)):  # a signal, and pure noise
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(
                algorithm="dpsgd", noise_key=key(2), feature_bounds=(-1.0, 1.0), label_bounds=(-1.0, 1.0)
            )
            model.fit(X, y)
        # (The comparison's noise std depends on the released model's prediction range, a DP output.)
        decisions.append((model.released_, float(model.intercept_)))
    assert decisions[0] == decisions[1] and decisions[0][0] == "constant"
    assert decisions[0][1] == pytest.approx(-300.0 / 2_000, abs=0.05)  # the noisy label mean


def _skewed_counts(rows: int, seed: int):
    """Counts like doctor visits: mostly zero, a long tail, a weak signal in five bounded features."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (rows, 5))
    y = rng.poisson(np.exp(-1.5 + 0.8 * X[:, 0]))
    return X, y.astype(float)


def test_an_iterative_fit_that_would_lose_to_the_mean_releases_the_noisy_mean():
    """DP-AMBSSGD from the centre of a wide documented label range [0, 50] never reaches a label mean
    near 0.3 in its few steps; the guard publishes the noisy label mean, says so, and scores like it."""
    X, y = _skewed_counts(20_000, 0)
    test_X, test_y = _skewed_counts(2_000, 1)
    bounds = dict(feature_bounds=(0.0, 1.0), label_bounds=(0.0, 50.0))
    with pytest.warns(UserWarning, match="the noisy label mean was released instead"):
        model = DPLinearRegression(algorithm="ambssgd", num_steps=6, noise_key=key(3), **bounds).fit(X, y)
    assert model.released_ == "constant" and not model.guard_.model
    assert np.all(model.coef_ == 0)
    constant = np.sqrt(np.mean((test_y - y.mean()) ** 2))
    assert np.sqrt(np.mean((model.predict(test_X) - test_y) ** 2)) <= 1.02 * constant
    assert any(
        "the noisy label mean, the constant predictor was released" in n for n in model.privacy_report_.notes
    )
    # The whole fit, guard included, is the (ε, δ) asked for.
    assert model.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-9)


def test_a_model_that_clearly_wins_is_released():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (20_000, 4))
    y = X @ np.array([2.0, -1.0, 0.5, 1.5]) + 0.3 * rng.standard_normal(20_000)
    bounds = dict(feature_bounds=(-1.0, 1.0), label_bounds=(-6.0, 6.0))
    for algorithm in ("dpsgd", "srgd", "ambssgd"):
        model = DPLinearRegression(algorithm=algorithm, noise_key=key(7), **bounds).fit(X, y)
        assert model.released_ == "model" and model.guard_.gain > model.guard_.margin
        assert any("the fitted model was released" in note for note in model.privacy_report_.notes)
        assert model.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-9)


def test_adassp_defaults_keep_their_whole_budget_and_public_bounds_or_people_are_guarded():
    """Row-level AdaSSP with private bounds (the defaults) keeps its λ₀ > N rule and its whole μ (no
    guard event); with public bounds, or under the user unit, the guard takes its share and decides."""
    rng = np.random.default_rng(6)
    X = rng.uniform(-1, 1, (6_000, 3))
    y = X @ np.array([1.0, -0.5, 0.5]) + 0.5 * rng.standard_normal(6_000)
    people = np.repeat(np.arange(2_000), 3)
    public = dict(feature_bounds=(-1.0, 1.0), label_bounds=(-4.0, 4.0))
    defaults = DPLinearRegression(noise_key=key(8)).fit(X, y)
    assert defaults.algorithm_ == "ssp" and defaults.guard_ is None and defaults.released_ == "model"
    assert "release guard" not in defaults.privacy_report_.events
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = DPLinearRegression(noise_key=key(8), **public).fit(X, y)
        persons = DPLinearRegression(max_rows_per_user=3, noise_key=key(8), **public).fit(X, y, groups=people)
    for model in (rows, persons):
        assert model.guard_ is not None and "release guard" in model.privacy_report_.events
        assert model.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-9)


def test_a_classifier_that_loses_to_the_majority_releases_it_with_its_frequencies():
    """Labels independent of the features, 80 % one class: no model beats the majority; the guard
    publishes it, and predict_proba gives the noisy class frequencies for every row."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (4_000, 3))
    y = np.where(rng.uniform(size=4_000) < 0.8, "common", "rare")
    for estimator in (
        DPLogisticRegression(algorithm="dpsgd", noise_key=key(4), feature_bounds=(-1.0, 1.0)),
        DPKANClassifier(noise_key=key(4), feature_low=-1.0, feature_high=1.0),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(X, y)
        if estimator.released_ != "constant":
            continue  # a model that matched the majority to within the noise: allowed, checked below
        assert set(estimator.predict(X)) == {"common"}
        probabilities = estimator.predict_proba(X[:3])
        assert np.allclose(probabilities, probabilities[0]) and probabilities[0, 0] == pytest.approx(
            0.8, abs=0.05
        )
    accuracy = np.mean(estimator.predict(X) == y)
    assert accuracy >= 0.78  # never below the majority class by more than the noise


def test_multiclass_constant_is_the_majority_class():
    rng = np.random.default_rng(9)
    X = rng.uniform(-1, 1, (3_000, 2))
    y = rng.choice(["a", "b", "c"], size=3_000, p=[0.6, 0.3, 0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPLogisticRegression(
            algorithm="dpsgd", epsilon=0.5, noise_key=key(11), feature_bounds=(-1.0, 1.0)
        ).fit(X, y)
    if model.released_ == "constant":
        assert set(model.predict(X)) == {"a"}
        assert np.argmax(model.predict_proba(X[:1])) == 0
    assert np.mean(model.predict(X) == y) >= 0.57


def test_a_regression_predicts_within_its_label_bounds():
    """Training clipped every label into label_bounds_, and the guard judged the clipped predictions: so
    does predict, whatever the rows."""
    rng = np.random.default_rng(12)
    X = rng.uniform(0, 1, (5_000, 2))
    y = 10 * X[:, 0] + rng.standard_normal(5_000)
    model = DPLinearRegression(noise_key=key(13), feature_bounds=(0.0, 1.0), label_bounds=(0.0, 10.0)).fit(
        X, y
    )
    far = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    predicted = model.predict(far)
    assert predicted.min() >= 0.0 and predicted.max() <= 10.0
    raw = far @ model.coef_ + model.intercept_
    assert np.allclose(predicted, np.clip(raw, 0.0, 10.0))


def test_adassps_label_mean_rule_is_not_reported_as_a_lost_comparison():
    """Defaults at the row level (AdaSSP, private bounds: no guard) on too few rows for 19 features: only
    the label sum is released, and the one warning says so; no guard compared anything."""
    rng = np.random.default_rng(3)
    X = rng.lognormal(3.0, 0.5, (1_400, 19))
    y = 1_000.0 * X[:, 0] + rng.normal(0, 5_000.0, 1_400)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = DPLinearRegression(epsilon=1.0, noise_key=key(21)).fit(X, y)
    messages = [str(warning.message) for warning in caught]
    assert model.released_ == "constant" and model.guard_ is None
    assert any(message.startswith("too few rows for the regression") for message in messages), messages
    assert not any("guard's noisy comparison" in message for message in messages), messages
