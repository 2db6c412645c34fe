"""The run plan: one training run's privacy argument, built once and frozen.

A ``RunPlan`` holds what a run will compute and release, fixed before any row is read: the algorithm
(its budget and hyperparameters), the model, the algorithm's step plan (``steps``: every step's row span
and noise scale), the privacy event those steps release, the guarantee the exact accountant makes of
that event (``report``; a plan over its budget is refused when it is built), and the checkpoint policy.
Like jax_privacy's execution plan, the plan *is* the privacy argument: it is built in one place (the
flow's plan task, the estimator's fit, ``dpstream.coordinator.run``) and handed down; the data plane and
the coordinator check it against the lake and the executor and never rebuild it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpstream.algorithms.base import Algorithm, Plan, PrivacyReport
from dpstream.algorithms.user_level import check_user_level
from dpstream.checkpoint import CheckpointPolicy, config_fingerprint
from dpstream.models import Model
from dpstream.privacy import PrivacyEvent

__all__ = ["RunPlan", "PlanMismatchError"]


class PlanMismatchError(ValueError):
    """The data or the executor a run was handed does not match its plan."""


@dataclass(frozen=True)
class RunPlan:
    """``event`` and ``report`` are derived from ``algorithm`` and ``steps`` when the plan is made (also by
    ``dataclasses.replace``), never passed in: the ledger's charge and the noise come from one plan."""

    algorithm: Algorithm
    model: Model
    steps: Plan  # the algorithm's plan: the row span and noise scales of every step
    checkpoint: CheckpointPolicy | None = None
    event: PrivacyEvent = field(init=False)  # what the steps release, for the accountant and the ledger
    report: PrivacyReport = field(init=False)  # the planned guarantee (the final report adds what the run
    # chose, e.g. DP-AMBSSGD's clip norms)

    def __post_init__(self) -> None:
        # algorithm.report refuses steps that spend more than the algorithm's (ε, δ)
        object.__setattr__(self, "event", self.algorithm.event(self.steps))
        object.__setattr__(self, "report", self.algorithm.report(self.steps))

    @classmethod
    def build(
        cls,
        algorithm: Algorithm,
        model: Model,
        num_rows: int,
        num_params: int,
        checkpoint: CheckpointPolicy | None = None,
    ) -> RunPlan:
        """Plan ``algorithm`` for ``model`` on ``num_rows`` rows and ``num_params`` parameters (the model's
        ``num_params(num_features)``). Raises ``ValueError`` when the plan spends more than the
        algorithm's (ε, δ) (``build_report``) or the rows cannot carry it; under the user unit, when the
        algorithm or the model cannot combine a person's rows (``check_user_level``)."""
        unit = getattr(algorithm, "unit", None)
        if unit is not None and unit.is_user:
            check_user_level(algorithm.name, model)
        return cls(algorithm, model, algorithm.plan(num_rows, num_params), checkpoint)

    @property
    def num_rows(self) -> int:
        return self.steps.num_rows

    @property
    def num_params(self) -> int:
        return self.steps.num_params

    @property
    def mu(self) -> float:
        """The μ-GDP the run is charged in the ledger."""
        return self.report.mu

    def fingerprint(self, lake: str = "") -> str:
        """The checkpoint identity of what this plan computes on ``lake`` (``config_fingerprint``)."""
        return config_fingerprint(self.algorithm, self.model, self.num_rows, self.num_params, lake)

    def check_data(self, num_rows: int, num_features: int, where: str = "the data") -> None:
        """Refuse data the plan was not built for: another row count or another feature count."""
        params = self.model.num_params(num_features)
        if num_rows != self.num_rows or params != self.num_params:
            raise PlanMismatchError(
                f"{where} has {num_rows:,} rows and {num_features} features ({params} parameters for "
                f"{type(self.model).__name__}), but the run plan was built for {self.num_rows:,} rows and "
                f"{self.num_params} parameters; build the plan from this data"
            )

    def check_executor(self, executor: Any) -> None:
        """Refuse an executor that computes statistics for another model than the plan's."""
        if executor.model != self.model:
            raise PlanMismatchError(
                f"the executor computes statistics for {executor.model!r}, but the run plan trains "
                f"{self.model!r}; give the executor the plan's model"
            )
        per_user = getattr(self.algorithm, "unit", None) is not None and self.algorithm.unit.is_user
        if per_user != getattr(executor, "by_user", False):
            raise PlanMismatchError(
                "the run plan's privacy unit is "
                + (
                    "the user, but the executor reads rows without their users"
                    if per_user
                    else "the row, but the executor combines users' rows"
                )
                + "; give InMemoryExecutor(by_user=...) the plan's unit"
            )
