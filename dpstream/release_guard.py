"""Never worse than the constant: the release guard around a fit.

A fitted model can lose to the constant predictor the fit could have released instead (the label mean,
or the majority class): noise that outweighs the data, person-level sensitivity over few people, an
iterative algorithm that starts far from skewed labels. The guard makes two Gaussian releases over the
same contributions, each at μ_guard/√2, and publishes the winner, deciding from DP values only:

1. **The constant, before training.** Regression: Ỹ = Σy + N(0, σ₁²), y ∈ [−1, 1] on the public scale,
   sensitivity 2 (replace-one) or 1 (zero-out); the constant is c = clip(Ỹ/N, −1, 1) (0 for a model
   without an intercept, which cannot represent another). Classification, K classes: the class counts
   C̃ = C + N(0, σ₁²I), sensitivity √2 (replace-one moves two counts) or 1; the constant is the majority
   class m = argmax C̃, with the noisy frequencies as its probabilities. Released first, a
   regression's constant is also where an iterative algorithm starts (its intercept), so it need not
   walk there from the centre of a wide label range.
2. **The comparison, after training.** Regression: D̃ = Σd + N(0, σ₂²), d = (ŷ − y)² − (c − y)², the
   model's squared error minus the constant's, contribution by contribution. Given c (a DP output)
   and the released model's prediction range [lo, hi] ⊂ [−1, 1] over the public feature box (b ± ‖w‖₁
   for a linear model), d = (ŷ − c)(ŷ + c − 2y) is linear in y and convex in ŷ, so its extremes lie at
   y = ±1 and ŷ ∈ {lo, hi, clip(y, lo, hi)}; the sensitivity is their spread (replace-one) or largest
   magnitude (zero-out). A model whose predictions stay near c costs little noise to judge. The model
   is published iff D̃ < −z·σ₂. Classification: R̃ = R + N(0, σ₂²), R the contributions the model gets
   right, sensitivity 1; the model is published iff R̃ > C̃_m + z·sqrt(σ₁² + σ₂²).

The margin of z noise stds (``MARGIN_SIGMAS``) means a model that loses to the constant is published
with probability at most Φ(−z), and then narrowly; a model that wins by less than the noise can
resolve gives way to the constant, which costs little (it was not much better).

Contributions are rows, or people: a person's rows are weighted 1/k_u (their k_u rows kept), so each
person moves every sum as one row does and the sensitivities hold for both units. N, the number of
contributions, is public, as everywhere in the fit. Everything the decision reads is a DP output (the
constant, the model, the releases) or public: post-processing. The guard's μ is a share of the fit's
μ² and composes with training (μ_fit² = μ_train² + μ_guard², exact Gaussian DP; adaptively, as the
comparison is calibrated on the constant), stated in the privacy report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpstream.models import Model
from dpstream.models.users import histogram_weights
from dpstream.noise import NoiseKey, gaussian
from dpstream.privacy import ComposedEvent, GaussianEvent, NeighbouringRelation

__all__ = [
    "GUARD_SHARE",
    "MARGIN_SIGMAS",
    "GuardConstant",
    "GuardDecision",
    "RegressionGuard",
    "ClassificationGuard",
    "Guard",
    "release_guard",
    "guard_constant",
    "guard_decision",
    "linear_prediction_range",
    "constant_params",
    "with_intercepts",
]

# The guard's share of the fit's μ²: training keeps sqrt(0.8) ≈ 0.89 of its μ (BENCHMARKS.md "Never
# worse than the mean" measures what the guard buys and costs).
GUARD_SHARE = 0.2
NOISE_STREAM = "release-guard"
# The model must win by this many noise stds of the comparison: a model worse than the constant is
# published with probability at most Φ(−MARGIN_SIGMAS) ≈ 16 %, and then by less than that margin.
MARGIN_SIGMAS = 1.0
# The constant's share of the guard's μ²; the comparison gets the rest.
CONSTANT_SHARE = 0.7


@dataclass(frozen=True)
class GuardConstant:
    """The first release: the constant predictor on the public scale and what released it."""

    values: np.ndarray  # (c,) for a regression; the K noisy class frequencies for a classifier
    noisy_sums: np.ndarray  # Ỹ, or the noisy class counts C̃
    event: GaussianEvent

    def intercepts(self) -> np.ndarray:
        """The constant as a model's intercept(s): c; the log-odds of class 1 for two classes; the log
        frequencies (their softmax) for K ≥ 3."""
        if self.values.size == 1:
            return self.values.copy()
        if self.values.size == 2:
            return np.array([math.log(self.values[1] / self.values[0])])
        return np.log(self.values)


@dataclass(frozen=True)
class GuardDecision:
    """What the guard released and decided: ``model`` says which was published."""

    model: bool
    constant: GuardConstant
    gain: float  # noisy, per contribution: the model's advantage (squared error, or accuracy)
    margin: float  # per contribution: the advantage the model had to exceed
    contributions: int
    event: ComposedEvent  # both releases

    @classmethod
    def of_totals(
        cls,
        gain: float,
        margin: float,
        constant: GuardConstant,
        contributions: int,
        comparison: GaussianEvent,
    ) -> GuardDecision:
        """The decision from the noisy total advantage ``gain`` and the total ``margin`` it must exceed:
        the model is published iff gain > margin; both are reported per contribution."""
        n = max(contributions, 1)
        events = ComposedEvent((constant.event, comparison))
        return cls(gain > margin, constant, gain / n, margin / n, contributions, events)

    def describe(self, classifies: bool, unit: str) -> str:
        if classifies:
            measure = f"the model's noisy in-sample accuracy is {self.gain:+.2%} from the majority class's"
            constant = "the majority class (with its noisy frequencies as probabilities)"
        else:
            measure = (
                f"the model's noisy in-sample squared error is {-self.gain:+.4g} per {unit} from the noisy "
                "label mean's (public scale)"
            )
            constant = "the noisy label mean, the constant predictor"
        chosen = "the fitted model was released" if self.model else f"{constant} was released instead"
        return f"{measure}, against a margin of {self.margin:.4g}: {chosen}"


def _replace(relation: NeighbouringRelation) -> bool:
    return relation is NeighbouringRelation.REPLACE_ONE


def _weights(weights: np.ndarray | None, rows: int) -> np.ndarray:
    return np.ones(rows) if weights is None else np.asarray(weights, dtype=np.float64)


@dataclass(frozen=True)
class _TwoReleases:
    """A guard at ``mu``: the constant's release at sqrt(CONSTANT_SHARE)·μ, the comparison's at the rest."""

    mu: float
    relation: NeighbouringRelation

    @property
    def constant_mu(self) -> float:
        return self.mu * math.sqrt(CONSTANT_SHARE)

    @property
    def comparison_mu(self) -> float:
        return self.mu * math.sqrt(1.0 - CONSTANT_SHARE)


@dataclass(frozen=True)
class RegressionGuard(_TwoReleases):
    """The label sum, then the squared-error difference (module docstring)."""

    def constant_sums(self, targets: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
        """One block's Σy (labels on the public scale); sums add over disjoint blocks."""
        y = np.clip(np.asarray(targets, dtype=np.float64), -1.0, 1.0)
        return np.array([_weights(weights, len(y)) @ y])

    def release_constant(
        self, sums: np.ndarray, key: NoiseKey, contributions: int, has_intercept: bool = True
    ) -> GuardConstant:
        sensitivity = 2.0 if _replace(self.relation) else 1.0
        std = sensitivity / self.constant_mu
        noisy = np.asarray(sums, dtype=np.float64) + std * gaussian(key, 0, NOISE_STREAM, 1)
        c = float(np.clip(noisy[0] / max(contributions, 1), -1.0, 1.0)) if has_intercept else 0.0
        event = GaussianEvent(sensitivity, std, self.relation, "release guard: label sum")
        return GuardConstant(np.array([c]), noisy, event)

    def comparison_sums(
        self, margins: np.ndarray, targets: np.ndarray, weights: np.ndarray | None, constant: GuardConstant
    ) -> np.ndarray:
        """One block's Σ (ŷ − y)² − (c − y)², predictions clipped to [−1, 1]."""
        y = np.clip(np.asarray(targets, dtype=np.float64), -1.0, 1.0)
        predicted = np.clip(np.asarray(margins, dtype=np.float64).ravel(), -1.0, 1.0)
        c = float(constant.values[0])
        return np.array([_weights(weights, len(y)) @ ((predicted - y) ** 2 - (c - y) ** 2)])

    def difference_range(self, c: float, low: float, high: float) -> tuple[float, float]:
        """The least and largest d = (ŷ − c)(ŷ + c − 2y) over y ∈ [−1, 1] and ŷ ∈ [low, high]."""
        values = [
            (p - c) * (p + c - 2.0 * y) for y in (-1.0, 1.0) for p in (low, high, min(max(y, low), high))
        ]
        return min(values), max(values)

    def decide(
        self,
        sums: np.ndarray,
        constant: GuardConstant,
        key: NoiseKey,
        contributions: int,
        prediction_range: tuple[float, float] = (-1.0, 1.0),
    ) -> GuardDecision:
        low, high = (float(np.clip(v, -1.0, 1.0)) for v in prediction_range)
        least, largest = self.difference_range(float(constant.values[0]), low, high)
        spread = largest - least if _replace(self.relation) else max(abs(least), abs(largest))
        sensitivity = max(spread, 1e-12)  # a model equal to c everywhere: nothing to tell apart
        std = sensitivity / self.comparison_mu
        noisy = float(sums[0]) + std * _comparison_noise(key)
        event = GaussianEvent(
            sensitivity,
            std,
            self.relation,
            "release guard: the model's squared error minus the noisy label mean's",
        )
        return GuardDecision.of_totals(-noisy, MARGIN_SIGMAS * std, constant, contributions, event)


