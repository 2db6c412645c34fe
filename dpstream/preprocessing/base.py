"""``DPTransformer``: the fit the DP transformers share, as the estimators' (``FitAccounting``): the
parameters checked once, the pipeline's earlier steps checked for leaks (``dpstream.estimators.leaks``),
the budget charged before anything is released, one Gaussian release of a vector of column sums, and
``privacy_report_`` stating it.

Each transformer maps a row onto column statistics of bounded range, so that one row moves the vector of
sums by at most ``sensitivity`` in L2 under the relation (stated by each), and releases
sums + N(0, (sensitivity/μ)²) per entry: μ-GDP exactly (Dong, Roth & Su, "Gaussian Differential Privacy",
arXiv:1905.02383, Theorem 2.7), charged as such to a shared ``PrivacyBudget``. A transformer that learns
nothing from the rows (public constants) releases nothing and states ε = 0.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from dpstream.algorithms.base import PrivacyReport
from dpstream.estimators.accounting import FitAccounting
from dpstream.estimators.leaks import PipelineCheck, PrivatelyFitted, pipeline_leaks
from dpstream.estimators.parameters import Interval, Options, check_parameters
from dpstream.noise import NoiseKey, gaussian
from dpstream.privacy import NeighbouringRelation, PrivacyBudget, epsilon_for_delta, mu_for_epsilon_delta
from dpstream.privacy.unit import PrivacyUnit

__all__ = ["DPTransformer", "column_bounds", "release_report"]


def column_bounds(bounds: Any, num_columns: int, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Public ``(low, high)``, each one number or one per column, as two arrays with low < high."""
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise ValueError(
            f"{owner} needs public bounds=(low, high) (one pair, or one low and one high per column), got "
            f"{bounds!r}: bounds from public knowledge (a schema, a survey's codebook), not from the rows"
        )
    low, high = (np.broadcast_to(np.asarray(b, dtype=np.float64), (num_columns,)).copy() for b in bounds)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ValueError(f"{owner}: bounds must be finite with low < high in every column, got {bounds!r}")
    return low, high


class DPTransformer(PrivatelyFitted, FitAccounting, TransformerMixin, BaseEstimator):
    """A transformer fitted by one Gaussian release of column sums (module docstring). Subclasses set
    ``epsilon``, ``delta``, ``relation``, ``noise_key``, ``random_state`` and ``budget`` in ``__init__``."""

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "relation": [Options({"replace-one", "zero-out"})],
        "noise_key": [NoiseKey, None],
        "random_state": [Interval(Integral, 0, None, closed="left"), None],
        "budget": [PrivacyBudget, None],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True  # fresh DP noise on every fit
        return tags

    def _begin(self) -> PipelineCheck:
        """Check the parameters and the pipeline before the fit reads a row."""
        check_parameters(self)
        return pipeline_leaks(self)

    def _zero_out(self) -> bool:
        return NeighbouringRelation.parse(self.relation) is NeighbouringRelation.ZERO_OUT

    def _charged(self) -> tuple[float, NoiseKey]:
        """(the fit's whole μ, its noise key), the budget charged with μ before anything is released."""
        mu = mu_for_epsilon_delta(self.epsilon, self.delta)
        self._charge_budget(mu, people=False)
        return mu, self._fit_key()

    @staticmethod
    def _release(
        sums: np.ndarray, sensitivity: float, mu: float, key: NoiseKey, stream: str
    ) -> tuple[np.ndarray, float]:
        """(sums + N(0, (sensitivity/μ)²) per entry, the noise std): μ-GDP."""
        std = sensitivity / mu
        return sums + std * gaussian(key, 0, stream, sums.shape), std

    def _report(
        self, mechanism: str, sensitivity: float, std: float | None, rows: int, pipeline: PipelineCheck
    ) -> PrivacyReport:
        """The fit's guarantee with its notes (the budget's among them): ``std`` None where nothing was
        released."""
        return self._stated(
            release_report(mechanism, self.relation, self.delta, sensitivity, std, rows), pipeline
        )


def release_report(
    mechanism: str, relation: str, delta: float, sensitivity: float, std: float | None, rows: int
) -> PrivacyReport:
    """A transformer's ``privacy_report_``: one Gaussian release of ``sensitivity`` with noise ``std``
    (μ = sensitivity/std), or, with ``std`` None, nothing released (ε = δ = μ = 0)."""
    released = std is not None
    mu = sensitivity / std if released else 0.0
    unit = PrivacyUnit.row(NeighbouringRelation.parse(relation))
    return PrivacyReport(
        mechanism=mechanism,
        relation=NeighbouringRelation.parse(relation).value,
        epsilon=epsilon_for_delta(delta, mu) if released else 0.0,
        delta=delta if released else 0.0,
        mu=mu,
        noise_multiplier=std / sensitivity if released else 0.0,
        sensitivity=sensitivity,
        steps=1 if released else 0,
        rows_per_step=rows,
        accountant="exact Gaussian DP (one Gaussian release)" if released else "none: nothing released",
        events=mechanism,
        unit=unit.describe(),
        ledger_unit=unit.ledger_unit,
    )
