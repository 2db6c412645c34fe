"""What every algorithm shares: the plan of row spans, the privacy report, and the state-machine protocol.

An algorithm is transport-agnostic (docs/design.md). The coordinator asks it for

* ``plan(num_rows, num_params)``: the steps, the disjoint row span of each (one pass, each row once)
  and every noise scale, as a frozen plan class of the algorithm's own (the plan is the privacy
  argument: its ``NOISE_FIELDS`` are what the report's events are computed from);
* ``init(plan)``: the initial state;
* ``request(state, span, plan)``: what the workers must compute for that step (``StatsRequest``);
* ``followup(state, span, stats, key, plan)``: None, or a second request over the step's gradient rows
  when the first round's statistics were not enough (DP-AMBSSGD, when DP-STAT chose a clip norm
  outside the window of candidates it asked for);
* ``apply(state, span, stats, key, plan[, followup_stats])``: the DP update from the merged statistics
  (and, only when there was a follow-up request, its statistics), adding the step's noise, which is drawn from the noise
  key at that step and so identical on a retry;
* ``result(state)``, ``event(plan)`` and ``report(plan)``: the released parameters, what the plan
  releases (the privacy event) and the privacy report the exact accountant makes of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Protocol

import numpy as np

from dpstream.models import BatchStats, StatsRequest
from dpstream.noise import NoiseKey
from dpstream.privacy import (
    GaussianEvent,
    GdpAccountant,
    NeighbouringRelation,
    PrivacyEvent,
    PrivacyUnit,
    compose_mu,
    epsilon_for_delta,
    event_mu,
)

__all__ = [
    "StepSpan",
    "Plan",
    "PrivacyReport",
    "Algorithm",
    "OneRoundTrip",
    "project_to_ball",
    "tail_average",
    "build_report",
    "report_after",
    "resolve_unit",
]


@dataclass(frozen=True)
class StepSpan:
    """Rows [start, stop) of the shuffled order used by one step; ``stat_rows`` only for DP-AMBSSGD."""

    step: int
    gradient_rows: tuple[int, int]
    stat_rows: tuple[int, int] | None = None

    @property
    def rows(self) -> int:
        stat = 0 if self.stat_rows is None else self.stat_rows[1] - self.stat_rows[0]
        return stat + self.gradient_rows[1] - self.gradient_rows[0]


@dataclass(frozen=True)
class Plan:
    """What every algorithm's plan states; each algorithm subclasses it with its noise scales as typed,
    frozen fields (``DPSGDPlan``, ``AMBSSGDPlan``, ``SRGDPlan``, ``SSPPlan``).

    ``num_params`` is the length of the parameter vector the noise is drawn for (the model's
    ``num_params(num_features)``: the feature count for the linear models, m·d·p for the KAN).
    ``NOISE_FIELDS`` names the fields holding noise standard deviations or ``NoiseCalibration``s: the
    audit's broken-mechanism check scales exactly these."""

    num_rows: int
    num_params: int
    spans: tuple[StepSpan, ...]
    rows_per_step: int
    NOISE_FIELDS: ClassVar[tuple[str, ...]] = ()

    @property
    def num_steps(self) -> int:
        return len(self.spans)

    @property
    def rows_used(self) -> int:
        return sum(span.rows for span in self.spans)


@dataclass(frozen=True)
class PrivacyReport:
    """Everything a user needs to state the guarantee; built from the events by the exact accountant."""

    mechanism: str
    relation: str
    epsilon: float
    delta: float
    mu: float
    noise_multiplier: float
    sensitivity: float
    steps: int
    rows_per_step: int
    accountant: str
    events: str
    clip_norms: tuple[float, ...] = ()
    notes: tuple[str, ...] = ()
    unit: str = "one row"  # whose data the guarantee protects (``PrivacyUnit.describe``)
    ledger_unit: str = "row"  # what the lake's ledger counts (``PrivacyUnit.ledger_unit``)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def event(self) -> GaussianEvent:
        """The whole release as one event for an accountant: a μ-GDP mechanism under ``relation`` (exact
        for composing with other fits, which is all Gaussian DP needs of it; ``events`` describes its parts).
        A report of nothing released (μ = 0) is an event of sensitivity 0."""
        relation = NeighbouringRelation.parse(self.relation)
        if self.mu == 0:
            return GaussianEvent(0.0, 1.0, relation, self.mechanism)
        return GaussianEvent(1.0, 1.0 / self.mu, relation, self.mechanism)

    def composed_with(self, event: PrivacyEvent, note: str, delta: float) -> PrivacyReport:
        """This report extended by another release over the same data (private bounds before training, the
        release guard after it): the μ-GDP guarantees compose, μ² = μ_report² + μ_event² (exact for
        Gaussian DP), and ε is restated at ``delta``."""
        mu = compose_mu(self.mu, event_mu(event))
        return replace(
            self,
            epsilon=epsilon_for_delta(delta, mu),
            mu=mu,
            events=f"composition of [{self.events}; {event.describe()}]",
            notes=self.notes + (note,),
        )

    def to_markdown(self) -> str:
        clip = (
            (
                f"{self.clip_norms[0]:.6g}"
                if len(set(self.clip_norms)) == 1
                else f"{min(self.clip_norms):.4g} to {max(self.clip_norms):.4g} (per step, DP outputs)"
            )
            if self.clip_norms
            else "n/a"
        )
        rows = [
            ("mechanism", self.mechanism),
            ("privacy unit", self.unit),
            ("neighbouring relation", self.relation),
            ("guarantee", f"({self.epsilon:.6g}, {self.delta:g})-DP; {self.mu:.6g}-GDP"),
            ("noise multiplier (noise std / clip norm)", f"{self.noise_multiplier:.6g}"),
            ("sensitivity γ_T of the noise process", f"{self.sensitivity:.6g}"),
            (
                f"steps × {'people' if self.ledger_unit.startswith('user:') else 'rows'} per step",
                f"{self.steps} × {self.rows_per_step}",
            ),
            ("clip norm", clip),
            ("accountant", self.accountant),
        ]
        lines = ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
        return "\n".join(lines + [f"\n{note}" for note in self.notes])


