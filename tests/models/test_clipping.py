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
