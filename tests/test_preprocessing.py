"""DP transformers (dpstream.preprocessing), the PrivacyLeakWarning for non-private pipeline steps,
random_state's reproducible noise, and the refusal of sample_weight."""

import math
import warnings

import numpy as np
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import dpstream
from dpstream import BudgetError, DPLinearRegression, PrivacyBudget
from dpstream.estimators.leaks import data_independent
from dpstream.estimators.parameters import InvalidParameterError
from dpstream.noise import NoiseKey
from dpstream.preprocessing import DPOneHotEncoder, DPSimpleImputer, DPStandardScaler, PrivacyLeakWarning
from dpstream.privacy import mu_for_epsilon_delta

KEY = NoiseKey.from_secret(bytes(range(32)))


@parametrize_with_checks(
    [
        DPStandardScaler(bounds=(-5.0, 5.0)),
        DPStandardScaler(bounds=(-5.0, 5.0), relation="zero-out"),
        DPSimpleImputer(),
        DPSimpleImputer(strategy="mean", bounds=(-5.0, 5.0)),
    ]
)
def test_transformers_pass_check_estimator(estimator, check):
    check(estimator)


def shifted_rows(rows=20_000, dim=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(3.0, 2.0, (rows, dim))


def leak_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, PrivacyLeakWarning)]


def test_the_scaler_is_within_its_noise_of_the_exact_moments():
    X = shifted_rows()
    scaler = DPStandardScaler(bounds=(-7.0, 13.0), noise_key=KEY).fit(X)
    mu = mu_for_epsilon_delta(1.0, 1e-6)
    mean_std = 10.0 * math.sqrt(5 * 4) / mu / X.shape[0]  # half-width × σ / N
    clipped = np.clip(X, -7.0, 13.0)
    assert np.all(np.abs(scaler.mean_ - clipped.mean(axis=0)) < 5 * mean_std)
    variance_std = 10.0**2 * math.sqrt(5 * 4) / mu / X.shape[0]  # half-width² × σ / N
    assert np.all(np.abs(scaler.var_ - clipped.var(axis=0)) < 5 * variance_std + 5 * mean_std)
    assert scaler.privacy_report_.epsilon == pytest.approx(1.0)
    assert scaler.privacy_report_.sensitivity == pytest.approx(math.sqrt(20))
    scaled = scaler.transform(X)
    assert np.all(np.abs(scaled.mean(axis=0)) < 0.02) and np.all(np.abs(scaled.std(axis=0) - 1) < 0.05)
    assert np.allclose(scaler.inverse_transform(scaled), clipped)


def test_the_scaler_estimates_private_bounds_within_the_same_epsilon():
    scaler = DPStandardScaler(noise_key=KEY).fit(shifted_rows())
    low, high = scaler.bounds_
    assert np.all(low < 0.5) and np.all(high > 5.5)  # the bulk (3 ± 2) is inside
    assert scaler.privacy_report_.epsilon == pytest.approx(1.0)
    assert any("private bounds" in note for note in scaler.privacy_report_.notes)


def test_the_scaler_refuses_too_few_rows_for_private_bounds_naming_the_fix():
    with pytest.raises(ValueError, match=r"DPStandardScaler\(bounds='private'\).*Pass public bounds"):
        DPStandardScaler().fit(shifted_rows(rows=40))


def test_zero_out_releases_the_count_too():
    scaler = DPStandardScaler(bounds=(-7.0, 13.0), relation="zero-out", noise_key=KEY).fit(shifted_rows())
    assert scaler.privacy_report_.sensitivity == pytest.approx(math.sqrt(2 * 4 + 1))
    assert scaler.privacy_report_.relation == "zero-out"


def test_the_imputer_fills_a_noisy_mean_or_a_public_constant():
    X = shifted_rows()
    holes = np.random.default_rng(1).random(X.shape) < 0.2
    X[holes] = np.nan
    imputer = DPSimpleImputer(strategy="mean", bounds=(-7.0, 13.0), noise_key=KEY).fit(X)
    assert np.all(np.abs(imputer.statistics_ - np.nanmean(np.clip(X, -7, 13), axis=0)) < 0.05)
    filled = imputer.transform(X)
    assert not np.isnan(filled).any() and np.array_equal(filled[~holes], X[~holes])
    constant = DPSimpleImputer(fill_value=-1.0).fit(X)
    assert constant.privacy_report_.epsilon == 0 and np.all(constant.transform(X)[holes] == -1.0)


