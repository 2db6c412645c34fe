"""The release guard of a run on a lake (``dpstream.release_guard``: the argument and the decision rule),
over the held-out rows.

A run on a shuffled lake holds its last file out for evaluation; the guard's two releases read those
rows (or people: a user-level shuffle writes every person's rows to one file) and never the training
rows. The two sets are fixed by position before any value is read, so every contribution is in the
training or in the guard, never both: by parallel composition the run stays μ_train-GDP with the guard
at the same μ (``LakeGuard.finish`` states it in the report), and the guard costs no training budget.
The guard's noise comes from the run's key (its own stream), so a retried or resumed run releases the
same constant and makes the same decision.

``LakeGuard`` is what ``dpstream.coordinator.execute`` calls: ``start`` (the initial parameters, moved
to the constant, before the first step) and ``finish`` (the comparison after the last; the model's
parameters, or the constant's, go out: a linear model's weights 0 and intercept, or the KAN's weights
whose margin is constant, ``release_guard.constant_params``). It serves the model kinds whose parameters
can hold the constant (``ModelKind.holds_constant``: all of them today).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dpstream.algorithms.base import PrivacyReport
from dpstream.models import Model
from dpstream.noise import NoiseKey
from dpstream.privacy import PrivacyEvent, event_mu
from dpstream.release_guard import (
    Blocks,
    Guard,
    GuardConstant,
    GuardDecision,
    RegressionGuard,
    constant_params,
    guard_constant,
    guard_decision,
    linear_prediction_range,
    with_intercepts,
)

__all__ = ["LakeGuard", "with_parallel_release"]


def with_parallel_release(report: PrivacyReport, event: PrivacyEvent, note: str) -> PrivacyReport:
    """``report`` extended by a release over contributions disjoint from the report's: the guarantee is
    the larger μ (parallel composition), which must be the report's."""
    if event_mu(event) > report.mu * (1 + 1e-12):
        raise ValueError(
            f"a parallel release at μ = {event_mu(event):.6g} exceeds the run's μ = {report.mu:.6g}"
        )
    return dataclasses.replace(
        report,
        events=f"{report.events}; in parallel, on disjoint contributions: {event.describe()}",
        notes=report.notes + (note,),
    )


@dataclass(frozen=True)
class LakeGuard:
    """The guard over the held-out blocks ``holdout()`` ((model rows, targets[, user codes]) as the
    model reads them) of ``contributions`` rows or people."""

    guard: Guard
    holdout: Callable[[], Blocks]
    contributions: int
    inputs: int  # the model's inputs per row
    intercept_index: int | None  # the column of the public constant 1, or None
    unit: str = "row"  # "row" or "person", for the report

    # The constant of each key, released once: ``start`` and ``finish`` of one run read the held-out
    # file for it once between them (a resumed run, which skips ``start``, reads it in ``finish``).
    _constants: dict[str, GuardConstant] = field(default_factory=dict, repr=False, compare=False)

    def constant(self, key: NoiseKey) -> GuardConstant:
        if key.key_id not in self._constants:
            self._constants[key.key_id] = guard_constant(
                self.guard, self.holdout(), self.contributions, key, self.intercept_index is not None
            )
        return self._constants[key.key_id]

    def start(self, key: NoiseKey, params: np.ndarray) -> np.ndarray:
        """Where training starts: a regression's intercept at the noisy label mean; a classifier's
        parameters as they are (``dpstream.estimators.glm`` measures why)."""
        if not isinstance(self.guard, RegressionGuard):
            return params
        return with_intercepts(params, self.inputs, self.intercept_index, self.constant(key))

    def finish(
        self,
        key: NoiseKey,
        model: Model,
        params: np.ndarray,
        report: PrivacyReport,
        *,
        label_mean_only: bool = False,
    ) -> tuple[np.ndarray, PrivacyReport, GuardDecision]:
        """The comparison: (the parameters to publish, the report with the guard stated, the decision).
        ``label_mean_only``: training released only the noisy label mean (AdaSSP's λ₀ > N rule)."""
        constant = self.constant(key)  # ``start``'s release
        regression = isinstance(self.guard, RegressionGuard)
        span = linear_prediction_range(params, self.intercept_index) if regression else (-1.0, 1.0)
        decision = guard_decision(
            self.guard, model, params, self.holdout(), constant, self.contributions, key, span
        )
        people = "people" if self.unit == "person" else "rows"
        # AdaSSP's λ₀ > N rule: training released only the noisy label mean, of every training row or
        # person, at the run's whole μ; the guard's constant is a noisier estimate of the same mean (the
        # held-out file alone, at a share of μ). The better-estimated constant stays.
        kept = ""
        if regression and label_mean_only and not decision.model:
            decision = dataclasses.replace(decision, model=True)
            kept = (
                f"; the trained model is itself the noisy label mean, of more {people} than the held-out file "
                "holds, so it is kept over the guard's noisier one"
            )
        if not decision.model:
            params = constant_params(model, self.inputs, self.intercept_index, constant)
        note = (
            f"release guard ({self.guard.mu:.4g}-GDP in two releases over the {self.contributions:,} {people} of the "
            f"shuffle's last file, which training does not read: parallel composition, no share of the run's μ): "
            + decision.describe(not regression, self.unit)
            + kept
        )
        return params, with_parallel_release(report, decision.event, note), decision
