"""Private bounds: per-column ranges from two rounds of noisy histograms, for data without public bounds.

Round 1, coarse (where the values are). Every column j is binned on one public grid of edges
e_0 < … < e_{m−1} (``default_edges``: 0 and ±10^{k/2} for 10⁻³ ≤ 10^{k/2} ≤ 10⁹, and the largest
negative float just below 0, so that 0 has a bin of its own): bin 0 is (−∞, e_0],
bin b is (e_{b−1}, e_b], bin m is (e_{m−1}, ∞). The release is the table of counts c_{jb} plus N(0, σ₁²)
noise on every entry. A bin is occupied when its noisy count reaches τ = ``threshold_sigmas``·σ₁ (5σ: an
empty bin passes with probability 3·10⁻⁷); a column with no occupied bin is searched again with windows
of 2 and 3 adjacent bins against τ·√w. The coarse range of column j is [lower edge of its first occupied
bin, upper edge of its last]: the support of the bins holding at least τ rows, rounded outwards to the
half-decade grid.

Round 2, fine (how far the bulk reaches). Each column's coarse range is cut into ``fine_bins`` equal bins
(values outside fall in the end bins) and counted again with N(0, σ₂²) noise. From each end, the range is
narrowed bin by bin while the noisy mass of the bins dropped, plus ``tail_sigmas`` times its noise
(σ₂√k for k bins), stays at most q·N: with few rows the noise forbids narrowing and the coarse range
stays; with many, the range closes in to about the q and 1 − q quantiles. The half-decade grid alone
leaves longitudes or years compressed into a sliver of their range ([−316, −100] for −124..−114); the
second round restores their resolution. q (``tail_fraction``) is 3/√N clipped to [0.02, 0.2] for
features, at most 0.02 for a regression label: clipping a feature's tails keeps the order of its values,
clipping the label's tails biases every prediction.

Sensitivity. A record sits in exactly one bin per column in each round, so replacing it moves at most one
unit out of and one into each column's bins: L2 sensitivity sqrt(2d) per round under replace-one,
sqrt(d) under zero-out (the zero record is counted nowhere). The mechanism is the composition of two
Gaussian releases with μ₁ = sqrt(``coarse_share``)·μ and μ₂ = sqrt(1 − ``coarse_share``)·μ, so it is
μ-GDP (the second round is chosen after the first: adaptive composition, Dong, Roth & Su 2022).

Budget (``bounds_share``). The estimators charge the bounds within the fit's (ε, δ): a share s of μ² on
the bounds, 1 − s on training, sequential composition over all rows (μ² = μ_b² + μ_t²). Compared with
spending the histograms on a disjoint 10 % of the rows at the full μ (parallel composition, the earlier
rule), a count of all N rows with noise 1/sqrt(s) times larger has sqrt(s)·N/(0.1·N) ≈ 3× the
signal-to-noise at s = 0.1, and training pays a noise factor 1/sqrt(1 − s) ≈ 1.05 instead of losing
10 % of its rows.
s is chosen from public quantities only (N, the number of columns, μ): large enough that τ is at most
N/8 rows, between 0.1 and 0.5. ``dpstream convert`` keeps the disjoint sample (its rows never enter the
lake, so the lake's ledger is not charged: ``dpstream.pipelines.preprocessing.private_bounds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpstream.noise import NoiseKey, gaussian
from dpstream.privacy import ComposedEvent, GaussianEvent, NeighbouringRelation, mu_for_epsilon_delta
from dpstream.validation import check_budget, check_positive

__all__ = [
    "PrivateBounds",
    "TooFewRows",
    "too_few_for_bounds",
    "default_edges",
    "bounds_share",
    "tail_fraction",
    "PRIVATE_BOUNDS_FRACTION",
    "SHARE_RANGE",
]

PRIVATE_BOUNDS_FRACTION = 0.1  # dpstream convert: the share of rows sampled for the histograms
_WINDOWS = (1, 2, 3)
_ROWS_PER_BIN = 8  # bounds_share aims for τ ≤ N / 8
SHARE_RANGE = (0.1, 0.5)


class TooFewRows(ValueError):
    """No coarse bin (or window of up to 3 adjacent bins) of ``column`` reached the threshold τ."""

    def __init__(self, column: str, threshold: float, sigmas: float = 5.0):
        self.column, self.threshold = column, threshold
        super().__init__(
            f"too few rows for private bounds: no half-decade bin of column {column!r} holds {threshold:.0f} noisy rows "
            f"(the {sigmas:g}σ threshold of the histogram noise). Pass public bounds, or use a larger epsilon"
        )


class TooSpread(ValueError):
    """The occupied coarse bins of ``column`` hold less than ``MIN_KEPT_SHARE`` of the sample: its values
    spread over more half-decades than the sample resolves at this budget, and bounds on the bins that
    pass τ would clip most of it (382 sampled aircraft once gave a flight delay the bounds [−31.6, −10])."""

    def __init__(self, column: str, share: float):
        self.column, self.share = column, share
        super().__init__(
            f"too few rows for private bounds of column {column!r}: the half-decade bins whose noisy counts pass "
            f"the noise threshold hold only {max(share, 0.0):.0%} of the sample (its values spread over more "
            f"half-decades than it can resolve at this budget), and bounds on those bins would clip the other "
            f"{min(1.0 - share, 1.0):.0%}. Pass public bounds, or use a larger epsilon"
        )


# Of the sample the coarse bounds must hold (noisy counts): less is refused, not clipped away. A half,
# not 3/4: the churn conversion of docs/lakes.md (`tenure`, 7,043 rows, months 0-72 over five half-decades)
# held 68 % in 1 run of 12 at 3/4 and was refused; the flight delay that motivated it held 35 %.
MIN_KEPT_SHARE = 0.5


ZERO_EDGE = np.nextafter(0.0, -1.0)  # the lower edge of the bin that holds exactly 0


def default_edges() -> np.ndarray:
    """0 and ±10^{k/2} for k = −6..18: half-decades from 10⁻³ to 10⁹ on both signs, and the negative float
    next to 0 (52 edges). The bin (−5e−324, 0] holds exactly 0: an indicator column or a non-negative
    count gets the lower bound 0 itself (mapped onto −1 exactly), not the −0.001 of the next edge."""
    positive = 10.0 ** (np.arange(-6, 19) / 2)
    return np.concatenate([-positive[::-1], [ZERO_EDGE, 0.0], positive])


def tail_fraction(num_rows: int, label: bool = False) -> float:
    """q of the fine round: 3/√N clipped to [0.02, 0.2]; for a regression label at most 0.02."""
    fraction = min(max(3.0 / math.sqrt(max(num_rows, 1)), 0.02), 0.2)
    return min(fraction, 0.02) if label else fraction


@dataclass(frozen=True)
class PrivateBounds:
    mu: float  # the whole mechanism's μ-GDP (both rounds)
    relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE
    coarse_share: float = 0.5  # of μ² for the coarse round; the rest for the fine one
    fine_bins: int = 16
    threshold_sigmas: float = (
        5.0  # τ = threshold_sigmas·σ₁: a coarse bin is occupied when its noisy count reaches τ
    )
    tail_sigmas: float = 1.0  # the fine round narrows only while the dropped mass + tail_sigmas·σ₂√k ≤ q·N
    edges: np.ndarray = field(default_factory=default_edges)

    def __post_init__(self) -> None:
        check_positive("mu", self.mu)
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))
        if not 0.0 < self.coarse_share < 1.0:
            raise ValueError(f"coarse_share must lie in (0, 1), got {self.coarse_share!r}")
        check_positive("fine_bins", self.fine_bins, integer=True)
        check_positive("threshold_sigmas", self.threshold_sigmas)
        check_positive("tail_sigmas", self.tail_sigmas, allow_zero=True)
        edges = np.asarray(self.edges, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
            raise ValueError("edges must be a strictly increasing 1-d array of at least 2 finite values")
        object.__setattr__(self, "edges", edges)

    @classmethod
    def for_budget(
        cls,
        epsilon: float,
        delta: float,
        relation: NeighbouringRelation | str = NeighbouringRelation.REPLACE_ONE,
    ) -> PrivateBounds:
        """The mechanism that is exactly (ε, δ)-DP on its own (``dpstream convert``'s sample)."""
        epsilon, delta = check_budget(epsilon, delta)
        return cls(mu_for_epsilon_delta(epsilon, delta), relation)

    # --- sensitivities and noise ------------------------------------------------------------------
    def sensitivity(self, num_columns: int) -> float:
        """L2 sensitivity of one round's histogram table: sqrt(2d) replace-one, sqrt(d) zero-out."""
        return math.sqrt((2.0 if self.relation is NeighbouringRelation.REPLACE_ONE else 1.0) * num_columns)

    def coarse_std(self, num_columns: int) -> float:
        return self.sensitivity(num_columns) / (math.sqrt(self.coarse_share) * self.mu)

    def fine_std(self, num_columns: int) -> float:
        return self.sensitivity(num_columns) / (math.sqrt(1.0 - self.coarse_share) * self.mu)

    def minimum_rows(self, num_columns: int) -> int:
        """τ + 2σ₁: the rows one coarse bin of a column must hold to count as occupied with probability
        0.98. No fewer rows can give that column a bound; more are needed where it spreads over bins."""
        return math.ceil((self.threshold_sigmas + 2.0) * self.coarse_std(num_columns))

    def event(self, num_columns: int) -> ComposedEvent:
        return ComposedEvent(
            (
                GaussianEvent(
                    self.sensitivity(num_columns),
                    self.coarse_std(num_columns),
                    self.relation,
                    f"private bounds, coarse round: {num_columns} per-column histograms",
                ),
                GaussianEvent(
                    self.sensitivity(num_columns),
                    self.fine_std(num_columns),
                    self.relation,
                    f"private bounds, fine round: {num_columns} per-column histograms",
                ),
            )
        )

    # --- round 1 ----------------------------------------------------------------------------------
    def coarse_histogram(self, columns: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """(d, m + 1) counts of each column's values per grid bin; sums over disjoint rows merge.
        ``weights`` (the user unit: 1/k_u on each of user u's rows) make a user's rows weigh 1 in each
        column, so one user moves a column's histogram as one row does: the sensitivity is unchanged."""
        columns = _as_columns(columns)
        bins = np.searchsorted(self.edges, columns, side="left")  # value v in bin b iff e_{b−1} < v ≤ e_b
        return _counts(bins, self.edges.size + 1, weights)

    def coarse_release(
        self,
        counts: np.ndarray,
        key: NoiseKey,
        names: tuple[str, ...] | None = None,
        num_rows: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) per column from the exact coarse counts and the key's noise (module docstring). With
        ``num_rows`` (the public sample size), a column whose occupied bins hold less than
        ``MIN_KEPT_SHARE`` of it by their noisy counts is refused (``TooSpread``): post-processing of the
        same release."""
        counts = np.asarray(counts, dtype=np.float64)
        std = self.coarse_std(counts.shape[0])
        noisy = counts + std * gaussian(key, 0, "private-bounds-coarse", counts.shape)
        threshold = self.threshold_sigmas * std
        last = self.edges.size - 1
        low, high = np.empty(counts.shape[0]), np.empty(counts.shape[0])
        for column in range(counts.shape[0]):
            span = _occupied(noisy[column], threshold)
            if span is None:
                raise TooFewRows(names[column] if names else str(column), threshold, self.threshold_sigmas)
            first, final = span
            kept = float(noisy[column][first : final + 1].sum())
            if num_rows is not None and kept < MIN_KEPT_SHARE * num_rows:
                raise TooSpread(names[column] if names else str(column), kept / num_rows)
            # Bin b spans (e_{b−1}, e_b]; one grid step apart where the only occupied bin lies beyond the grid.
            lower = min(max(first - 1, 0), last - 1)
            upper = min(max(final, lower + 1), last)
            if upper == lower + 1 and self.edges[upper] == 0.0:
                # The bin of 0 alone has no width: an all-zero column is read as an indicator that never
                # fires, [0, 1], so its weight in the user's units stays on an indicator's scale.
                upper = min(int(np.searchsorted(self.edges, 1.0)), last)
            # The bin of 0 is (−5e−324, 0]: from there the range starts at 0 itself, which clips the same
            # doubles and is what a user reads (not −4.94066e-324)
            low[column] = 0.0 if self.edges[lower] == ZERO_EDGE else self.edges[lower]
            high[column] = self.edges[upper]
        return low, high

    # --- round 2 ----------------------------------------------------------------------------------
    def fine_histogram(
        self, columns: np.ndarray, low: np.ndarray, high: np.ndarray, weights: np.ndarray | None = None
    ) -> np.ndarray:
        """(d, fine_bins) counts on equal bins of each column's coarse range (ends included); ``weights``
        as in ``coarse_histogram``."""
        columns = _as_columns(columns)
        position = (columns - low) / (high - low)
        bins = np.clip(np.floor(position * self.fine_bins), 0, self.fine_bins - 1).astype(np.int64)
        return _counts(bins, self.fine_bins, weights)

    def fine_release(
        self,
        counts: np.ndarray,
        key: NoiseKey,
        low: np.ndarray,
        high: np.ndarray,
        num_rows: int,
        tail: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The coarse (low, high) narrowed by the noisy fine counts (module docstring); ``tail`` is q per column."""
        counts = np.asarray(counts, dtype=np.float64)
        std = self.fine_std(counts.shape[0])
        noisy = counts + std * gaussian(key, 0, "private-bounds-fine", counts.shape)
        width = (high - low) / self.fine_bins
        new_low, new_high = low.astype(np.float64).copy(), high.astype(np.float64).copy()
        for column in range(counts.shape[0]):
            allowed = float(tail[column]) * num_rows
            below = _narrowing(noisy[column], allowed, std, self.tail_sigmas, self.fine_bins - 1)
            above = _narrowing(
                noisy[column][::-1], allowed, std, self.tail_sigmas, self.fine_bins - 1 - below
            )
            new_low[column] = low[column] + below * width[column]
            new_high[column] = high[column] - above * width[column]
        return new_low, new_high

    def estimate(
        self,
        columns: np.ndarray,
        key: NoiseKey,
        names: tuple[str, ...] | None = None,
        label_column: int | None = None,
        num_rows: int | None = None,
        weights: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Both rounds on rows held in memory (``label_column``: the regression label's index, whose tail
        fraction is the label's). ``num_rows`` is the public N the tail fractions q·N are computed from;
        pass it where the rows held are fewer by a data-dependent number (rows dropped for missing
        values), since q·N must not depend on the data. ``weights``: the user unit's 1/k_u per row
        (``coarse_histogram``), with ``num_rows`` the number of users."""
        columns = _as_columns(columns)
        num_rows = columns.shape[0] if num_rows is None else num_rows
        low, high = self.coarse_release(self.coarse_histogram(columns, weights), key, names, num_rows)
        tail = self.tails(num_rows, columns.shape[1], label_column)
        fine = self.fine_histogram(columns, low, high, weights)
        return self.fine_release(fine, key, low, high, num_rows, tail)

    @staticmethod
    def tails(num_rows: int, num_columns: int, label_column: int | None = None) -> np.ndarray:
        tail = np.full(num_columns, tail_fraction(num_rows))
        if label_column is not None:
            tail[label_column] = tail_fraction(num_rows, label=True)
        return tail


def bounds_share(num_rows: int, num_columns: int, mu: float, relation: NeighbouringRelation | str) -> float:
    """The share s of μ² a fit spends on private bounds (module docstring): the smallest in [0.1, 0.5]
    whose coarse threshold τ is at most N/8 rows. Public quantities only."""
    probe = PrivateBounds(mu, relation)
    target = max(num_rows, 1) / _ROWS_PER_BIN
    needed = (
        probe.threshold_sigmas * probe.sensitivity(num_columns) / (mu * target)
    ) ** 2 / probe.coarse_share
    return float(min(max(needed, SHARE_RANGE[0]), SHARE_RANGE[1]))


def _as_columns(columns: np.ndarray) -> np.ndarray:
    columns = np.asarray(columns, dtype=np.float64)
    if columns.ndim != 2:
        raise ValueError(f"expected a 2-d array (rows, columns), got shape {columns.shape}")
    return columns


def _counts(bins: np.ndarray, width: int, weights: np.ndarray | None = None) -> np.ndarray:
    offsets = bins + width * np.arange(bins.shape[1])[None, :]
    repeated = None if weights is None else np.repeat(np.asarray(weights, dtype=np.float64), bins.shape[1])
    counts = np.bincount(offsets.ravel(), weights=repeated, minlength=width * bins.shape[1])
    return counts.reshape(bins.shape[1], width)


def _occupied(noisy: np.ndarray, threshold: float) -> tuple[int, int] | None:
    """(first, last) occupied bin: single bins first; windows of w adjacent bins (against τ·√w) only for
    a column where no smaller window holds enough, and then the window's whole extent."""
    for w in _WINDOWS:
        sums = np.convolve(noisy, np.ones(w), mode="valid")
        hits = np.flatnonzero(sums >= threshold * math.sqrt(w))
        if hits.size:
            return int(hits[0]), int(hits[-1]) + w - 1
    return None


def _narrowing(noisy: np.ndarray, allowed: float, std: float, sigmas: float, most: int) -> int:
    """How many bins to drop from the start of ``noisy``: the largest k ≤ ``most`` whose dropped mass plus
    ``sigmas``·std·√k stays within ``allowed`` rows, stopping at the first k that does not."""
    dropped, k = 0.0, 0
    while k < most:
        dropped += noisy[k]
        if dropped + sigmas * std * math.sqrt(k + 1) > allowed:
            break
        k += 1
    return k


def too_few_for_bounds(
    error: TooFewRows, count: int, columns: int, least: int, epsilon: float, label: bool, people: bool
) -> ValueError:
    """An estimator's refusal when no half-decade bin of a column held enough noisy rows (``count`` rows, or people)."""
    given = "feature_bounds=(low, high)" + (" and label_bounds=(low, high)" if label else "")
    counted = f"{count:,} people (user-level DP counts each once)" if people else f"n_samples={count:,}"
    return ValueError(
        f"too few {'people' if people else 'rows'} for private bounds: {counted} with {columns} column(s) without "
        f"public bounds at epsilon={epsilon:g}, and no half-decade bin of column {error.column!r} (nor 2 or 3 "
        f"adjacent ones) holds the {error.threshold:.0f} noisy rows the histograms need. A column needs at "
        f"least {least:,} rows inside one half-decade such as (100, 316], more where its values spread over "
        f"several (as {error.column!r} does here). This attempt spent its share of epsilon like any release: "
        f"a retry on the same rows spends it again. Pass {given} from "
        "public knowledge, such as the data's documentation, or use a larger epsilon"
    )
