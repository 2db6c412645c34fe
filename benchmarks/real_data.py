"""Defaults on real data in its own units: dpstream against diffprivlib, a textbook AdaSSP, non-private
fits and the constant predictor, with medians and 10th percentiles over repeated fits.

Datasets and their documented public bounds: ``benchmarks.real_datasets`` (nine sets, 333 to 53,940
rows, all offline). For each, a fixed 80/20 split, and at each ε (δ = 1e-6, replace-one), ``FITS`` fits
of each method with fresh noise (fixed seeds, so a run reproduces):

* **defaults**: ``DPLinearRegression()`` / ``DPLogisticRegression()`` on the raw columns, as a
  scikit-learn user calls them: private bounds estimated inside the fit's (ε, δ) (``dpstream.bounds``),
  ``"auto"`` → AdaSSP. Where the rows are too few for private bounds the cell says "refused".
* **public bounds**: the same estimators given the documented ``feature_bounds`` / ``label_bounds``.
* **diffprivlib** (pure ε-DP, δ = 0, a stronger guarantee) with the same public bounds:
  ``LinearRegression(bounds_X, bounds_y)`` and ``LogisticRegression(data_norm)`` on the rows mapped onto
  [−1, 1].
* **AdaSSP (Wang 2018)**: ``benchmarks.adassp_reference``, the textbook algorithm with the same bounds.
* **non-private** OLS / logistic regression, and the **constant** (training mean) / **majority** class.

Regression reports held-out RMSE in the label's units and its ratio to the constant predictor's;
classification held-out accuracy. "≤ const" counts fits no better than the constant predictor;
"one class" counts fits predicting a single class for every test row.

``--adassp`` adds the measurement behind AdaSSP's label-mean fallback (``dpstream.algorithms.ssp``):
on subsamples of California and CPS where Wang's noise bound λ₀ is a given multiple of N, the median
RMSE of the full AdaSSP release against the noisy label mean.

Run: ``python -m benchmarks.real_data [--fits 20] [--adassp]`` (about 2 min on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from benchmarks import adassp_reference
from benchmarks.common import import_diffprivlib, markdown_table
from benchmarks.real_datasets import DATASETS, Dataset, load, split
from dpstream.noise import NoiseKey
from dpstream.scaling import PublicBounds

EPSILONS = (1.0, 4.0)
DELTA = 1e-6
FITS = 20
METHODS = ("defaults", "public bounds", "diffprivlib", "AdaSSP (Wang 2018)")
DOCUMENTED_SETS = (
    "california",
    "diamonds",
    "cps1988",
    "diabetes",
    "california_200k",
    "tv16",
    "churn",
    "breast_cancer",
    "penguins",
)


@dataclass
class Result:
    """Scores of every fit of every method on one dataset at one ε (None: the method refused)."""

    dataset: Dataset
    epsilon: float
    scores: dict[str, np.ndarray | None] = field(default_factory=dict)
    single_class: dict[str, int] = field(default_factory=dict)
    constant: float = math.nan  # RMSE of the training mean / majority-class accuracy
    nonprivate: float = math.nan
    train_rows: int = 0

    @property
    def regression(self) -> bool:
        return self.dataset.task == "regression"

    def median(self, method: str) -> float:
        scores = self.scores.get(method)
        return math.nan if scores is None else float(np.median(scores))

    def tenth(self, method: str) -> float:
        """The 10th percentile of quality: of accuracy, or of RMSE the 90th (the worse tail)."""
        scores = self.scores.get(method)
        if scores is None:
            return math.nan
        return float(np.percentile(scores, 90 if self.regression else 10))

    def no_better_than_constant(self, method: str) -> int:
        scores = self.scores.get(method)
        if scores is None:
            return 0
        return int(np.sum(scores >= self.constant) if self.regression else np.sum(scores <= self.constant))


def noise_key(seed: int) -> NoiseKey:
    return NoiseKey.from_secret(seed.to_bytes(4, "big") * 8)


def evaluate(dataset: Dataset, epsilon: float, fits: int = FITS, methods=METHODS, seed: int = 0) -> Result:
    """Every method ``fits`` times on the dataset's fixed split (seeds ``seed``, ``seed + 1``, …)."""
    from sklearn.linear_model import LinearRegression, LogisticRegression

    from dpstream.estimators import DPLinearRegression, DPLogisticRegression

    Xtr, ytr, Xte, yte = split(dataset)
    features = PublicBounds.parse(dataset.feature_bounds, Xtr.shape[1], "feature_bounds")
    result = Result(dataset, epsilon, train_rows=len(ytr))
    unit_train, unit_test = features.to_unit(Xtr), features.to_unit(Xte)
    if result.regression:
        labels = PublicBounds.parse(dataset.label_bounds, 1, "label_bounds")
        score = lambda prediction: float(np.sqrt(np.mean((np.asarray(prediction, float) - yte) ** 2)))
        result.constant = score(np.full(len(yte), ytr.mean()))
        result.nonprivate = score(LinearRegression().fit(Xtr, ytr).predict(Xte))
        public = dict(feature_bounds=dataset.feature_bounds, label_bounds=dataset.label_bounds)
        estimator = DPLinearRegression
    else:
        classes = np.unique(ytr)
        score = lambda prediction: float(np.mean(np.asarray(prediction) == yte))
        result.constant = float(max(np.mean(yte == c) for c in classes))
        result.nonprivate = LogisticRegression(max_iter=5000).fit(unit_train, ytr).score(unit_test, yte)
        public = dict(feature_bounds=dataset.feature_bounds)
        estimator = DPLogisticRegression
    dpl = import_diffprivlib() if "diffprivlib" in methods else None

    def predict(method: str, fit: int) -> np.ndarray:
        seed_of_fit = seed + fit
        if method in ("defaults", "public bounds"):
            kwargs = public if method == "public bounds" else {}
            model = estimator(epsilon=epsilon, delta=DELTA, noise_key=noise_key(seed_of_fit), **kwargs)
            return model.fit(Xtr, ytr).predict(Xte)
        if method == "diffprivlib":
            if result.regression:
                model = dpl.LinearRegression(
                    epsilon=epsilon, bounds_X=(-1, 1), bounds_y=(-1, 1), random_state=seed_of_fit
                ).fit(unit_train, labels.to_unit(ytr))
                return labels.from_unit(model.predict(unit_test))
            model = dpl.LogisticRegression(
                epsilon=epsilon, data_norm=math.sqrt(Xtr.shape[1]), random_state=seed_of_fit
            )
            return model.fit(unit_train, ytr).predict(unit_test)
        rng = np.random.default_rng(seed_of_fit)
        if result.regression:
            theta = adassp_reference.fit(unit_train, labels.to_unit(ytr), epsilon, DELTA, rng)
            return labels.from_unit(adassp_reference.predict(theta, unit_test))
        signs = np.where(ytr == classes[-1], 1.0, -1.0)
        margins = adassp_reference.predict(
            adassp_reference.fit(unit_train, signs, epsilon, DELTA, rng), unit_test
        )
        return np.where(margins > 0, classes[-1], classes[0])

    for method in methods:
        scores, single = [], 0
        try:
            for fit in range(fits):
                prediction = predict(method, fit)
                scores.append(score(prediction))
                single += int(not result.regression and np.unique(prediction).size == 1)
        except ValueError as error:
            if "too few rows" not in str(error):
                raise
            result.scores[method] = None
            continue
        result.scores[method] = np.array(scores)
        result.single_class[method] = single
    return result


