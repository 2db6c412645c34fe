"""Empirical privacy audit: a statistical lower bound on ε from a worst-case canary record.

A mechanism that is (ε, δ)-DP bounds every test that tries to tell two neighbouring datasets D and D'
apart: for a test that says "D" on a set S of outputs, TPR ≤ e^ε FPR + δ and TNR ≤ e^ε FNR + δ
(Kairouz, Oh & Viswanath 2015; used for auditing by Jagielski, Ullman & Oprea 2020 and Nasr et al.
2021). Running the mechanism many times on D and on D' and bounding the two error rates with
Clopper–Pearson intervals gives, with the stated confidence,

    ε ≥ max( ln((TPR_lo − δ) / FPR_hi),  ln((TNR_lo − δ) / FNR_hi) ).

An honest implementation keeps this lower bound below the claimed ε; a broken one (noise too small, a
sensitivity forgotten) pushes it above, which is what the audit exists to catch.

The datasets. Background rows have their last feature zero, so their gradients never move the last
coordinate e. One canary row x = B·e with label −Y (B = 10, Y = 10⁶) has a gradient (B w_e + Y)·B·e
far above any clip norm: clipped, it contributes exactly +C·e. Under replace-one the neighbour D'
holds the mirror canary (label +Y, contribution −C·e), so the contributions differ by 2C, the full
sensitivity; under zero-out D' holds a zero row (contribution 0, sensitivity C). The canary sits in
the first gradient row of step 0 (positions are data-independent), for every algorithm. For AdaSSP
the canary row is clipped to B_x·e and its label to ∓B_y: its Xᵀy contributions differ by 2B_xB_y
along e (the full moment sensitivity) while XᵀX is the same on both sides under replace-one, so the
audit exercises the Xᵀy release; the statistic is −θ_e.

The test statistic is the released step-0 update along e: −Δw_e for DP-SGD and DP-AMBSSGD, −Δz_e for
Accelerated-DP-SRGD (its mirror-descent sequence moves by the released prefix sum). Each trial runs
the real coordinator (``dpstream.coordinator.run``, the loop every executor drives) with a fresh
noise key and stops after step 0: later releases are further mechanisms, and auditing a subset of
releases is valid (it can only make the bound weaker). The threshold is chosen on one half of the
trials and the rates are measured on the other, so the bound holds for the chosen threshold.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import dpstream.algorithms  # noqa: F401  (each algorithm module declares itself)
from dpstream.algorithms.builder import AlgorithmSpec
from dpstream.algorithms.registry import AlgorithmDeclaration, declarations
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.models.kinds.base import TrainingDefaults
from dpstream.noise import NoiseKey, dpsgd_noise_names, make_noise_process
from dpstream.privacy import NeighbouringRelation

__all__ = [
    "AuditResult",
    "audit_algorithm",
    "audit_result",
    "epsilon_lower_bound",
    "canary_datasets",
    "audited_algorithms",
    "audit_choices",
    "NoiseScaledDown",
]

CANARY_SCALE = 10.0  # B: the canary's feature value along e
CANARY_LABEL = 1e6  # Y: its residual keeps the clipped gradient at +C·e whatever the current model


@dataclass(frozen=True)
class AuditResult:
    """What one audit measured; ``epsilon_lower_bound`` holds with probability ≥ ``confidence``."""

    mechanism: str
    relation: str
    claimed_epsilon: float
    delta: float
    trials: int  # per dataset, both halves
    threshold: float
    true_positive_rate: float  # on the evaluation half
    false_positive_rate: float
    epsilon_lower_bound: float
    confidence: float

    @property
    def passed(self) -> bool:
        """The empirical lower bound does not contradict the claimed ε."""
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def to_row(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "relation": self.relation,
            "claimed ε": self.claimed_epsilon,
            "δ": self.delta,
            "trials per dataset": self.trials,
            "TPR": round(self.true_positive_rate, 4),
            "FPR": round(self.false_positive_rate, 4),
            f"ε lower bound ({self.confidence:.0%})": round(self.epsilon_lower_bound, 3),
            "verdict": "consistent" if self.passed else "VIOLATED",
        }


def _clopper_pearson(successes: np.ndarray, trials: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided (1 − alpha) Clopper–Pearson intervals of binomial proportions (vectorised)."""
    from scipy.stats import beta

    successes = np.asarray(successes, dtype=float)
    with np.errstate(invalid="ignore"):
        low = np.where(successes == 0, 0.0, beta.ppf(alpha / 2, successes, trials - successes + 1))
        high = np.where(successes == trials, 1.0, beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return low, high


def _bounds(
    with_canary: np.ndarray,
    without_canary: np.ndarray,
    thresholds: np.ndarray,
    delta: float,
    confidence: float,
) -> np.ndarray:
    """The ε lower bound of the test "statistic > threshold means the canary is present", per threshold."""
    alpha = (1.0 - confidence) / 2  # two rates, each interval at 1 − alpha: both hold with ≥ confidence
    n_in, n_out = len(with_canary), len(without_canary)
    positives = n_in - np.searchsorted(np.sort(with_canary), thresholds, side="right")
    false_positives = n_out - np.searchsorted(np.sort(without_canary), thresholds, side="right")
    tpr_low, _ = _clopper_pearson(positives, n_in, alpha)
    _, fpr_high = _clopper_pearson(false_positives, n_out, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log(np.clip(tpr_low - delta, 0.0, None) / fpr_high)
        reverse = np.log(np.clip(1.0 - fpr_high - delta, 0.0, None) / (1.0 - tpr_low))
    bounds = np.fmax(np.nan_to_num(direct, nan=0.0, neginf=0.0), np.nan_to_num(reverse, nan=0.0, neginf=0.0))
    return np.maximum(bounds, 0.0)


def epsilon_lower_bound(
    with_canary: np.ndarray,
    without_canary: np.ndarray,
    threshold: float,
    delta: float,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(ε lower bound, TPR, FPR) of the test "statistic > threshold" on these trials:
    max(ln((TPR_lo − δ)/FPR_hi), ln((TNR_lo − δ)/FNR_hi)) with Clopper–Pearson bounds, holding with
    probability ≥ ``confidence``."""
    bound = float(_bounds(with_canary, without_canary, np.array([threshold]), delta, confidence)[0])
    return bound, float(np.mean(with_canary > threshold)), float(np.mean(without_canary > threshold))


def _best_threshold(
    with_canary: np.ndarray, without_canary: np.ndarray, delta: float, confidence: float
) -> float:
    """The threshold whose lower bound is largest on the selection half (never the evaluation half)."""
    candidates = np.unique(np.concatenate([with_canary, without_canary]))
    return float(
        candidates[int(np.argmax(_bounds(with_canary, without_canary, candidates, delta, confidence)))]
    )


def canary_datasets(
    num_rows: int, num_features: int, canary_row: int, relation: NeighbouringRelation, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y) with the canary and (X', y') of its neighbour; background rows have x_e = 0 (last feature)."""
    rng = np.random.default_rng(seed)
    X = np.zeros((num_rows, num_features))
    X[:, :-1] = rng.standard_normal((num_rows, num_features - 1)) / math.sqrt(num_features - 1)
    y = X[:, :-1] @ np.linspace(-1, 1, num_features - 1) + 0.1 * rng.standard_normal(num_rows)
    X[canary_row] = 0.0
    X[canary_row, -1] = CANARY_SCALE
    X_out, y_in, y_out = X.copy(), y.copy(), y.copy()
    y_in[canary_row] = -CANARY_LABEL
    if relation is NeighbouringRelation.REPLACE_ONE:
        y_out[canary_row] = CANARY_LABEL  # the mirror canary: clipped contribution −C·e
    else:
        X_out[canary_row], y_out[canary_row] = 0.0, 0.0  # a zero row: zero gradient
    return X, y_in, X_out, y_out


class _StepZeroDone(Exception):
    """Raised from ``on_step`` to stop a trial once the audited release is made."""


def _step_zero_statistic(algorithm: Any, X: np.ndarray, y: np.ndarray, key: NoiseKey) -> float:
    captured: list[float] = []

    def after_step(step: int, state: Any) -> None:
        iterate = state.z if hasattr(state, "z") else state.params  # SRGD moves z by the released prefix sum
        captured.append(-float(iterate[-1]))
        raise _StepZeroDone

    try:
        run(
            algorithm,
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            num_rows=X.shape[0],
            num_params=X.shape[1],
            initial_params=np.zeros(X.shape[1]),
            key=key,
            on_step=after_step,
        )
    except _StepZeroDone:
        pass
    return captured[0]


def _trial_key(seed: int, label: str, trial: int) -> NoiseKey:
    return NoiseKey.from_secret(
        hashlib.blake2b(f"audit/{seed}/{label}/{trial}".encode(), digest_size=32).digest()
    )


def audit_algorithm(
    algorithm: Any,
    *,
    trials: int = 500,
    num_rows: int = 2_000,
    num_features: int = 4,
    confidence: float = 0.95,
    seed: int = 0,
) -> AuditResult:
    """Audit ``algorithm`` (any dpstream algorithm, as configured, at its claimed ε and δ).

    ``trials`` runs on each of the two neighbouring datasets (half select the threshold, half measure);
    ``seed`` fixes the data and the trial keys, so an audit is reproducible. Returns the measured rates
    and the lower bound on ε; ``result.passed`` is False when the bound exceeds the claimed ε.
    """
    if trials < 20:
        raise ValueError(
            f"trials must be at least 20 (half select the threshold, half measure), got {trials!r}"
        )
    if num_features < 2:
        raise ValueError(
            f"num_features must be at least 2 (one background feature and the canary's), got {num_features!r}"
        )
    relation = NeighbouringRelation.parse(algorithm.relation)
    plan = algorithm.plan(num_rows, num_features)  # the audit's models are linear: num_params = num_features
    canary_row = plan.spans[0].gradient_rows[0]
    X, y_in, X_out, y_out = canary_datasets(num_rows, num_features, canary_row, relation, seed)
    with_canary = np.array(
        [_step_zero_statistic(algorithm, X, y_in, _trial_key(seed, "in", t)) for t in range(trials)]
    )
    without = np.array(
        [_step_zero_statistic(algorithm, X_out, y_out, _trial_key(seed, "out", t)) for t in range(trials)]
    )
    return audit_result(algorithm, algorithm.report(plan).mechanism, with_canary, without, confidence)


def audit_result(
    algorithm: Any, mechanism: str, with_canary: np.ndarray, without: np.ndarray, confidence: float
) -> AuditResult:
    """The audit's verdict from the trials' statistics on each side: the threshold chosen on the first
    half, the rates and the lower bound measured on the second."""
    half = with_canary.size // 2
    threshold = _best_threshold(with_canary[:half], without[:half], algorithm.delta, confidence)
    bound, tpr, fpr = epsilon_lower_bound(
        with_canary[half:], without[half:], threshold, algorithm.delta, confidence
    )
    return AuditResult(
        mechanism=mechanism,
        relation=NeighbouringRelation.parse(algorithm.relation).value,
        claimed_epsilon=float(algorithm.epsilon),
        delta=float(algorithm.delta),
        trials=with_canary.size,
        threshold=threshold,
        true_positive_rate=tpr,
        false_positive_rate=fpr,
        epsilon_lower_bound=bound,
        confidence=confidence,
    )


def _audited() -> Iterator[tuple[str, AlgorithmDeclaration, str | None]]:
    """(configuration name, declaration, noise process or None) of each audited configuration: every
    declared algorithm with an ``audited`` configuration, and one that takes a noise process once per
    process DP-SGD takes, named ``<algorithm>-<noise>`` (the default process first, by the plain name)."""
    default = TrainingDefaults().noise
    noises = sorted(dpsgd_noise_names(), key=lambda noise: noise != default)
    for declaration in declarations():
        if declaration.audited is None:
            continue
        if "noise" not in declaration.uses:
            yield declaration.name, declaration, None
            continue
        for noise in noises:
            yield (
                (declaration.name if noise == default else f"{declaration.name}-{noise}"),
                declaration,
                noise,
            )


def audit_choices() -> tuple[str, ...]:
    """What ``dpstream audit --algorithm`` accepts: ``"all"`` and the name of each audited configuration."""
    return ("all", *(name for name, _, _ in _audited()))


def audited_algorithms(epsilon: float, delta: float, relation: str = "replace-one") -> dict[str, Any]:
    """One configuration of every declared algorithm and of every noise process it takes, at (ε, δ), for
    ``dpstream audit`` (each declaration's ``audited``; a process with its default settings)."""
    settings = AlgorithmSpec()
    configurations = {}
    for name, declaration, noise in _audited():
        process = (
            None
            if noise is None
            else make_noise_process(noise, correlation=settings.correlation, nu=settings.nu)
        )
        configurations[name] = declaration.audited(epsilon, delta, relation, process)
    return configurations


class NoiseScaledDown:
    """A deliberately broken mechanism for testing the audit: ``algorithm`` with its noise divided by ``factor``.

    It keeps claiming the original ε, so an audit that cannot tell it apart is too weak to trust."""

    def __init__(self, algorithm: Any, factor: float = 10.0):
        self._algorithm, self._factor = algorithm, factor
        self.epsilon, self.delta, self.relation, self.name = (
            algorithm.epsilon,
            algorithm.delta,
            algorithm.relation,
            algorithm.name,
        )

    def plan(self, num_rows: int, num_params: int) -> Any:
        plan = self._algorithm.plan(num_rows, num_params)
        scaled = {}
        for name in plan.NOISE_FIELDS:  # every noise scale the plan states (DP-SGD's and SRGD's calibration,
            value = getattr(plan, name)  # DP-AMBSSGD's α and count noise, AdaSSP's three releases)
            scaled[name] = (
                replace(value, noise_std=value.noise_std / self._factor)
                if hasattr(value, "noise_std")
                else value / self._factor
            )
        return replace(plan, **scaled)

    def event(self, plan: Any) -> Any:  # the broken mechanism claims the honest plan's event ...
        return self._algorithm.event(self._algorithm.plan(plan.num_rows, plan.num_params))

    def report(self, plan: Any, state: Any = None) -> Any:  # ... and its report
        return self._algorithm.report(self._algorithm.plan(plan.num_rows, plan.num_params), state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._algorithm, name)
