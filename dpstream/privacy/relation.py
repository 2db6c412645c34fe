"""The neighbouring relation a privacy guarantee refers to.

Two datasets of the same size N are neighbours when

* ``REPLACE_ONE`` (default): one record is replaced by an arbitrary other record. N is public
  (the shuffle manifest publishes it), so this is the relation that matches what we release.
* ``ZERO_OUT``: one record is replaced by a "zero" record whose contribution to every statistic is
  zero (Kairouz et al. 2021; seed 001 App. A.2; seed 004 Def. F.1).

The L2 sensitivity of a statistic follows from the relation and from the set every record's
contribution lies in. For a sum of contributions clipped to a ball of radius C the replace-one
sensitivity is the ball's diameter, 2C, and the zero-out sensitivity its radius, C. For a count of
records meeting a predicate (contribution in {0, 1}) both are 1.
"""

from __future__ import annotations

import enum
import math

__all__ = ["NeighbouringRelation"]


class NeighbouringRelation(str, enum.Enum):
    REPLACE_ONE = "replace-one"
    ZERO_OUT = "zero-out"

    @classmethod
    def parse(cls, value: "NeighbouringRelation | str") -> "NeighbouringRelation":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower().replace("_", "-"))
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in cls)
            raise ValueError(
                f"relation must be one of {allowed}, got {value!r}"
            ) from None

    def clipped_sum_sensitivity(self, clip_norm: float) -> float:
        """L2 sensitivity of Σ_i clip(v_i, clip_norm): 2·clip_norm (replace-one) or clip_norm (zero-out)."""
        clip_norm = float(clip_norm)
        if not math.isfinite(clip_norm) or clip_norm <= 0:
            raise ValueError(f"clip_norm must be a finite number > 0, got {clip_norm!r}")
        return 2.0 * clip_norm if self is NeighbouringRelation.REPLACE_ONE else clip_norm

    def count_sensitivity(self) -> float:
        """L2 sensitivity of a count of records meeting a predicate: 1 under both relations."""
        return 1.0

    def describe(self) -> str:
        if self is NeighbouringRelation.REPLACE_ONE:
            return "replace-one (datasets of the same public size N differing in one record)"
        return "zero-out (one record's contribution replaced by zero)"

    def __str__(self) -> str:
        return self.value
