"""Estimator defaults on badly scaled data: "auto" → AdaSSP (or SRGD at small ε over many rows), private or
public bounds, stable steps, warnings."""

import warnings

import numpy as np
import pytest

from dpstream.estimators import DPKANClassifier, DPLinearRegression, DPLogisticRegression
from dpstream.noise import NoiseKey

KEY = NoiseKey.from_secret(b"d" * 32)


def positive_features(rows=20_000, dim=12, seed=0):
    """Features in [0, 1], strongly correlated: ‖E[xxᵀ]‖ ≈ 4 > 1, the case where the old step diverged."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, (rows, 1))
    X = np.clip(0.7 * base + 0.3 * rng.uniform(0, 1, (rows, dim)), 0, 1)
    y = np.clip(2 * X.mean(axis=1) - 1 + 0.1 * rng.standard_normal(rows), -1, 1)
    return X, y


def test_auto_resolves_by_model_and_hyperparameters():
    X, y = positive_features(3000)
    assert DPLinearRegression().fit(X, y).algorithm_ == "ssp"
    assert DPLogisticRegression().fit(X, y > 0).algorithm_ == "ssp"
    assert DPLinearRegression(num_steps=3).fit(X, y).algorithm_ == "ambssgd"
    assert DPLinearRegression(batch_size=300).fit(X, y).algorithm_ == "dpsgd"
    assert (
        DPKANClassifier(num_hidden=4, grid_size=3)
        .fit(X[:, :3], y > 0)
        .privacy_report_.mechanism.startswith("one-pass DP-SGD")
    )
    with pytest.raises(ValueError, match="algorithm='ssp' has no steps; num_steps"):
        DPLinearRegression(algorithm="ssp", num_steps=3).fit(X, y)


def test_auto_runs_srgd_for_a_regression_at_small_epsilon_over_many_rows_and_inputs():
    """The linear kind's small-budget choice (BENCHMARKS.md "Where auto runs Accelerated-DP-SRGD"): row
    level, private bounds, N ≥ 20,000 and at least 20 inputs (features and the intercept), at the fit's
    whole ε ≤ 1 (not what private bounds and the guard leave) or at any ε where the private
    preconditioner whitens SRGD's rows."""
    from dpstream.algorithms.builder import AlgorithmSpec, chosen_algorithm
    from dpstream.models.glm import LinearRegressionModel, LogisticRegressionModel
    from dpstream.privacy import PrivacyUnit

    linear, logistic = LinearRegressionModel(), LogisticRegressionModel()

    def auto(model=linear, rows=20_000, inputs=20, **settings):
        spec = AlgorithmSpec(**{"small_budget_eligible": True, **settings})
        return chosen_algorithm(spec, model, inputs, rows)

    assert auto(epsilon=1.0) == "srgd"
    assert auto(epsilon=1.0, rows=19_999) == auto(epsilon=1.0, inputs=19) == auto(epsilon=1.01) == "ssp"
    assert auto(epsilon=0.9, auto_epsilon=2.0) == "ssp"  # the whole budget decides
    assert auto(model=logistic, epsilon=1.0) == "ssp"
    assert auto(epsilon=1.0, small_budget_eligible=False) == "ssp"  # public bounds, or a lake
    assert auto(epsilon=1.0, unit=PrivacyUnit.user("id", 5)) == "ssp"
    assert auto(epsilon=1.0, given=frozenset({"label_bound"})) == "ssp"  # AdaSSP's own setting
    assert auto(name="ssp", epsilon=1.0) == "ssp"
    assert auto(epsilon=4.0, whitens=True) == auto(epsilon=1.01, whitens=True) == "srgd"
    assert auto(epsilon=4.0, whitens=True, rows=19_999) == auto(epsilon=4.0, whitens=True, inputs=19) == "ssp"
    assert auto(epsilon=1.5, whitens=True, inputs=100) == "ssp"  # τ = 1.9 > 0.3: no whitening there

    X, y = positive_features(20_000, dim=19)  # 19 features and the intercept
    fitted = DPLinearRegression(epsilon=1.0, noise_key=KEY).fit(X, y)
    assert fitted.algorithm_ == "srgd" and fitted.guard_ is not None  # guarded: not AdaSSP's exemption
    above = DPLinearRegression(epsilon=1.5, noise_key=KEY).fit(X, y)
    assert above.algorithm_ == "srgd" and above.preconditioner_ is not None  # whitened rows, any ε
    assert DPLinearRegression(epsilon=1.5, fit_intercept=False, noise_key=KEY).fit(X, y).algorithm_ == "ssp"
    assert DPLinearRegression(epsilon=1.0, noise_key=KEY).fit(X[:19_999], y[:19_999]).algorithm_ == "ssp"
    assert DPLinearRegression(epsilon=1.0, noise_key=KEY).fit(X[:, :18], y).algorithm_ == "ssp"
    public = DPLinearRegression(epsilon=1.0, feature_bounds=(0, 1), label_bounds=(-1, 1), noise_key=KEY)
    assert public.fit(X, y).algorithm_ == "ssp"


