"""Estimators: scikit-learn conventions, validated parameters, input types, and the privacy report."""

import numpy as np
import pandas as pd
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpstream.estimators import DPKANClassifier, DPLinearRegression, DPLogisticRegression
from dpstream.noise import NoiseKey
from dpstream.privacy import epsilon_for_delta

NOISY = "DP noise at epsilon=1 on the checks' few hundred rows cannot reach their accuracy thresholds"


def expected_failures(estimator):
    # The checks set random_state=0, which reproduces the noise: the checks that fit twice and compare pass.
    # With that seed the classifiers reach check_classifiers_train's accuracy; the regression does not.
    return {"check_regressors_train": NOISY} if isinstance(estimator, DPLinearRegression) else {}


# The checks fit 20-200 rows: too few for private bounds at ε = 1, so the instances get public ones (the
# private default and its refusal below a minimum N are tested in tests/test_bounds.py).
PUBLIC = dict(feature_bounds=(-5.0, 5.0))


@parametrize_with_checks(
    [
        DPLinearRegression(**PUBLIC, label_bounds=(-5.0, 5.0)),
        DPLinearRegression(**PUBLIC, label_bounds=(-5.0, 5.0), algorithm="dpsgd", noise="lambda"),
        DPLinearRegression(**PUBLIC, label_bounds=(-5.0, 5.0), algorithm="srgd"),
        DPLogisticRegression(feature_bounds=(-3.0, 3.0), algorithm="dpsgd", noise="nu"),
        DPKANClassifier(num_hidden=8, feature_low=-5.0, feature_high=5.0),
    ],
    expected_failed_checks=expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def regression_data(rows=60_000, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, dim))
    w = rng.standard_normal(dim) / np.sqrt(dim)
    return X, X @ w + 0.5 + 0.3 * rng.standard_normal(rows)


KEY = NoiseKey.from_secret(b"k" * 32)


@pytest.mark.parametrize(
    "algorithm, extra",
    [
        ("ambssgd", {}),
        ("dpsgd", {"noise": "independent"}),
        ("dpsgd", {"noise": "lambda"}),
        ("dpsgd", {"noise": "nu"}),
        ("srgd", {}),
    ],
)
def test_fit_learns_and_reports(algorithm, extra):
    X, y = regression_data()
    clip = {} if algorithm == "ambssgd" else {"clip_norm": 4.0}  # DP-AMBSSGD picks its clip norms by DP-STAT
    model = DPLinearRegression(algorithm=algorithm, noise_key=KEY, **clip, **extra).fit(X, y)
    # Private bounds map the Gaussian features onto [-1, 1] by their ~2% quantiles; DP-AMBSSGD's ~44
    # steps of the stable size 1/(L·R²) reach R² ≈ 0.39-0.43 there with the release guard's share taken
    # (12 keys; the others 0.7-0.9): it learns. A fixed key: the threshold sits inside that spread.
    assert model.score(X, y) > 0.4
    report = model.privacy_report_
    assert report.epsilon == pytest.approx(1.0, rel=1e-9)
    assert report.epsilon == pytest.approx(epsilon_for_delta(1e-6, report.mu), rel=1e-12)
    assert report.delta == 1e-6 and report.relation == "replace-one"
    assert "guarantee" in report.to_markdown()


def test_same_key_same_model_and_fresh_keys_differ():
    X, y = regression_data(20_000)
    a = DPLinearRegression(noise_key=KEY).fit(X, y).coef_
    b = DPLinearRegression(noise_key=KEY).fit(X, y).coef_
    c = DPLinearRegression().fit(X, y).coef_
    assert a.tobytes() == b.tobytes()
    assert not np.array_equal(a, c)


def test_lambda_zero_and_nu_one_equal_dp_sgd():
    X, y = regression_data(20_000)
    base = DPLinearRegression(algorithm="dpsgd", noise_key=KEY).fit(X, y).coef_
    for noise, extra in (("lambda", {"correlation": 0.0}), ("nu", {"nu": 1.0})):
        other = DPLinearRegression(algorithm="dpsgd", noise=noise, noise_key=KEY, **extra).fit(X, y).coef_
        assert other.tobytes() == base.tobytes()


def test_pandas_and_dask_inputs_match_numpy():
    import dask.array as da
    import dask.dataframe as dd

    X, y = regression_data(30_000)
    reference = DPLinearRegression(noise_key=KEY).fit(X, y).coef_
    from_pandas = (
        DPLinearRegression(noise_key=KEY).fit(pd.DataFrame(X, columns=list("abcdef")), pd.Series(y)).coef_
    )
    np.testing.assert_allclose(from_pandas, reference, rtol=1e-12)  # same maths; BLAS order may differ
    from_dask = (
        DPLinearRegression(noise_key=KEY)
        .fit(da.from_array(X, chunks=(7000, 3)), da.from_array(y, chunks=7000))
        .coef_
    )
    np.testing.assert_allclose(from_dask, reference, rtol=1e-9)
    frame = dd.from_pandas(pd.DataFrame(X), npartitions=5)
    from_frame = (
        DPLinearRegression(noise_key=KEY).fit(frame, dd.from_pandas(pd.Series(y), npartitions=5)).coef_
    )
    np.testing.assert_allclose(from_frame, reference, rtol=1e-9)


def test_float32_input_accepted():
    X, y = regression_data(20_000)
    model = DPLinearRegression().fit(X.astype(np.float32), y)
    assert model.score(X, y) > 0.5


