"""Never worse than the mean: every DP algorithm on every real dataset against the constant predictor.

For each dataset of ``benchmarks.real_datasets`` (its fixed 80/20 split, person-disjoint for a panel;
sets above ``MAX_ROWS`` rows subsampled to ``MAX_ROWS`` with a fixed seed, a panel by whole people),
each algorithm by name (``ALGORITHMS``), with private bounds (``feature_bounds`` / ``label_bounds`` left
None: estimated with DP inside the fit's budget, ``dpstream.bounds``) and with the documented public
bounds, at the row level and, for a panel, the person level (``fit(X, y, groups=ids)`` with
``max_rows_per_user`` the dataset's documented ``max_rows_per_person``): ``--fits`` fits with fixed noise
keys (``benchmarks.real_data.noise_key``), ε = ``--epsilon``, δ = 1e-6, replace-one.

Per cell: regression, the median and worst held-out RMSE ÷ the constant predictor's (the training
mean); classification, the median and worst accuracy against the majority class and the target
"majority + ½ (non-private − majority)"; for an iterative algorithm, its excess over non-private
÷ AdaSSP's (excess MSE for regression, excess error rate for classification); "refused: <reason>"
where the estimator raises ValueError (its refusals: too few rows for private bounds, an algorithm
that does not train under the person unit, ``dpstream.algorithms.user_level``). Non-private: OLS on
the raw columns, logistic regression on the columns mapped by the documented bounds.

Targets (a line per cell that misses one, with its reason: ``benchmarks.never_worse_reasons``): median ≤
constant; worst ≤ 1.05 × constant (classification: error rate ≤ 1.05 × the majority's); at N ≥ 20,000
training rows, an iterative algorithm's excess ≤ 2 × AdaSSP's, and classification median ≥ majority + ½
gap. Warnings are caught and counted per cell.

A person-level fit keeps at most ``max_rows_per_user`` rows per person drawn from OS entropy, so where
that bound binds a rerun differs slightly (``DPLinearRegression``'s ``max_rows_per_user``).

Run: ``python -m benchmarks.never_worse [--fits 20] [--epsilon 1] [--datasets a,b]
[--algorithms ssp,ambssgd,dpsgd-lambda,srgd]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from benchmarks.common import markdown_table
from benchmarks.never_worse_reasons import reason
from benchmarks.real_data import noise_key
from benchmarks.real_datasets import DATASETS, Dataset, load, split_groups
from dpstream.scaling import PublicBounds

ALGORITHMS = {
    "ssp": {"algorithm": "ssp"},
    "ambssgd": {"algorithm": "ambssgd"},
    "dpsgd-lambda": {"algorithm": "dpsgd", "noise": "lambda"},
    "srgd": {"algorithm": "srgd"},
}
REFERENCE = "ssp"  # AdaSSP: the iterative algorithms' excess is compared with its
BOUNDS = ("private", "documented")
LEVELS = ("row", "person")
DELTA = 1e-6
MAX_ROWS = 100_000
SUBSAMPLE_SEED = 0
LARGE = 20_000  # training rows from which the excess and half-gap targets apply
WORST_SLACK = 1.05


@dataclass(frozen=True)
class Prepared:
    """A dataset's split and the baselines every cell is measured against."""

    dataset: Dataset
    full_rows: int  # before subsampling
    X_train: np.ndarray
    y_train: np.ndarray
    groups_train: np.ndarray | None
    X_test: np.ndarray
    y_test: np.ndarray
    constant: float  # RMSE of the training mean, or the majority class's accuracy
    nonprivate: float  # OLS RMSE, or logistic regression's accuracy

    @property
    def regression(self) -> bool:
        return self.dataset.task == "regression"

    def score(self, prediction: np.ndarray) -> float:
        if self.regression:
            return float(np.sqrt(np.mean((np.asarray(prediction, float) - self.y_test) ** 2)))
        return float(np.mean(np.asarray(prediction) == self.y_test))


