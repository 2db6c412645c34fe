"""``DPSimpleImputer``: scikit-learn's ``SimpleImputer`` for the two strategies DP allows cheaply.

``strategy="constant"`` fills every missing value of a column with a public constant (``fill_value``: a
number, or a category for text columns): nothing is learnt from the rows, nothing released, ε = 0.

``strategy="mean"`` fills with a noisy mean of the column's present values inside public ``bounds``
[a_j, b_j]: with u = (clip(x) − m_j)/h_j ∈ [−1, 1] (m_j, h_j the bounds' middle and half-width), one
Gaussian release of S_j = Σ_present u and C_j = #present for every column. Replacing one row moves S_j
by at most 2 with C_j fixed, or S_j by 1 and C_j by 1 (present ↔ missing), so by at most 2 in L2 per
column: sensitivity 2√d under replace-one; under zero-out a row moves each by at most 1, √(2d). The
fill value is m_j + h_j·clip(S̃_j / max(C̃_j, 1), −1, 1), post-processing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import OneToOneFeatureMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from dpstream.estimators.parameters import Options
from dpstream.noise import NoiseKey
from dpstream.preprocessing.base import DPTransformer, column_bounds
from dpstream.privacy import PrivacyBudget

__all__ = ["DPSimpleImputer"]


def _missing(X: np.ndarray) -> np.ndarray:
    return np.asarray(pd.isna(X), dtype=bool)


class DPSimpleImputer(OneToOneFeatureMixin, DPTransformer):
    """Fill missing values (NaN, None) with a public constant or a noisy mean (module docstring).

    Parameters
    ----------
    strategy : {"constant", "mean"}, default "constant"
    fill_value : number, str or None, default None
        The public constant of ``strategy="constant"``: None fills numbers with 0 and text with
        "missing".
    bounds : (low, high) or None, default None
        Public bounds for ``strategy="mean"`` (one pair, or one low and one high per column).
    epsilon, delta, relation, noise_key, random_state, budget :
        As for ``DPStandardScaler``; a constant fill releases nothing and uses none of them.

    Attributes: ``statistics_`` (the fill value per column), ``privacy_report_``.
    """

    _parameter_constraints: dict = {
        **DPTransformer._parameter_constraints,
        "strategy": [Options({"constant", "mean"})],
        "fill_value": [str, int, float, None],
        "bounds": [tuple, list, None],
    }

    def __init__(
        self,
        *,
        strategy: str = "constant",
        fill_value: Any = None,
        bounds: tuple | None = None,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        relation: str = "replace-one",
        noise_key: NoiseKey | None = None,
        random_state: int | None = None,
        budget: PrivacyBudget | None = None,
    ):
        self.strategy = strategy
        self.fill_value = fill_value
        self.bounds = bounds
        self.epsilon = epsilon
        self.delta = delta
        self.relation = relation
        self.noise_key = noise_key
        self.random_state = random_state
        self.budget = budget

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # what it fills
        tags.input_tags.string = self.strategy == "constant"  # a category fills text columns
        return tags

    def fit(self, X: Any, y: Any = None) -> DPSimpleImputer:
        leaks = self._begin()
        numeric = self.strategy == "mean"
        X = validate_data(self, X, dtype=np.float64 if numeric else None, ensure_all_finite="allow-nan")
        rows, columns = X.shape
        if not numeric:
            text = X.dtype.kind in "OUS"
            fill = self.fill_value if self.fill_value is not None else ("missing" if text else 0)
            if not text and isinstance(fill, str):
                raise ValueError(
                    f"DPSimpleImputer: fill_value={fill!r} is text and X's columns are numbers; give a number, "
                    "or pass the text columns (object dtype) on their own"
                )
            self.statistics_ = np.full(columns, fill, dtype=object if text else None)
            mechanism = f"no release: the public constant {fill!r} fills every column"
            self.privacy_report_ = self._report(mechanism, 0.0, None, rows, leaks)
            return self
        if self.bounds is None:
            raise ValueError(
                "DPSimpleImputer(strategy='mean') needs public bounds=(low, high) to clip each column into "
                "(its sensitivity); or use strategy='constant' with a public fill_value, which costs no budget"
            )
        low, high = column_bounds(self.bounds, columns, "DPSimpleImputer")
        middle, half = (low + high) / 2, (high - low) / 2
        present = ~_missing(X)
        unit = np.where(present, (np.clip(np.nan_to_num(X), low, high) - middle) / half, 0.0)
        sums = np.concatenate([unit.sum(axis=0), present.sum(axis=0)])
        sensitivity = math.sqrt(2 * columns) if self._zero_out() else 2 * math.sqrt(columns)
        mu, key = self._charged()
        noisy, std = self._release(sums, sensitivity, mu, key, "dp-simple-imputer")
        counts = np.maximum(noisy[columns:], 1.0)
        self.statistics_ = middle + half * np.clip(noisy[:columns] / counts, -1.0, 1.0)
        mechanism = f"Gaussian release of {columns} clipped sums and {columns} counts of the present values"
        self.privacy_report_ = self._report(mechanism, sensitivity, std, rows, leaks)
        return self

    def transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "statistics_")
        numeric = self.strategy == "mean"
        X = validate_data(
            self, X, dtype=np.float64 if numeric else None, ensure_all_finite="allow-nan", reset=False
        )
        missing = _missing(X)
        if not missing.any():
            return X
        filled = X.astype(object) if self.statistics_.dtype == object else X.copy()
        rows, cols = np.nonzero(missing)
        filled[rows, cols] = self.statistics_[cols]
        return filled
