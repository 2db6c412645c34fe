"""DP-AMBSSGD with per-batch DP-STAT adaptive clipping (Varshney et al., "Optimal Private Linear
Regression via Adaptive Clipping", arXiv:2207.04686, Alg. 2 and 3; docs/design.md, notes A1–A8).

Each of the T steps takes s fresh "stat" rows and then b fresh "gradient" rows (disjoint, one pass):

1. DP-STAT: release noisy counts c_k + N(0, Kα²) of stat rows whose statistic is ≤ Δ2^k, k = 0..K−1,
   and stop at the first with c_priv ≥ s − θ; γ_t = Δ2^k (or Δ2^K = B if none). All K exact counts
   come from one histogram pass, so the step needs one round trip.
2. Clip norm ζ_t = R_x γ_t logᵃN for the residual statistic (paper), or ζ_t = safety·γ_t when DP-STAT
   runs on the per-example gradient norm |φ'_i|·‖x_i‖ directly (no R_x needed).
3. w_{t+1} = w_t − η( (1/b) Σ clip(g_i, ζ_t) + α·(Δ(ζ_t)/b)·ξ_t ), Δ(ζ) = 2ζ (replace-one).
4. Output the average of w_{⌊T/2⌋+1..T}.

Privacy (exact GDP, replace-one). Each count has sensitivity 1 and std sqrt(K)α, so the K counts are
μ = 1/α together; the gradient step has sensitivity Δ(ζ_t) and std αΔ(ζ_t), μ = 1/α. The default charge
is μ = 1/α (``disjoint_accounting=True``): the stat rows and the gradient rows of every step are
disjoint index ranges of the shuffled order, fixed by the plan before any data is read (they depend on
N only), so every record enters exactly one mechanism of one step: the K counts of one step, or the
clipped sum of one step. Neighbouring datasets differ in one record, hence in the input of one
mechanism; the mechanisms chosen adaptively afterwards (ζ_t depends on earlier outputs) see identical
inputs on both datasets and add nothing (parallel composition; a ``DisjointUnionEvent``). Varshney et
al. (Thm 3.6) charge every record for both mechanisms, μ = sqrt(2)/α; ``disjoint_accounting=False``
keeps that conservative charge. α is calibrated from (ε, δ) by the exact δ(ε; μ).

Step size. The default η = b/(R² + (b − 1)·L_H) is Thm 3.7's with ‖E[xxᵀ]‖ ≤ L_H; with
``hessian_norm=None`` L_H = R² (E‖x‖² ≤ R² bounds the largest eigenvalue), so η = 1/R² and the
iteration is stable for every distribution with that row-norm bound. The paper's η = b/(R² + b − 1)
assumes ‖H‖ ≤ 1: pass ``hessian_norm=1.0`` when that is known (e.g. isotropic features).

Candidate window. The clip norm cannot move far between steps, so a step asks the workers for the
clipped sums at the 2w + 1 candidates around the previous step's ζ (``candidate_window`` = w, default
2) instead of all K + 1: the GEMM of the statistics kernel shrinks from K + 1 = 31 columns to 5. When
DP-STAT lands outside the window, ``followup`` asks for one more pass over the gradient rows at the
chosen ζ (a second round trip). Privacy is unchanged: the window depends on the data only through
ζ_{t−1}, an earlier DP output, and whichever round computes it, the released value is the same clipped
sum Σ clip(g_i, ζ_t) plus the same noise. The first step, with no previous ζ, evaluates every
candidate; ``candidate_window=None`` does so at every step (one round trip always).

Departures from the paper (docs/design.md, notes A1–A4): disjoint index ranges; exactly K counts; the
slack θ = stat_slack·sqrt(K)α (default 2; 0 is paper-faithful and overshoots); K chosen directly
(default 30) instead of B/N^200.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpstream.algorithms.base import (
    Plan,
    PrivacyReport,
    StepSpan,
    build_report,
    resolve_unit,
    tail_average,
)
from dpstream.algorithms.registry import AlgorithmDeclaration, UserLevel, register
from dpstream.models import BatchStats, StatsRequest
from dpstream.noise import IndependentNoise, NoiseKey
from dpstream.privacy import (
    ComposedEvent,
    DisjointUnionEvent,
    GaussianEvent,
    NeighbouringRelation,
    PrivacyUnit,
    SelfComposedEvent,
    mu_for_epsilon_delta,
)
from dpstream.validation import check_budget, check_positive

__all__ = ["DPAMBSSGD", "AMBSSGDPlan", "AMBSSGDState", "dp_stat_threshold"]


@dataclass(frozen=True)
class AMBSSGDPlan(Plan):
    """T steps of s = ``stat_rows`` DP-STAT rows then b = ``gradient_rows`` gradient rows (Alg. 2, spec
    §2.4). Per step: K Gaussian counts of std ``count_noise_std`` = sqrt(K)·α, the threshold slack θ,
    the candidate clip norms ζ (one per DP-STAT outcome) and the gradient noise std α·Δ(ζ_t); η is the
    step size. ``count_noise`` and ``gradient_noise`` are the two independent noise processes (their
    streams keep the draws of the two mechanisms of a step apart)."""

    alpha: float
    stat_rows: int
    gradient_rows: int
    count_noise_std: float
    slack: float
    learning_rate: float
    clip_norms: np.ndarray
    notes: tuple[str, ...] = ()
    count_noise: IndependentNoise = IndependentNoise(stream="dpstat")
    gradient_noise: IndependentNoise = IndependentNoise(stream="gradient")
    NOISE_FIELDS: ClassVar[tuple[str, ...]] = ("alpha", "count_noise_std")


def dp_stat_threshold(counts: np.ndarray, noise: np.ndarray, stat_rows: int, slack: float) -> int:
    """Index k of the first noisy count with c_k + noise_k ≥ s − θ, or K if none (Alg. 3 with errata)."""
    hits = np.flatnonzero(counts + noise >= stat_rows - slack)
    return int(hits[0]) if hits.size else len(counts)


@dataclass(frozen=True)
class AMBSSGDState:
    step: int
    params: np.ndarray
    average_sum: np.ndarray
    average_count: int
    clip_history: tuple[float, ...] = ()


@dataclass(frozen=True)
class DPAMBSSGD:
    epsilon: float
    delta: float
    bound: float  # public upper bound B of the DP-STAT statistic (residual or gradient norm)
    statistic: str = "residual"  # "residual" (paper) | "gradient_norm"
    feature_norm: float | None = None  # R_x, needed for the residual statistic
    num_steps: int | None = None  # default round(4 ln N)
    stat_fraction: float = 1 / 11  # s/(b+s); the paper's s = b/10
    levels: int = 30  # K
    stat_slack: float = 2.0  # θ = stat_slack·sqrt(K)·α
    clip_safety: float = 1.0  # ζ = clip_safety·γ for the gradient-norm statistic
    tail_exponent: float = 0.5  # a in ζ = R_x γ logᵃN
    learning_rate: float | None = None  # default b/(R² + (b − 1)·L_H) (Thm 3.7; module docstring)
    hessian_norm: float | None = None  # L_H ≥ ‖E[xxᵀ]‖; None: R², always stable
    candidate_window: int | None = 2  # w: clip norms ζ_{t−1}·2^−w .. ζ_{t−1}·2^w per step; None: all
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE
    unit: PrivacyUnit | None = None  # whose data is protected; None: the row under relation
    disjoint_accounting: bool = True
    name: str = "ambssgd"

    def __post_init__(self) -> None:
        check_budget(self.epsilon, self.delta)
        object.__setattr__(self, "unit", resolve_unit(self.unit, self.relation))
        object.__setattr__(self, "relation", self.unit.relation)
        if self.statistic not in ("residual", "gradient_norm"):
            raise ValueError(f"statistic must be 'residual' or 'gradient_norm', got {self.statistic!r}")
        if self.statistic == "residual" and (self.feature_norm is None or not self.feature_norm > 0):
            raise ValueError("the residual statistic needs feature_norm (R_x > 0, a public bound on E‖x‖²)")
        check_positive("bound", self.bound)
        if not 0.0 < self.stat_fraction < 1.0:
            raise ValueError(f"stat_fraction must lie in (0, 1), got {self.stat_fraction!r}")
        check_positive("levels", self.levels, integer=True)
        if self.stat_slack < 0 or self.clip_safety <= 0:
            raise ValueError("stat_slack must be >= 0 and clip_safety > 0")
        check_positive("num_steps", self.num_steps, optional=True, integer=True)
        check_positive("learning_rate", self.learning_rate, optional=True)
        check_positive("hessian_norm", self.hessian_norm, optional=True)
        if self.candidate_window is not None:
            check_positive("candidate_window", self.candidate_window, integer=True, allow_zero=True)

    @property
    def noise_multiplier(self) -> float:
        """α: each mechanism of a step is 1/α-GDP; a record pays sqrt(2)/α (or 1/α if disjoint)."""
        mu = mu_for_epsilon_delta(self.epsilon, self.delta)
        return (1.0 if self.disjoint_accounting else math.sqrt(2.0)) / mu

    def thresholds(self) -> np.ndarray:
        """The grid Δ2^k, k = 0..K−1, with Δ = B·2^−K; Δ2^K = B is the cap."""
        return self.bound * 2.0 ** (np.arange(self.levels) - self.levels)

    def clip_norms(self, num_rows: int, num_params: int) -> np.ndarray:
        """Candidate ζ for every possible DP-STAT outcome γ ∈ {Δ2^k : k = 0..K}."""
        gammas = self.bound * 2.0 ** (np.arange(self.levels + 1) - self.levels)
        if self.statistic == "residual":
            return self.feature_norm * gammas * math.log(num_rows) ** self.tail_exponent
        return self.clip_safety * gammas

    def plan(self, num_rows: int, num_params: int) -> AMBSSGDPlan:
        if num_rows < 2:
            raise ValueError(
                f"too few rows for the plan: n_samples={num_rows}; DP-AMBSSGD needs at least 2 rows"
            )
        # Default T = round(4 ln N) (c₁ = 4, docs/design.md note A7), but fewer when N is small: DP-STAT
        # needs s ≥ 10·sqrt(K)·α stat rows per step (note A4) or its counts drown in noise.
        alpha = self.noise_multiplier
        rows_needed = math.ceil(10 * math.sqrt(self.levels) * alpha / self.stat_fraction)
        if self.num_steps is None and num_rows < 2 * rows_needed:
            raise ValueError(
                f"too few rows for DP-AMBSSGD: n_samples={num_rows}, but at epsilon={self.epsilon:g}, delta={self.delta:g} "
                "DP-STAT needs s ≥ 10·sqrt(K)·α stat rows per step (docs/design.md, note A4), "
                f"{rows_needed:,} rows per step, and "
                f"an average over at least 2 steps: at least {2 * rows_needed:,} rows. Use algorithm 'ssp' (AdaSSP, "
                "exact at any N) or 'dpsgd', or set num_steps to accept noisy clip norms"
            )
        default_steps = min(round(4 * math.log(num_rows)), num_rows // rows_needed)
        steps = int(self.num_steps) if self.num_steps is not None else default_steps
        per_step = num_rows // steps
        stat = max(1, round(per_step * self.stat_fraction))
        grad = per_step - stat
        if grad < 1:
            raise ValueError(
                f"too few rows for the plan: n_samples={num_rows} over {steps} steps leaves {stat} stat and "
                f"{grad} gradient rows per step; use more rows or fewer steps (num_steps)"
            )
        spans = tuple(
            StepSpan(t, (t * per_step + stat, (t + 1) * per_step), (t * per_step, t * per_step + stat))
            for t in range(steps)
        )
        count_noise = math.sqrt(self.levels) * alpha
        learning_rate = self.learning_rate
        if learning_rate is None:
            radius2 = (self.feature_norm if self.feature_norm is not None else math.sqrt(num_params + 2)) ** 2
            hessian = radius2 if self.hessian_norm is None else self.hessian_norm
            learning_rate = grad / (radius2 + (grad - 1) * hessian)
        notes = []
        if stat < 10 * count_noise:
            notes.append(
                f"warning: s={stat} stat rows per step is below 10·sqrt(K)·α={10 * count_noise:.0f}; DP-STAT "
                "counts will be noisy (docs/design.md, note A4); use more rows, fewer steps or fewer levels"
            )
        return AMBSSGDPlan(
            num_rows,
            num_params,
            spans,
            per_step,
            alpha=alpha,
            stat_rows=stat,
            gradient_rows=grad,
            count_noise_std=count_noise,
            slack=self.stat_slack * count_noise,
            learning_rate=learning_rate,
            clip_norms=self.clip_norms(num_rows, num_params),
            notes=tuple(notes),
        )

    def init(self, plan: AMBSSGDPlan, params: np.ndarray) -> AMBSSGDState:
        params = np.array(params, dtype=np.float64)
        return AMBSSGDState(0, params, np.zeros_like(params), 0)

    def window(self, state: AMBSSGDState, plan: AMBSSGDPlan) -> tuple[int, int]:
        """Candidate indices [first, last] a step computes: every one at the first step or without a
        window, else the w on either side of the previous step's released ζ (a DP output)."""
        last = len(plan.clip_norms) - 1
        if self.candidate_window is None or not state.clip_history:
            return 0, last
        previous = int(np.argmin(np.abs(plan.clip_norms - state.clip_history[-1])))
        return max(0, previous - self.candidate_window), min(last, previous + self.candidate_window)

    def request(self, state: AMBSSGDState, span: StepSpan, plan: AMBSSGDPlan) -> StatsRequest:
        first, last = self.window(state, plan)
        return StatsRequest(
            params=state.params,
            clip_norms=plan.clip_norms[first : last + 1],
            thresholds=self.thresholds(),
            statistic=self.statistic,
        )

    def dp_stat(self, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: AMBSSGDPlan) -> int:
        """The candidate index DP-STAT releases for this step (Alg. 3): noisy counts, first over s − θ."""
        count_noise = plan.count_noise_std * plan.count_noise.draw(key, span.step, self.levels)
        return dp_stat_threshold(stats.histogram, count_noise, plan.stat_rows, plan.slack)

    def followup(
        self, state: AMBSSGDState, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: AMBSSGDPlan
    ) -> StatsRequest | None:
        """The gradient rows' clipped sum at ζ_t when DP-STAT chose it outside the window, else None."""
        first, last = self.window(state, plan)
        index = self.dp_stat(span, stats, key, plan)
        if first <= index <= last:
            return None
        return StatsRequest(params=state.params, clip_norms=plan.clip_norms[index : index + 1])

    def apply(
        self,
        state: AMBSSGDState,
        span: StepSpan,
        stats: BatchStats,
        key: NoiseKey,
        plan: AMBSSGDPlan,
        followup_stats: BatchStats | None = None,
    ) -> AMBSSGDState:
        first, last = self.window(state, plan)
        if stats.clipped_sums.shape[0] != last - first + 1:
            raise ValueError(
                f"step {span.step} expects clipped sums for candidates {first}..{last}, got "
                f"{stats.clipped_sums.shape[0]} rows: compute the statistics of this state's request"
            )
        index = self.dp_stat(span, stats, key, plan)
        if first <= index <= last:
            clipped_sum = stats.clipped_sums[index - first]
        elif followup_stats is None or followup_stats.clipped_sums.shape[0] != 1:
            raise ValueError(
                f"DP-STAT chose clip norm {index} outside the window {first}..{last} at step {span.step}: "
                "apply needs the statistics of followup(...) as followup_stats"
            )
        else:
            clipped_sum = followup_stats.clipped_sums[0]
        clip_norm = float(plan.clip_norms[index])
        noise_std = plan.alpha * self.unit.clipped_sum_sensitivity(clip_norm)
        noise = plan.gradient_noise.draw(key, span.step, state.params.size)
        released = clipped_sum + noise_std * noise
        params = state.params - plan.learning_rate * released / plan.gradient_rows
        average_sum, average_count = tail_average(
            state.average_sum, state.average_count, params, state.step, plan.num_steps
        )
        return AMBSSGDState(
            step=state.step + 1,
            params=params,
            average_sum=average_sum,
            average_count=average_count,
            clip_history=state.clip_history + (clip_norm,),
        )

    def result(self, state: AMBSSGDState) -> np.ndarray:
        return state.average_sum / state.average_count if state.average_count else state.params

    def step_event(self, plan: AMBSSGDPlan) -> ComposedEvent | DisjointUnionEvent:
        alpha = plan.alpha
        counts = SelfComposedEvent(
            GaussianEvent(1.0, plan.count_noise_std, self.relation, "DP-STAT count"), self.levels
        )
        # Gradient step: sensitivity Δ(ζ), std αΔ(ζ) whatever ζ_t is; stated for ζ = 1.
        unit = self.unit.clipped_sum_sensitivity(1.0)
        gradient = GaussianEvent(unit, alpha * unit, self.relation, "clipped gradient sum")
        if self.disjoint_accounting:
            return DisjointUnionEvent((counts, gradient))
        return ComposedEvent((counts, gradient))

    def event(self, plan: AMBSSGDPlan) -> DisjointUnionEvent:
        """What the run releases: one step's DP-STAT counts and gradient sum per disjoint batch."""
        return DisjointUnionEvent(tuple(self.step_event(plan) for _ in range(plan.num_steps)))

    def report(self, plan: AMBSSGDPlan, state: Any = None) -> PrivacyReport:
        event = self.event(plan)
        accounting = (
            "stat and gradient rows disjoint and fixed in advance: each record pays for one mechanism (parallel composition)"
            if self.disjoint_accounting
            else "each record charged for DP-STAT and the gradient step (Varshney et al., conservative opt-in)"
        )
        return build_report(
            mechanism=f"DP-AMBSSGD with per-batch DP-STAT on the {self.statistic.replace('_', ' ')} ({self.levels} levels)",
            event=event,
            relation=self.relation,
            unit=self.unit,
            epsilon=self.epsilon,
            delta=self.delta,
            noise_multiplier=plan.alpha * self.unit.clipped_sum_sensitivity(1.0),
            sensitivity=1.0,
            plan=plan,
            clip_norms=tuple(state.clip_history) if state is not None else (),
            notes=(accounting,) + plan.notes,
        )


def _build(spec: Any, model: Any, num_rows: int, learning_rate: float) -> DPAMBSSGD:
    return DPAMBSSGD(
        spec.epsilon,
        spec.delta,
        bound=spec.stat_bound,
        statistic="gradient_norm",
        num_steps=spec.num_steps,
        learning_rate=learning_rate,
        relation=spec.relation,
        unit=spec.unit,
    )


def _audited(epsilon: float, delta: float, relation: str, noise: None) -> DPAMBSSGD:
    # One step: at the audit's N = 2,000 the default plan would refuse DP-STAT's minimum rows; privacy is the same.
    return DPAMBSSGD(epsilon, delta, bound=1e3, statistic="gradient_norm", relation=relation, num_steps=1)


register(
    AlgorithmDeclaration(
        "ambssgd",
        uses=("learning_rate", "num_steps", "stat_bound"),
        build=_build,
        title="DP-AMBSSGD",
        state_types=(AMBSSGDState,),
        user_level=UserLevel(),
        audited=_audited,
        # Measured over 1 to 4 (BENCHMARKS.md "A private preconditioner"): its few large steps gain
        # most from rows that fill the box, clipped at 1.5 sd
        whitening_spread=1.5,
    )
)