def subsample(dataset: Dataset, max_rows: int = MAX_ROWS, seed: int = SUBSAMPLE_SEED) -> Dataset:
    """At most ``max_rows`` rows, drawn with a fixed seed: rows, or a panel's whole people (in random
    order while their rows fit), so each kept person keeps their full history."""
    if dataset.rows <= max_rows:
        return dataset
    rng = np.random.default_rng(seed)
    if dataset.groups is None:
        keep = np.sort(rng.choice(dataset.rows, max_rows, replace=False))
    else:
        codes, people = pd.factorize(pd.Series(dataset.groups))
        order = rng.permutation(len(people))
        fits = np.cumsum(np.bincount(codes, minlength=len(people))[order]) <= max_rows
        keep = np.flatnonzero(np.isin(codes, order[fits]))
    groups = None if dataset.groups is None else dataset.groups[keep]
    return dataclasses.replace(dataset, X=dataset.X[keep], y=dataset.y[keep], groups=groups)


def prepare(dataset: Dataset, max_rows: int = MAX_ROWS) -> Prepared:
    """Subsample, split (``split_groups``, seed 0) and fit the constant and non-private baselines."""
    from sklearn.linear_model import LinearRegression, LogisticRegression

    full_rows = dataset.rows
    dataset = subsample(dataset, max_rows)
    X_train, y_train, groups_train, X_test, y_test, _ = split_groups(dataset)
    if dataset.task == "regression":
        constant = float(np.sqrt(np.mean((y_test - y_train.mean()) ** 2)))
        nonprivate = LinearRegression().fit(X_train, y_train).predict(X_test)
        nonprivate_score = float(np.sqrt(np.mean((nonprivate - y_test) ** 2)))
    else:
        classes, counts = np.unique(y_train, return_counts=True)
        constant = float(np.mean(y_test == classes[np.argmax(counts)]))
        unit = PublicBounds.parse(dataset.feature_bounds, X_train.shape[1], "feature_bounds")
        model = LogisticRegression(max_iter=1000).fit(unit.to_unit(X_train), y_train)  # 16 classes: 721
        nonprivate_score = float(model.score(unit.to_unit(X_test), y_test))
    return Prepared(
        dataset, full_rows, X_train, y_train, groups_train, X_test, y_test, constant, nonprivate_score
    )


@dataclass
class Cell:
    """The fits of one algorithm on one dataset with one kind of bounds at one privacy level."""

    prepared: Prepared
    algorithm: str
    bounds: str  # "private" | "documented"
    level: str  # "row" | "person"
    scores: list[float] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # one reason per refused fit
    warnings: Counter = field(default_factory=Counter)  # warning text (first line) -> count
    constants: int = 0  # fits whose release guard (or AdaSSP's λ₀ > N rule) released the constant

    @property
    def regression(self) -> bool:
        return self.prepared.regression

    @property
    def train_rows(self) -> int:
        return len(self.prepared.y_train)

    @property
    def refused(self) -> bool:
        return not self.scores

    def median(self) -> float:
        return float(np.median(self.scores)) if self.scores else math.nan

    def worst(self) -> float:
        if not self.scores:
            return math.nan
        return float(np.max(self.scores) if self.regression else np.min(self.scores))

    def excess(self) -> float:
        """Excess over non-private of the median fit: MSE for regression, error rate for classification."""
        if self.regression:
            return self.median() ** 2 - self.prepared.nonprivate**2
        return self.prepared.nonprivate - self.median()

    def target(self) -> float:
        """Classification: majority + half the gap to non-private."""
        return self.prepared.constant + (self.prepared.nonprivate - self.prepared.constant) / 2


def _estimator(prepared: Prepared, algorithm: str, bounds: str, level: str, epsilon: float, seed: int):
    from dpstream.estimators import DPLinearRegression, DPLogisticRegression

    dataset = prepared.dataset
    kwargs = dict(ALGORITHMS[algorithm], epsilon=epsilon, delta=DELTA, noise_key=noise_key(seed))
    if bounds == "documented":
        kwargs["feature_bounds"] = dataset.feature_bounds
        if prepared.regression:
            kwargs["label_bounds"] = dataset.label_bounds
    if level == "person":
        kwargs["max_rows_per_user"] = dataset.max_rows_per_person
    return (DPLinearRegression if prepared.regression else DPLogisticRegression)(**kwargs)