def test_the_imputer_fills_text_columns_with_a_public_category():
    X = np.array([["red", None], [np.nan, "small"]], dtype=object)
    filled = DPSimpleImputer(fill_value="Unknown").fit(X).transform(X)
    assert filled.tolist() == [["red", "Unknown"], ["Unknown", "small"]]
    with pytest.raises(ValueError, match="fill_value='Unknown' is text and X's columns are numbers"):
        DPSimpleImputer(fill_value="Unknown").fit(shifted_rows(rows=10))


def test_a_noisy_mean_needs_public_bounds():
    with pytest.raises(ValueError, match=r"strategy='mean'\) needs public bounds=\(low, high\)"):
        DPSimpleImputer(strategy="mean").fit(shifted_rows(rows=10))
    with pytest.raises(ValueError, match="low < high in every column"):
        DPSimpleImputer(strategy="mean", bounds=(1.0, 1.0)).fit(shifted_rows(rows=10))


def test_the_encoder_takes_public_categories_and_releases_nothing():
    X = np.array([["a", "x"], ["b", "z"]], dtype=object)
    encoder = DPOneHotEncoder(categories=[["a", "b"], ["x", "y"]]).fit(X)
    assert encoder.transform(X).tolist() == [[1, 0, 1, 0], [0, 1, 0, 0]]  # "z" is not public: all zeros
    assert encoder.privacy_report_.epsilon == 0 and encoder.privacy_report_.event.mu == 0
    assert list(encoder.get_feature_names_out()) == ["x0_a", "x0_b", "x1_x", "x1_y"]
    with pytest.raises(ValueError, match="needs the public categories"):
        DPOneHotEncoder().fit(X)


def regression(rows=20_000, seed=0):
    X = shifted_rows(rows, seed=seed)
    return X, X @ np.array([1.0, -1.0, 0.5, 0.0]) + np.random.default_rng(seed).normal(0, 1, rows)


@pytest.mark.parametrize(
    "before",
    [
        StandardScaler(),
        SimpleImputer(),
        make_pipeline(FunctionTransformer(), StandardScaler()),
    ],
    ids=["StandardScaler", "SimpleImputer-mean", "nested"],
)
def test_a_non_private_step_before_a_dp_fit_warns_and_is_noted(before):
    X, y = regression()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pipeline = make_pipeline(before, DPLinearRegression(feature_bounds=(-10.0, 10.0), noise_key=KEY)).fit(
            X, y
        )
    (message,) = leak_warnings(record)
    assert "without differential privacy" in message and type(before).__name__ in message
    if isinstance(before, Pipeline):  # a composite names its part that learnt from the rows
        assert "(Pipeline: 'standardscaler' StandardScaler)" in message
    assert any("not (epsilon, delta)-DP" in note for note in pipeline[-1].privacy_report_.notes)


@pytest.mark.parametrize(
    "before",
    [
        DPStandardScaler(bounds=(-7.0, 13.0)),
        FunctionTransformer(np.tanh),
        OneHotEncoder(categories=[[0.0, 1.0]] * 4, handle_unknown="ignore", sparse_output=False),
        ColumnTransformer(
            [("scale", DPStandardScaler(bounds=(-7.0, 13.0)), [0, 1])], remainder="passthrough"
        ),
    ],
    ids=["DPStandardScaler", "FunctionTransformer", "OneHotEncoder-public", "ColumnTransformer"],
)
def test_private_or_data_independent_steps_do_not_warn(before):
    X, y = regression()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_pipeline(before, DPLinearRegression(feature_bounds=(-10.0, 10.0))).fit(X, y)
    assert leak_warnings(record) == []


def test_which_sklearn_steps_learn_from_the_rows():
    learns = [OneHotEncoder(), OneHotEncoder(categories=[[0, 1]], min_frequency=5), SimpleImputer(), "x"]
    public = [OneHotEncoder(categories=[[0, 1]]), SimpleImputer(strategy="constant"), "passthrough", None]
    assert [data_independent(step) for step in learns] == [False] * 4
    assert [data_independent(step) for step in public] == [True] * 4


