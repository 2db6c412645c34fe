"""Batch statistics: what a worker computes for a block of rows, and how blocks merge.

``BatchStats`` is a monoid (docs/design.md): statistics of disjoint row sets merge with ``+``; merged in
a fixed order they are identical however many workers produced them. Nothing per-example leaves a block.

``StatsRequest`` says what to compute: the parameters, the candidate clip norms (several at once so
DP-AMBSSGD can pick its clip norm after DP-STAT, usually without a second round trip: a window of them
around the previous step's), optional DP-STAT thresholds, and for SRGD the previous iterate and the
weights of the gradient difference. With ``kind="moments"`` it asks instead for the least-squares
sufficient statistics XᵀX and Xᵀy of rows clipped to ``row_norm_bound`` and labels clipped to
``label_bound`` (AdaSSP, ``dpstream.models.moments``).

Fields marked *operator only* (``loss_sum``, ``clipped_rows``) are non-private diagnostics; they are
never released through a DP report without that label.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["StatsRequest", "BatchStats"]


@dataclass(frozen=True)
class StatsRequest:
    params: np.ndarray
    clip_norms: np.ndarray = field(default_factory=lambda: np.array([np.inf]))
    thresholds: np.ndarray | None = None
    statistic: str = (
        "residual"  # DP-STAT counts rows with statistic <= threshold: "residual" | "gradient_norm"
    )
    previous_params: np.ndarray | None = None  # SRGD: clip η_t ∇f(x_t) − η_{t−1} ∇f(x_{t−1})
    weight: float = 1.0  # η_t
    previous_weight: float = 0.0  # η_{t−1}
    kind: str = "clipped_gradient"  # | "moments": XᵀX and Xᵀy of clipped rows and labels
    row_norm_bound: float | None = None  # B_x, for kind="moments"
    label_bound: float | None = None  # B_y, for kind="moments"

    def __post_init__(self) -> None:
        if self.kind not in ("clipped_gradient", "moments"):
            raise ValueError(f"kind must be 'clipped_gradient' or 'moments', got {self.kind!r}")
        if self.kind == "moments":
            for name in ("row_norm_bound", "label_bound"):
                value = getattr(self, name)
                if value is None or not np.isfinite(value) or value <= 0:
                    raise ValueError(f"kind='moments' needs {name} as a finite number > 0, got {value!r}")
        clip_norms = np.atleast_1d(np.asarray(self.clip_norms, dtype=np.float64))
        if clip_norms.ndim != 1 or np.any(~(clip_norms > 0)):
            raise ValueError("clip_norms must be a 1-d array of positive values (inf = no clipping)")
        object.__setattr__(self, "clip_norms", clip_norms)
        if self.thresholds is not None:
            thresholds = np.asarray(self.thresholds, dtype=np.float64)
            if thresholds.ndim != 1 or np.any(np.diff(thresholds) <= 0):
                raise ValueError("thresholds must be a strictly increasing 1-d array")
            object.__setattr__(self, "thresholds", thresholds)
        if self.statistic not in ("residual", "gradient_norm"):
            raise ValueError(f"statistic must be 'residual' or 'gradient_norm', got {self.statistic!r}")


@dataclass
class BatchStats:
    """Sufficient statistics of a set of rows for one step."""

    clipped_sums: np.ndarray  # (len(clip_norms), dim) float64: Σ_i clip(g_i, C_k) for each candidate C_k
    row_count: int
    histogram: np.ndarray | None = None  # (len(thresholds),) int64: #rows with statistic <= threshold_k
    loss_sum: float = 0.0  # operator only
    clipped_rows: np.ndarray | None = None  # (len(clip_norms),) int64, operator only
    gram: np.ndarray | None = None  # (dim, dim) float64: Σ_i x̄_i x̄_iᵀ of clipped rows x̄_i (kind="moments")
    moment: np.ndarray | None = None  # (dim,) float64: Σ_i x̄_i ȳ_i with clipped labels ȳ_i (kind="moments")
    label_sum: float | None = None  # Σ_i ȳ_i, the clipped labels alone (kind="moments", a scalar label)

    @classmethod
    def zeros(cls, num_clip_norms: int, dim: int, num_thresholds: int | None = None) -> BatchStats:
        return cls(
            clipped_sums=np.zeros((num_clip_norms, dim)),
            row_count=0,
            histogram=None if num_thresholds is None else np.zeros(num_thresholds, dtype=np.int64),
            clipped_rows=np.zeros(num_clip_norms, dtype=np.int64),
        )

    def __add__(self, other: BatchStats) -> BatchStats:
        if self.clipped_sums.shape != other.clipped_sums.shape:
            raise ValueError(
                f"cannot merge statistics of shapes {self.clipped_sums.shape} and {other.clipped_sums.shape}"
            )
        return BatchStats(
            clipped_sums=self.clipped_sums + other.clipped_sums,
            row_count=self.row_count + other.row_count,
            histogram=_merge_optional(self.histogram, other.histogram),
            loss_sum=self.loss_sum + other.loss_sum,
            clipped_rows=_merge_optional(self.clipped_rows, other.clipped_rows),
            gram=_merge_optional(self.gram, other.gram),
            moment=_merge_optional(self.moment, other.moment),
            label_sum=None
            if self.label_sum is None and other.label_sum is None
            else (self.label_sum or 0.0) + (other.label_sum or 0.0),
        )


def _merge_optional(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None if b is None else b.copy()
    if b is None:
        return a.copy()
    return a + b
