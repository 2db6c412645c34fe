"""Why a cell of ``benchmarks.never_worse`` misses its target: one reason per missed line, from the
cell's public facts (rows, people, level, bounds, how often the guard released the constant) and its
baselines. Issue 50 asks that a target out of reach be stated with its figure and its reason; the
reasons here are the measured explanations of BENCHMARKS.md ("Never worse than the mean", "A private
preconditioner"), matched to each cell.

``reason(cell, target, reference)`` takes a ``never_worse.Cell`` (duck-typed: this module is imported by
that one), the kind of target missed ("median", "worst", "excess" or "half gap") and AdaSSP's cell.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["reason"]

SMALL_N = 1_000  # rows: both releases (model, noisy mean) are noise of the signal's order
FEW_PEOPLE = 5_000  # people: the person-weighted noisy mean's own error shows
LOW_SIGNAL = 0.97  # non-private OLS ÷ constant RMSE at or above this: excess ratios compare noise
ITERATIVE = ("ambssgd", "dpsgd-lambda", "srgd")


def reason(cell: Any, target: str, reference: Any | None) -> str:
    """The reason ``cell`` misses ``target`` ("median", "worst", "excess", "half gap")."""
    prepared, rows = cell.prepared, cell.train_rows
    if rows < SMALL_N:
        return f"small N ({rows:,} rows): the model's and the noisy mean's noise are of the signal's order"
    if target == "excess":
        return _excess_reason(cell, reference)
    if not cell.regression:
        return _labels_reason(cell)
    people = len(np.unique(prepared.groups_train)) if cell.level == "person" else None
    if people is not None and people < FEW_PEOPLE:
        clipped = "; with private bounds the clipped tail also biases it" if cell.bounds == "private" else ""
        return (
            f"person level over {people:,} people: the person-weighted noisy label mean itself is off by this "
            f"much{clipped}; the guard releases the best constant it has"
        )
    fits = len(cell.scores)
    if cell.constants * 2 >= fits:
        bias = (
            " of labels clipped to the private bounds (the clipped tail biases it)"
            if cell.bounds == "private"
            else ""
        )
        return f"the guard released the noisy mean{bias} in {cell.constants} of {fits} fits: the miss is that mean's error"
    return (
        f"the guard published a model that loses narrowly (allowed with probability ≤ 16 %, its margin) or its noisy "
        f"mean ({cell.constants} of {fits} fits) on {rows:,} rows"
    )


def _excess_reason(cell: Any, reference: Any | None) -> str:
    prepared = cell.prepared
    if reference is not None and reference.excess() <= 0:
        return "AdaSSP is at or beyond the non-private model here: there is no excess to be within 2× of"
    if cell.regression and prepared.nonprivate >= LOW_SIGNAL * prepared.constant:
        return (
            f"low signal: non-private OLS is {prepared.nonprivate / prepared.constant:.3f} of the constant's RMSE, so "
            "every excess is a sliver of its MSE and their ratio compares noise"
        )
    if not cell.regression:
        return _labels_reason(cell)
    return "not explained by a measured cause"


def _labels_reason(cell: Any) -> str:
    if cell.algorithm not in ITERATIVE:
        return "not explained by a measured cause"
    return (
        "an iterative algorithm on labels: the private preconditioner serves regressions only (on binary labels "
        "it gained on California > $200k and lost card payments to the majority class), and a few large "
        "steps do not fit a K-class softmax in one pass"
    )
