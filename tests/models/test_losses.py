"""A GLM loss is one module plus one registry entry: a toy Poisson regression loss registered here runs
through the CPU kernels (both layouts, several clip norms, SRGD's differences) against a float64 NumPy
statement of the clipped statistics, trains end to end with DP-SGD through the coordinator, and builds
the GPU kernel's source (run on a GPU where there is one), without touching the kernels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from dpstream.algorithms import DPSGD
from dpstream.backend import gpu_status
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import GLM, StatsRequest
from dpstream.models.glm_cpu import CHUNK_ROWS, block_statistics
from dpstream.models.glm_cuda_source import kernel_source
from dpstream.models.losses.base import LossDeclaration, declared_loss, loss_names, register, unregister
from dpstream.noise import NoiseKey

KEY = NoiseKey.from_secret(b"p" * 32)


def poisson_derivative_and_loss(margin: float, label: float) -> tuple[float, float]:
    """Poisson regression with the log link: φ(m, y) = e^m − y·m (the negative log-likelihood less
    log y!), φ'(m, y) = e^m − y."""
    rate = math.exp(margin)
    return rate - label, rate - label * margin


POISSON = LossDeclaration(
    name="poisson",
    derivative_and_loss=poisson_derivative_and_loss,
    cuda="""
  const double rate = exp(margin);
  *loss = rate - label * margin;
  return rate - label;""",
)


@dataclass(frozen=True)
class PoissonRegressionModel(GLM):
    """The toy GLM: the NumPy statement of the same loss, for the paths that do not run the kernels."""

    name: ClassVar[str] = "poisson"
    loss_kind: ClassVar[str | None] = "poisson"

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.exp(margins) - y * margins

    def derivative(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.exp(margins) - y


@pytest.fixture()
def poisson():
    register(POISSON)
    try:
        yield POISSON.name
    finally:
        unregister(POISSON.name)


def reference(X, y, params, clip_norms, previous=None, weight=1.0, previous_weight=0.0):
    """(clipped sums, loss sum, clipped rows) of the Poisson loss in float64 NumPy."""
    X = X.astype(np.float64)
    model = PoissonRegressionModel()
    margins = X @ params
    scalars = model.derivative(margins, y)
    if previous is not None:
        previous_scalars = model.derivative(X @ previous, y)
        scalars = weight * (scalars - previous_scalars) + (weight - previous_weight) * previous_scalars
    norms = np.abs(scalars) * np.linalg.norm(X, axis=1)
    factors = np.minimum(1.0, np.asarray(clip_norms)[None, :] / norms[:, None])
    sums = (X.T @ (scalars[:, None] * factors)).T
    return sums, model.loss(margins, y).sum(), (factors < 1.0).sum(axis=0)


def poisson_data(rows, dim, order="C", dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    X = np.asarray(rng.uniform(-1, 1, (rows, dim)).astype(dtype), order=order)
    X[:, -1] = 1.0  # the intercept column
    truth = np.linspace(-0.6, 0.6, dim)
    y = rng.poisson(np.exp(X.astype(np.float64) @ truth)).astype(np.float64)
    return X, y, truth


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("srgd", [False, True])
def test_a_registered_loss_runs_through_the_cpu_kernels(poisson, order, srgd):
    assert poisson in loss_names()
    X, y, truth = poisson_data(2 * CHUNK_ROWS + 57, 9, order)
    params = truth + 0.3
    clip_norms = np.array([0.05, 0.5, 2.0, np.inf])
    extra = dict(previous=truth - 0.2, weight=3.0, previous_weight=2.0) if srgd else {}
    sums, loss_sum, clipped, values = block_statistics(X, y, params, clip_norms, poisson, **extra)
    expected, expected_loss, expected_clipped = reference(X, y, params, clip_norms, **extra)
    assert values is None
    np.testing.assert_allclose(sums, expected, atol=2e-5 * np.abs(expected).max())
    assert loss_sum == pytest.approx(expected_loss, rel=1e-5)
    np.testing.assert_array_equal(clipped, expected_clipped)
    assert clipped[0] > 0 and clipped[-1] == 0
    # The model reaches the same kernel through its loss_kind.
    stats = PoissonRegressionModel().block_stats(X, y, StatsRequest(params, clip_norms=clip_norms))
    np.testing.assert_allclose(stats.clipped_sums, block_statistics(X, y, params, clip_norms, poisson)[0])


def test_a_registered_loss_trains_end_to_end(poisson):
    """DP-SGD at ε = 50 on Poisson counts: the fit approaches the true log-rates."""
    X, y, truth = poisson_data(40_000, 4, dtype=np.float64, seed=1)
    algorithm = DPSGD(50.0, 1e-6, clip_norm=20.0, learning_rate=0.3, batch_size=1_000, averaging="tail")
    result = run(
        algorithm,
        InMemoryExecutor(PoissonRegressionModel(), [(X, y)]),
        num_rows=X.shape[0],
        num_params=X.shape[1],
        initial_params=np.zeros(X.shape[1]),
        key=KEY,
    )
    np.testing.assert_allclose(result.params, truth, atol=0.05)  # measured 0.009
    assert result.training_loss[-1] < result.training_loss[0]


def test_a_registered_loss_builds_the_gpu_kernel_source(poisson):
    source = kernel_source(declared_loss(poisson), warps=4, rows_per_warp=512)
    assert POISSON.cuda in source and "double loss_label(double label) { return label; }" in source
    assert "loss_kind" not in source  # the kernel branches on no loss


def test_a_withdrawn_loss_is_refused():
    X, y, truth = poisson_data(10, 3)
    register(POISSON)
    unregister(POISSON.name)
    with pytest.raises(ValueError, match=r"loss must be one of .*'squared'.*got 'poisson'"):
        block_statistics(X, y, truth, np.array([1.0]), POISSON.name)


USABLE, REASON = gpu_status()


@pytest.mark.gpu
@pytest.mark.skipif(not USABLE, reason=f"needs a GPU with CuPy: {REASON}")
def test_a_registered_loss_runs_through_the_gpu_kernel(poisson):
    X, y, truth = poisson_data(100_000, 16)
    request = StatsRequest(params=truth + 0.3, clip_norms=np.array([0.05, 0.5, np.inf]))
    cpu = PoissonRegressionModel().block_stats(X, y, request)
    gpu = PoissonRegressionModel(backend="cupy").block_stats(X, y, request)
    np.testing.assert_allclose(gpu.clipped_sums, cpu.clipped_sums, atol=2e-5 * np.abs(cpu.clipped_sums).max())
    assert gpu.loss_sum == pytest.approx(cpu.loss_sum, rel=1e-5)
    assert np.abs(gpu.clipped_rows - cpu.clipped_rows).max() <= 3  # rows at a clip boundary may flip
