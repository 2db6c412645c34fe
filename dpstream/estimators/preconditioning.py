"""The fit's private preconditioner (``dpstream.preconditioner``: the release, its sensitivity and the
map), as a mixin of ``SinglePassEstimator``.

Where the estimator's model reads whitened rows (``_preconditions``: a linear regression with an
intercept) and the algorithm the fit runs declares a ``whitening_spread`` (DP-AMBSSGD and
Accelerated-DP-SRGD) and the rows are many enough for the release to resolve their covariance
(``worth_releasing``), ``PRECONDITIONER_SHARE`` of the fit's μ² releases the rows' noisy second moment
before training; the training pass then reads every block centred and whitened (``_precondition``), the
default step of DP-AMBSSGD is 1/(L·λ̃) from the same release, and the trained weights are mapped back to
the public scale (``_unwhitened``) before the release guard judges them: the guard compares the model as
published, linear in the features. ``preconditioner_`` holds the release (DP values) or None, and the
privacy report states its share.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from dpstream.algorithms.registry import declared
from dpstream.models import Model
from dpstream.noise import NoiseKey
from dpstream.preconditioner import PRECONDITIONER_SHARE, Whitening, release_whitening, whitens_at
from dpstream.privacy import NeighbouringRelation

__all__ = ["Preconditioned"]


class Preconditioned:
    """Each estimator states whether its model can read whitened rows (``_preconditions``: one output,
    the intercept last). The fit clears ``preconditioner_`` first, so nothing reads a previous fit's."""

    def _preconditions(self) -> bool:
        return False

    def _whitening_spread(self, model: Model, dim: int, unit: Any, num_rows: int, mu: float) -> float | None:
        """The spread of the preconditioner the fit at ``mu`` releases (with ``PRECONDITIONER_SHARE`` of
        μ²), or None for none: one is released where the model reads whitened rows, the algorithm the
        fit will run declares a ``whitening_spread`` and the release would resolve the rows' covariance
        (``whitens_at``). Public settings only."""
        if not self._preconditions():
            return None
        spread = declared(self._algorithm_name(model, dim, unit, num_rows)).whitening_spread
        relation = NeighbouringRelation.parse(self.relation)
        return spread if spread and whitens_at(self._model_inputs(), num_rows, mu, relation) else None

    def _release_preconditioner(
        self,
        spread: float | None,
        mu: float,
        blocks: Iterable[tuple[np.ndarray, ...]],
        contributions: int,
        key: NoiseKey,
    ) -> None:
        """Release the preconditioner of ``spread`` at ``mu`` from ``blocks`` (the training pass; the fit
        cleared ``preconditioner_``, so they are not whitened); none for no spread."""
        if spread:
            relation = NeighbouringRelation.parse(self.relation)
            self.preconditioner_ = release_whitening(blocks, contributions, mu, relation, key, spread)

    def _whitening(self) -> Whitening | None:
        return getattr(self, "preconditioner_", None)  # None before a fit

    def _precondition(self, block: np.ndarray) -> np.ndarray:
        """A block of features on the public scale, whitened where the fit released a preconditioner."""
        whitening = self._whitening()
        return block if whitening is None else whitening.apply(block)

    def _row_curvature(self) -> float | None:
        """The preconditioner's DP bound on the whitened rows' λ_max(E[xxᵀ]) (the default step's), or None."""
        whitening = self._whitening()
        return None if whitening is None else whitening.curvature

    def _unwhitened(self, params: np.ndarray) -> np.ndarray:
        """Parameters (the weights, then the intercept) on the public scale, from those trained on the
        whitened rows: the model as published (``Whitening.unmap``)."""
        whitening = self._whitening()
        if whitening is None:
            return params
        weights, intercept = whitening.unmap(params[:-1], float(params[-1]))
        return np.append(weights, intercept)

    def _preconditioned_report(self, report: Any, delta: float) -> Any:
        """``report`` composed with the preconditioner's release, if the fit made one."""
        whitening = self._whitening()
        if whitening is None:
            return report
        note = (
            f"private preconditioner ({PRECONDITIONER_SHARE:.0%} of the fit's μ², "
            f"{whitening.event.sensitivity / whitening.event.noise_std:.4g}-GDP): the rows' noisy second moment, "
            f"which centres and whitens them (coordinates clipped at {whitening.spread:g} standard deviations "
            f"in training; the published model is linear in the features); its largest eigenvalue on the "
            f"whitened rows, {whitening.curvature:.3g}, sets DP-AMBSSGD's default step 1/(L·λ̃)"
        )
        return report.composed_with(whitening.event, note, delta)
