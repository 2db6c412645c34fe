"""User-level contributions: at most k rows per user chosen uniformly, users in random order,
and AdaSSP's per-user weights that keep one row's sensitivity whatever a user holds."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.models.users import bound_contributions, ssp_user_weights
from dpstream.privacy import NeighbouringRelation, PrivacyUnit, group_mu


def _zipf_ids(rng, users=300, heavy=10_000):
    counts = np.minimum(rng.zipf(1.6, users), 200)
    counts[0] = heavy  # one user with 10⁴ rows
    return np.repeat(np.array([f"customer-{u:04d}" for u in range(users)], dtype=object), counts)


def test_bounding_keeps_at_most_k_rows_per_user_contiguous_in_random_user_order():
    rng = np.random.default_rng(0)
    ids = _zipf_ids(rng)
    shuffled = rng.permutation(ids.size)
    ids = ids[shuffled]
    bounded = bound_contributions(ids, 8, np.random.default_rng(1))
    assert bounded.num_users == len(set(ids)) and bounded.rows_per_user.max() == 8
    assert np.all(np.diff(bounded.users) >= 0)  # each user's rows contiguous, users one after another
    kept_ids = ids[bounded.rows]
    for code in range(bounded.num_users):  # one id per code, all rows of a user from that user
        assert len(set(kept_ids[bounded.users == code])) == 1
    expected = np.minimum(np.unique(ids, return_counts=True)[1], 8)
    assert sorted(bounded.rows_per_user) == sorted(expected)
    assert bounded.rows.dtype.kind == "i" and bounded.users.dtype.kind == "i"  # codes, never the ids
    heavy = np.flatnonzero(ids == "customer-0000")
    assert set(bounded.rows[kept_ids == "customer-0000"]) <= set(heavy)
    everything = bound_contributions(ids, None, np.random.default_rng(2))
    assert everything.rows.size == ids.size and everything.rows_per_user.max() == 10_000


def test_the_kept_rows_and_the_user_order_are_uniform():
    ids = np.array(["a"] * 5 + ["b", "c"])
    kept = np.zeros(5)
    first = {"a": 0, "b": 0, "c": 0}
    draws = 6000
    rng = np.random.default_rng(3)
    for _ in range(draws):
        bounded = bound_contributions(ids, 2, rng)
        kept += np.bincount(bounded.rows[bounded.rows < 5], minlength=5)
        first[ids[bounded.rows[0]]] += 1
    # each of a's 5 rows kept with probability 2/5; each user first with probability 1/3 (4σ bands)
    p = 2 / 5
    assert np.all(np.abs(kept / draws - p) < 4 * np.sqrt(p * (1 - p) / draws)), kept / draws
    assert all(abs(n / draws - 1 / 3) < 4 * np.sqrt(2 / 9 / draws) for n in first.values()), first


def test_bad_ids_and_bounds_are_refused():
    with pytest.raises(ValueError, match=r"missing value \(row 1\)"):
        bound_contributions(np.array([1.0, np.nan]), 2)
    with pytest.raises(ValueError, match=r"missing value \(row 0\)"):
        bound_contributions(np.array([None, "a"], dtype=object), 2)
    # NaN in an object column (pandas' missing value) must not split a person into several users
    with pytest.raises(ValueError, match=r"missing value \(row 2\)"):
        bound_contributions(np.array([1, 2, np.nan, np.nan, 2], dtype=object), 2)
    import pandas as pd

    with pytest.raises(ValueError, match=r"missing value \(row 1\)"):
        bound_contributions(pd.array(["a", None, "a"], dtype="string"), 2)
    mixed = bound_contributions(np.array([1, "1", 1.0, "b", 2], dtype=object), None)
    assert mixed.num_users == 4  # 1 and 1.0 are one id, "1" another: as pandas and Python compare them
    with pytest.raises(ValueError, match="max_rows_per_user must be a whole number"):
        bound_contributions(np.array([1, 2]), 0)


def _contributions(X, T, users, w):
    grams = [np.einsum("i,ij,ik->jk", w[users == u], X[users == u], X[users == u]) for u in np.unique(users)]
    moments = [
        np.einsum("i,ij,ik->jk", w[users == u], X[users == u], T[users == u]) for u in np.unique(users)
    ]
    return grams, moments


@pytest.mark.parametrize("seed", range(5))
def test_weighted_users_keep_one_rows_bounds_for_any_labels(seed):
    rng = np.random.default_rng(seed)
    bound, target_bound, dim = 1.7, 0.8, 4
    counts = np.minimum(rng.zipf(1.5, 60), 40)
    users = np.repeat(np.arange(counts.size), counts)
    X = rng.standard_normal((users.size, dim)) * rng.uniform(0.05, 1.5, (users.size, 1))
    norms = np.linalg.norm(X, axis=1)
    X *= np.minimum(1.0, bound / norms)[:, None]  # rows clipped to ‖x‖ ≤ B, as the model does
    T = rng.choice([-1.0, 1.0], (users.size, 2)) * target_bound / np.sqrt(2)  # ‖t‖ = B_t, the worst case
    w, v = ssp_user_weights(np.linalg.norm(X, axis=1), users, bound)
    grams, moments = _contributions(X, T, users, w)
    assert max(np.trace(G) for G in grams) <= bound**2 * (1 + 1e-12)
    assert max(np.linalg.norm(m) for m in moments) <= bound * target_bound * (1 + 1e-12)
    # So replacing one user moves XᵀX by at most √2·B² and Xᵀy by 2·B·B_t (replace-one), as one row does.
    relation = NeighbouringRelation.REPLACE_ONE
    worst_gram = max(np.linalg.norm(a - b) for a in grams for b in grams)
    worst_moment = max(np.linalg.norm(a - b) for a in moments for b in moments)
    assert worst_gram <= relation.gram_sensitivity(bound) * (1 + 1e-12)
    assert worst_moment <= relation.moment_sensitivity(bound, target_bound) * (1 + 1e-12)
    labels = rng.uniform(-target_bound, target_bound, users.size)
    assert np.abs(np.bincount(users, weights=v * labels)).max() <= target_bound * (1 + 1e-12)
    assert np.all(w >= 1.0 / np.bincount(users)[users] - 1e-15) and np.all(w <= 1.0)


def test_the_bounds_are_attained_and_one_row_users_keep_weight_one():
    bound = 2.0
    # Two one-row users at the bound in orthogonal directions: ‖G − G'‖_F = √2·B², the stated sensitivity.
    X = np.array([[bound, 0.0], [0.0, bound]])
    w, _ = ssp_user_weights(np.linalg.norm(X, axis=1), np.array([0, 1]), bound)
    assert np.all(w == 1.0)
    gap = np.linalg.norm(np.outer(X[0], X[0]) - np.outer(X[1], X[1]))
    assert gap == pytest.approx(NeighbouringRelation.REPLACE_ONE.gram_sensitivity(bound))
    # A user of k equal rows at the bound is worth its mean (w = B/S = 1/k), and tr G_u = B² exactly.
    k = 7
    same = np.tile([bound, 0.0], (k, 1))
    w, v = ssp_user_weights(np.full(k, bound), np.zeros(k, dtype=np.int64), bound)
    assert np.allclose(w, 1 / k) and np.allclose(v, 1 / k)
    assert np.trace(np.einsum("i,ij,ik->jk", w, same, same)) == pytest.approx(bound**2)
    with pytest.raises(ValueError, match="already clipped"):
        ssp_user_weights(np.array([bound * 1.5]), np.array([0]), bound)


def test_the_privacy_unit_states_itself_and_converts_by_group_privacy():
    row, user = PrivacyUnit.row(), PrivacyUnit.user("customer_id", 8)
    assert row.name == "row" and user.name == "user" and user.is_user and not row.is_user
    assert "one value of 'customer_id' (at most 8 rows" in user.describe()
    assert user.to_json() == {
        "unit": "user",
        "relation": "replace-one",
        "user_column": "customer_id",
        "max_rows_per_user": 8,
    }
    # One contribution per user: the same sensitivities as a row (the combination keeps the row's bounds).
    assert user.clipped_sum_sensitivity(1.5) == row.clipped_sum_sensitivity(1.5) == 3.0
    assert group_mu(0.5, 8) == 4.0
    with pytest.raises(ValueError, match="give user_column too"):
        PrivacyUnit(max_rows_per_user=4)
    with pytest.raises(ValueError, match="max_rows_per_user must be a whole number"):
        PrivacyUnit.user("customer_id", 0)
    with pytest.raises(ValueError, match="user_column must name the id column"):
        PrivacyUnit.user("", 3)
