"""``DPStandardScaler``: scikit-learn's ``StandardScaler`` with a noisy mean and standard deviation,
inside public or private bounds.

Each column j is clipped into its bounds [a_j, b_j] and mapped onto u = (x − m_j)/h_j ∈ [−1, 1]
(m_j = (a_j + b_j)/2, h_j = (b_j − a_j)/2). One Gaussian release of the 2d sums S1_j = Σ u and
S2_j = Σ u² (and, under zero-out, the row count): replacing one row moves S1_j by at most 2 and S2_j by
at most 1, so the L2 sensitivity is √(5d) under replace-one (N public); under zero-out a row moves each
sum and the count by at most 1, √(2d + 1). Then mean_j = m_j + h_j·S̃1_j/N and
var_j = h_j²·max(S̃2_j/N − (S̃1_j/N)², 10⁻⁶), both post-processing.

``bounds="private"`` first estimates the bounds with DP (``dpstream.bounds.PrivateBounds``, two rounds of
noisy histograms) with the share of μ² ``dpstream.bounds.bounds_share`` picks, and releases the sums with
the rest: the two compose to the fit's (ε, δ).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import OneToOneFeatureMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from dpstream.bounds import PrivateBounds, TooFewRows, TooSpread, bounds_share
from dpstream.estimators.parameters import Options
from dpstream.noise import NoiseKey
from dpstream.preprocessing.base import DPTransformer, column_bounds
from dpstream.privacy import PrivacyBudget

__all__ = ["DPStandardScaler"]

_VARIANCE_FLOOR = 1e-6  # of the half-range², where the noisy variance comes out at or below 0


class DPStandardScaler(OneToOneFeatureMixin, DPTransformer):
    """Standardise each column with a noisy mean and standard deviation (module docstring).

    Parameters
    ----------
    bounds : (low, high) or "private", default "private"
        Public bounds, one pair or one low and one high per column: values are clipped into them (at fit
        and at transform). "private" estimates them with DP within (epsilon, delta).
    epsilon, delta : float, default 1.0, 1e-6
        The fit's (ε, δ)-DP guarantee under ``relation``, for the rows it reads.
    relation : {"replace-one", "zero-out"}, default "replace-one"
    noise_key, random_state, budget :
        As for ``dpstream.DPLinearRegression`` (a fresh key from OS entropy by default; ``random_state``
        for tests only; a ``PrivacyBudget`` charged before the release).

    Attributes: ``mean_``, ``var_``, ``scale_``, ``bounds_`` (low, high), ``privacy_report_``.
    """

    _parameter_constraints: dict = {
        **DPTransformer._parameter_constraints,
        "bounds": [tuple, list, Options({"private"})],
    }

    def __init__(
        self,
        *,
        bounds: tuple | str = "private",
        epsilon: float = 1.0,
        delta: float = 1e-6,
        relation: str = "replace-one",
        noise_key: NoiseKey | None = None,
        random_state: int | None = None,
        budget: PrivacyBudget | None = None,
    ):
        self.bounds = bounds
        self.epsilon = epsilon
        self.delta = delta
        self.relation = relation
        self.noise_key = noise_key
        self.random_state = random_state
        self.budget = budget

    def fit(self, X: Any, y: Any = None) -> DPStandardScaler:
        leaks = self._begin()
        X = validate_data(self, X, dtype=np.float64)
        rows, columns = X.shape
        mu, key = self._charged()
        share = bounds_share(rows, columns, mu, self.relation) if self.bounds == "private" else 0.0
        low, high, bounds_note = self._bounds(X, math.sqrt(share) * mu, key)
        middle, half = (low + high) / 2, (high - low) / 2
        unit = (np.clip(X, low, high) - middle) / half
        sums = np.concatenate(
            [unit.sum(axis=0), (unit**2).sum(axis=0)] + ([[rows]] if self._zero_out() else [])
        )
        sensitivity = math.sqrt(2 * columns + 1) if self._zero_out() else math.sqrt(5 * columns)
        noisy, std = self._release(sums, sensitivity, math.sqrt(1 - share) * mu, key, "dp-standard-scaler")
        count = max(float(noisy[-1]), 1.0) if self._zero_out() else float(rows)
        first, second = noisy[:columns] / count, noisy[columns : 2 * columns] / count
        self.bounds_ = (low, high)
        self.mean_ = middle + half * np.clip(first, -1.0, 1.0)
        self.var_ = half**2 * np.maximum(second - np.clip(first, -1.0, 1.0) ** 2, _VARIANCE_FLOOR)
        self.scale_ = np.sqrt(self.var_)
        self.n_samples_seen_ = rows
        mechanism = f"Gaussian release of {sums.size} column sums of the clipped rows"
        report = self._report(mechanism, sensitivity, std, rows, leaks)
        if share:
            bounds_mu = math.sqrt(share) * mu
            report = report.composed_with(
                PrivateBounds(bounds_mu, self.relation).event(columns), bounds_note, self.delta
            )
        self.privacy_report_ = report
        return self

    def _bounds(self, X: np.ndarray, mu: float, key: NoiseKey) -> tuple[np.ndarray, np.ndarray, str]:
        """The public bounds, or private ones released at ``mu`` (and the report's note)."""
        if self.bounds != "private":
            return (*column_bounds(self.bounds, X.shape[1], "DPStandardScaler"), "")
        names = tuple(str(name) for name in getattr(self, "feature_names_in_", range(X.shape[1])))
        try:
            low, high = PrivateBounds(mu, self.relation).estimate(
                X, key.derive("bounds"), names, num_rows=X.shape[0]
            )
        except (TooFewRows, TooSpread) as error:
            raise ValueError(f"DPStandardScaler(bounds='private'): {error}") from None
        note = f"private bounds: two rounds of noisy per-column histograms ({mu:.4g}-GDP)"
        return low, high, note

    def transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "mean_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        low, high = self.bounds_
        return (np.clip(X, low, high) - self.mean_) / self.scale_

    def inverse_transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "mean_")
        return np.asarray(X, dtype=np.float64) * self.scale_ + self.mean_
