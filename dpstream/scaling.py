"""Public scale: bounds the user declares for features and labels, and the map onto [−1, 1].

DP guarantees need bounds on one record's contribution. The estimators and AdaSSP take them from a
public scale: with ``feature_bounds = (low, high)`` every feature is clipped into [low_j, high_j] and
mapped affinely onto [−1, 1]; with ``label_bounds`` the regression label likewise. Both are either
public choices (from documentation or domain knowledge) or a DP release (``dpstream.bounds``, charged to
the fit), never read off the rows. ``symmetric`` bounds map by scale alone, for a model without an
intercept. On [−1, 1] with a constant intercept feature the row norm is at most R = sqrt(d), the
bound behind AdaSSP's clipping and the stable step sizes 1/(L·R²).

A model trained on mapped data is mapped back exactly: with x = c + h⊙x' (c the midpoints, h the
half-widths) and y = c_y + h_y y', the margin w'ᵀx' + b' is (w'/h)ᵀx + b' − Σ_j w'_j c_j / h_j, so
``coef_`` and ``intercept_`` are stated in the user's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PublicBounds", "unmap_linear"]


@dataclass(frozen=True)
class PublicBounds:
    low: np.ndarray
    high: np.ndarray
    # Map by scale alone (centre 0, half-width max(|low|, |high|)): for a model without an intercept, which
    # could not absorb the shift of the affine map.
    symmetric: bool = False

    @classmethod
    def parse(cls, bounds: Any, num_columns: int, name: str, symmetric: bool = False) -> PublicBounds | None:
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
        return cls(low, high, symmetric)

    @property
    def centre(self) -> np.ndarray:
        return np.zeros_like(self.low) if self.symmetric else (self.low + self.high) / 2

    @property
    def half_width(self) -> np.ndarray:
        if self.symmetric:
            return np.maximum(np.abs(self.low), np.abs(self.high))
        return (self.high - self.low) / 2

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """Clip into [low, high] and map onto [−1, 1] (columns of a 2-d block, or a 1-d label vector)."""
        # (d,) bounds broadcast over the columns of a block; a label's (1,) bounds over its rows.
        mapped = (np.clip(values, self.low, self.high) - self.centre) / self.half_width
        return mapped.astype(np.float32 if values.dtype == np.float32 else np.float64, copy=False)

    def from_unit(self, values: np.ndarray) -> np.ndarray:
        """The inverse map of ``to_unit`` on [−1, 1]: centre + half_width · v."""
        return self.centre + self.half_width * np.asarray(values, dtype=np.float64)

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
