"""The privacy-critical clipping: one record's scaled contribution never leaves the public ball."""

import numpy as np
import pytest

from dpstream.models.clipping import clip_factors, clip_labels, clip_rows


@pytest.mark.parametrize("seed", range(5))
def test_scaled_rows_lie_in_every_candidate_ball(seed):
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((500, 7)) * rng.lognormal(0.0, 3.0, (500, 1))  # norms over ~8 decades
    V[:3] = 0.0  # zero rows: factor 1, contribution 0
    norms = np.linalg.norm(V, axis=1)
    clip_norms = np.geomspace(1e-3, 1e3, 9)
    factors = clip_factors(norms, clip_norms)
    assert factors.shape == (500, 9) and np.all((factors > 0) & (factors <= 1.0))
    assert np.all(factors[:3] == 1.0)
    for k, bound in enumerate(clip_norms):
        scaled = np.linalg.norm(V * factors[:, k : k + 1], axis=1)
        assert scaled.max() <= bound * (1 + 1e-12)
        inside = norms <= bound
        assert np.all(factors[inside, k] == 1.0)  # rows within the ball are not touched


def test_clip_rows_and_labels():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 5)).astype(np.float32) * 3
    clipped, count = clip_rows(X, 2.0)
    assert count == int((np.linalg.norm(X.astype(np.float64), axis=1) > 2.0).sum()) > 0
    assert np.linalg.norm(clipped.astype(np.float64), axis=1).max() <= 2.0 * (1 + 1e-6)  # float32 rows
    small = X / 100
    same, none = clip_rows(small, 2.0)
    assert same is small and none == 0  # nothing to clip: no copy
    assert np.array_equal(clip_labels(np.array([-5.0, 0.3, 7.0]), 1.0), [-1.0, 0.3, 1.0])


def _exact_clip_rows(X, bound):
    """clip_rows without its first look: float64 norms of every row, always."""
    norms = np.sqrt((X.astype(np.float64) ** 2).sum(axis=1))
    factors = clip_factors(norms, np.array([bound]))[:, 0]
    clipped = int((factors < 1.0).sum())
    return (X, 0) if clipped == 0 else (X * factors[:, None].astype(X.dtype), clipped)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 3, 17, 200])
def test_the_first_look_never_lets_a_row_over_the_bound_through(dtype, dim):
    """certainly_within answers True only where every row's float64 norm is within the bound, and
    clip_rows gives bit for bit what the float64 norms alone give, here for rows packed around the bound
    (relative distances down to one unit roundoff, on both sides)."""
    from dpstream.models.clipping import certainly_within

    rng = np.random.default_rng(dim)
    bound = 2.5
    eps = float(np.finfo(dtype).eps)
    for trial in range(40):
        X = rng.standard_normal((64, dim))
        offsets = rng.choice([-1, 1], 64) * np.geomspace(eps / 4, 1e-3, 64) * (trial % 3)
        X = (X / np.linalg.norm(X, axis=1, keepdims=True) * bound * (1 + offsets)[:, None]).astype(dtype)
        if trial % 2:
            X[1:] *= 0.5  # the usual case: one row near the bound, the rest well inside
        norms = np.sqrt((X.astype(np.float64) ** 2).sum(axis=1))
        if certainly_within(X, bound):
            assert norms.max() <= bound
        fast, fast_count = clip_rows(X, bound)
        exact, exact_count = _exact_clip_rows(X, bound)
        assert fast_count == exact_count and np.array_equal(fast, exact)
    close = rng.standard_normal((64, dim))
    shrink = 1 - np.geomspace(16 * (dim + 2) * eps, 1e-3, 64)  # inside by more than the look's margin
    close = (close / np.linalg.norm(close, axis=1, keepdims=True) * bound * shrink[:, None]).astype(dtype)
    assert certainly_within(close, bound) and clip_rows(close, bound)[0] is close
    inside = (rng.standard_normal((1000, dim)) * 0.1 / np.sqrt(dim)).astype(dtype)
    assert certainly_within(inside, bound) and clip_rows(inside, bound)[0] is inside


def test_the_first_look_defers_on_non_finite_values_and_degenerate_bounds():
    from dpstream.models.clipping import certainly_within

    X = np.full((4, 3), 0.1, dtype=np.float32)
    assert certainly_within(X, 1.0)
    for bad in (np.nan, np.inf, -np.inf):
        Y = X.copy()
        Y[2, 1] = bad
        assert not certainly_within(Y, 1.0)
    tiny = np.full((4, 3), 1e-17, dtype=np.float32)  # within 1e-16, but squares near float32's subnormals
    assert not certainly_within(tiny, 1e-16) and clip_rows(tiny, 1e-16)[0] is tiny
    # A bound whose square leaves float32 (1e20) or float64 (1e200): no warning, no overflow.
    assert not certainly_within(X, 1e20) and certainly_within(X.astype(np.float64), 1e20)
    assert not certainly_within(X, 1e200) and not certainly_within(X.astype(np.float64), 1e200)
    assert clip_rows(X, 1e20)[0] is X and clip_rows(X, 1e200)[0] is X
    assert not certainly_within(X[:0], 1.0) and not certainly_within(X.astype(np.int32), 1.0)
    nan_rows = X.copy()
    nan_rows[0, 0] = np.nan
    out, _ = clip_rows(nan_rows, 1.0)
    assert np.isnan(out[0]).any() and np.array_equal(out[1:], X[1:])  # the float64 path, as before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 17])
def test_rows_at_the_first_looks_threshold_are_within_the_bound(dtype, dim):
    """Rows of d equal entries a, for every a of X's type in a window around the look's threshold
    (B·√(1 − 4(d + 2)u)/√d): wherever the look answers True the float64 norm is within B, and the answer
    turns from True to False inside the window, so rows exactly at the threshold are among those tried."""
    from dpstream.models.clipping import certainly_within

    bound = 1.7
    u = float(np.finfo(dtype).eps) / 2
    a = dtype(bound * np.sqrt(1 - 4 * (dim + 2) * u) / np.sqrt(dim))
    for _ in range(40):
        a = np.nextafter(a, dtype(0))
    answers = []
    for _ in range(80):
        X = np.full((1, dim), a, dtype=dtype)
        answer = certainly_within(X, bound)
        if answer:
            assert np.sqrt((X.astype(np.float64) ** 2).sum()) <= bound
        answers.append(answer)
        a = np.nextafter(a, dtype(np.inf))
    assert answers[0] and not answers[-1] and answers == sorted(answers, reverse=True)