def evaluate_cell(
    data: Dataset | Prepared,
    algorithm: str,
    bounds: str = "documented",
    level: str = "row",
    fits: int = 5,
    epsilon: float = 1.0,
    seed: int = 0,
) -> Cell:
    """``fits`` fits (noise keys ``seed``, ``seed + 1``, …) of ``algorithm`` (a key of ``ALGORITHMS``)
    with ``bounds`` ("private" | "documented") at ``level`` ("row" | "person": a panel's only), scored
    on the held-out rows. A ValueError (the estimator's refusal) is recorded, not raised."""
    prepared = data if isinstance(data, Prepared) else prepare(data)
    if level == "person" and prepared.groups_train is None:
        raise ValueError(f"{prepared.dataset.name} is not a panel: it has no person level")
    cell = Cell(prepared, algorithm, bounds, level)
    groups = prepared.groups_train if level == "person" else None
    for fit in range(fits):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                model = _estimator(prepared, algorithm, bounds, level, epsilon, seed + fit)
                model.fit(prepared.X_train, prepared.y_train, groups=groups)
                cell.scores.append(prepared.score(model.predict(prepared.X_test)))
                cell.constants += model.released_ == "constant"
            except ValueError as error:
                cell.refusals.append(str(error))
        cell.warnings.update(str(w.message).split("\n")[0][:100] for w in caught)
        if cell.refusals and not cell.scores:
            break  # a refusal from public settings repeats at every fit
    return cell


def misses(cells: list[Cell]) -> list[str]:
    """One line per target a scored cell misses (the module docstring lists them), with its reason
    (``benchmarks.never_worse_reasons``)."""
    reference = {(c.prepared.dataset.name, c.bounds, c.level): c for c in cells if c.algorithm == REFERENCE}
    lines = []
    for c in cells:
        if c.refused:
            continue
        where = f"{c.prepared.dataset.name} · {c.level} · {c.bounds} · {c.algorithm}"
        ref = reference.get((c.prepared.dataset.name, c.bounds, c.level))
        for target, text in _missed(c, ref):
            lines.append(f"{where}: {text} — {reason(c, target, ref)}")
    return lines


def _missed(c: Cell, ref: Cell | None) -> list[tuple[str, str]]:
    """(target, what was measured) for each target ``c`` misses; ``ref``: AdaSSP's cell beside it."""
    const, missed = c.prepared.constant, []
    if c.regression:
        if c.median() > const:
            missed.append(("median", f"median RMSE {c.median() / const:.3f}× the constant's"))
        if c.worst() > WORST_SLACK * const:
            missed.append(("worst", f"worst RMSE {c.worst() / const:.3f}× the constant's (> {WORST_SLACK})"))
    else:
        if c.median() < const:
            missed.append(("median", f"median accuracy {c.median():.3f} < majority {const:.3f}"))
        if 1 - c.worst() > WORST_SLACK * (1 - const):
            missed.append(("worst", f"worst accuracy {c.worst():.3f}: error > {WORST_SLACK}× the majority's"))
        if c.train_rows >= LARGE and c.median() < c.target() - 0.5 / len(c.prepared.y_test):  # half a row
            missed.append(
                ("half gap", f"median accuracy {c.median():.3f} < majority + ½ gap {c.target():.3f}")
            )
    if c.algorithm != REFERENCE and c.train_rows >= LARGE and ref is not None and not ref.refused:
        if c.excess() > 2 * max(ref.excess(), 0.0):
            ratio = excess_ratio(c, ref)
            versus = f"{ratio:.3g}× AdaSSP's" if math.isfinite(ratio) else f"{c.excess():.3g}, AdaSSP's ≤ 0"
            missed.append(("excess", f"excess {versus} (> 2×)"))
    return missed


def excess_ratio(cell: Cell, ref: Cell) -> float:
    """The cell's excess over non-private ÷ AdaSSP's (inf where AdaSSP's is ≤ 0 and the cell's is not)."""
    if ref.excess() <= 0:
        return math.inf if cell.excess() > 0 else 0.0
    return cell.excess() / ref.excess()


def _short(reason: str) -> str:
    """A refusal's first phrase: 'too few rows for private bounds', 'user-level DP'."""
    return re.split(r"[:;(]", reason, maxsplit=1)[0].strip()[:60]


def _text(cell: Cell | None, ref: Cell | None) -> str:
    if cell is None:
        return "—"
    if cell.refused:
        return f"refused: {_short(cell.refusals[0])}"
    const = cell.prepared.constant
    text = (
        f"{cell.median() / const:.3f} / {cell.worst() / const:.3f}"
        if cell.regression
        else f"{cell.median():.3f} / {cell.worst():.3f}"
    )
    if cell.algorithm != REFERENCE and ref is not None and not ref.refused:
        text += f" (×{excess_ratio(cell, ref):.2g})"
    if cell.refusals:
        text += f" [{len(cell.refusals)} refused]"
    warned = sum(cell.warnings.values())
    return text + (f" {warned}w" if warned else "")