@pytest.mark.parametrize("algorithm", ["ambssgd", "dpsgd", "ssp"])
def test_defaults_do_not_diverge_on_features_in_zero_one(algorithm):
    X, y = positive_features()
    assert np.linalg.eigvalsh(X.T @ X / len(X))[-1] > 2.0  # the old default step η ≈ 1 diverged here
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither a divergence nor a scale warning
        model = DPLinearRegression(algorithm=algorithm, epsilon=4.0).fit(X, y)
    constant = float(np.mean((y - y.mean()) ** 2))
    assert float(np.mean((model.predict(X) - y) ** 2)) < constant
    if model.training_loss_.size > 1:
        assert model.training_loss_[-1] < model.training_loss_[0]


def test_feature_and_label_bounds_give_coefficients_in_user_units():
    rng = np.random.default_rng(1)
    raw = rng.uniform(0, 1000, (5000, 3))
    dollars = 50_000 + raw @ np.array([100.0, -50.0, 20.0]) + 1000 * rng.standard_normal(5000)
    bounds, label_bounds = (0.0, 1000.0), (-100_000.0, 200_000.0)
    model = DPLinearRegression(noise_key=KEY, feature_bounds=bounds, label_bounds=label_bounds).fit(
        raw, dollars
    )
    unit = (-1.0, 1.0)
    mapped = DPLinearRegression(noise_key=KEY, feature_bounds=unit, label_bounds=unit).fit(
        raw / 500 - 1, (dollars - 50_000) / 150_000
    )
    np.testing.assert_allclose(
        model.predict(raw), 50_000 + 150_000 * mapped.predict(raw / 500 - 1), rtol=1e-9
    )
    np.testing.assert_allclose(model.coef_, mapped.coef_ * 150_000 / 500, rtol=1e-9)
    assert model.score(raw, dollars) > 0.9  # and it learned, at ε = 1
    # Predictions clip inputs into the bounds, as in training.
    np.testing.assert_allclose(model.predict(np.full((1, 3), 5000.0)), model.predict(np.full((1, 3), 1000.0)))


def test_per_column_bounds_and_classifier():
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.uniform(-124, -114, 20_000), rng.uniform(0, 15, 20_000)])
    labels = (X[:, 1] + rng.normal(0, 1, 20_000) > 7).astype(int)
    clf = DPLogisticRegression(feature_bounds=([-124.5, 0.0], [-114.0, 15.0])).fit(X, labels)
    assert clf.score(X, labels) > 0.8
    assert clf.predict_proba(X[:5]).shape == (5, 2)


