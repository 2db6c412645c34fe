"""CuPy backend on a real GPU: the same statistics as NumPy within float rounding, blocks copied once,
estimators and a Dask GPU worker (one worker per GPU). Skipped, with the reason, without a GPU."""

import gc
import os

import numpy as np
import pytest

from dpstream.backend import _DEVICE_COPIES, gpu_status, to_device
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import KANModel, LinearRegressionModel, LogisticRegressionModel, StatsRequest
from dpstream.noise import NoiseKey

USABLE, REASON = gpu_status()
if (
    not USABLE and os.environ.get("DPSTREAM_REQUIRE_GPU") == "1"
):  # `make bench-gpu`: a skip there is a failure
    raise RuntimeError(f"DPSTREAM_REQUIRE_GPU=1 but the GPU is not usable: {REASON}")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not USABLE, reason=f"needs a GPU with CuPy: {REASON}")]
KEY = NoiseKey.from_secret(b"g" * 32)


@pytest.mark.parametrize(
    "model_class", [LinearRegressionModel, LogisticRegressionModel], ids=lambda c: c.name
)
def test_glm_statistics_match_numpy(model_class):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200_000, 64)).astype(np.float32)
    y = (
        rng.standard_normal(200_000)
        if model_class is LinearRegressionModel
        else np.where(rng.random(200_000) > 0.5, 1.0, -1.0)
    )
    request = StatsRequest(params=rng.standard_normal(64), clip_norms=np.array([0.5, 4.0, np.inf]))
    cpu = model_class().block_stats(X, y, request)
    gpu = model_class(backend="cupy").block_stats(X, y, request)
    scale = np.abs(cpu.clipped_sums).max()
    np.testing.assert_allclose(
        gpu.clipped_sums, cpu.clipped_sums, atol=1e-5 * scale
    )  # float32 products, float64 sums
    assert isinstance(gpu.clipped_sums, np.ndarray) and gpu.clipped_sums.dtype == np.float64
    assert gpu.loss_sum == pytest.approx(cpu.loss_sum, rel=1e-6)
    assert np.abs(gpu.clipped_rows - cpu.clipped_rows).max() <= 2  # rows at the clip boundary may flip


FUSED_CASES = [  # (features, clip norms, dtype, column-major, fused): the kernel's shapes and one it does not cover
    (64, 31, np.float32, False, True),
    (32, 8, np.float64, False, True),
    (8, 1, np.float32, True, True),
    (200, 3, np.float32, False, True),
    (256, 1, np.float64, True, True),
    (300, 2, np.float32, False, False),
    (64, 31, np.float64, False, False),
]


@pytest.mark.parametrize(
    "features, norms, dtype, fortran, fused", FUSED_CASES, ids=lambda v: getattr(v, "__name__", str(v))
)
@pytest.mark.parametrize(
    "model_class", [LinearRegressionModel, LogisticRegressionModel], ids=lambda c: c.name
)
def test_fused_glm_kernel_matches_numpy_for_every_shape_and_request(
    model_class, features, norms, dtype, fortran, fused
):
    from dpstream.models import glm_cuda

    rng = np.random.default_rng(features + norms)
    rows = 70_001  # not a multiple of any tile: the ragged last thread block
    X = rng.standard_normal((rows, features)).astype(dtype)
    X = np.asfortranarray(X) if fortran else X
    y = (
        rng.standard_normal(rows)
        if model_class is LinearRegressionModel
        else (rng.random(rows) > 0.5).astype(float)
    )
    assert glm_cuda.supports(features, norms, X.dtype) == fused
    clip_norms = np.geomspace(0.05, 50.0, norms) * np.sqrt(features)
    params, previous = rng.standard_normal(features) * 0.1, rng.standard_normal(features) * 0.1
    requests = [
        StatsRequest(params=params, clip_norms=clip_norms),
        StatsRequest(params=params, clip_norms=clip_norms, weight=0.3),
        StatsRequest(
            params=params, clip_norms=clip_norms, previous_params=previous, weight=0.5, previous_weight=0.4
        ),
    ]
    for request in requests:
        cpu = model_class().block_stats(X, y, request)
        gpu = model_class(backend="cupy").block_stats(X, y, request)
        scale = np.abs(cpu.clipped_sums).max()
        np.testing.assert_allclose(
            gpu.clipped_sums, cpu.clipped_sums, atol=2e-5 * scale if dtype == np.float32 else 1e-10 * scale
        )
        assert gpu.loss_sum == pytest.approx(cpu.loss_sum, rel=1e-5 if dtype == np.float32 else 1e-10)
        assert np.abs(gpu.clipped_rows - cpu.clipped_rows).max() <= 3
        again = model_class(backend="cupy").block_stats(X, y, request)
        np.testing.assert_array_equal(
            again.clipped_sums, gpu.clipped_sums
        )  # a retried step releases the same bits
    thresholds = np.geomspace(0.01, 10.0, 20)
    for statistic in ("residual", "gradient_norm"):
        request = StatsRequest(
            params=params, clip_norms=clip_norms, thresholds=thresholds, statistic=statistic
        )
        cpu, gpu = (
            model_class().block_stats(X, y, request, "stat"),
            model_class(backend="cupy").block_stats(X, y, request, "stat"),
        )
        assert np.abs(gpu.histogram - cpu.histogram).max() <= 3  # rows at a threshold may flip in float32


