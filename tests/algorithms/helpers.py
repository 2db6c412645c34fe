"""Synthetic data and a one-call trainer shared by the algorithm tests."""

import numpy as np

from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey


def gaussian_regression(rows, dim, sigma, seed=0):
    rng = np.random.default_rng(seed)
    w_star = rng.standard_normal(dim)
    w_star /= np.linalg.norm(w_star)
    X = rng.standard_normal((rows, dim))
    return X, X @ w_star + sigma * rng.standard_normal(rows), w_star


def fixed_key(byte=7):
    return NoiseKey.from_secret(bytes([byte]) * 32)


def train(algorithm, X, y, key=None, model=None, blocks=None, on_step=None):
    model = model or LinearRegressionModel()
    return run(
        algorithm,
        InMemoryExecutor(model, blocks if blocks is not None else [(X, y)]),
        num_rows=X.shape[0],
        num_params=X.shape[1],
        initial_params=model.init_params(X.shape[1]),
        key=key or fixed_key(),
        on_step=on_step,
    )


def excess_risk(params, w_star):
    """Excess squared-loss risk for x ~ N(0, I): ‖w − w*‖²/2."""
    return 0.5 * float(np.sum((params - w_star) ** 2))
