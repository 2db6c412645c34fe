"""Public scale: bounds the user declares for features and labels, and the map onto [−1, 1].

DP guarantees need bounds on one record's contribution. The estimators and AdaSSP take them from a
public scale: with ``feature_bounds = (low, high)`` every feature is clipped into [low_j, high_j] and
mapped affinely onto [−1, 1]; with ``label_bounds`` the regression label likewise. Both are public
choices (from documentation, domain knowledge or ``dpstream.bounds`` private quantiles), never computed
from the rows. On [−1, 1] with a constant intercept feature the row norm is at most R = sqrt(d), the
bound behind AdaSSP's clipping and the stable step sizes 1/(L·R²).

A model trained on mapped data is mapped back exactly: with x = c + h⊙x' (c the midpoints, h the
half-widths) and y = c_y + h_y y', the margin w'ᵀx' + b' is (w'/h)ᵀx + b' − Σ_j w'_j c_j / h_j, so
``coef_`` and ``intercept_`` are stated in the user's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PublicBounds", "unmap_linear", "scale_warning", "FAR_OUTSIDE"]

FAR_OUTSIDE = (
    10.0  # |value| beyond this on the assumed [−1, 1] scale is "far outside" (raw units, not scaled)
)


@dataclass(frozen=True)
class PublicBounds:
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def parse(cls, bounds: Any, num_columns: int, name: str) -> PublicBounds | None:
        """``None``, or (low, high) with scalars or arrays of ``num_columns`` entries; errors name ``name``."""
        if bounds is None:
            return None
        try:
            low, high = bounds
            low = np.broadcast_to(np.asarray(low, dtype=np.float64), (num_columns,)).copy()
            high = np.broadcast_to(np.asarray(high, dtype=np.float64), (num_columns,)).copy()
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must be a pair (low, high) of numbers or of arrays with one entry per column ({num_columns}), "
                f"got {bounds!r}"
            ) from None
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(f"{name} must be finite, got low={low.tolist()} high={high.tolist()}")
        bad = np.flatnonzero(~(high > low))
        if bad.size:
            raise ValueError(
                f"{name} needs low < high for every column; column {int(bad[0])} has low={low[bad[0]]:g}, high={high[bad[0]]:g}"
            )
        return cls(low, high)

    @property
    def centre(self) -> np.ndarray:
        return (self.low + self.high) / 2

    @property
    def half_width(self) -> np.ndarray:
        return (self.high - self.low) / 2

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """Clip into [low, high] and map onto [−1, 1] (columns of a 2-d block, or a 1-d label vector)."""
        # (d,) bounds broadcast over the columns of a block; a label's (1,) bounds over its rows.
        mapped = (np.clip(values, self.low, self.high) - self.centre) / self.half_width
        return mapped.astype(np.float32 if values.dtype == np.float32 else np.float64, copy=False)

    def clip(self, values: np.ndarray) -> np.ndarray:
        return np.clip(values, self.low.astype(values.dtype), self.high.astype(values.dtype))


def unmap_linear(
    coef: np.ndarray, intercept: float, features: PublicBounds | None, labels: PublicBounds | None
) -> tuple[np.ndarray, float]:
    """Coefficients in the user's units from those on the [−1, 1] scale (module docstring)."""
    coef, intercept = np.asarray(coef, dtype=np.float64), float(intercept)
    if features is not None:
        coef = coef / features.half_width
        intercept -= float(coef @ features.centre)
    if labels is not None:
        coef = coef * labels.half_width[0]
        intercept = float(labels.centre[0] + labels.half_width[0] * intercept)
    return coef, intercept


def scale_warning(values: np.ndarray, name: str, parameter: str) -> str | None:
    """A message when a block lies far outside the assumed [−1, 1] scale, naming the column; else None.

    Operator-only: computed from the data, shown to the data owner fitting the model, never released.
    """
    if values.size == 0:
        return None
    magnitude = np.abs(values)
    if values.ndim == 2:
        peaks = magnitude.max(axis=0)
        column = int(np.argmax(peaks))
        if peaks[column] <= FAR_OUTSIDE:
            return None
        where, peak = f"{name} column {column}", float(peaks[column])
    else:
        peak = float(magnitude.max())
        if peak <= FAR_OUTSIDE:
            return None
        where = name
    return (
        f"{where} reaches |value| = {peak:.4g}, far outside the assumed public scale [-1, 1] (operator-only check of "
        f"the data): the clipping bounds and step sizes assume that scale. Pass {parameter}=(low, high) from public "
        "knowledge, or scale the data with public constants"
    )