def _cell(value: float, digits: str) -> str:
    return "refused" if math.isnan(value) else format(value, digits)


def regression_table(results: list[Result]) -> str:
    rows = []
    for r in results:
        ratio = lambda method: _cell(r.median(method) / r.constant, ".2f")  # noqa: E731
        rows.append(
            [
                r.dataset.name,
                f"{r.train_rows:,}",
                f"{r.epsilon:g}",
                f"{r.constant:.4g}",
                f"{r.nonprivate:.4g}",
            ]
            + [f"{_cell(r.median(m), '.4g')} ({ratio(m)}; p90 {_cell(r.tenth(m), '.4g')})" for m in METHODS]
            + [
                f"{r.no_better_than_constant('defaults')}/{FITS}",
                f"{r.no_better_than_constant('public bounds')}/{FITS}",
            ]
        )
    return markdown_table(
        ["dataset", "train rows", "ε", "constant RMSE", "OLS"]
        + [f"{m}: median (÷ constant; p90)" for m in METHODS]
        + ["defaults ≤ const", "public ≤ const"],
        rows,
    )


def classification_table(results: list[Result]) -> str:
    rows = []
    for r in results:
        target = r.constant + (r.nonprivate - r.constant) / 2
        rows.append(
            [
                r.dataset.name,
                f"{r.train_rows:,}",
                f"{r.epsilon:g}",
                f"{r.constant:.3f}",
                f"{r.nonprivate:.3f}",
                f"{target:.3f}",
            ]
            + [f"{_cell(r.median(m), '.3f')} (p10 {_cell(r.tenth(m), '.3f')})" for m in METHODS]
            + [
                f"{r.single_class.get('defaults', 0)}/{FITS}",
                f"{r.single_class.get('public bounds', 0)}/{FITS}",
            ]
        )
    return markdown_table(
        ["dataset", "train rows", "ε", "majority", "logistic (non-private)", "majority + half the gap"]
        + [f"{m}: median (p10)" for m in METHODS]
        + ["defaults one class", "public one class"],
        rows,
    )


