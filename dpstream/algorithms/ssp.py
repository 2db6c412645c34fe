"""AdaSSP: sufficient-statistics perturbation with a privately chosen ridge (Wang 2018, Alg. 2).

One pass, no sequential steps: every block contributes the least-squares statistics of its clipped
rows (``dpstream.models.moments``), the sums are merged as a monoid, and the coordinator releases

1. λ̃_min = max(0, λ_min(XᵀX) + σ_λ z − σ_λ·sqrt(2 ln(1/ρ))), a high-probability lower bound on the
   smallest eigenvalue (sensitivity B_x², Weyl);
2. the ridge λ = max(0, σ_G·sqrt(d ln(2d²/ρ)) − λ̃_min): Wang's bound on the spectral norm of the
   symmetric Gaussian noise E below, minus the curvature the data already has;
3. XᵀX + E, E symmetric with N(0, σ_G²) upper-triangle entries (sensitivity √2·B_x² replace-one);
4. Xᵀy + N(0, σ_v² I) (sensitivity 2·B_x·B_y replace-one);

and returns θ = (P(XᵀX + E) + λI)⁻¹ (Xᵀy + noise), computed on the noisy values only (post-processing).
P projects onto the positive semidefinite cone (negative eigenvalues set to 0): the exact XᵀX and its centred
form C below are PSD, so P only removes noise, and a negative noise eigenvalue can no longer cancel the ridge
and blow the solution up along its eigenvector. Eigenvalues below σ_G are raised to σ_G. Solving a
classifier's full noisy system (the intercept penalised like the other weights) without the projection,
churn's 10th-percentile accuracy falls to 0.52; with it the churn fits at ε = 1 give 0.789 (p10 0.784), TV16
0.889 (p10 0.888) (``python -m benchmarks.real_data``, BENCHMARKS.md "Real data in its own units").

Too few rows for the regression (``label_mean_only``). Wang's noise bound λ₀ = σ_G·sqrt(d ln(2d²/ρ)) is
public (N, d, ε, δ, ρ). With an intercept and features on [−1, 1], no feature's centred curvature
exceeds N, so λ₀ > N means the ridge outweighs every direction the data could show: the weights shrink
towards 0 and what they keep is mostly noise (measured on subsamples, ``python -m benchmarks.real_data
--adassp``: on CPS 1988 the noisy label mean beats the full release from λ₀ ≈ N, on California the full
release stays ahead up to λ₀ = 2N; the rule takes the crossover of the first). Such a plan releases only the label sum Σy,
sensitivity 2·B_y (replace-one; B_y zero-out), with the whole μ, and the model is the noisy label mean,
the constant predictor, said plainly in the report. Classification keeps the full system: there the
ridge-dominated solution is a nearest-centroid rule, which still beats the majority class.

Intercept (``intercept_index`` = k, the column holding the public constant 1). In regression the ridge
is not applied to the intercept (the features are centred); in classification it is penalised like
every other coefficient. The model is computed from the noisy release (post-processing) by
``dpstream.algorithms.ssp_solve``, which gives the equations and the measurements behind each choice.

Privacy (exact GDP). The three releases are Gaussian mechanisms on the same records, composed:
μ² = μ_λ² + μ_G² + μ_v² with μ_i = Δ_i / σ_i. The total μ comes from (ε, δ) by the exact δ(ε; μ), and
is split by ``budget_split`` (shares of μ²; Wang uses thirds of ε; the default spends little on λ_min,
which only tunes λ, measured in BENCHMARKS.md). Sensitivities: ``NeighbouringRelation``.

K classes (``link="softmax"``, ``num_classes`` = K ≥ 3; ``dpstream.models.multinomial``): the targets are
the classes' contrast vectors t_c = Uᵀe_c (‖t_c‖ = sqrt(1 − 1/K), the label bound used here in place of
``label_bound``), the moment XᵀT is d × (K−1) with the binary moment's sensitivity times sqrt(1 − 1/K),
one release of XᵀX for all K classes (the model from it: ``ssp_solve``). The plan's ``num_params`` is
d·K; XᵀX is d × d.

Classification (``link="logistic"``): labels y ∈ {−1, +1}, the same statistics and releases as a
regression (the classifier from them: ``ssp_solve``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpstream.algorithms import ssp_solve
from dpstream.algorithms.base import OneRoundTrip, Plan, PrivacyReport, StepSpan, build_report, resolve_unit
from dpstream.algorithms.registry import AlgorithmDeclaration, UserLevel, register
from dpstream.models import BatchStats, StatsRequest
from dpstream.noise import IndependentNoise, NoiseKey, symmetric_noise
from dpstream.privacy import (
    ComposedEvent,
    GaussianEvent,
    NeighbouringRelation,
    PrivacyUnit,
    mu_for_epsilon_delta,
)
from dpstream.validation import check_budget, check_positive

__all__ = ["AdaSSP", "SSPPlan", "SSPState", "symmetric_noise"]
# LDA needs each class's noisy count and mean; it beats the quadratic surrogate (no masking of middle
# classes) once the expected class count N/K is this many times the count's noise std (public quantities;
# measured in BENCHMARKS.md, "Multi-class labels": diamonds cut at N/(Kσ) ≈ 110 gains 3–4 points, digits
# at ≈ 5 and penguins at ≈ 8 lose 10–40).
LDA_MIN_COUNT_TO_NOISE = 50.0


@dataclass(frozen=True)
class SSPPlan(Plan):
    """One step over all N rows: rows clipped to ``row_norm_bound`` B_x, and the three Gaussian
    releases' stds for λ_min(XᵀX), the upper triangle of XᵀX and Xᵀy (each sensitivity / (μ·sqrt(share))),
    with one independent noise process for each."""

    row_norm_bound: float
    eigenvalue_std: float
    gram_std: float
    moment_std: float
    # λ₀ > N in a regression with an intercept: only Σy is released (module docstring)
    label_mean_only: bool = False
    eigenvalue_noise: IndependentNoise = IndependentNoise(stream="ssp-eigenvalue")
    gram_noise: IndependentNoise = IndependentNoise(stream="ssp-gram")
    moment_noise: IndependentNoise = IndependentNoise(stream="ssp-moment")
    NOISE_FIELDS: ClassVar[tuple[str, ...]] = ("eigenvalue_std", "gram_std", "moment_std")


@dataclass(frozen=True)
class SSPState:
    params: np.ndarray
    ridge: float | None = None  # λ, a DP output (function of the noisy λ_min); None: label mean only
    # tr(XᵀX + E)/d, centred if there is an intercept: the data's mean curvature, a DP output
    curvature: float | None = None
    label_mean_only: bool = False  # the plan released Σy alone: params are the noisy label mean


@dataclass(frozen=True)
class AdaSSP(OneRoundTrip):
    epsilon: float
    delta: float
    # B_x ≥ ‖x‖ (rows clipped to it); None: sqrt(dim), features in [−1, 1]
    row_norm_bound: float | None = None
    label_bound: float = 1.0  # B_y ≥ |y| (labels clipped to it)
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE
    unit: PrivacyUnit | None = None  # whose data is protected; None: the row under relation
    failure_probability: float = 0.05  # ρ of the ridge rule
    budget_split: tuple[float, float, float] = (0.1, 0.6, 0.3)  # shares of μ² for λ_min, XᵀX, Xᵀy
    # "identity" (least squares) | "logistic" (PASS-GLM degree 2) | "softmax" (K classes)
    link: str = "identity"
    num_classes: int = 2  # K, for link="softmax"
    intercept_index: int | None = None  # column of the public constant 1: not penalised (module docstring)
    name: str = "ssp"

    def __post_init__(self) -> None:
        check_budget(self.epsilon, self.delta)
        object.__setattr__(self, "unit", resolve_unit(self.unit, self.relation))
        object.__setattr__(self, "relation", self.unit.relation)
        check_positive("row_norm_bound", self.row_norm_bound, optional=True)
        check_positive("label_bound", self.label_bound)
        if not 0.0 < self.failure_probability < 1.0:
            raise ValueError(f"failure_probability must lie in (0, 1), got {self.failure_probability!r}")
        split = tuple(float(share) for share in self.budget_split)
        if len(split) != 3 or any(not share > 0 for share in split) or abs(sum(split) - 1.0) > 1e-9:
            raise ValueError(
                f"budget_split must be three shares > 0 of μ² summing to 1 (λ_min, XᵀX, Xᵀy), got {self.budget_split!r}"
            )
        object.__setattr__(self, "budget_split", split)
        if self.link not in ("identity", "logistic", "softmax"):
            raise ValueError(f"link must be 'identity', 'logistic' or 'softmax', got {self.link!r}")
        if self.link == "softmax" and not (isinstance(self.num_classes, int) and self.num_classes >= 3):
            raise ValueError(f"link='softmax' needs num_classes ≥ 3, got {self.num_classes!r}")

    @property
    def targets(self) -> int:
        """Columns of Xᵀy: 1, or K − 1 contrasts for K classes."""
        return self.num_classes - 1 if self.link == "softmax" else 1

    @property
    def target_bound(self) -> float:
        """The bound on a row's target (its norm for K classes): ``label_bound``, or sqrt(1 − 1/K)."""
        return math.sqrt(1.0 - 1.0 / self.num_classes) if self.link == "softmax" else self.label_bound

    def features(self, num_params: int) -> int:
        """d, the side of XᵀX: the parameter count over the K class columns of a softmax model."""
        return num_params // self.num_classes if self.link == "softmax" else num_params

    def bound(self, dim: int) -> float:
        return float(self.row_norm_bound) if self.row_norm_bound is not None else math.sqrt(dim)

    def noise_stds(self, dim: int) -> tuple[float, float, float]:
        """(σ_λ, σ_G, σ_v): std = sensitivity / (μ·sqrt(share))."""
        mu = mu_for_epsilon_delta(self.epsilon, self.delta)
        bound = self.bound(dim)
        sensitivities = (
            self.unit.eigenvalue_sensitivity(bound),
            self.unit.gram_sensitivity(bound),
            self.unit.moment_sensitivity(bound, self.target_bound),
        )
        return tuple(
            s / (mu * math.sqrt(share)) for s, share in zip(sensitivities, self.budget_split, strict=True)
        )  # type: ignore[return-value]

    def noise_bound(self, gram_std: float, dim: int) -> float:
        """λ₀ = σ_G·sqrt(d ln(2d²/ρ)): Wang's high-probability bound on ‖E‖₂, the ridge before λ_min."""
        return gram_std * math.sqrt(dim * math.log(2 * dim * dim / self.failure_probability))

    def plan(self, num_rows: int, num_params: int) -> SSPPlan:
        """The releases, fixed from public quantities: the three of Alg. 2, or Σy alone where λ₀ > N in a
        regression with an intercept (module docstring)."""
        check_positive("n_samples", num_rows, integer=True)
        check_positive("num_params", num_params, integer=True)
        if self.intercept_index is not None and not 0 <= self.intercept_index < num_params:
            raise ValueError(f"intercept_index={self.intercept_index} is outside the {num_params} columns")
        if self.link == "softmax" and num_params % self.num_classes:
            raise ValueError(f"num_params={num_params} is not a multiple of the {self.num_classes} classes")
        features = self.features(num_params)
        eigen_std, gram_std, moment_std = self.noise_stds(features)
        mean_only = self.centres and self.noise_bound(gram_std, features) > num_rows
        if mean_only:  # nothing but Σy is released: the whole μ goes to it
            eigen_std = gram_std = math.nan
            moment_std = self.label_sum_sensitivity / mu_for_epsilon_delta(self.epsilon, self.delta)
        return SSPPlan(
            num_rows,
            num_params,
            (StepSpan(0, (0, num_rows)),),
            num_rows,
            row_norm_bound=self.bound(features),
            eigenvalue_std=eigen_std,
            gram_std=gram_std,
            moment_std=moment_std,
            label_mean_only=mean_only,
        )

    @property
    def label_sum_sensitivity(self) -> float:
        """Σ clip(y_i, ±B_y), summed on its own (``BatchStats.label_sum``; nothing read from the rows' columns,
        so a lake whose constant column holds other values cannot exceed it): 2·B_y replace-one, B_y zero-out."""
        return self.unit.moment_sensitivity(1.0, self.label_bound)

    def init(self, plan: SSPPlan, params: np.ndarray) -> SSPState:
        return SSPState(np.zeros(plan.num_params))

    def request(self, state: SSPState, span: StepSpan, plan: SSPPlan) -> StatsRequest:
        return StatsRequest(
            params=state.params,
            kind="moments",
            row_norm_bound=plan.row_norm_bound,
            label_bound=self.target_bound,
        )

    def ridge(self, smallest_eigenvalue: float, eigen_draw: float, plan: SSPPlan) -> float:
        """λ = max(0, σ_G·sqrt(d ln(2d²/ρ)) − λ̃_min) from the exact λ_min and its noise draw (Wang 2018, Alg. 2)."""
        rho, eigen_std = self.failure_probability, plan.eigenvalue_std
        lower = max(
            0.0, smallest_eigenvalue + eigen_std * eigen_draw - eigen_std * math.sqrt(2 * math.log(1 / rho))
        )
        return max(0.0, self.noise_bound(plan.gram_std, self.features(plan.num_params)) - lower)

    def apply(
        self, state: SSPState, span: StepSpan, stats: BatchStats, key: NoiseKey, plan: SSPPlan
    ) -> SSPState:
        if stats.gram is None or stats.moment is None:
            raise ValueError(
                "AdaSSP needs the statistics of kind='moments' (XᵀX and Xᵀy); the executor returned gradient sums"
            )
        dim = self.features(plan.num_params)
        if plan.label_mean_only:
            if stats.label_sum is None:
                raise ValueError("a label-mean-only plan needs the statistics' label sum Σ clip(y)")
            label_sum = stats.label_sum + plan.moment_std * float(
                plan.moment_noise.draw(key, span.step, 1)[0]
            )
            params = np.zeros(dim)
            params[self.intercept_index] = label_sum / plan.num_rows
            return SSPState(params, label_mean_only=True)
        ridge = self.ridge(
            float(np.linalg.eigvalsh(stats.gram)[0]),
            float(plan.eigenvalue_noise.draw(key, span.step, 1)[0]),
            plan,
        )
        noisy_gram = stats.gram + plan.gram_std * symmetric_noise(
            plan.gram_noise.draw(key, span.step, dim * (dim + 1) // 2), dim
        )
        draws = plan.moment_noise.draw(key, span.step, dim * self.targets)
        noisy_moment = stats.moment + plan.moment_std * (
            draws if self.targets == 1 else draws.reshape(dim, -1)
        )
        params = ssp_solve.model(self, noisy_gram, noisy_moment, ridge, plan)
        intercept = self.intercept_index if self.centres else None
        penalised = ssp_solve.penalised_system(noisy_gram, intercept, self.count(noisy_gram, plan))[2]
        return SSPState(params, ridge, max(0.0, float(np.trace(penalised)) / penalised.shape[0]))

    @property
    def centres(self) -> bool:
        """Whether the intercept is left unpenalised by centring: regression only (module docstring)."""
        return self.intercept_index is not None and self.link == "identity"

    def count(self, gram: np.ndarray, plan: SSPPlan) -> float:
        """Σ_i 1 over the rows, as the intercept column sees it: N itself, public, under the row unit; under
        the user unit the rows carry the users' weights (``dpstream.models.users``), so the weighted count
        is the noisy (XᵀX)_{kk} (post-processing of the release), floored at 1."""
        if self.intercept_index is None or not self.unit.is_user:
            return float(plan.num_rows)
        return max(1.0, float(gram[self.intercept_index, self.intercept_index]))

    def uses_discriminants(self, plan: SSPPlan) -> bool:
        """Whether a K-class fit solves by LDA (``ssp_solve.discriminants``) rather than the quadratic surrogate: with an
        intercept column, once N/K ≥ ``LDA_MIN_COUNT_TO_NOISE`` × the class counts' noise std (public)."""
        return (
            self.link == "softmax"
            and self.intercept_index is not None
            and plan.num_rows / self.num_classes >= LDA_MIN_COUNT_TO_NOISE * plan.moment_std
        )

    def result(self, state: SSPState) -> np.ndarray:
        return state.params

    def event(self, plan: SSPPlan) -> ComposedEvent:
        bound = plan.row_norm_bound
        if plan.label_mean_only:
            return ComposedEvent(
                (GaussianEvent(self.label_sum_sensitivity, plan.moment_std, self.relation, "Σy (label sum)"),)
            )
        return ComposedEvent(
            (
                GaussianEvent(
                    self.unit.eigenvalue_sensitivity(bound),
                    plan.eigenvalue_std,
                    self.relation,
                    "λ_min(XᵀX)",
                ),
                GaussianEvent(
                    self.unit.gram_sensitivity(bound), plan.gram_std, self.relation, "XᵀX upper triangle"
                ),
                GaussianEvent(
                    self.unit.moment_sensitivity(bound, self.target_bound),
                    plan.moment_std,
                    self.relation,
                    "Xᵀy"
                    if self.targets == 1
                    else f"XᵀT ({self.targets} class contrasts of {self.num_classes} classes)",
                ),
            )
        )

    def report(self, plan: SSPPlan, state: Any = None) -> PrivacyReport:
        event = self.event(plan)
        target = {
            "identity": "least squares",
            "logistic": "logistic loss, PASS-GLM degree-2",
            "softmax": f"{self.num_classes}-class softmax loss, PASS-GLM degree-2",
        }[self.link]
        units = "people" if self.unit.is_user else "rows"
        mechanism = (
            f"AdaSSP, label mean only (too few {units} for the regression)"
            if plan.label_mean_only
            else f"AdaSSP: sufficient-statistics perturbation with a private ridge ({target})"
        )
        return build_report(
            mechanism=mechanism,
            event=event,
            relation=self.relation,
            unit=self.unit,
            epsilon=self.epsilon,
            delta=self.delta,
            # std / sensitivity of the equivalent single Gaussian
            noise_multiplier=1.0 / math.sqrt(sum(part.mu**2 for part in event.events)),
            sensitivity=1.0,
            plan=plan,
            clip_norms=(plan.row_norm_bound,),
            notes=(
                f"rows clipped to ‖x‖ ≤ {plan.row_norm_bound:.6g} and labels to |y| ≤ {self.target_bound:.6g} "
                f"(fixed before the pass); one pass, one release of XᵀX, {'Xᵀy' if self.targets == 1 else 'XᵀT'} and λ_min",
            )
            if not plan.label_mean_only
            else (self.too_few_rows(plan),),
        )

    def too_few_rows(self, plan: SSPPlan) -> str:
        """The report's note for a label-mean-only plan: what was released and why (public quantities)."""
        gram_std = self.noise_stds(plan.num_params)[1]
        units = "people" if self.unit.is_user else "rows"
        return (
            f"too few {units} for the regression: AdaSSP's noise bound λ₀ = "
            f"{self.noise_bound(gram_std, plan.num_params):.4g} exceeds N = {plan.num_rows:,} {units} (the most "
            f"curvature a feature on [-1, 1] can give) at this epsilon and {plan.num_params - 1} features, so only "
            f"the label sum was released (labels clipped to |y| ≤ {self.label_bound:.6g} on the public scale, i.e. to "
            "the label bounds) and the model is the noisy label mean, the constant predictor"
        )


def _build(spec: Any, model: Any, num_rows: int, learning_rate: float) -> AdaSSP:
    return AdaSSP(
        spec.epsilon,
        spec.delta,
        row_norm_bound=spec.row_norm_bound,
        label_bound=spec.label_bound,
        link=model.link,
        num_classes=getattr(model, "num_classes", 2),
        intercept_index=spec.intercept_index,
        relation=spec.relation,
        unit=spec.unit,
    )


def _audited(epsilon: float, delta: float, relation: str, noise: None) -> AdaSSP:
    return AdaSSP(epsilon, delta, relation=relation)


register(
    AlgorithmDeclaration(
        "ssp",
        uses=("row_norm_bound", "label_bound"),
        build=_build,
        title="AdaSSP",
        state_types=(SSPState,),
        user_level=UserLevel(any_model=True),
        audited=_audited,
    )
)
