"""What the private preconditioner buys: DP-AMBSSGD and Accelerated-DP-SRGD with and without it.

The preconditioner (``dpstream.preconditioner``) spends 10 % of the fit's μ² on the rows' noisy second
moment, centres and whitens the rows with it and sets the default step from it. Here each preconditioned
algorithm runs on every regression set of the real-data suite (``benchmarks.never_worse``: its fixed
splits, sets above 100,000 rows subsampled) with private and documented bounds, at the row level and, for
a panel, the person level where the algorithm trains there; ``--fits`` fits with fixed keys, ε = 1,
δ = 1e-6. "without" is the same fit with the estimator's ``_preconditions`` switched off (the whole
budget then goes to training, as before the preconditioner existed). Per cell: median / worst held-out
RMSE ÷ the training mean's, and (×r) the median fit's excess MSE over non-private ÷ AdaSSP's, AdaSSP
run in the same cell.

Run: ``python -m benchmarks.preconditioner [--fits 5] [--datasets california,diamonds,...]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from benchmarks.common import markdown_table
from benchmarks.never_worse import BOUNDS, REFERENCE, Cell, evaluate_cell, excess_ratio, prepare
from benchmarks.real_datasets import load

__all__ = ["without_preconditioner", "compare"]

PRECONDITIONED = ("ambssgd", "srgd")
REGRESSION = (
    "california", "diamonds", "cps1988", "diabetes", "flights_delay", "movielens", "insteval", "nlswork",
    "psid7682", "rwm5yr", "doctor_visits", "gss_wages", "loans",
)  # fmt: skip
PERSON_LEVEL = ("ambssgd",)  # SRGD does not train under the person unit


@contextmanager
def without_preconditioner() -> Iterator[None]:
    """Fits inside train as before the preconditioner: no release, the whole budget to training."""
    from dpstream.estimators import DPLinearRegression

    with mock.patch.object(DPLinearRegression, "_preconditions", lambda self: False):
        yield


def _text(cell: Cell, ref: Cell) -> str:
    if cell.refused:
        return "refused"
    const = cell.prepared.constant
    ratio = excess_ratio(cell, ref) if not ref.refused else float("nan")
    return f"{cell.median() / const:.3f} / {cell.worst() / const:.3f} (×{ratio:.2g})"


def compare(name: str, fits: int, epsilon: float = 1.0) -> list[list[str]]:
    """One row per level and bounds of dataset ``name``: AdaSSP, then each algorithm without → with."""
    prepared = prepare(load(name))
    if not prepared.regression:
        raise ValueError(f"{name} is a classification set; the preconditioner serves regressions")
    levels = ("row", "person") if prepared.groups_train is not None else ("row",)
    rows = []
    for level in levels:
        for bounds in BOUNDS:
            ref = evaluate_cell(prepared, REFERENCE, bounds, level, fits, epsilon)
            cells = [prepared.dataset.name, level, bounds, _text(ref, ref).split(" (")[0]]
            for algorithm in PRECONDITIONED:
                if level == "person" and algorithm not in PERSON_LEVEL:
                    cells.append("—")
                    continue
                with without_preconditioner():
                    before = evaluate_cell(prepared, algorithm, bounds, level, fits, epsilon)
                after = evaluate_cell(prepared, algorithm, bounds, level, fits, epsilon)
                cells.append(f"{_text(before, ref)} → {_text(after, ref)}")
            rows.append(cells)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fits", type=int, default=5)
    parser.add_argument("--datasets", default=",".join(REGRESSION))
    args = parser.parse_args(argv)
    start, rows = time.perf_counter(), []
    for name in args.datasets.split(","):
        rows += compare(name, args.fits)
        print(" | ".join(rows[-1]), flush=True)
    headers = ["dataset", "level", "bounds", "AdaSSP", *(f"{a}: without → with" for a in PRECONDITIONED)]
    print()
    print(markdown_table(headers, rows))
    print(f"\n{args.fits} fits per cell, ε = 1, δ = 1e-6; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
