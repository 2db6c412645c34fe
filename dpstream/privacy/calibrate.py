"""Noise calibration: from a target (ε, δ) to the noise a mechanism must add.

For a Gaussian mechanism, or a matrix mechanism with single participation, the released stream is
μ-GDP with μ = Δ·γ/s (Δ the row sensitivity under the relation, γ the largest column norm of the
encoder, s the noise std; Choquette-Choo et al., "Correlated Noise Provably Beats Independent Noise",
arXiv:2310.06771, App. A.1). The least noise meeting (ε, δ) is therefore

    s = Δ·γ / μ*(ε, δ),

with μ*(ε, δ) the exact inverse of δ(ε; μ) (``gdp.mu_for_epsilon_delta``). ``NoiseCalibration``
carries the result in the Opacus convention ``noise_multiplier = s / clip_norm`` plus the event the
mechanism will release, so mechanism and accountant agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpstream.privacy import gdp
from dpstream.privacy.events import MatrixMechanismEvent
from dpstream.privacy.relation import NeighbouringRelation
from dpstream.validation import check_budget, check_positive

__all__ = ["NoiseCalibration", "calibrate_gaussian", "calibrate_clipped_sum", "check_budget"]


@dataclass(frozen=True)
class NoiseCalibration:
    epsilon: float
    delta: float
    mu: float
    relation: NeighbouringRelation
    row_sensitivity: float
    max_column_norm: float
    noise_std: float

    def event(self, num_steps: int, label: str = "calibrated mechanism") -> MatrixMechanismEvent:
        return MatrixMechanismEvent(
            row_sensitivity=self.row_sensitivity,
            noise_std=self.noise_std,
            max_column_norm=self.max_column_norm,
            num_steps=num_steps,
            relation=self.relation,
            label=label,
        )


def calibrate_gaussian(
    epsilon: float,
    delta: float,
    sensitivity: float,
    *,
    max_column_norm: float = 1.0,
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE,
) -> NoiseCalibration:
    """Noise std so that a release with row ``sensitivity`` (already under ``relation``) and encoder
    column norm ``max_column_norm`` is exactly (ε, δ)-DP."""
    epsilon, delta = check_budget(epsilon, delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    max_column_norm = check_positive("max_column_norm", max_column_norm)
    mu = gdp.mu_for_epsilon_delta(epsilon, delta)
    return NoiseCalibration(
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        relation=NeighbouringRelation.parse(relation),
        row_sensitivity=sensitivity,
        max_column_norm=max_column_norm,
        noise_std=sensitivity * max_column_norm / mu,
    )


def calibrate_clipped_sum(
    epsilon: float,
    delta: float,
    clip_norm: float,
    *,
    max_column_norm: float = 1.0,
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE,
) -> NoiseCalibration:
    """Calibrate noise for sums of per-record contributions clipped to ``clip_norm``.

    The sensitivity is 2·clip_norm under replace-one and clip_norm under zero-out.
    ``noise_std / clip_norm`` is the noise multiplier in the Opacus convention.
    """
    relation = NeighbouringRelation.parse(relation)
    return calibrate_gaussian(
        epsilon,
        delta,
        relation.clipped_sum_sensitivity(clip_norm),
        max_column_norm=max_column_norm,
        relation=relation,
    )
