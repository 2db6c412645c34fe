"""Defaults on real data: every estimator with its defaults against AdaSSP, diffprivlib and non-private fits.

Datasets (public scaling only: the bounds below are documented or domain facts, never computed from rows):

* California housing (20,640 rows): regression of the house value (label bounds $0–500,001, the
  documented top-code) and classification of value > $200,000; feature bounds of ``examples.california``.
* scikit-learn's diabetes (442 rows, regression): features are documented as centred and scaled so each
  column's sum of squares is 1, i.e. about z/21 for a z-score z; bounds ±0.2 (|z| ≤ 4.2); the label
  (disease progression) bounded by 0–400.
* scikit-learn's breast cancer (569 rows, classification): the per-feature min/max printed in the
  dataset's documentation (``DESCR``) as bounds.
* Synthetic d = 20: x uniform on [−1, 1]²⁰, y = clip(xᵀw* + N(0, 0.2²), −1, 1) with ‖w*‖² = 0.3, at
  N ∈ {10⁴, 10⁵, 10⁶}, 10⁴ test rows.

A fixed random 80/20 split (synthetic: a fresh test set). Each DP estimator is fitted with its defaults
and the public bounds (``feature_bounds``, ``label_bounds``); "auto" resolves to AdaSSP here (d ≤ 256).
diffprivlib (pure ε-DP, δ = 0, a stronger guarantee) gets the same data mapped to [−1, 1]. Regression
reports held-out MSE on the label mapped to [−1, 1]; classification held-out accuracy. Medians of
``REPEATS`` fits with fresh noise keys; (ε, δ = 1e-6) replace-one.

Run: ``python -m benchmarks.real_data`` (about 3 min on 2 cores).
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import import_diffprivlib, markdown_table
from dpstream.scaling import PublicBounds

HOUSING = Path(__file__).resolve().parents[2] / "shared" / "data" / "california_housing" / "housing.csv"
EPSILONS = (1.0, 4.0)
DELTA = 1e-6
REPEATS = 5
REGRESSORS = ("auto", "ambssgd", "dpsgd", "srgd")
CLASSIFIERS = ("auto", "ambssgd", "dpsgd")


def split(X, y, seed=0):
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    return X[order[:cut]], y[order[:cut]], X[order[cut:]], y[order[cut:]]


def california(classify: bool):
    from examples.california import LABEL_RANGE, SPEC

    frame = pd.read_csv(HOUSING)
    frame["total_bedrooms"] = frame["total_bedrooms"].fillna(SPEC.impute_values["total_bedrooms"])
    columns = list(SPEC.columns)
    onehot = np.column_stack(
        [(frame["ocean_proximity"] == v).to_numpy(float) for v in SPEC.categorical["ocean_proximity"]]
    )
    X = np.hstack([frame[columns].to_numpy(float), onehot])
    low = np.array([SPEC.bounds[c][0] for c in columns] + [0.0] * onehot.shape[1])
    high = np.array([SPEC.bounds[c][1] for c in columns] + [1.0] * onehot.shape[1])
    value = frame["median_house_value"].to_numpy(float)
    y = (value > 200_000).astype(int) if classify else value
    return (*split(X, y), (low, high), None if classify else LABEL_RANGE)


def diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return (*split(X, y), (-0.2, 0.2), (0.0, 400.0))


def breast_cancer():
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return (*split(data.data, data.target), documented_ranges(data.DESCR, len(data.feature_names)), None)


def documented_ranges(descr: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The Min / Max columns of the summary table in a scikit-learn dataset's documentation."""
    rows = re.findall(r"^\s*[a-z][a-z ()]+:\s+([-\d.]+)\s+([-\d.]+)\s*$", descr, flags=re.MULTILINE)
    low, high = np.array(rows[:count], dtype=float).T
    return low, high