def test_logistic_labels_and_probabilities():
    X, y = regression_data(40_000)
    labels = np.where(y > 0.5, "high", "low")
    clf = DPLogisticRegression(algorithm="dpsgd").fit(X, labels)
    assert clf.classes_.tolist() == ["high", "low"]
    assert clf.score(X, labels) > 0.8
    proba = clf.predict_proba(X[:10])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(clf.predict(X[:100])) <= {"high", "low"}
    zero_one = DPLogisticRegression().fit(X, (y > 0.5).astype(int))
    assert zero_one.classes_.tolist() == [0, 1]


@pytest.mark.parametrize(
    "params, match",
    [
        ({"epsilon": 0.0}, "'epsilon' parameter"),
        ({"epsilon": -1.0}, "'epsilon' parameter"),
        ({"delta": 0.0}, "'delta' parameter"),
        ({"delta": 1.0}, "'delta' parameter"),
        ({"algorithm": "dpsgd", "noise": "lambda", "correlation": 1.0}, "'correlation' parameter"),
        ({"algorithm": "dpsgd", "noise": "lambda", "correlation": -0.2}, "'correlation' parameter"),
        ({"algorithm": "dpsgd", "noise": "nu", "nu": 0.0}, "'nu' parameter"),
        ({"algorithm": "dpsgd", "noise": "nu", "nu": 1.5}, "'nu' parameter"),
        ({"algorithm": "adam"}, "'algorithm' parameter"),
        ({"relation": "add-remove"}, "'relation' parameter"),
        ({"algorithm": "dpsgd", "batch_size": 10**6}, "batch_size=1000000 is larger than the number of rows"),
        ({"algorithm": "srgd", "batch_size": 10**6}, "batch_size=1000000 is larger than the number of rows"),
        ({"num_steps": 5000}, "too few rows for the plan"),
    ],
)
def test_bad_hyperparameters_named(params, match):
    X, y = regression_data(2000)
    with pytest.raises(ValueError, match=match):
        DPLinearRegression(**params).fit(X, y)


@pytest.mark.parametrize("where", ["X", "y"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_inputs_named_with_row(where, value):
    X, y = regression_data(2000)
    (X if where == "X" else y)[17] = value if where == "y" else X[17] * 0 + value
    with pytest.raises(ValueError, match=f"{where} contains NaN or infinity \\(first at row 17\\)"):
        DPLinearRegression().fit(X, y)


def test_wrong_shapes():
    X, y = regression_data(2000)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        DPLinearRegression().fit(X, y[:-1])
    with pytest.raises(ValueError, match="Reshape your data"):
        DPLinearRegression().fit(X[:, 0], y)
    model = DPLinearRegression().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])
    with pytest.raises(ValueError, match="DPLogisticRegression needs y with at least 2 classes, got 1 class"):
        DPLogisticRegression().fit(X, np.zeros(2000))


def test_every_parameter_is_documented_with_the_algorithms_that_use_it():
    from dpstream.algorithms.registry import algorithm_names, declared

    for estimator in (DPLinearRegression, DPLogisticRegression):
        section = estimator.__doc__.split("Parameters\n    ----------", 1)[1]
        documented = {
            name.strip()
            for line in section.splitlines()
            if " : " in line and not line.startswith("        ")
            for name in line.split(" : ")[0].split(",")
        }
        assert set(estimator().get_params()) == documented, set(estimator().get_params()) ^ documented
        for algorithm in algorithm_names():  # each hyperparameter's entry names the algorithms using it
            for name in set(declared(algorithm).uses) & documented:
                entry = section.split(f"    {name} : ", 1)[1].split("\n    ", 2)[1]
                assert f'"{algorithm}"' in entry, (name, algorithm, entry)


# At their defaults (private bounds) the estimators refuse the checks' 10-200 rows, as they must: a DP
# histogram cannot place a column's bulk from so few rows at ε = 1 (dpstream.bounds: about 120 rows inside
# one half-decade per column). Every other check passes at the defaults.
TOO_FEW_FOR_PRIVATE_BOUNDS = (
    "the check fits 10-200 rows, too few for private bounds at epsilon=1 (a DP histogram needs about 120 "
    "rows in one half-decade per column); the same check passes with public bounds above"
)
REFUSED_AT_DEFAULTS = (
    "check_dict_unchanged", "check_dont_overwrite_parameters", "check_dtype_object", "check_estimators_dtypes",
    "check_estimators_fit_returns_self", "check_estimators_nan_inf", "check_estimators_overwrite_params",
    "check_estimators_pickle", "check_f_contiguous_array_estimator", "check_fit2d_1feature",
    "check_fit2d_predict1d", "check_fit_idempotent", "check_fit_score_takes_y", "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit",
    "check_readonly_memmap_input", "check_supervised_y_2d",
)  # fmt: skip
REFUSED_REGRESSOR = (
    "check_fit_check_is_fitted", "check_n_features_in", "check_regressor_data_not_an_array", "check_regressors_int",
    "check_regressors_no_decision_function",
    "check_regressors_train",
)  # fmt: skip
REFUSED_CLASSIFIER = (
    "check_classifier_data_not_an_array", "check_classifiers_classes", "check_classifiers_train",
    "check_decision_proba_consistency",
)  # fmt: skip


def refused_at_defaults(estimator):
    own = REFUSED_REGRESSOR if isinstance(estimator, DPLinearRegression) else REFUSED_CLASSIFIER
    return {name: TOO_FEW_FOR_PRIVATE_BOUNDS for name in REFUSED_AT_DEFAULTS + own}


@parametrize_with_checks(
    [DPLinearRegression(), DPLogisticRegression(), DPKANClassifier()],
    expected_failed_checks=refused_at_defaults,
)
def test_sklearn_compatible_at_defaults(estimator, check):
    check(estimator)