def label_mean_errors(name: str, ratios, repeats: int = 30) -> dict[float, tuple[int, float, float]]:
    """{λ₀/N: (N, median RMSE of the full AdaSSP release, of the noisy label mean)} on subsamples of the
    dataset's training rows: both arms run ``AdaSSP.apply`` on the same exact statistics, with the plan's
    ``label_mean_only`` set each way (public bounds, ε = 1)."""
    from dpstream.algorithms.ssp import AdaSSP
    from dpstream.models import LinearRegressionModel
    from dpstream.privacy import mu_for_epsilon_delta

    dataset = load(name)
    Xtr, ytr, Xte, yte = split(dataset)
    features = PublicBounds.parse(dataset.feature_bounds, Xtr.shape[1], "feature_bounds")
    labels = PublicBounds.parse(dataset.label_bounds, 1, "label_bounds")
    dim = Xtr.shape[1] + 1
    algorithm = AdaSSP(1.0, DELTA, intercept_index=dim - 1)
    eigen_std, gram_std, moment_std = algorithm.noise_stds(dim)
    test_rows = np.hstack([features.to_unit(Xte), np.ones((len(Xte), 1))])
    results = {}
    for ratio in ratios:
        num_rows = int(algorithm.noise_bound(gram_std, dim) / ratio)
        planned = algorithm.plan(num_rows, dim)
        arms = {
            "full": dataclasses.replace(
                planned,
                label_mean_only=False,
                eigenvalue_std=eigen_std,
                gram_std=gram_std,
                moment_std=moment_std,
            ),
            "mean": dataclasses.replace(
                planned,
                label_mean_only=True,
                moment_std=algorithm.label_sum_sensitivity / mu_for_epsilon_delta(1.0, DELTA),
            ),
        }
        errors: dict[str, list[float]] = {arm: [] for arm in arms}
        for repeat in range(repeats):
            pick = np.random.default_rng(repeat).choice(len(ytr), num_rows, replace=False)
            Z = np.hstack([features.to_unit(Xtr[pick]), np.ones((num_rows, 1))])
            stats = LinearRegressionModel().block_stats(
                Z,
                labels.to_unit(ytr[pick]),
                algorithm.request(algorithm.init(planned, None), planned.spans[0], planned),
            )  # the statistics a run computes: XᵀX, Xᵀy and the label sum
            for arm, plan in arms.items():
                state = algorithm.apply(
                    algorithm.init(plan, None), plan.spans[0], stats, noise_key(repeat), plan
                )
                prediction = labels.from_unit(test_rows @ algorithm.result(state))
                errors[arm].append(float(np.sqrt(np.mean((prediction - yte) ** 2))))
        results[ratio] = (num_rows, float(np.median(errors["full"])), float(np.median(errors["mean"])))
    return results


def label_mean_rule(repeats: int = 30) -> str:
    """The table of ``label_mean_errors`` on California and CPS 1988."""
    rows = []
    for name in ("california", "cps1988"):
        for ratio, (num_rows, full, mean) in label_mean_errors(
            name, (0.6, 0.8, 1.0, 1.2, 1.5, 2.0), repeats
        ).items():
            rows.append(
                [
                    load(name).name,
                    f"{ratio:g}",
                    f"{num_rows:,}",
                    f"{full:.4g}",
                    f"{mean:.4g}",
                    "full" if full < mean else "mean",
                ]
            )
    return markdown_table(
        ["dataset", "λ₀ / N", "N", "full AdaSSP RMSE (median)", "noisy label mean RMSE (median)", "better"],
        rows,
    )


def main() -> None:
    global FITS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=FITS, help="fits per method, dataset and epsilon")
    parser.add_argument("--adassp", action="store_true", help="add the label-mean rule's measurement")
    # The nine sets of the table in docs/estimators.md by default; the rest of the suite is benchmarks.never_worse's.
    parser.add_argument("--datasets", nargs="*", default=list(DOCUMENTED_SETS), choices=list(DATASETS))
    args = parser.parse_args()
    FITS = args.fits
    start = time.perf_counter()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffprivlib's PrivacyLeakWarning; ours are summarised in the tables
        for name in args.datasets:
            dataset = load(name)
            for epsilon in EPSILONS:
                results.append(evaluate(dataset, epsilon, FITS))
        print(regression_table([r for r in results if r.regression]), flush=True)
        print()
        print(classification_table([r for r in results if not r.regression]), flush=True)
        if args.adassp:
            print()
            print(label_mean_rule())
    print(
        f"\n{FITS} fits per cell; held-out RMSE in the label's units / accuracy; δ = {DELTA:g}, replace-one; "
        f"{time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
