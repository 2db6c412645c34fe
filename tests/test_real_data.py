"""The real-data claims of docs/estimators.md ("Real data in its own units") as statistical tests:
defaults on data in its own units.

Each test runs ``benchmarks.real_data.evaluate`` with fixed seeds (noise keys and diffprivlib's
``random_state``), so it is deterministic; the thresholds are the page's claims, and the figures
measured by ``python -m benchmarks.real_data`` (20 fits, BENCHMARKS.md "Real data in its own units")
are quoted beside each so the margin is visible. A change that makes a claim stop holding fails here.
"""

import warnings

import numpy as np
import pytest

from benchmarks.real_data import evaluate
from benchmarks.real_datasets import load

pytestmark = pytest.mark.slow
FITS = 11


def run(name: str, epsilon: float, methods, fits: int = FITS):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffprivlib's PrivacyLeakWarning
        return evaluate(load(name), epsilon, fits, methods)


@pytest.mark.parametrize(
    "name, measured",
    [("california", 0.65), ("diamonds", 0.33), ("cps1988", 0.78)],  # median RMSE ÷ constant, ε = 1
)
def test_regression_defaults_on_raw_units_beat_the_constant(name, measured):
    result = run(name, 1.0, ("defaults", "public bounds"))
    defaults, public = result.scores["defaults"], result.scores["public bounds"]
    assert np.median(defaults) <= 0.85 * result.constant, (np.median(defaults) / result.constant, measured)
    assert (
        result.no_better_than_constant("defaults") == 0
        and result.no_better_than_constant("public bounds") <= 1
    )
    # Private bounds cost at most 1.5× the MSE of the documented public bounds (measured: they do better).
    assert np.median(defaults) ** 2 <= 1.5 * np.median(public) ** 2


@pytest.mark.parametrize(
    "name, measured",
    [("california_200k", 0.802), ("tv16", 0.882), ("churn", 0.782)],  # median accuracy of defaults, ε = 1
)
def test_classification_defaults_close_half_the_gap_to_non_private(name, measured):
    result = run(name, 1.0, ("defaults", "public bounds"))
    target = result.constant + (result.nonprivate - result.constant) / 2  # 0.709, 0.739, 0.772
    assert np.median(result.scores["defaults"]) >= target, (np.median(result.scores["defaults"]), measured)
    assert np.median(result.scores["defaults"]) >= np.median(result.scores["public bounds"]) - 0.02
    assert result.single_class["defaults"] == 0


@pytest.mark.parametrize("name", ["tv16", "churn"])
def test_public_bounds_match_diffprivlib_and_are_stable(name):
    # Measured (20 fits): TV16 0.889 (p10 0.888) against diffprivlib 0.830; churn 0.789 (p10 0.784) against
    # 0.745. California > $200k is the exception docs/estimators.md states: 0.799 against 0.825.
    result = run(name, 1.0, ("public bounds", "diffprivlib"))
    ours = result.scores["public bounds"]
    assert np.median(ours) >= np.median(result.scores["diffprivlib"])
    assert np.median(ours) - np.percentile(ours, 10) <= 0.03


@pytest.mark.parametrize(
    "name, measured",
    [
        ("breast_cancer", 0.912),
        ("penguins", 0.910),
        ("diabetes", 0.84),
    ],  # median at ε = 4 (diabetes: ÷ const)
)
def test_small_data_at_epsilon_four_beats_the_constant_and_predicts_both_classes(name, measured):
    result = run(name, 4.0, ("defaults",), fits=20)
    scores = result.scores["defaults"]
    if result.regression:
        assert np.median(scores) < result.constant, (np.median(scores) / result.constant, measured)
        assert result.no_better_than_constant("defaults") <= 2
    else:
        assert np.median(scores) > result.constant + 0.1, (np.median(scores), measured)
        assert result.single_class["defaults"] <= 1


def test_small_data_at_epsilon_one_is_refused_with_the_fix():
    with pytest.raises(
        ValueError, match=r"too few rows for private bounds: n_samples=455 .*feature_bounds=\(low, high\)"
    ):
        from dpstream.estimators import DPLogisticRegression

        dataset = load("breast_cancer")
        DPLogisticRegression(epsilon=1.0).fit(dataset.X[:455], dataset.y[:455])


def test_the_label_mean_release_wins_where_the_noise_bound_exceeds_n():
    """docs/estimators.md ("Too few rows for the regression"): the full AdaSSP release loses to the noisy
    label mean from λ₀ ≈ N on CPS wages, not before 2N on California. Measured (30 fits): CPS full/mean
    0.674/0.719 at λ₀ = 0.6N, 0.767/0.719 at 1.5N; California full beats the mean
    at every ratio up to 2N ($109k against $113k)."""
    from benchmarks.real_data import label_mean_errors

    cps = label_mean_errors("cps1988", (0.6, 1.5, 2.0), repeats=15)
    assert cps[0.6][1] < cps[0.6][2] and cps[1.5][1] > cps[1.5][2] and cps[2.0][1] > cps[2.0][2]
    california = label_mean_errors("california", (0.6, 2.0), repeats=15)
    assert all(full < mean for _, full, mean in california.values())