def synthetic(rows: int, dim: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    w_star = rng.standard_normal(dim)
    w_star *= np.sqrt(0.3) / np.linalg.norm(w_star)
    X = rng.uniform(-1, 1, (rows + 10_000, dim))
    y = np.clip(X @ w_star + 0.2 * rng.standard_normal(len(X)), -1, 1)
    return X[:rows], y[:rows], X[rows:], y[rows:], (-1.0, 1.0), (-1.0, 1.0)


def dp_regression(algorithm, epsilon, Xtr, ytr, Xte, feature_bounds, label_bounds):
    from dpstream.estimators import DPLinearRegression

    model = DPLinearRegression(
        epsilon=epsilon,
        delta=DELTA,
        algorithm=algorithm,
        feature_bounds=feature_bounds,
        label_bounds=label_bounds,
    )
    return model.fit(Xtr, ytr).predict(Xte)


def dp_classifier(algorithm, epsilon, Xtr, ytr, Xte, feature_bounds):
    from dpstream.estimators import DPLogisticRegression

    return (
        DPLogisticRegression(epsilon=epsilon, delta=DELTA, algorithm=algorithm, feature_bounds=feature_bounds)
        .fit(Xtr, ytr)
        .predict(Xte)
    )


def median_or_refusal(fit_score) -> float:
    """Median of REPEATS scores, or NaN when the algorithm refuses the data (e.g. DP-AMBSSGD at small N)."""
    try:
        return float(np.median([fit_score() for _ in range(REPEATS)]))
    except ValueError as error:
        if "too few rows" not in str(error):
            raise
        return float("nan")


def cell(value: float, digits: str) -> str:
    return "refused (too few rows)" if np.isnan(value) else format(value, digits)


def regression_rows(name, data):
    from sklearn.linear_model import LinearRegression

    Xtr, ytr, Xte, yte, fb, lb = data
    features = PublicBounds.parse(fb, Xtr.shape[1], "feature_bounds")
    labels = PublicBounds.parse(lb, 1, "label_bounds")
    mse = lambda prediction: float(
        np.mean((labels.to_unit(np.asarray(prediction, float)) - labels.to_unit(yte)) ** 2)
    )  # noqa: E731
    unit_train = features.to_unit(Xtr), labels.to_unit(ytr)
    ols = LinearRegression().fit(*unit_train).predict(features.to_unit(Xte))
    constant = mse(np.full(len(yte), labels.centre[0] + labels.half_width[0] * np.mean(unit_train[1])))
    dpl = import_diffprivlib()
    rows = []
    for epsilon in EPSILONS:
        cells = {}
        for algorithm in REGRESSORS:
            cells[algorithm] = median_or_refusal(
                lambda: mse(dp_regression(algorithm, epsilon, Xtr, ytr, Xte, fb, lb))
            )
        peer = []
        for _ in range(REPEATS):
            fitted = dpl.LinearRegression(epsilon=epsilon, bounds_X=(-1, 1), bounds_y=(-1, 1)).fit(
                *unit_train
            )
            peer.append(float(np.mean((fitted.predict(features.to_unit(Xte)) - labels.to_unit(yte)) ** 2)))
        rows.append(
            [name, f"{len(ytr):,}", f"{epsilon:g}"]
            + [cell(cells[a], ".4g") for a in REGRESSORS]
            + [
                f"{np.median(peer):.4g}",
                f"{float(np.mean((ols - labels.to_unit(yte)) ** 2)):.4g}",
                f"{constant:.4g}",
                cell(cells["ambssgd"] / cells["auto"], ".2f"),
            ]
        )
    return rows


def classification_rows(name, data, kan=False):
    from sklearn.linear_model import LogisticRegression

    Xtr, ytr, Xte, yte, fb, _ = data
    features = PublicBounds.parse(fb, Xtr.shape[1], "feature_bounds")
    accuracy = lambda prediction: float(np.mean(prediction == yte))  # noqa: E731
    nonprivate = (
        LogisticRegression(max_iter=5000).fit(features.to_unit(Xtr), ytr).score(features.to_unit(Xte), yte)
    )
    majority = max(np.mean(yte), 1 - np.mean(yte))
    dpl = import_diffprivlib()
    rows = []
    for epsilon in EPSILONS:
        cells = {
            a: median_or_refusal(lambda: accuracy(dp_classifier(a, epsilon, Xtr, ytr, Xte, fb)))
            for a in CLASSIFIERS
        }
        peer = np.median(
            [
                dpl.LogisticRegression(epsilon=epsilon, data_norm=np.sqrt(Xtr.shape[1]))
                .fit(features.to_unit(Xtr), ytr)
                .score(features.to_unit(Xte), yte)
                for _ in range(REPEATS)
            ]
        )
        kan_cell = "–"
        if kan:
            from dpstream.estimators import DPKANClassifier

            kan = DPKANClassifier(
                epsilon=epsilon, delta=DELTA, feature_low=features.low, feature_high=features.high
            )
            kan_cell = f"{np.median([kan.fit(Xtr, ytr).score(Xte, yte) for _ in range(REPEATS)]):.3f}"
        rows.append(
            [name, f"{len(ytr):,}", f"{epsilon:g}"]
            + [cell(cells[a], ".3f") for a in CLASSIFIERS]
            + [kan_cell, f"{peer:.3f}", f"{nonprivate:.3f}", f"{majority:.3f}"]
        )
    return rows


def main() -> None:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # diffprivlib's PrivacyLeakWarning / scale notes; tables carry the results
        regression = regression_rows("California", california(False)) + regression_rows(
            "diabetes", diabetes()
        )
        for rows in (10_000, 100_000, 1_000_000):
            regression += regression_rows("synthetic d=20", synthetic(rows))
        print(
            markdown_table(
                ["dataset", "train rows", "ε"]
                + [f"{a} (default)" for a in REGRESSORS]
                + ["diffprivlib (ε-DP)", "OLS (non-private)", "constant", "ambssgd / auto"],
                regression,
            ),
            flush=True,
        )
        classification = classification_rows("California > $200k", california(True), kan=True)
        classification += classification_rows("breast cancer", breast_cancer())
    print()
    print(
        markdown_table(
            ["dataset", "train rows", "ε"]
            + [f"logistic {a}" for a in CLASSIFIERS]
            + ["KAN (default)", "diffprivlib (ε-DP)", "logistic (non-private)", "majority"],
            classification,
        )
    )
    print(
        f"\nheld-out MSE on the label mapped to [-1, 1] / accuracy; medians of {REPEATS} fits; "
        f"δ = {DELTA:g}, replace-one; {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