def test_raw_units_get_private_bounds_charged_within_epsilon():
    """No bounds given: the fit estimates them with DP inside its own (ε, δ) and learns in dollars."""
    X, y = positive_features(5000)
    X = X.copy()
    X[:, 4] *= 1e5
    dollars = 300_000 * y + 50_000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = DPLinearRegression(noise_key=KEY).fit(X, dollars)
    report = model.privacy_report_
    assert report.epsilon == pytest.approx(1.0, rel=1e-6) and report.delta == 1e-6
    assert any(note.startswith("private bounds (feature_bounds, label_bounds:") for note in report.notes)
    assert "private bounds, coarse round" in report.events and "XᵀX upper triangle" in report.events
    assert model.feature_bounds_.high[4] > 1e4 and model.label_bounds_.high[0] > 200_000
    constant = np.sqrt(np.mean((dollars - dollars.mean()) ** 2))
    assert np.sqrt(np.mean((model.predict(X) - dollars) ** 2)) < 0.5 * constant


def test_too_few_rows_for_private_bounds_names_the_minimum_and_the_fix():
    rng = np.random.default_rng(8)
    X, y = rng.lognormal(0, 4, (60, 5)), rng.lognormal(0, 4, 60)
    with pytest.raises(
        ValueError,
        match=r"too few rows for private bounds: n_samples=60 with 6 column\(s\).*"
        r"at least [\d,]+ rows.*feature_bounds=\(low, high\) and label_bounds=\(low, high\)",
    ):
        DPLinearRegression().fit(X, y)
    with pytest.raises(
        ValueError, match=r"n_samples=60 with 5 column\(s\).*Pass feature_bounds=\(low, high\) from"
    ):
        DPLogisticRegression().fit(X, y > 1)  # a classifier's labels need no bounds
    DPLinearRegression(feature_bounds=(0, 100), label_bounds=(0, 100)).fit(X, y)  # public bounds: no refusal


def test_too_few_rows_for_the_regression_release_the_label_mean():
    """λ₀ > N (public quantities): AdaSSP releases only the noisy label sum, says so, and predicts it."""
    rng = np.random.default_rng(9)
    X = rng.uniform(-1, 1, (200, 30))
    y = np.clip(0.3 + 0.1 * rng.standard_normal(200), -1, 1)
    unit = (-1.0, 1.0)
    with pytest.warns(
        UserWarning, match=r"too few rows .*label mean.*Use more rows, a larger epsilon"
    ) as caught:
        model = DPLinearRegression(feature_bounds=unit, label_bounds=unit, noise_key=KEY).fit(X, y)
    # One explanation: the guard had no fitted model to compare, so it does not warn that one lost
    assert not [w for w in caught if "lost to the noisy label mean" in str(w.message)]
    report = model.privacy_report_
    assert "label mean only" in report.mechanism and report.epsilon == pytest.approx(1.0, rel=1e-6)
    assert np.all(model.coef_ == 0) and np.ptp(model.predict(X)) == 0
    assert abs(model.intercept_ - 0.3) < 0.2  # the noisy mean, σ ≈ 2·sqrt(2)/(μ·200)
    assert model.released_ == "constant"  # whichever rule released it, the user is told it is the mean


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(feature_bounds=(1.0, 0.0)), "feature_bounds needs low < high for every column; column 0"),
        (dict(feature_bounds=([0.0, 0.0], [1.0, 1.0])), "feature_bounds must be a pair"),
        (dict(feature_bounds=(0.0, np.inf)), "feature_bounds must be finite"),
        (dict(label_bounds=(3.0, 3.0)), "label_bounds needs low < high"),
    ],
)
def test_bad_bounds_are_named(params, match):
    X, y = positive_features(500)
    with pytest.raises(ValueError, match=match):
        DPLinearRegression(**params).fit(X, y)


def test_label_bounds_refused_for_a_classifier():
    X, y = positive_features(500)
    with pytest.raises(ValueError, match="label_bounds applies to regression"):
        DPLogisticRegression(label_bounds=(0, 1)).fit(X, y > 0)


def test_divergence_warns_with_the_losses():
    X, y = positive_features(20_000)
    with pytest.warns(UserWarning, match=r"training loss rose from .* diverging \(operator-only"):
        DPLinearRegression(algorithm="ambssgd", learning_rate=5.0, epsilon=8.0).fit(X, y)


