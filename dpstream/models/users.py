"""A user's rows as one contribution (user-level DP, ``dpstream.privacy.unit.PrivacyUnit.user``).

Two steps, each a pure function of public parameters and the rows:

1. **Contribution bounding** (``bound_contributions``): at most k rows per user, chosen uniformly at
   random, the users in a uniformly random order and each user's rows contiguous, so that a user's rows
   can be combined where they are read (one block, one step). The users are returned as dense codes
   0..U−1 in that random order, never as their ids.

2. **Combination** into one contribution with the row unit's bound, so that every release keeps the
   row unit's sensitivity (``PrivacyUnit``): for AdaSSP's sufficient statistics, a weight w_u on each of
   user u's rows (``ssp_user_weights``). With rows clipped to ‖x_i‖ ≤ B and targets to ‖t_i‖ ≤ B_t, the
   user's weighted contributions

       G_u = w_u Σ_i x_i x_iᵀ   (PSD)        and        m_u = w_u Σ_i x_i t_iᵀ

   satisfy tr G_u = w_u Q_u and ‖m_u‖ ≤ w_u Σ_i ‖x_i‖ ‖t_i‖ ≤ w_u S_u B_t, with S_u = Σ_i ‖x_i‖ and
   Q_u = Σ_i ‖x_i‖² ≤ B·S_u (each ‖x_i‖ ≤ B). So

       w_u = min(1, B / S_u)

   gives ‖m_u‖ ≤ B·B_t and tr G_u ≤ (B/S_u)·B·S_u = B² (hence ‖G_u‖_F ≤ B² and ‖G_u‖_op ≤ B²): exactly
   one row's bounds, so XᵀX, Xᵀy and λ_min(XᵀX) keep the sensitivities of ``NeighbouringRelation`` (for
   two PSD G, G' of trace ≤ B², ‖G − G'‖²_F ≤ ‖G‖²_F + ‖G'‖²_F ≤ 2B⁴; Weyl for λ_min). It is the largest
   weight that reads the rows' norms alone (the moment's bound is attained by rows of norm B with aligned
   targets), so it does not bias the fit towards some labels. A one-row user gets w = 1: the row unit is
   the case k = 1; w_u ≥ 1/k_u (S_u ≤ k_u·B), so a user's rows are never worth less than their mean.
   The label sum of a label-mean-only plan takes the user's mean label (weight 1/k_u: |Σ| ≤ B_y), and the
   private bounds' histograms weigh each row 1/k_u (``histogram_weights``: a user's rows weigh 1 per
   column, one row's contribution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BoundedUsers",
    "bound_contributions",
    "ssp_user_weights",
    "histogram_weights",
    "user_counts",
    "not_combined",
]


def not_combined(what: str) -> str:
    """A model's refusal of statistics under the user unit that it cannot combine per person (the
    algorithms refuse such runs first, from their declarations: ``dpstream.algorithms.user_level``)."""
    return (
        "user-level DP (groups / the user privacy unit) combines a person's rows into one contribution; "
        f"{what} does not combine them yet"
    )


@dataclass(frozen=True)
class BoundedUsers:
    """The rows a user-level pass reads: ``rows`` (indices into the input, each user's rows contiguous,
    users in random order), ``users`` (the dense code 0..U−1 of each kept row, non-decreasing) and
    ``rows_per_user`` (k_u, length U)."""

    rows: np.ndarray
    users: np.ndarray
    rows_per_user: np.ndarray

    @property
    def num_users(self) -> int:
        return int(self.rows_per_user.size)


def bound_contributions(
    user_ids: Any, max_rows_per_user: int | None, rng: np.random.Generator | None = None
) -> BoundedUsers:
    """At most ``max_rows_per_user`` rows per distinct id (all with None), chosen uniformly at random;
    the users in a uniformly random order, each user's kept rows contiguous (in random order too).
    ``rng`` defaults to a generator seeded from OS entropy: which rows are dropped is not reproducible
    from anything a run publishes."""
    if max_rows_per_user is not None and (
        isinstance(max_rows_per_user, bool) or not isinstance(max_rows_per_user, int) or max_rows_per_user < 1
    ):
        raise ValueError(
            f"max_rows_per_user must be a whole number ≥ 1 (or None: all), got {max_rows_per_user!r}"
        )
    import pandas as pd

    if np.ndim(user_ids) != 1:
        raise ValueError(f"the user ids must be one value per row, got shape {np.shape(user_ids)}")
    # Hash-based codes: a sort of mixed or missing values (NaN in an object column) could split one
    # person into several users, each charged as one, which would break the guarantee.
    codes, _ = pd.factorize(pd.Series(user_ids, copy=False), use_na_sentinel=True)
    if codes.size and codes.min() < 0:
        row = int(np.argmax(codes < 0))
        raise ValueError(f"the user ids hold a missing value (row {row}); every row needs its user's id")
    rng = rng if rng is not None else np.random.default_rng()  # OS entropy
    codes = np.asarray(codes, dtype=np.int64)
    num_users = int(codes.max()) + 1 if codes.size else 0
    if num_users >= 2**31:  # the sort key below holds a user's position in 31 bits
        raise ValueError(f"{num_users:,} users in one block; bound them in blocks of fewer than 2³¹")
    order = rng.permutation(num_users)  # user code → its position in the pass
    # A random key per row breaks ties uniformly: sorting by (position of the user, key) lists each
    # user's rows in uniformly random order, and its first k are a uniform k-subset. One int64 key,
    # position·2³² + a random 32-bit word, sorts 8× faster than a lexsort of the two (5 ms against 40 ms
    # for 250,000 rows, measured); two rows of one user draw the same word with probability 2⁻³².
    keys = (order[codes].astype(np.int64) << 32) | rng.integers(0, 2**32, codes.size, dtype=np.int64)
    by_user = np.argsort(keys)
    positions = order[codes][by_user]
    counts = np.bincount(positions, minlength=num_users)
    rank = np.arange(by_user.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    keep = rank < (max_rows_per_user if max_rows_per_user is not None else by_user.size)
    kept_users = positions[keep]
    return BoundedUsers(by_user[keep], kept_users, np.bincount(kept_users, minlength=num_users))


def user_counts(users: np.ndarray) -> np.ndarray:
    """k_u of every row's user, for rows listed user by user (``BoundedUsers.users``)."""
    counts = np.bincount(users)
    return counts[users]


