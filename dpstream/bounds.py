"""Private bounds: per-column ranges from noisy histograms, for users who have no public bounds.

Mechanism. Every column j is binned on one public grid of edges e_0 < … < e_{m−1} (by default a
symmetric grid of half-decades, 0 and ±10^{k/2} for 10⁻³ ≤ 10^{k/2} ≤ 10⁹): bin 0 is (−∞, e_0], bin b is
(e_{b−1}, e_b], bin m is (e_{m−1}, ∞). The release is the table of counts c_{jb} plus N(0, σ²) noise on
every entry. A record sits in exactly one bin per column, so replacing it moves at most one unit out
of and one into each column's bins: L2 sensitivity sqrt(2d) under replace-one, sqrt(d) under zero-out
(the zero record is counted nowhere). σ = sensitivity / μ, μ from (ε, δ) by the exact δ(ε; μ).

Post-processing. A bin is occupied when its noisy count is at least τ = ``threshold_sigmas``·σ (5σ: an
empty bin passes with probability 3·10⁻⁷, so among the d·(m + 1) bins a spurious one is rare). low_j is
the lower edge of column j's first occupied bin, high_j the upper edge of its last: the support of the
bins that hold at least τ rows, rounded outwards to the grid. Rows in sparser bins are clipped. A noisy
cumulative quantile would be the textbook choice, but its noise grows with the square root of the
number of bins summed, and on a grid wide enough for unknown units that swamps the tails of ten
thousand rows; the occupied-bin rule has the noise of one count. No occupied bin means too few rows:
``ValueError``, naming the minimum.

Single pass. The estimators spend the histograms on a disjoint prefix of the rows (the first
``PRIVATE_BOUNDS_FRACTION`` of them; positions are data-independent) and train on the rest. A record
is then in one of the two mechanisms, and the training mechanism, chosen after seeing the bounds,
takes identical inputs on neighbouring datasets that differ in a prefix row: by parallel composition
the pair is max(μ_bounds, μ_train)-GDP, which is the requested (ε, δ) when both use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpstream.noise import NoiseKey, gaussian
from dpstream.privacy import GaussianEvent, NeighbouringRelation, mu_for_epsilon_delta
from dpstream.validation import check_budget

__all__ = ["PrivateBounds", "default_edges", "PRIVATE_BOUNDS_FRACTION"]

PRIVATE_BOUNDS_FRACTION = 0.1


def default_edges() -> np.ndarray:
    """0 and ±10^{k/2} for k = −6..18: half-decades from 10⁻³ to 10⁹ on both signs (51 edges)."""
    positive = 10.0 ** (np.arange(-6, 19) / 2)
    return np.concatenate([-positive[::-1], [0.0], positive])


@dataclass(frozen=True)
class PrivateBounds:
    epsilon: float
    delta: float
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE
    threshold_sigmas: float = 5.0  # τ = threshold_sigmas·σ: a bin is occupied when its noisy count reaches τ
    edges: np.ndarray = field(default_factory=default_edges)

    def __post_init__(self) -> None:
        check_budget(self.epsilon, self.delta)
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))
        if not self.threshold_sigmas > 0:
            raise ValueError(f"threshold_sigmas must be > 0, got {self.threshold_sigmas!r}")
        edges = np.asarray(self.edges, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
            raise ValueError("edges must be a strictly increasing 1-d array of at least 2 finite values")
        object.__setattr__(self, "edges", edges)

    def sensitivity(self, num_columns: int) -> float:
        return math.sqrt((2.0 if self.relation is NeighbouringRelation.REPLACE_ONE else 1.0) * num_columns)

    def noise_std(self, num_columns: int) -> float:
        return self.sensitivity(num_columns) / mu_for_epsilon_delta(self.epsilon, self.delta)

    def histogram(self, columns: np.ndarray) -> np.ndarray:
        """(d, m + 1) int64 counts of each column's values per bin; sums over disjoint rows merge."""
        columns = np.asarray(columns, dtype=np.float64)
        if columns.ndim != 2:
            raise ValueError(f"expected a 2-d array (rows, columns), got shape {columns.shape}")
        bins = np.searchsorted(self.edges, columns, side="left")  # value v in bin b iff e_{b−1} < v ≤ e_b
        width = self.edges.size + 1
        offsets = bins + width * np.arange(columns.shape[1])[None, :]
        return np.bincount(offsets.ravel(), minlength=width * columns.shape[1]).reshape(
            columns.shape[1], width
        )

    def release(
        self, counts: np.ndarray, key: NoiseKey, names: tuple[str, ...] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) per column from the exact counts and the key's noise (module docstring); ``names``
        label the columns in errors (else their indices)."""
        counts = np.asarray(counts, dtype=np.float64)
        std = self.noise_std(counts.shape[0])
        noisy = counts + std * gaussian(key, 0, "private-bounds", counts.shape)
        threshold = self.threshold_sigmas * std
        edges, last = self.edges, self.edges.size - 1  # the grid's last index
        low, high = np.empty(counts.shape[0]), np.empty(counts.shape[0])
        for column in range(counts.shape[0]):
            occupied = np.flatnonzero(noisy[column] >= threshold)
            if occupied.size == 0:
                label = names[column] if names else column
                raise ValueError(
                    f"too few rows for private bounds: no bin of column {label!r} reached {threshold:.0f} noisy rows "
                    f"({self.threshold_sigmas:g}σ at epsilon={self.epsilon:g}); the histograms need about "
                    f"{2 * threshold:.0f} rows in one bin of every column. Pass public bounds instead"
                )
            # Bin b spans (e_{b−1}, e_b]: the lower edge of the first occupied bin and the upper edge of the
            # last, kept one grid step apart where the only occupied bin lies beyond either end of the grid.
            lower = min(max(occupied[0] - 1, 0), last - 1)
            upper = min(max(occupied[-1], lower + 1), last)
            low[column], high[column] = edges[lower], edges[upper]
        return low, high

    def minimum_rows(self, num_columns: int) -> int:
        """Rows needed in one bin of each column for it to count as occupied about half the time."""
        return math.ceil(self.threshold_sigmas * self.noise_std(num_columns))

    def event(self, num_columns: int) -> GaussianEvent:
        return GaussianEvent(
            self.sensitivity(num_columns),
            self.noise_std(num_columns),
            self.relation,
            f"private bounds: {num_columns} per-column histograms",
        )
