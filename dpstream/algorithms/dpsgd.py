"""One-pass mini-batch DP-SGD with any noise process (Choquette-Choo et al., "Correlated Noise Provably
Beats Independent Noise", arXiv:2310.06771, Alg. 1; Wang et al., "KANs Trained by DP-SGD with
Correlated Noise", arXiv:2605.12648, Alg. 1).

Step t uses the next ``batch_size`` rows (disjoint, one pass) and releases

    ĝ_t = Σ_{i∈batch t} clip(g_i, C) + s·ξ_t,     w_{t+1} = Π_{B(w_0, R)}(w_t − (η/b) ĝ_t),

with ξ_t from the noise process (independent: DP-SGD; λ-correlated: DP-λCGD; Toeplitz: ν-DP-FTRL).
The released stream is the matrix mechanism C·G + s·W with encoder C = M⁻¹, so with single
participation it is μ-GDP with μ = Δ·γ_T/s, Δ = 2C (replace-one) or C (zero-out), γ_T the process's
sensitivity over the T steps. The noise std s is calibrated by inverting the exact δ(ε; μ).
The projection onto B(w_0, R) (Wang et al., arXiv:2605.12648; optional) is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from dpstream.algorithms.base import (
    OneRoundTrip,
    Plan,
    PrivacyReport,
    StepSpan,
    build_report,
    project_to_ball,
    resolve_unit,
    tail_average,
)
from dpstream.algorithms.registry import AlgorithmDeclaration, UserLevel, register
from dpstream.models import BatchStats, StatsRequest
from dpstream.noise import NoiseKey, NoiseProcess, NoiseState, make_noise_process
from dpstream.privacy import (
    NeighbouringRelation,
    NoiseCalibration,
    PrivacyEvent,
    PrivacyUnit,
    calibrate_gaussian,
)
from dpstream.validation import check_budget, check_positive

__all__ = ["DPSGD", "DPSGDPlan", "DPSGDState"]


@dataclass(frozen=True)
class DPSGDPlan(Plan):
    """T = ⌊N/b⌋ disjoint batches and the noise std s = ``calibration.noise_std`` on each clipped sum,
    calibrated so that the process with sensitivity γ_T (``calibration.max_column_norm``) is (ε, δ)-DP;
    ``noise`` is that process (independent, λ-correlated or ν-DP-FTRL)."""

    calibration: NoiseCalibration
    noise: NoiseProcess
    NOISE_FIELDS: ClassVar[tuple[str, ...]] = ("calibration",)

    @property
    def noise_std(self) -> float:
        return self.calibration.noise_std


@dataclass(frozen=True)
class DPSGDState:
    step: int
    params: np.ndarray
    initial_params: np.ndarray
    noise_state: NoiseState
    average_sum: np.ndarray
    average_count: int


@dataclass(frozen=True)
class DPSGD(OneRoundTrip):
    epsilon: float
    delta: float
    clip_norm: float
    learning_rate: float
    batch_size: int
    noise: NoiseProcess = make_noise_process("independent")
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE
    unit: PrivacyUnit | None = None  # whose data is protected; None: the row under relation
    projection_radius: float | None = None
    averaging: str = "last"  # "last" | "tail" (mean of the last half of the iterates)
    name: str = "dpsgd"

    def __post_init__(self) -> None:
        check_budget(self.epsilon, self.delta)
        object.__setattr__(self, "unit", resolve_unit(self.unit, self.relation))
        object.__setattr__(self, "relation", self.unit.relation)
        check_positive("clip_norm", self.clip_norm)
        check_positive("learning_rate", self.learning_rate)
        check_positive("batch_size", self.batch_size, integer=True)
        check_positive("projection_radius", self.projection_radius, optional=True)
        if self.averaging not in ("last", "tail"):
            raise ValueError(f"averaging must be 'last' or 'tail', got {self.averaging!r}")
        if self.noise.target != "increment":
            raise ValueError(
                f"DP-SGD adds noise to each step; {self.noise.describe()} adds it to prefix sums"
            )

    def plan(self, num_rows: int, num_params: int) -> DPSGDPlan:
        batch = int(self.batch_size)
        if batch > num_rows:
            raise ValueError(
                f"batch_size={batch} is larger than the number of rows N={num_rows}; use batch_size <= N"
            )
        steps = num_rows // batch
        spans = tuple(StepSpan(t, (t * batch, (t + 1) * batch)) for t in range(steps))
        calibration = calibrate_gaussian(  # sums of contributions clipped to C: the unit's sensitivity
            self.epsilon,
            self.delta,
            self.unit.clipped_sum_sensitivity(self.clip_norm),
            max_column_norm=self.noise.sensitivity(steps),
            relation=self.relation,
        )
        return DPSGDPlan(num_rows, num_params, spans, batch, calibration, self.noise)

    def init(self, plan: DPSGDPlan, params: np.ndarray) -> DPSGDState:
        params = np.array(params, dtype=np.float64)
        return DPSGDState(0, params, params.copy(), plan.noise.init(params.size), np.zeros_like(params), 0)

    def request(self, state: DPSGDState, span: StepSpan, plan: DPSGDPlan) -> StatsRequest:
        return StatsRequest(params=state.params, clip_norms=np.array([float(self.clip_norm)]))

    def apply(
        self, state: DPSGDState, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: DPSGDPlan
    ) -> DPSGDState:
        noise, noise_state = plan.noise.next(key, state.noise_state)
        released = stats.clipped_sums[0] + plan.noise_std * noise
        params = state.params - (self.learning_rate / self.batch_size) * released
        params = project_to_ball(params, state.initial_params, self.projection_radius)
        average_sum, average_count = tail_average(
            state.average_sum, state.average_count, params, state.step, plan.num_steps
        )
        return replace(
            state,
            step=state.step + 1,
            params=params,
            noise_state=noise_state,
            average_sum=average_sum,
            average_count=average_count,
        )

    def result(self, state: DPSGDState) -> np.ndarray:
        if self.averaging == "tail" and state.average_count:
            return state.average_sum / state.average_count
        return state.params

    def event(self, plan: DPSGDPlan) -> PrivacyEvent:
        """What the run releases: the T noisy clipped-gradient sums as one matrix mechanism."""
        return plan.calibration.event(plan.num_steps, label=self.noise.describe())

    def report(self, plan: DPSGDPlan, state: Any = None) -> PrivacyReport:
        calibration = plan.calibration
        return build_report(
            mechanism=f"one-pass DP-SGD with {self.noise.describe()}",
            event=self.event(plan),
            relation=self.relation,
            unit=self.unit,
            epsilon=self.epsilon,
            delta=self.delta,
            noise_multiplier=calibration.noise_std / self.clip_norm,
            sensitivity=calibration.max_column_norm,
            plan=plan,
            clip_norms=(float(self.clip_norm),),
        )


def _build(spec: Any, model: Any, num_rows: int, learning_rate: float) -> DPSGD:
    # The default batch: max(64, N/1000) rows, at most N.
    batch_size = (
        spec.batch_size if spec.batch_size is not None else max(1, min(num_rows, max(64, num_rows // 1000)))
    )
    return DPSGD(
        spec.epsilon,
        spec.delta,
        clip_norm=spec.clip_norm,
        learning_rate=learning_rate,
        batch_size=batch_size,
        noise=make_noise_process(spec.noise, correlation=spec.correlation, nu=spec.nu),
        projection_radius=spec.projection_radius,
        averaging="tail",
        relation=spec.relation,
        unit=spec.unit,
    )


def _audited(epsilon: float, delta: float, relation: str, noise: NoiseProcess) -> DPSGD:
    return DPSGD(
        epsilon, delta, clip_norm=1.0, learning_rate=0.5, batch_size=100, relation=relation, noise=noise
    )


# correlation is read only with noise="lambda", nu only with noise="nu" (the builder refuses the other).
register(
    AlgorithmDeclaration(
        "dpsgd",
        uses=("clip_norm", "learning_rate", "batch_size", "noise", "correlation", "nu", "projection_radius"),
        build=_build,
        title="DP-SGD",
        state_types=(DPSGDState,),
        user_level=UserLevel(note="any noise"),
        audited=_audited,
    )
)