def ssp_user_weights(
    row_norms: np.ndarray, users: np.ndarray, row_norm_bound: float
) -> tuple[np.ndarray, np.ndarray]:
    """(w per row for XᵀX and XᵀT, v per row for the label sum): w_u = min(1, B/S_u) from the
    norms of the *clipped* rows (‖x_i‖ ≤ B), v_u = 1/k_u (module docstring). ``users`` are the rows' user
    codes, each user's rows contiguous."""
    norms = np.asarray(row_norms, dtype=np.float64)
    if norms.size and norms.max() > row_norm_bound * (1 + 1e-12):
        raise ValueError("ssp_user_weights needs the norms of rows already clipped to the row-norm bound")
    users = np.asarray(users, dtype=np.int64)
    sums = np.bincount(users, weights=norms)
    with np.errstate(divide="ignore"):
        per_user = np.minimum(1.0, row_norm_bound / sums)
    per_user = np.where(sums > 0, per_user, 1.0)  # a user of zero rows contributes nothing at any weight
    return per_user[users], 1.0 / user_counts(users)


def histogram_weights(users: np.ndarray | None) -> np.ndarray | None:
    """1/k_u per row of a block holding whole users (the user unit's histograms), None for the row unit."""
    if users is None:
        return None
    return 1.0 / user_counts(np.unique(users, return_inverse=True)[1].ravel())
