"""What a private step size could buy the iterative algorithms at most: their default step 1/R² = 1/d
against the oracle 1/λ_max, λ_max the exact (non-private) largest eigenvalue of E[xxᵀ] of the rows as the
model reads them (documented bounds mapped onto [−1, 1], the intercept column appended).

No private release estimates λ_max here: the oracle is an upper bound on what one could buy; both arms
run without the private preconditioner (``benchmarks.preconditioner``), which whitens the rows and sets
the step itself. Per dataset
(``benchmarks.never_worse.prepare``: its fixed split, sets above 100,000 rows subsampled): ``--fits``
fits with fixed keys of DP-AMBSSGD and DP-λCGD (``dpsgd``, ``noise="lambda"``) with documented bounds,
ε = 1, δ = 1e-6; median held-out RMSE ÷ the training mean's.

Run: ``python -m benchmarks.step_oracle [--fits 3] [--datasets diamonds,flights_delay,...]``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from benchmarks.common import markdown_table
from benchmarks.never_worse import Prepared, prepare
from benchmarks.preconditioner import without_preconditioner
from benchmarks.real_data import noise_key
from benchmarks.real_datasets import load
from dpstream.scaling import PublicBounds

__all__ = ["largest_eigenvalue", "step_medians"]

SETS = ("diamonds", "flights_delay", "california", "gss_wages", "cps1988")
ALGORITHMS = {"DP-AMBSSGD": {"algorithm": "ambssgd"}, "DP-λCGD": {"algorithm": "dpsgd", "noise": "lambda"}}


def largest_eigenvalue(prepared: Prepared) -> float:
    """λ_max of E[xxᵀ] over the training rows on the public scale, intercept included (non-private)."""
    dataset = prepared.dataset
    bounds = PublicBounds.parse(dataset.feature_bounds, prepared.X_train.shape[1], "feature_bounds")
    rows = np.column_stack([bounds.to_unit(prepared.X_train), np.ones(len(prepared.y_train))])
    return float(np.linalg.eigvalsh(rows.T @ rows / len(rows))[-1])


def step_medians(prepared: Prepared, algorithm: str, learning_rate: float | None, fits: int) -> float:
    """Median held-out RMSE ÷ the constant's of ``algorithm`` at ``learning_rate`` (None: its default)."""
    from dpstream.estimators import DPLinearRegression

    dataset, scores = prepared.dataset, []
    step = {} if learning_rate is None else {"learning_rate": learning_rate}
    for fit in range(fits):
        with warnings.catch_warnings(), without_preconditioner():  # the step alone, on the rows as mapped
            warnings.simplefilter("ignore")
            model = DPLinearRegression(
                epsilon=1.0,
                noise_key=noise_key(fit),
                feature_bounds=dataset.feature_bounds,
                label_bounds=dataset.label_bounds,
                **ALGORITHMS[algorithm],
                **step,
            ).fit(prepared.X_train, prepared.y_train)
        scores.append(prepared.score(model.predict(prepared.X_test)) / prepared.constant)
    return float(np.median(scores))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fits", type=int, default=3)
    parser.add_argument("--datasets", default=",".join(SETS))
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets.split(","):
        prepared = prepare(load(name))
        eigenvalue = largest_eigenvalue(prepared)
        cells = [
            f"{step_medians(prepared, algorithm, None, args.fits):.3f} → "
            f"{step_medians(prepared, algorithm, 1.0 / eigenvalue, args.fits):.3f}"
            for algorithm in ALGORITHMS
        ]
        rows.append([name, str(prepared.X_train.shape[1] + 1), f"{eigenvalue:.1f}", *cells])
        print(" | ".join(rows[-1]), flush=True)
    headers = ["dataset", "d", "λ_max", *(f"{name} 1/d → 1/λ_max" for name in ALGORITHMS)]
    print()
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
