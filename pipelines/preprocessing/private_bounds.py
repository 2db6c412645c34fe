"""Private bounds at conversion time, for columns that have no public range: the request and its release.

``dpstream convert`` estimates the bounds of every numeric column given neither ``--bounds`` nor
``--unscaled`` (or the columns named by ``--private-bounds``). It spends a fixed, data-independent sample
of the CSV's rows (every ``sample_every``-th data row, position 0 included) on
``dpstream.bounds.PrivateBounds``: two rounds of noisy per-column histograms (where the values are on a
public half-decade grid, then how far the bulk reaches). Those rows are **not written to the lake**, so no
training run ever reads them (``dpstream.pipelines.conversion.sample`` picks them).

Guarantee (parallel composition, the argument of ``dpstream.bounds`` for the estimators). A record is
either in the sample (its only release is the bounds: (ε, δ) of this request under its relation) or in
the lake (the released bounds do not depend on it; every training run on the lake is charged to the
lake's ledger as usual, and choosing the scaling after seeing the bounds is post-processing for the
sample's records). So the bounds cost the lake's ledger nothing, and the conversion record states
their guarantee beside them (``"private_bounds"``), which model.json copies.

The released bounds are then public values like any others: ``ConvertSpec.from_record`` prepares new
rows with them, without a sample. A systematic sample rather than a prefix keeps the estimate useful on
CSVs sorted by a column (California is sorted by longitude blocks). The noise key comes from OS entropy
and is dropped after the release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream.bounds import PRIVATE_BOUNDS_FRACTION, PrivateBounds, TooFewRows
from dpstream.noise import NoiseKey
from dpstream.pipelines.errors import LakeError
from dpstream.privacy import NeighbouringRelation, epsilon_for_delta, event_mu

__all__ = ["PrivateBoundsRequest"]


@dataclass(frozen=True)
class PrivateBoundsRequest:
    columns: tuple[str, ...]  # numeric columns (features or the label) whose bounds are estimated
    label: str | None = None  # the label's name: its tails are clipped less (dpstream.bounds.tail_fraction)
    epsilon: float = 1.0
    delta: float = 1e-6
    relation: str = "replace-one"
    sample_every: int = round(1 / PRIVATE_BOUNDS_FRACTION)  # every 10th data row is spent on the histograms
    # The user unit: the sample is every 10th *person* of this column (all their rows), each row weighing
    # 1/k_u in the histograms (``person_sample_mask``; one person moves a histogram as one row does).
    user_column: str | None = None

    def __post_init__(self) -> None:
        if not self.columns:
            raise LakeError("private bounds need at least one column; name them with --private-bounds COLUMN")
        if len(set(self.columns)) != len(self.columns):
            raise LakeError(f"private bounds name a column twice: {list(self.columns)}")
        if not (isinstance(self.sample_every, int) and self.sample_every >= 2):
            raise LakeError(f"sample_every must be an integer ≥ 2, got {self.sample_every!r}")
        try:
            self.mechanism()
        except ValueError as error:
            raise LakeError(f"private bounds: {error}") from None

    def mechanism(self) -> PrivateBounds:
        return PrivateBounds.for_budget(self.epsilon, self.delta, NeighbouringRelation.parse(self.relation))

    def _needed_epsilon(self, error: ValueError, mechanism: PrivateBounds, sample_rows: int) -> str:
        """The least --private-epsilon at which the threshold τ ∝ 1/μ fits in the sample at all (more is
        needed where a column spreads over several bins): μ·τ/rows, as ε at this δ. Public: τ and the
        sample size are."""
        if not isinstance(error, TooFewRows) or sample_rows <= 0:
            return ""
        needed = mechanism.mu * error.threshold / sample_rows
        return (
            f" (more than {epsilon_for_delta(self.delta, needed):.3g} for this sample even if one bin held every "
            "value; more where the values spread over several)"
        )

    def release(
        self, sample: dict[str, np.ndarray], sample_rows: int, users: np.ndarray | None = None
    ) -> tuple[dict, dict[str, Any]]:
        """({column: (low, high)}, the provenance for the record) from the sample's raw column values.
        ``sample_rows`` is the number of sampled positions, public (every ``sample_every``-th CSV row): the
        rows held may be fewer by a data-dependent number (missing values dropped), which must not reach
        the tail fractions or the record. ``users`` (with ``user_column``): each held row's person code;
        ``sample_rows`` is then the number of people sampled."""
        mechanism = self.mechanism()
        values = np.column_stack([sample[column] for column in self.columns])
        label = self.columns.index(self.label) if self.label in self.columns else None
        weights = None
        if users is not None:
            _, inverse, counts = np.unique(users, return_inverse=True, return_counts=True)
            weights = 1.0 / counts[inverse.ravel()]
        try:
            low, high = mechanism.estimate(
                values, NoiseKey.generate(), self.columns, label, sample_rows, weights
            )
        except ValueError as error:  # too few rows: say which flag to change, and by how much
            raise LakeError(
                f"private bounds of {', '.join(map(repr, self.columns))}: {error} (the sample is every "
                f"{self.sample_every}th {'person' if self.user_column else 'row'}: {sample_rows:,} "
                f"{'people' if self.user_column else 'rows'} here). This attempt spent epsilon={self.epsilon:g} on the "
                "sample like any release (this refusal is computed from the noisy counts): another attempt on the "
                "same CSV adds its own, and a lake it writes states only its own. Flags: --bounds COLUMN=LOW,HIGH for "
                f"public ranges, or a larger --private-epsilon{self._needed_epsilon(error, mechanism, sample_rows)}"
            ) from None
        bounds = {
            column: (float(lo), float(hi)) for column, lo, hi in zip(self.columns, low, high, strict=True)
        }
        mu = event_mu(mechanism.event(len(self.columns)))
        sampled = (
            f"{sample_rows:,} sampled people (every row of one value of {self.user_column!r} in 1 of "
            f"{self.sample_every}), whose rows are"
            if self.user_column is not None
            else f"{sample_rows:,} sampled rows, which are"
        )
        provenance = {
            "columns": list(self.columns),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "relation": NeighbouringRelation.parse(self.relation).value,
            "mu": mu,
            "sample_every": self.sample_every,
            "sample_rows": sample_rows,
            "mechanism": "two rounds of noisy per-column histograms, a half-decade grid then 16 bins (dpstream.bounds)",
            "guarantee": (
                f"({self.epsilon:g}, {self.delta:g})-DP ({mu:.6g}-GDP) for the {sampled} not in the lake "
                "(parallel composition: the lake's ledger is not charged)"
            ),
            "unit": f"user:{self.user_column}" if self.user_column is not None else "row",
        }
        return bounds, provenance