def table(cells: list[Cell], algorithms: list[str], regression: bool) -> str:
    """One row per dataset, level and bounds; one column per algorithm."""
    rows, seen = [], {}
    for c in cells:
        if c.regression == regression:
            seen.setdefault((c.prepared.dataset.name, c.level, c.bounds), {})[c.algorithm] = c
    for (name, level, bounds), by_algorithm in seen.items():
        p = next(iter(by_algorithm.values())).prepared
        rows_note = f"{len(p.y_train):,}" + (
            f" (of {p.full_rows:,} subsampled)" if p.full_rows > p.dataset.rows else ""
        )
        people = f"; {len(np.unique(p.groups_train)):,} people" if level == "person" else ""
        baseline = (
            [f"{p.constant:.4g}", f"{p.nonprivate / p.constant:.3f}"]
            if regression
            else [
                f"{p.constant:.3f}",
                f"{p.nonprivate:.3f}",
                f"{p.constant + (p.nonprivate - p.constant) / 2:.3f}",
            ]
        )
        ref = by_algorithm.get(REFERENCE)
        rows.append([name, rows_note + people, level, bounds, *baseline]
                    + [_text(by_algorithm.get(a), ref) for a in algorithms])  # fmt: skip
    head = (
        ["constant RMSE", "OLS ÷ const"]
        if regression
        else ["majority", "logistic (non-private)", "majority + ½ gap"]
    )
    unit = "RMSE ÷ constant: median / worst" if regression else "accuracy: median / worst"
    return markdown_table(
        ["dataset", "train rows", "level", "bounds", *head] + [f"{a} ({unit})" for a in algorithms], rows
    )


def run(names: list[str], algorithms: list[str], fits: int, epsilon: float, log=print) -> list[Cell]:
    """Every cell of every dataset in ``names``."""
    cells = []
    for name in names:
        start = time.perf_counter()
        prepared = prepare(load(name))
        levels = LEVELS if prepared.groups_train is not None else LEVELS[:1]
        for level in levels:
            for bounds in BOUNDS:
                for algorithm in algorithms:
                    cells.append(evaluate_cell(prepared, algorithm, bounds, level, fits, epsilon))
        log(f"{name}: {time.perf_counter() - start:.0f} s")
    return cells


def report(cells: list[Cell], algorithms: list[str], fits: int, epsilon: float, elapsed: float) -> str:
    parts = [table(cells, algorithms, True), "", table(cells, algorithms, False), ""]
    parts.append(
        f"{fits} fits per cell, ε = {epsilon:g}, δ = {DELTA:g} (replace-one); sets above {MAX_ROWS:,} rows "
        f"subsampled to {MAX_ROWS:,} (seed {SUBSAMPLE_SEED}; a panel by whole people). (×r): the excess over "
        f"non-private ÷ AdaSSP's; Nw: warnings caught over the cell's fits; [k refused]: fits refused."
    )
    missed = misses(cells)
    parts += ["", f"Cells missing a target ({len(missed)}):"] + [f"- {line}" for line in missed]
    refused = [c.refusals[0] for c in cells if c.refused]
    example = {_short(reason): reason for reason in reversed(refused)}  # the first of each kind
    parts += ["", "Refusals (cells; one example of each kind):"] + [
        f"- {n}× {example[kind][:240]}" for kind, n in Counter(map(_short, refused)).most_common()
    ]
    caught = Counter()
    for c in cells:
        caught.update(c.warnings)
    parts += ["", "Warnings (fits):"] + [f"- {n}× {text}" for text, n in caught.most_common(8)]
    parts.append(f"\n{elapsed:.0f} s in all")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=20, help="fits per cell")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated names")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated names")
    args = parser.parse_args()
    names, algorithms = args.datasets.split(","), args.algorithms.split(",")
    unknown = [n for n in names if n not in DATASETS] + [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)} (datasets: {', '.join(DATASETS)}; algorithms: "
                     f"{', '.join(ALGORITHMS)})")  # fmt: skip
    start = time.perf_counter()
    cells = run(names, algorithms, args.fits, args.epsilon, log=lambda line: print(line, flush=True))
    print(report(cells, algorithms, args.fits, args.epsilon, time.perf_counter() - start))


if __name__ == "__main__":
    main()