def test_fused_glm_kernel_clips_every_row_into_the_ball():
    """n copies of one row with a tiny clip norm: the clipped sum is exactly n·C along the gradient."""
    features, rows, clip_norm = 40, 100_003, 1e-3
    x = np.linspace(-1.0, 2.0, features)
    X, y = np.tile(x, (rows, 1)), np.full(rows, 50.0)
    request = StatsRequest(params=np.zeros(features), clip_norms=np.array([clip_norm, np.inf]))
    gpu = LinearRegressionModel(backend="cupy").block_stats(X, y, request)
    direction = -x / np.linalg.norm(x)  # φ' = m − y = −50 < 0
    np.testing.assert_allclose(gpu.clipped_sums[0], rows * clip_norm * direction, rtol=1e-9)
    np.testing.assert_allclose(gpu.clipped_sums[1], rows * -50.0 * x, rtol=1e-9)  # C = inf: no clipping
    assert list(gpu.clipped_rows) == [rows, 0]


def test_kan_statistics_match_numpy():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (20_000, 16)).astype(np.float32)
    y = np.where(rng.random(20_000) > 0.5, 1.0, -1.0)
    cpu_model = KANModel(num_hidden=256, grid_size=5)
    gpu_model = KANModel(num_hidden=256, grid_size=5, backend="cupy")
    request = StatsRequest(params=cpu_model.init_params(16), clip_norms=np.array([0.3, np.inf]))
    cpu, gpu = cpu_model.block_stats(X, y, request), gpu_model.block_stats(X, y, request)
    np.testing.assert_allclose(
        gpu.clipped_sums, cpu.clipped_sums, rtol=1e-9, atol=1e-12 * np.abs(cpu.clipped_sums).max()
    )
    np.testing.assert_allclose(
        gpu_model.predict_margin(X, request.params),
        cpu_model.predict_margin(X, request.params),
        rtol=1e-10,
        atol=1e-12,
    )


def test_a_block_is_copied_to_the_gpu_once():
    block = np.ones((1000, 8), dtype=np.float32)
    import cupy

    first = to_device(block, cupy)
    assert to_device(block, cupy) is first and id(block) in _DEVICE_COPIES
    key = id(block)
    del block, first
    gc.collect()
    assert key not in _DEVICE_COPIES  # freed with its host block


def test_estimator_and_dask_gpu_worker_match_the_cpu_fit(tmp_path):
    from distributed import Client, LocalCluster

    from dpstream.algorithms import DPSGD
    from dpstream.estimators import DPKANClassifier
    from dpstream.noise import make_noise_process
    from dpstream.pipelines import DaskExecutor, lake_blocks, shuffle_once
    from tests.pipelines.conftest import DIM, feature_spec, local_put, write_lake

    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (20_000, 4))
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    cpu = DPKANClassifier(num_hidden=32, noise_key=KEY).fit(X, y)
    gpu = DPKANClassifier(num_hidden=32, noise_key=KEY, backend="cupy").fit(X, y)
    np.testing.assert_allclose(
        gpu.weights_, cpu.weights_, rtol=1e-7, atol=1e-9
    )  # same noise, statistics to rounding

    write_lake(local_put, str(tmp_path / "raw"))
    manifest = shuffle_once(
        feature_spec(str(tmp_path / "raw")), str(tmp_path / "shuffled"), rows_per_file=5000
    )
    algorithm = DPSGD(
        1.0,
        1e-6,
        clip_norm=1.0,
        learning_rate=1.0,
        batch_size=1000,
        noise=make_noise_process("lambda", correlation=0.5),
    )
    model = KANModel(num_hidden=16, feature_low=-4.0, feature_high=4.0)
    dim = model.num_params(DIM)
    reference = run(
        algorithm,
        InMemoryExecutor(model, lake_blocks(manifest)),
        num_rows=manifest.num_rows,
        num_params=dim,
        initial_params=model.init_params(DIM),
        key=KEY,
    ).params
    import cupy

    # One worker per GPU, one thread each (dask-cuda's LocalCUDACluster does the same across several GPUs).
    with (
        LocalCluster(
            n_workers=cupy.cuda.runtime.getDeviceCount(),
            threads_per_worker=1,
            dashboard_address=None,
            resources={"GPU": 1},
        ) as cluster,
        Client(cluster) as client,
    ):
        gpu_model = KANModel(num_hidden=16, feature_low=-4.0, feature_high=4.0, backend="cupy")
        on_gpu = run(
            algorithm,
            DaskExecutor(client, manifest, gpu_model),
            num_rows=manifest.num_rows,
            num_params=dim,
            initial_params=gpu_model.init_params(DIM),
            key=KEY,
        ).params
    np.testing.assert_allclose(on_gpu, reference, rtol=1e-7, atol=1e-9)
