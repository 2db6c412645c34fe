"""The neighbouring relation a privacy guarantee refers to.

Two datasets of the same size N are neighbours when

* ``REPLACE_ONE`` (default): one record is replaced by an arbitrary other record. N is public
  (the shuffle manifest publishes it), so this is the relation that matches what we release.
* ``ZERO_OUT``: one record is replaced by a "zero" record whose contribution to every statistic is
  zero (Kairouz et al. 2021; Choquette-Choo et al., "Correlated Noise Provably Beats Independent Noise",
  arXiv:2310.06771, App. A.2; Wang et al., "KANs Trained by DP-SGD with Correlated Noise",
  arXiv:2605.12648, Def. F.1).

The L2 sensitivity of a statistic follows from the relation and from the set every record's
contribution lies in. For a sum of contributions clipped to a ball of radius C the replace-one
sensitivity is the ball's diameter, 2C, and the zero-out sensitivity its radius, C. For a count of
records meeting a predicate (contribution in {0, 1}) both are 1.

Sufficient statistics of least squares (AdaSSP, ``dpstream.algorithms.ssp``) with rows clipped to
‖x‖ ≤ B_x and labels to |y| ≤ B_y:

* XᵀX, released as its upper triangle: one record changes it by xxᵀ − x'x'ᵀ, whose Frobenius norm
  satisfies ‖xxᵀ − x'x'ᵀ‖²_F = ‖x‖⁴ + ‖x'‖⁴ − 2(xᵀx')² ≤ 2B_x⁴, so √2·B_x² (replace-one); ‖xxᵀ‖_F = ‖x‖²
  ≤ B_x² (zero-out). The upper triangle's entries are a subset of the matrix's, so the bound carries.
* Xᵀy: ‖xy − x'y'‖ ≤ 2B_xB_y (replace-one), B_xB_y (zero-out).
* λ_min(XᵀX): by Weyl's inequality a change by the symmetric D = xxᵀ − x'x'ᵀ moves every eigenvalue by
  at most ‖D‖_op ≤ max(‖x‖², ‖x'‖²) ≤ B_x² (D is a difference of two PSD matrices of norm ≤ B_x²), and
  by ‖xxᵀ‖_op ≤ B_x² under zero-out: B_x² under both.
"""

from __future__ import annotations

import enum
import math

from dpstream.validation import check_positive

__all__ = ["NeighbouringRelation"]


class NeighbouringRelation(str, enum.Enum):
    REPLACE_ONE = "replace-one"
    ZERO_OUT = "zero-out"

    @classmethod
    def parse(cls, value: NeighbouringRelation | str) -> NeighbouringRelation:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower().replace("_", "-"))
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in cls)
            raise ValueError(f"relation must be one of {allowed}, got {value!r}") from None

    def clipped_sum_sensitivity(self, clip_norm: float) -> float:
        """L2 sensitivity of Σ_i clip(v_i, clip_norm): 2·clip_norm (replace-one) or clip_norm (zero-out)."""
        clip_norm = check_positive("clip_norm", clip_norm)
        return 2.0 * clip_norm if self is NeighbouringRelation.REPLACE_ONE else clip_norm

    def gram_sensitivity(self, row_norm_bound: float) -> float:
        """Frobenius sensitivity of the upper triangle of XᵀX for rows with ‖x‖ ≤ B: √2·B² or B²."""
        bound = check_positive("row_norm_bound", row_norm_bound) ** 2
        return math.sqrt(2.0) * bound if self is NeighbouringRelation.REPLACE_ONE else bound

    def moment_sensitivity(self, row_norm_bound: float, label_bound: float) -> float:
        """L2 sensitivity of Xᵀy for ‖x‖ ≤ B_x, |y| ≤ B_y: 2·B_x·B_y or B_x·B_y."""
        bound = check_positive("row_norm_bound", row_norm_bound) * check_positive("label_bound", label_bound)
        return 2.0 * bound if self is NeighbouringRelation.REPLACE_ONE else bound

    def eigenvalue_sensitivity(self, row_norm_bound: float) -> float:
        """Sensitivity of λ_min(XᵀX) for ‖x‖ ≤ B (Weyl): B² under both relations."""
        return check_positive("row_norm_bound", row_norm_bound) ** 2

    def count_sensitivity(self) -> float:
        """L2 sensitivity of a count of records meeting a predicate: 1 under both relations."""
        return 1.0

    def describe(self) -> str:
        if self is NeighbouringRelation.REPLACE_ONE:
            return "replace-one (datasets of the same public size N differing in one record)"
        return "zero-out (one record's contribution replaced by zero)"

    def __str__(self) -> str:
        return self.value