class Algorithm(Protocol):
    name: str

    def plan(self, num_rows: int, num_params: int) -> Plan: ...

    def init(self, plan: Plan, params: np.ndarray) -> Any: ...

    def request(self, state: Any, span: StepSpan, plan: Plan) -> StatsRequest: ...

    def followup(
        self, state: Any, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: Plan
    ) -> StatsRequest | None: ...

    def apply(
        self, state: Any, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: Plan, **followup: Any
    ) -> Any:
        """The step's update; an algorithm whose ``followup`` can return a request also takes
        ``followup_stats`` (the coordinator passes it only then)."""
        ...

    def result(self, state: Any) -> np.ndarray: ...

    def event(self, plan: Plan) -> PrivacyEvent:
        """What the plan releases, described for the accountant (``dpstream.privacy.events``)."""
        ...

    def report(self, plan: Plan, state: Any = None) -> PrivacyReport:
        """The run's privacy report: before the run from the plan alone (the coordinator refuses an
        over-budget plan with it), after it with the final ``state`` (DP-AMBSSGD quotes the clip norms
        DP-STAT chose)."""
        ...


class OneRoundTrip:
    """For algorithms whose step needs one round of statistics: ``followup`` is always None."""

    def followup(self, state: Any, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: Plan) -> None:
        return None


def project_to_ball(params: np.ndarray, center: np.ndarray, radius: float | None) -> np.ndarray:
    """Euclidean projection onto B(center, radius); identity when radius is None."""
    if radius is None:
        return params
    offset = params - center
    norm = float(np.linalg.norm(offset))
    return params if norm <= radius else center + offset * (radius / norm)


def tail_average(
    average_sum: np.ndarray, average_count: int, params: np.ndarray, step: int, num_steps: int
) -> tuple[np.ndarray, int]:
    """Accumulate the iterate after step ``step`` if it is among the last half, w_{⌊T/2⌋+1..T}
    (Varshney et al., "Optimal Private Linear Regression via Adaptive Clipping", arXiv:2207.04686,
    Alg. 2 line 12; docs/design.md, note A5). Post-processing: any window is equally private."""
    if step + 1 > num_steps // 2:
        return average_sum + params, average_count + 1
    return average_sum, average_count


def resolve_unit(unit: PrivacyUnit | None, relation: NeighbouringRelation | str) -> PrivacyUnit:
    """An algorithm's privacy unit: ``unit`` when given (its relation is then the algorithm's), else the
    row under ``relation``. The unit owns the sensitivities the algorithm calibrates its noise with."""
    relation = NeighbouringRelation.parse(relation)
    if unit is None:
        return PrivacyUnit.row(relation)
    if not isinstance(unit, PrivacyUnit):
        raise ValueError(f"unit must be a dpstream.privacy.PrivacyUnit, got {type(unit).__name__}")
    if relation is not NeighbouringRelation.REPLACE_ONE and relation is not unit.relation:
        raise ValueError(
            f"relation={relation.value!r} disagrees with the unit's ({unit.relation.value}); state it once, in the unit"
        )
    return unit


def build_report(
    *,
    mechanism: str,
    event: PrivacyEvent,
    relation: NeighbouringRelation,
    epsilon: float,
    delta: float,
    noise_multiplier: float,
    sensitivity: float,
    plan: Plan,
    clip_norms: tuple[float, ...] = (),
    notes: tuple[str, ...] = (),
    unit: PrivacyUnit | None = None,
) -> PrivacyReport:
    """Interpret the run's event with the exact accountant; refuse if it exceeds the requested ε."""
    accountant = GdpAccountant(relation).compose(event)
    achieved = accountant.get_epsilon(delta)
    if achieved > epsilon * (1 + 1e-9):
        raise ValueError(
            f"this configuration spends epsilon={achieved:.6g} at delta={delta:g}, more than the requested "
            f"epsilon={epsilon:g}; add noise or lower the number of releases"
        )
    return PrivacyReport(
        mechanism=mechanism,
        relation=relation.value,
        epsilon=achieved,
        delta=delta,
        mu=accountant.mu,
        noise_multiplier=noise_multiplier,
        sensitivity=sensitivity,
        steps=plan.num_steps,
        rows_per_step=plan.rows_per_step,
        accountant="exact Gaussian DP (closed-form δ(ε)), single pass without amplification",
        events=event.describe(),
        clip_norms=clip_norms,
        notes=notes,
        unit=(unit if unit is not None else PrivacyUnit.row(relation)).describe(),
        ledger_unit=(unit if unit is not None else PrivacyUnit.row(relation)).ledger_unit,
    )


def report_after(algorithm: Algorithm, plan: Plan, steps: int) -> PrivacyReport:
    """The privacy report of the first ``steps`` releases of ``plan`` (for progress displays).

    The releases so far are the same mechanism on a shorter plan, so the exact accountant bounds them
    with the same event on ``steps`` steps. For correlated noise the event keeps the encoder's largest
    column over all T steps, an upper bound for the prefix; for disjoint single-pass batches with
    independent noise (DP-AMBSSGD, DP-SGD) one release already spends the run's ε (parallel composition).
    """
    if not 1 <= steps <= plan.num_steps:
        raise ValueError(f"steps must lie in [1, {plan.num_steps}], got {steps!r}")
    return algorithm.report(replace(plan, spans=plan.spans[:steps]))