def test_small_n_ambssgd_names_the_minimum_rows():
    X, y = positive_features(500)
    public = dict(feature_bounds=(0.0, 1.0), label_bounds=(-1.0, 1.0))
    with pytest.raises(
        ValueError, match=r"too few rows for DP-AMBSSGD: n_samples=500.* at least [\d,]+ rows.*'ssp'"
    ):
        DPLinearRegression(algorithm="ambssgd", **public).fit(X, y)
    # "auto" at the same N fits AdaSSP and is not a zero model.
    model = DPLinearRegression(epsilon=4.0, **public).fit(X, y)
    assert model.algorithm_ == "ssp" and np.any(model.coef_ != 0)


def test_a_dominating_ridge_is_reported_not_silent():
    # 3,000 rows × 30 features at ε = 2: λ₀ < N (so a regression is released), but the private ridge
    # (a DP output) is above the mean curvature, N/3 for uniform features on [−1, 1].
    rng = np.random.default_rng(6)
    X = rng.uniform(-1, 1, (3000, 30))
    y = np.clip(X[:, 0] * 0.5 + 0.1 * rng.standard_normal(3000), -1, 1)
    unit = (-1.0, 1.0)
    with pytest.warns(
        UserWarning,
        match=r"private ridge λ = .* exceeds the data's mean curvature tr\(XᵀX\)/d = .*algorithm='srgd'",
    ):
        model = DPLinearRegression(epsilon=2.0, feature_bounds=unit, label_bounds=unit).fit(X, y)
    assert model.ridge_ > 1000 and "exceeds the data's mean curvature" in model.privacy_report_.notes[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enough rows: no warning
        big = np.random.default_rng(7).uniform(-1, 1, (50_000, 3))
        DPLinearRegression(feature_bounds=unit, label_bounds=unit).fit(big, np.clip(big[:, 0] * 0.5, -1, 1))


def test_public_bounds_in_the_wrong_units_warn_naming_the_columns():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(10)
    X = pd.DataFrame({"rooms": rng.uniform(0, 10, 3000), "share": rng.uniform(0, 1, 3000)})
    y = X["rooms"] * 3 + rng.standard_normal(3000)
    with pytest.warns(UserWarning, match=r"public bounds clip many values of rooms \(9\d%\), y \(\d+%\)"):
        DPLinearRegression(feature_bounds=(0, 1), label_bounds=(0, 1)).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # bounds that hold the data: no warning
        DPLinearRegression(feature_bounds=(0, 10), label_bounds=(-10, 40)).fit(X, y)


def test_the_whole_fits_epsilon_is_capped_and_a_text_label_is_named():
    X, y = positive_features(3000)
    with pytest.raises(ValueError, match="epsilon must be at most 100 .* got 101"):
        DPLinearRegression(epsilon=101).fit(
            X, y
        )  # private bounds would take a share: the cap is on the whole
    with pytest.raises(
        ValueError, match="y must be numeric for a regressor; it holds 'high'. For class labels"
    ):
        DPLinearRegression().fit(X, np.where(y > 0, "high", "low"))


def test_a_classifier_no_better_than_the_majority_says_so():
    rng = np.random.default_rng(11)
    X = rng.uniform(0, 1, (8000, 3))
    rare = (X[:, 0] > 0.97).astype(int)  # 3 % positives: beyond the least-squares surrogate at ε = 1
    # Public bounds: the release guard compares the model with the majority class and releases it.
    with pytest.warns(UserWarning, match=r"so the majority class was released instead"):
        guarded = DPLogisticRegression(feature_bounds=(0, 1), noise_key=KEY).fit(X, rare)
    assert guarded.released_ == "constant" and set(guarded.predict(X)) == {0}
    # The defaults (private bounds, no guard) say when the model predicts one class for every row.
    with pytest.warns(UserWarning, match=r"predicts 0 for every training row \(operator-only"):
        DPLogisticRegression(noise_key=KEY).fit(X, rare)