@dataclass(frozen=True)
class ClassificationGuard(_TwoReleases):
    """The class counts, then the count the model gets right (module docstring)."""

    classes: int = 2

    def constant_sums(self, targets: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
        """One block's class counts: ±1 targets for two classes, class indices for K ≥ 3."""
        truth = self._truth(np.asarray(targets, dtype=np.float64))
        return np.bincount(truth, weights=_weights(weights, len(truth)), minlength=self.classes)

    def _truth(self, targets: np.ndarray) -> np.ndarray:
        return (targets > 0).astype(np.int64) if self.classes == 2 else targets.astype(np.int64)

    def release_constant(
        self, sums: np.ndarray, key: NoiseKey, contributions: int, has_intercept: bool = True
    ) -> GuardConstant:
        sensitivity = math.sqrt(2.0) if _replace(self.relation) else 1.0
        std = sensitivity / self.constant_mu
        noisy = np.asarray(sums, dtype=np.float64) + std * gaussian(key, 0, NOISE_STREAM, self.classes)
        floored = np.maximum(noisy, 0.5)  # every class keeps a probability
        event = GaussianEvent(sensitivity, std, self.relation, f"release guard: {self.classes} class counts")
        return GuardConstant(floored / floored.sum(), noisy, event)

    def comparison_sums(
        self, margins: np.ndarray, targets: np.ndarray, weights: np.ndarray | None, constant: GuardConstant
    ) -> np.ndarray:
        """One block's count of contributions the model classifies right."""
        truth = self._truth(np.asarray(targets, dtype=np.float64))
        predicted = (margins > 0).astype(np.int64) if margins.ndim == 1 else np.argmax(margins, axis=1)
        return np.array([_weights(weights, len(truth)) @ (predicted == truth)])

    def decide(
        self,
        sums: np.ndarray,
        constant: GuardConstant,
        key: NoiseKey,
        contributions: int,
        prediction_range: tuple[float, float] | None = None,
    ) -> GuardDecision:
        std = 1.0 / self.comparison_mu
        right = float(sums[0]) + std * _comparison_noise(key)
        majority = float(np.max(constant.noisy_sums))
        margin = MARGIN_SIGMAS * math.sqrt(std**2 + constant.event.noise_std**2)
        event = GaussianEvent(1.0, std, self.relation, "release guard: rows the model classifies right")
        return GuardDecision.of_totals(right - majority, margin, constant, contributions, event)


Guard = RegressionGuard | ClassificationGuard


def _comparison_noise(key: NoiseKey) -> float:
    """The standard normal of the comparison release: its own draw from the run's key (the constant's is 0)."""
    return float(gaussian(key, 1, NOISE_STREAM, 1)[0])


def release_guard(mu: float, relation: NeighbouringRelation, classes: int = 0) -> Guard:
    """The guard of a regression (``classes`` 0) or of a K-class classifier, at ``mu``."""
    return RegressionGuard(mu, relation) if classes == 0 else ClassificationGuard(mu, relation, classes)


Blocks = Iterable[tuple[np.ndarray, ...]]  # (model rows, targets[, user codes]) on the public scale


def guard_constant(
    guard: Guard,
    blocks: Blocks,
    contributions: int,
    key: NoiseKey,
    has_intercept: bool = True,
) -> GuardConstant:
    """The guard's first release over ``blocks`` (a user's rows weighted 1/k_u where blocks carry codes)."""
    sums = None
    for _, targets, *users in blocks:
        block_sums = guard.constant_sums(targets, histogram_weights(users[0] if users else None))
        sums = block_sums if sums is None else sums + block_sums
    return guard.release_constant(sums, key, contributions, has_intercept)


def guard_decision(
    guard: Guard,
    model: Model,
    params: np.ndarray,
    blocks: Blocks,
    constant: GuardConstant,
    contributions: int,
    key: NoiseKey,
    prediction_range: tuple[float, float] = (-1.0, 1.0),
) -> GuardDecision:
    """The guard's comparison of the model ``params`` with ``constant`` over ``blocks``. A regression's
    predictions are clipped into ``prediction_range``, so the comparison's sensitivity holds for any row."""
    low, high = prediction_range
    sums = None
    for rows, targets, *users in blocks:
        margins = model.predict_margin(rows, params)
        if isinstance(guard, RegressionGuard):
            margins = np.clip(margins, low, high)
        block_sums = guard.comparison_sums(
            margins, targets, histogram_weights(users[0] if users else None), constant
        )
        sums = block_sums if sums is None else sums + block_sums
    return guard.decide(sums, constant, key, contributions, prediction_range)


def linear_prediction_range(params: np.ndarray, intercept_index: int | None) -> tuple[float, float]:
    """b ± ‖w‖₁, clipped to [−1, 1]: a one-output linear model's predictions over the box [−1, 1]^d."""
    weights = np.asarray(params, dtype=np.float64)
    intercept = float(weights[intercept_index]) if intercept_index is not None else 0.0
    reach = float(np.abs(weights).sum()) - abs(intercept)
    return (max(intercept - reach, -1.0), min(intercept + reach, 1.0))


def constant_params(
    model: Model, inputs: int, intercept_index: int | None, constant: GuardConstant
) -> np.ndarray:
    """The parameters of ``model`` that predict ``constant`` on every row: a model that states how
    (``constant_margin_params(inputs, margin)``: the KAN) from the constant's margin, a linear model as
    weights 0 and the constant's intercepts (``with_intercepts``)."""
    own = getattr(model, "constant_margin_params", None)
    if own is not None:
        return own(inputs, float(constant.intercepts()[0]))
    return with_intercepts(np.zeros(model.num_params(inputs)), inputs, intercept_index, constant)


def with_intercepts(
    params: np.ndarray, inputs: int, intercept_index: int | None, constant: GuardConstant
) -> np.ndarray:
    """A linear model's parameters (inputs × outputs) with the intercept row set to the constant's
    intercepts (unchanged without an intercept)."""
    start = np.array(params, dtype=np.float64)
    if intercept_index is not None:
        start.reshape(inputs, -1)[intercept_index] = constant.intercepts()
    return start
