"""Backends: the GPU code path, run here with NumPy as its array module, equals the CPU kernels; label
mapping; backend selection. The same path with CuPy runs in tests/gpu when a GPU is present."""

import numpy as np
import pytest

from dpstream.backend import gpu_status, resolve_backend, to_device
from dpstream.models import BatchStats, LinearRegressionModel, LogisticRegressionModel, StatsRequest


@pytest.mark.parametrize("model", [LinearRegressionModel(), LogisticRegressionModel()], ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_path_equals_the_cpu_kernel(model, dtype):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10_000, 8)).astype(dtype)
    y = (
        rng.standard_normal(10_000)
        if model.name == "linear"
        else np.where(rng.random(10_000) > 0.5, 1.0, 0.0)
    )
    w = rng.standard_normal(8)
    requests = [
        ("gradient", StatsRequest(params=w, clip_norms=np.array([0.5, 2.0, np.inf]))),
        (
            "gradient",
            StatsRequest(
                params=w, clip_norms=np.array([1.0]), previous_params=0.9 * w, weight=0.3, previous_weight=0.2
            ),
        ),
        ("stat", StatsRequest(params=w, thresholds=np.array([0.1, 1.0, 10.0]), statistic="gradient_norm")),
    ]
    tolerance = 1e-6 if dtype == np.float32 else 1e-12  # float32 products, chunked differently
    for role, request in requests:
        cpu = model.block_stats(X, y, request, role)
        device = BatchStats.zeros(len(request.clip_norms), 8, None if role == "gradient" else 3)
        model._accumulate_on_device(X, y, request, role, device, np, chunk_rows=3000)
        np.testing.assert_allclose(
            device.clipped_sums,
            cpu.clipped_sums,
            rtol=tolerance,
            atol=tolerance * np.abs(cpu.clipped_sums).max(),
        )
        assert device.loss_sum == pytest.approx(cpu.loss_sum, rel=1e-6 if dtype == np.float32 else 1e-9)
        if role == "stat":
            np.testing.assert_array_equal(device.histogram, cpu.histogram)
        else:
            np.testing.assert_array_equal(device.clipped_rows, cpu.clipped_rows)


def test_classification_labels_zero_one_mean_minus_one_plus_one():
    rng = np.random.default_rng(1)
    X, w = rng.standard_normal((500, 4)), rng.standard_normal(4)
    zero_one = np.where(rng.random(500) > 0.5, 1.0, 0.0)
    request = StatsRequest(params=w)
    model = LogisticRegressionModel()
    np.testing.assert_array_equal(
        model.block_stats(X, zero_one, request).clipped_sums,
        model.block_stats(X, 2 * zero_one - 1, request).clipped_sums,
    )


def test_backend_selection():
    assert resolve_backend("numpy") == "numpy"
    assert resolve_backend("auto") == ("cupy" if gpu_status()[0] else "numpy")
    with pytest.raises(ValueError, match="backend must be one of 'numpy', 'cupy', 'auto'"):
        LinearRegressionModel(backend="gpu")
    block = np.ones((3, 2))
    assert to_device(block, np) is block  # NumPy: no copy