def test_a_pipeline_of_dp_steps_states_its_total_and_charges_one_budget():
    X, y = regression()
    budget = PrivacyBudget(epsilon=1.6)  # two fits at epsilon=1 compose to 1.4, three to 1.8
    steps = [
        DPStandardScaler(bounds=(-7.0, 13.0), budget=budget, noise_key=KEY),
        DPLinearRegression(feature_bounds=(-5.0, 5.0), budget=budget, noise_key=KEY),
    ]
    pipeline = make_pipeline(*steps).fit(X, y)
    mu = mu_for_epsilon_delta(1.0, 1e-6)
    assert budget.spent_mu == pytest.approx(math.sqrt(2) * mu)
    assert any("pipeline releases" in note for note in pipeline[-1].privacy_report_.notes)
    assert pipeline.score(X, y) > 0.8  # R² of the exact least squares: 0.90
    refused = DPStandardScaler(bounds=(-7.0, 13.0), budget=budget)
    with pytest.raises(BudgetError, match="has epsilon=.* left"):
        refused.fit(X)
    assert not hasattr(refused, "mean_")


def test_a_grid_search_over_a_leaky_pipeline_warns_at_every_fit():
    X, y = regression(rows=6_000)
    pipeline = make_pipeline(StandardScaler(), DPLinearRegression(feature_bounds=(-5.0, 5.0)))
    search = GridSearchCV(pipeline, {"dplinearregression__fit_intercept": [True, False]}, cv=2)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        search.fit(X, y)
    assert len(leak_warnings(record)) == 2 * 2 + 1  # every candidate's fold, and the refit


def test_random_state_reproduces_the_noise_and_says_so():
    X, y = regression(rows=5_000)
    with pytest.warns(PrivacyLeakWarning, match="random_state=3 made the noise reproducible"):
        first = DPLinearRegression(random_state=3).fit(X, y)
    with pytest.warns(PrivacyLeakWarning):
        second = DPLinearRegression(random_state=3).fit(X, y)
    assert np.array_equal(first.coef_, second.coef_)
    assert any("for tests only" in note for note in first.privacy_report_.notes)
    other = DPLinearRegression(random_state=4).fit(X, y)
    assert not np.array_equal(first.coef_, other.coef_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # a noise_key wins: nothing seeded, no warning
        keyed = DPLinearRegression(random_state=3, noise_key=KEY).fit(X, y)
    assert np.array_equal(keyed.coef_, DPLinearRegression(noise_key=KEY).fit(X, y).coef_)


def test_the_kan_seeds_its_model_publicly_and_its_noise_only_with_random_state():
    X, y = regression(rows=4_000)
    labels = (y > np.median(y)).astype(int)
    kan = dpstream.DPKANClassifier(num_hidden=4, feature_low=-7.0, feature_high=13.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        first, second = (kan.fit(X, labels).weights_.copy() for _ in range(2))
    assert not np.array_equal(first, second)  # fresh noise
    with pytest.warns(PrivacyLeakWarning):
        seeded = [kan.set_params(random_state=5).fit(X, labels).weights_.copy() for _ in range(2)]
    assert np.array_equal(*seeded)


def test_sample_weight_is_refused_naming_why():
    X, y = regression(rows=500)
    with pytest.raises(ValueError, match="does not take sample_weight: every mechanism is calibrated"):
        DPLinearRegression().fit(X, y, sample_weight=np.ones(500))
    with pytest.raises(TypeError, match="unexpected keyword argument 'weights'"):
        DPLinearRegression().fit(X, y, weights=np.ones(500))


def test_a_parameter_outside_its_rule_is_named():
    with pytest.raises(
        InvalidParameterError, match=r"'epsilon' parameter of DPLinearRegression must be a float"
    ):
        DPLinearRegression(epsilon=-1.0).fit(*regression(rows=100))
    with pytest.raises(ValueError, match=r"'bounds' parameter of DPStandardScaler must be .*'private'"):
        DPStandardScaler(bounds="data").fit(shifted_rows(rows=10))
