"""Multi-class logistic regression on real data: dpstream's one-release softmax AdaSSP against
diffprivlib's one-vs-rest, non-private logistic regression and the majority class.

Datasets (their own units, public bounds documented beside each, ``benchmarks.real_datasets``):
palmerpenguins species (3 classes, 333 rows), scikit-learn's wine (3 classes, 178 rows) and digits (10
classes, 1,797 rows), ggplot2's diamonds cut grade (5 classes, 53,940 rows) and nycflights13's carrier
(16 classes; 100,000 of its 327,346 rows, ``benchmarks.never_worse.subsample``). Each is split once
80/20 (seed 0); every fit draws its own noise. Methods:

* **dpstream public bounds**: ``DPLogisticRegression(epsilon, feature_bounds=documented)``;
* **dpstream defaults**: ``DPLogisticRegression(epsilon)``, private bounds inside the same ε (only where
  N allows them: diamonds);
* **dpstream OvR**: one binary ``DPLogisticRegression`` per class (that class against the rest, the
  documented bounds, a noise key each), every one at μ/√K so that the K releases compose to exactly the
  (ε, δ) of the others (Gaussian DP: μ² adds up); the class with the largest decision value wins;
* **diffprivlib OvR**: ``diffprivlib.models.LogisticRegression(epsilon, data_norm=sqrt(d))`` on the
  features mapped onto [−1, 1] with the same documented bounds (objective perturbation, pure ε-DP, one
  binary model per class with ε/K each);
* **non-private**: scikit-learn ``LogisticRegression`` on the same mapped features;
* **majority**: the most frequent training class.

    python -m benchmarks.multiclass [--fits 21] [--epsilons 1 4] [--datasets penguins wine digits diamonds_cut carrier]

prints a Markdown table of held-out accuracy (median and 10th percentile over the fits). The claims
drawn from it are statistical tests in ``tests/test_multiclass.py`` (fixed seeds).
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from benchmarks.common import import_diffprivlib, markdown_table
from benchmarks.real_datasets import Dataset, _onehot, _rdata, _with_indicators, documented_ranges, split

__all__ = ["DATASETS", "Result", "evaluate"]

DELTA = 1e-6
OVR_KEYS = 1 << 24  # one-vs-rest noise keys start here, apart from the single fits' (one per class)


def penguins_species() -> Dataset:
    frame = _rdata("palmerpenguins", "penguins").dropna()
    numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    X, bounds = _with_indicators(
        frame[numeric].to_numpy(float), _onehot(frame, ["island", "sex"]),
        [25.0, 10.0, 160.0, 2_000.0], [65.0, 25.0, 240.0, 7_000.0],
    )  # fmt: skip
    return Dataset(
        "penguins species", "classification", X, frame["species"].to_numpy(str), bounds, None,
        "palmerpenguins: adult Pygoscelis size ranges, bill 25–65 mm, depth 10–25 mm, flipper 160–240 mm, mass 2–7 kg",
    )  # fmt: skip


def _sklearn(name: str) -> Dataset:
    from sklearn import datasets

    bunch = getattr(datasets, f"load_{name}")()
    if name == "digits":
        low, high = np.zeros(64), np.full(64, 16.0)
        source = "load_digits DESCR: 8×8 images of integer pixels 0..16"
    else:
        low, high = documented_ranges(bunch.DESCR, bunch.data.shape[1])
        source = f"load_{name} DESCR: the Min / Max of its summary table"
    labels = np.asarray(bunch.target_names)[bunch.target].astype(str)
    return Dataset(f"{name} ({len(bunch.target_names)} classes)", "classification", bunch.data, labels,
                   (low, high), None, source)  # fmt: skip


def diamonds_cut() -> Dataset:
    frame = _rdata("ggplot2", "diamonds")
    numeric = ["carat", "depth", "table", "price", "x", "y", "z"]
    X, bounds = _with_indicators(
        frame[numeric].to_numpy(float), _onehot(frame, ["color", "clarity"]),
        [0.2, 43.0, 43.0, 326.0, 0.0, 0.0, 0.0], [5.01, 79.0, 95.0, 18_823.0, 10.74, 58.9, 31.8],
    )  # fmt: skip
    return Dataset(
        "diamonds cut (5 grades)", "classification", X, frame["cut"].to_numpy(str), bounds, None,
        "ggplot2 ?diamonds: carat 0.2–5.01, depth 43–79, table 43–95, price $326–$18,823, x 0–10.74, y 0–58.9, z 0–31.8",
    )  # fmt: skip


def flights_carrier() -> Dataset:
    from benchmarks.never_worse import subsample
    from benchmarks.real_datasets_more import flights_carrier as full

    return subsample(full())


DATASETS: dict[str, Callable[[], Dataset]] = {
    "penguins": penguins_species,
    "wine": lambda: _sklearn("wine"),
    "digits": lambda: _sklearn("digits"),
    "diamonds_cut": diamonds_cut,
    "carrier": flights_carrier,
}
METHODS = ("dpstream public bounds", "dpstream defaults", "dpstream OvR", "diffprivlib OvR")


@dataclass
class Result:
    dataset: str
    rows: int
    classes: int
    epsilon: float
    majority: float
    nonprivate: float
    accuracies: dict[str, list[float]] = field(default_factory=dict)  # method -> one accuracy per fit

    def median(self, method: str) -> float:
        return float(np.median(self.accuracies[method]))

    def p10(self, method: str) -> float:
        return float(np.percentile(self.accuracies[method], 10))


def _unit(X: np.ndarray, bounds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    low, high = bounds
    return 2.0 * (np.clip(X, low, high) - low) / (high - low) - 1.0


def evaluate(
    name: str,
    epsilon: float,
    fits: int,
    methods: tuple[str, ...] = METHODS,
    seed: int = 0,
    nonprivate: bool = True,
) -> Result:
    """Held-out accuracy of each method over ``fits`` fits (noise keys from ``seed``) on dataset ``name``;
    ``nonprivate=False`` leaves out the non-private reference (NaN), minutes on 16 classes."""
    from sklearn.linear_model import LogisticRegression

    from benchmarks.real_data import noise_key
    from dpstream.estimators import DPLogisticRegression

    dataset = DATASETS[name]()
    Xtr, ytr, Xte, yte = split(dataset)
    classes, counts = np.unique(ytr, return_counts=True)
    unit_train, unit_test = _unit(Xtr, dataset.feature_bounds), _unit(Xte, dataset.feature_bounds)
    result = Result(
        dataset.name, dataset.rows, len(classes), epsilon,
        majority=float(np.mean(yte == classes[np.argmax(counts)])),
        nonprivate=float(LogisticRegression(max_iter=5000).fit(unit_train, ytr).score(unit_test, yte))
        if nonprivate else math.nan,
    )  # fmt: skip
    dpl = import_diffprivlib() if "diffprivlib OvR" in methods else None
    for method in methods:
        scores = []
        for fit in range(fits):
            key = noise_key(10_000 * seed + fit)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # diffprivlib's PrivacyLeakWarning; our fit warnings
                if method == "dpstream OvR":
                    predicted = _one_vs_rest(
                        Xtr, ytr, Xte, dataset.feature_bounds, epsilon, 10_000 * seed + fit
                    )
                elif method == "diffprivlib OvR":
                    model = dpl.LogisticRegression(
                        epsilon=epsilon, data_norm=math.sqrt(Xtr.shape[1]), random_state=10_000 * seed + fit
                    ).fit(unit_train, ytr)
                    predicted = model.predict(unit_test)
                else:
                    bounds = dataset.feature_bounds if method == "dpstream public bounds" else None
                    try:
                        model = DPLogisticRegression(
                            epsilon=epsilon, delta=DELTA, feature_bounds=bounds, noise_key=key
                        ).fit(Xtr, ytr)
                    except ValueError as error:
                        if "too few rows" not in str(error):
                            raise
                        break  # private bounds need more rows: the cell stays empty
                    predicted = model.predict(Xte)
            scores.append(float(np.mean(predicted == yte)))
        if scores:
            result.accuracies[method] = scores
    return result


def _one_vs_rest(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    bounds: tuple[np.ndarray, np.ndarray],
    epsilon: float,
    seed: int,
) -> np.ndarray:
    """K binary fits at μ/√K each (so together exactly (ε, δ)), a noise key each; argmax of their margins."""
    from benchmarks.real_data import noise_key
    from dpstream.estimators import DPLogisticRegression
    from dpstream.privacy.gdp import epsilon_for_delta, mu_for_epsilon_delta

    classes = np.unique(y_train)
    epsilon_each = epsilon_for_delta(DELTA, mu_for_epsilon_delta(epsilon, DELTA) / math.sqrt(len(classes)))
    margins = np.column_stack(
        [
            DPLogisticRegression(
                epsilon=epsilon_each,
                delta=DELTA,
                feature_bounds=bounds,
                noise_key=noise_key(OVR_KEYS + seed * 64 + k),
            )
            .fit(X_train, (y_train == label).astype(int))
            .decision_function(X_test)
            for k, label in enumerate(classes)
        ]
    )
    return classes[np.argmax(margins, axis=1)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fits", type=int, default=21)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets:
        for epsilon in args.epsilons:
            result = evaluate(name, epsilon, args.fits)
            cells = [
                f"{result.median(m):.3f} ({result.p10(m):.3f})" if m in result.accuracies else "refused (N)"
                for m in METHODS
            ]
            rows.append(
                [
                    result.dataset,
                    f"{result.rows:,}",
                    f"{epsilon:g}",
                    *cells,
                    f"{result.nonprivate:.3f}",
                    f"{result.majority:.3f}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    print()
    print(
        markdown_table(
            ["dataset", "rows", "ε", *(f"{m}: median (p10)" for m in METHODS), "non-private", "majority"],
            rows,
        )
    )
    print(
        f"\n{args.fits} fits per cell, δ = {DELTA:g} (diffprivlib: pure ε-DP), replace-one; 80/20 split, seed 0"
    )


if __name__ == "__main__":
    main()
