"""A person's rows as one clipped gradient: user-level DP-SGD and DP-AMBSSGD for the GLMs. PRIVACY-CRITICAL.

Two ways to bound what one person adds to a released gradient sum (Charles et al. 2024, "Fine-tuning
large language models with user-level differential privacy", user-level sampling; Chua et al. 2024,
"Mind the privacy unit!", who compare both):

(a) clip each of the person's k rows to C and add them: the person moves the sum by up to k·C, the
    row-level mechanism at group privacy k (``dpstream.privacy.group_mu``);
(b) combine the person's rows into one gradient and clip that once: the person moves the sum by C,
    exactly one row's contribution, so every sensitivity stays the row unit's.

dpstream implements (b), with the mean over the person's rows. For person u with k_u rows (at most k,
``dpstream.models.users.bound_contributions``), margins m_i = ⟨x_i, w⟩ and loss derivatives
s_i = φ'(m_i, y_i):

    g_u = (1/k_u) Σ_{i∈u} s_i x_i,          ḡ_{u,C} = g_u · min(1, C/‖g_u‖)    (``clip_factors``),

and the step releases Σ_u ḡ_{u,C} + noise for each candidate clip norm C. ‖ḡ_{u,C}‖ ≤ C, so replacing
one person (all their rows) changes the sum by at most 2C, or C when zeroing them out:
``NeighbouringRelation.clipped_sum_sensitivity(C)`` with one contribution per person, as for a row.
The mean keeps a person's gradient on one row's scale (a person of many rows is not clipped harder
than a person of one), so the clip norms and DP-STAT bounds chosen for rows serve people unchanged.

DP-AMBSSGD's DP-STAT counts people too: each stat person adds one indicator per threshold to the
cumulative counts (the count sensitivity of one row), on a per-person statistic — ``"gradient_norm"``:
‖g_u‖; ``"residual"``: the mean |s_i| over the person's rows, which bounds ‖g_u‖ ≤ R_x·mean|s_i| when
every ‖x_i‖ ≤ R_x, the role the residual plays for a row (docs/design.md, note A8).

The KAN's per-row gradient has rank one too, β_i a_i ⊗ h(x_i) (Wang et al., "KANs Trained by DP-SGD with
Correlated Noise", arXiv:2605.12648, Lemma B.6), so the same combination applies to it (its DP-STAT
statistic is ‖g_u‖). NumPy, in float64, in chunks of whole people (``numpy.add.reduceat`` over each
person's contiguous rows). ``tests/models/test_user_gradients.py`` checks the sums against a per-person
loop, the bound ‖ḡ‖ ≤ C on heavy people, and that one person's change moves a release by at most the
sensitivity.
"""

from __future__ import annotations

import numpy as np

from dpstream.models.clipping import clip_factors

__all__ = ["user_gradient_statistics", "user_starts", "user_mean"]


def user_starts(users: np.ndarray) -> np.ndarray:
    """The first row of each person in rows listed person by person (contiguous codes)."""
    users = np.asarray(users)
    if users.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate([[True], users[1:] != users[:-1]]))


def user_mean(values: np.ndarray, users: np.ndarray) -> np.ndarray:
    """Each person's mean of a per-row value (rows listed person by person)."""
    starts = user_starts(users)
    if starts.size == 0:
        return np.zeros(0)
    counts = np.diff(np.append(starts, np.asarray(values).shape[0]))
    return np.add.reduceat(np.asarray(values, dtype=np.float64), starts, axis=0) / counts


def user_gradient_statistics(
    left: np.ndarray,
    right: np.ndarray,
    clip_norms: np.ndarray,
    users: np.ndarray,
    max_elements: int = 1 << 22,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Σ_u ḡ_{u,C} for each clip norm C (K, a·b), #{u : ‖g_u‖ > C} (K,), ‖g_u‖ per person) of a block
    whose ``users`` are contiguous, for per-row gradients of rank one, g_i = vec(left_i ⊗ right_i): a GLM's
    s_i·x_i (left (rows, 1)), the KAN's β_i a_i ⊗ h(x_i) (``dpstream.models.kan``). People are taken in
    chunks of at most ``max_elements`` gradient entries; a person of more rows is a chunk of its own,
    summed as leftᵀ·right without the per-row gradients, so memory stays bounded whatever the block."""
    users = np.asarray(users)
    if users.size and np.any(users[1:] < users[:-1]):
        raise ValueError("the user codes must ascend through the block, each person's rows contiguous")
    left = np.asarray(left, dtype=np.float64)
    right = np.asarray(right, dtype=np.float64)
    clip_norms = np.asarray(clip_norms, dtype=np.float64)
    width = left.shape[1] * right.shape[1]
    sums = np.zeros((clip_norms.size, width))
    clipped = np.zeros(clip_norms.size, dtype=np.int64)
    starts = user_starts(users)
    ends = np.append(starts[1:], left.shape[0])
    norms = np.zeros(starts.size)
    first = 0
    while first < starts.size:
        # the people whose rows fit in the chunk, at least one
        last = max(
            first + 1, int(np.searchsorted(ends, starts[first] + max(1, max_elements // width), "right"))
        )
        lo, hi = int(starts[first]), int(ends[last - 1])
        counts = ends[first:last] - starts[first:last]
        with np.errstate(over="ignore", invalid="ignore"):  # ∞ and NaN are handled by _norms
            if (hi - lo) * width > max_elements:  # one heavy person
                gradients = (left[lo:hi].T @ right[lo:hi]).reshape(1, width) / counts[:, None]
            else:
                rows = (left[lo:hi, :, None] * right[lo:hi, None, :]).reshape(hi - lo, width)
                gradients = np.add.reduceat(rows, starts[first:last] - lo, axis=0) / counts[:, None]
            chunk_norms = _norms(gradients)
        factors = clip_factors(chunk_norms, clip_norms)  # (people, K): ‖factor·g_u‖ ≤ C
        sums += factors.T @ gradients
        clipped += (chunk_norms[:, None] > clip_norms[None, :]).sum(axis=0)
        norms[first:last] = chunk_norms
        first = last
    return sums, clipped, norms


def _norms(gradients: np.ndarray) -> np.ndarray:
    """‖g_u‖ per row of ``gradients``, scaled by the largest entry so that a large finite gradient does not
    overflow to ∞ (whose clip factor 0 times the gradient's ∞ would make the whole sum NaN). A gradient
    with a non-finite entry is zeroed in place and given norm ∞: factor 0, contribution 0, within any C."""
    scale = np.abs(gradients).max(axis=1) if gradients.shape[1] else np.zeros(gradients.shape[0])
    finite = np.isfinite(scale)
    if not finite.all():
        gradients[~finite] = 0.0
    safe = np.where(finite & (scale > 0), scale, 1.0)
    norms = safe * np.sqrt(((gradients / safe[:, None]) ** 2).sum(axis=1))
    return np.where(finite, norms, np.inf)
