"""The privacy unit: whose data one guarantee protects, and what a neighbouring dataset changes.

* **Row** (``PrivacyUnit.row()``): neighbouring datasets differ in one record, replaced (replace-one)
  or zeroed (zero-out). The default.
* **User** (``PrivacyUnit.user(column, k)``): neighbouring datasets differ in *all* the records of one
  value of ``column`` (a customer, patient or device), of which at most ``k = max_rows_per_user`` are
  kept (contribution bounding, chosen uniformly at random), replaced by another user's or zeroed.

An algorithm releases sums of *contributions*, each bounded in a public set: a ball of radius C for a
clipped gradient, PSD matrices of trace ≤ B² and vectors of norm ≤ B·B_y for AdaSSP's XᵀX and Xᵀy, a
0/1 indicator for a DP-STAT count. Under the row unit a contribution is one row's. Under the user unit
it is one user's rows *combined* into one contribution inside the same set (``dpstream.models.users``:
AdaSSP's rows weighted; ``dpstream.models.user_gradients``: a user's mean gradient clipped once, one
DP-STAT value per user), so a user changes one contribution and every release keeps the row unit's
sensitivity: ``NeighbouringRelation``'s formulas for one contribution, whichever the unit. The
alternative, clipping each of a user's k rows on its own, has k times that sensitivity (group privacy);
``group_mu`` states that conversion for comparisons.

The unit owns the sensitivities (every algorithm asks it, not the relation) and states itself in the
privacy report, the ledger (``ledger_unit``: a lake's unit is fixed by its first run), model.json and
``dpstream report``. The number of units (rows N, or users U) is treated as public.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpstream.privacy.relation import NeighbouringRelation

__all__ = ["PrivacyUnit", "group_mu"]


@dataclass(frozen=True)
class PrivacyUnit:
    relation: NeighbouringRelation = NeighbouringRelation.REPLACE_ONE
    user_column: str | None = None  # None: the row
    max_rows_per_user: int | None = None  # k: a user's rows kept (None: all, combined into one contribution)

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))
        if self.user_column is None:
            if self.max_rows_per_user is not None:
                raise ValueError(
                    "max_rows_per_user bounds a user's rows: give user_column too (the privacy unit is then "
                    "the user), or leave both out for the row"
                )
            return
        if not isinstance(self.user_column, str) or not self.user_column.strip():
            raise ValueError(f"user_column must name the id column, got {self.user_column!r}")
        k = self.max_rows_per_user
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"max_rows_per_user must be a whole number ≥ 1 (or None: all), got {k!r}")

    @classmethod
    def row(cls, relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE) -> PrivacyUnit:
        return cls(NeighbouringRelation.parse(relation))

    @classmethod
    def user(
        cls,
        column: str,
        max_rows_per_user: int | None = None,
        relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE,
    ) -> PrivacyUnit:
        return cls(NeighbouringRelation.parse(relation), column, max_rows_per_user)

    @property
    def is_user(self) -> bool:
        return self.user_column is not None

    @property
    def name(self) -> str:
        """``"row"`` or ``"user"``: what the ledger records and compares."""
        return "user" if self.is_user else "row"

    @property
    def ledger_unit(self) -> str:
        """What a lake's ledger counts: ``"row"``, or ``"user:<column>"`` (a person as one id column names
        them; two id columns are two units). A lake's first run fixes it (``LifetimeBudget.unit``)."""
        return f"user:{self.user_column}" if self.is_user else "row"

    # Sensitivities of one contribution (a row's, or a user's rows combined): see the module docstring.
    def clipped_sum_sensitivity(self, clip_norm: float) -> float:
        return self.relation.clipped_sum_sensitivity(clip_norm)

    def gram_sensitivity(self, row_norm_bound: float) -> float:
        return self.relation.gram_sensitivity(row_norm_bound)

    def moment_sensitivity(self, row_norm_bound: float, label_bound: float) -> float:
        return self.relation.moment_sensitivity(row_norm_bound, label_bound)

    def eigenvalue_sensitivity(self, row_norm_bound: float) -> float:
        return self.relation.eigenvalue_sensitivity(row_norm_bound)

    def count_sensitivity(self) -> float:
        return self.relation.count_sensitivity()

    def describe(self) -> str:
        if not self.is_user:
            return f"one row ({self.relation.describe()})"
        rows = "all its rows" if self.max_rows_per_user is None else f"at most {self.max_rows_per_user} rows"
        return (
            f"one user: every row of one value of {self.user_column!r} ({rows}, combined into one contribution); "
            f"{self.relation.value}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "unit": self.name,
            "relation": self.relation.value,
            **(
                {"user_column": self.user_column, "max_rows_per_user": self.max_rows_per_user}
                if self.is_user
                else {}
            ),
        }


def group_mu(row_mu: float, rows_per_person: int) -> float:
    """μ-GDP per person of a row-level μ-GDP Gaussian mechanism when a person holds at most
    ``rows_per_person`` rows: changing k rows moves the released sum by at most k times one row's
    sensitivity, so the Gaussian's μ scales by k exactly (group privacy of GDP, Dong, Roth & Su 2022,
    Theorem 2.14). For comparing a row-level run with a user-level one at the same per-person guarantee."""
    if isinstance(rows_per_person, bool) or not isinstance(rows_per_person, int) or rows_per_person < 1:
        raise ValueError(f"rows_per_person must be a whole number ≥ 1, got {rows_per_person!r}")
    if not (math.isfinite(row_mu) and row_mu >= 0):
        raise ValueError(f"row_mu must be finite and ≥ 0, got {row_mu!r}")
    return rows_per_person * row_mu
