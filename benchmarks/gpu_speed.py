"""GPU benchmarks (CuPy backend), in one run on one machine, as ratios to references measured in the same run:

* GLM statistics (d = 64; 1 and 31 clip norms; float32 blocks resident on the device) in rows/s against
  the same kernel with NumPy on one core and on all of the machine's cores (one process per core, BLAS
  pinned to one thread, as Dask workers run it), against cuBLAS ``X.T @ (X @ w)`` on the same device
  block, and as a fraction of the device's peak memory bandwidth (bytes of X read per second / peak);
* KAN statistics at 1,048,576 parameters (d = 64, G = 5, m = 2,048) against NumPy on all cores;
* a data-plane run: ``train_on_lake`` (scatter-gather) on a one-worker LocalCluster with the CuPy model
  against the NumPy model on the same lake, with the parameter difference.

Writes a markdown report to stdout (and to ``$BENCH_GPU_OUT`` when set). Run: ``make bench-gpu``.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import tempfile
import time

import numpy as np

DIM = 64
GLM_BLOCKS = (65_536, 1_048_576, 4_194_304)
KAN_DIM, KAN_HIDDEN, KAN_GRID, KAN_ROWS = 64, 2048, 5, 8192


def _median(function, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _cpu_worker(args: tuple[str, int, int, int]) -> float:
    """One process of the all-cores reference: rows/s of the NumPy kernel on its own block (BLAS 1 thread)."""
    kind, rows, clip_norms, repeats = args
    from dpstream.models import KANModel, LinearRegressionModel, StatsRequest

    rng = np.random.default_rng(os.getpid())
    if kind == "kan":
        model = KANModel(num_hidden=KAN_HIDDEN, grid_size=KAN_GRID, input_map="cube")
        X = rng.uniform(-1, 1, (rows, KAN_DIM)).astype(np.float32)
        y = np.where(rng.random(rows) > 0.5, 1.0, -1.0)
        request = StatsRequest(params=model.init_params(KAN_DIM), clip_norms=np.ones(clip_norms))
    else:
        model = LinearRegressionModel()
        X = rng.standard_normal((rows, DIM)).astype(np.float32)
        y = rng.standard_normal(rows)
        request = StatsRequest(
            params=rng.standard_normal(DIM) * 0.1, clip_norms=np.geomspace(0.01, 100, clip_norms)
        )
    model.block_stats(X, y, request)  # warm-up
    return rows / _median(lambda: model.block_stats(X, y, request), repeats)


def cpu_rows_per_second(kind: str, rows: int, clip_norms: int, processes: int, repeats: int = 3) -> float:
    """Aggregate rows/s of ``processes`` concurrent single-thread processes (spawned: no CUDA state shared)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        return float(sum(pool.map(_cpu_worker, [(kind, rows, clip_norms, repeats)] * processes)))


def device_report() -> tuple[str, float]:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    # Peak DRAM bandwidth = 2 (double data rate) × memory clock × bus width in bytes.
    peak = 2.0 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8
    return name, peak


def glm_table(cores: int, peak: float) -> list[str]:
    import cupy

    from dpstream.backend import to_device
    from dpstream.models import LinearRegressionModel, StatsRequest

    lines = [
        "| rows per block | clip norms | GPU rows/s | GPU GB/s of X | fraction of peak bandwidth | cuBLAS X.T@(X@w) rows/s "
        "| GPU / cuBLAS | NumPy 1 core rows/s | NumPy all cores rows/s | GPU / all cores |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rng = np.random.default_rng(0)
    cpu_single = {c: _cpu_worker(("glm", 1_048_576, c, 3)) for c in (1, 31)}
    cpu_all = {c: cpu_rows_per_second("glm", 1_048_576, c, cores) for c in (1, 31)}
    gpu_model = LinearRegressionModel(backend="cupy")
    for rows in GLM_BLOCKS:
        X = rng.standard_normal((rows, DIM)).astype(np.float32)
        y = rng.standard_normal(rows)
        X_device = to_device(X, cupy)
        w = cupy.asarray(rng.standard_normal(DIM).astype(np.float32) * 0.1)

        def cublas(X_device=X_device, w=w):
            X_device.T @ (X_device @ w)
            cupy.cuda.Device().synchronize()

        cublas()
        reference = rows / _median(cublas, 10)
        for clip_norms in (1, 31):
            request = StatsRequest(
                params=rng.standard_normal(DIM) * 0.1, clip_norms=np.geomspace(0.01, 100, clip_norms)
            )
            gpu_model.block_stats(X, y, request)  # copies the block once, compiles kernels
            seconds = _median(lambda: gpu_model.block_stats(X, y, request), 10)
            rate = rows / seconds
            bandwidth = rate * DIM * 4
            lines.append(
                f"| {rows:,} | {clip_norms} | {rate:,.0f} | {bandwidth / 1e9:,.1f} | {bandwidth / peak:.3f} | "
                f"{reference:,.0f} | {rate / reference:.2f} | {cpu_single[clip_norms]:,.0f} | {cpu_all[clip_norms]:,.0f} | "
                f"{rate / cpu_all[clip_norms]:.1f} |"
            )
        del X_device
    return lines


def kan_table(cores: int) -> list[str]:
    from dpstream.models import KANModel, StatsRequest

    rng = np.random.default_rng(1)
    model = KANModel(num_hidden=KAN_HIDDEN, grid_size=KAN_GRID, input_map="cube", backend="cupy")
    lines = [
        "| rows per block | parameters | GPU rows/s | NumPy 1 core rows/s | NumPy all cores rows/s | GPU / all cores |",
        "|---|---|---|---|---|---|",
    ]
    single = _cpu_worker(("kan", KAN_ROWS, 1, 3))
    everything = cpu_rows_per_second("kan", KAN_ROWS, 1, cores)
    for rows in (KAN_ROWS, 65_536):
        X = rng.uniform(-1, 1, (rows, KAN_DIM)).astype(np.float32)
        y = np.where(rng.random(rows) > 0.5, 1.0, -1.0)
        request = StatsRequest(params=model.init_params(KAN_DIM), clip_norms=np.array([1.0]))
        model.block_stats(X, y, request)
        rate = rows / _median(lambda: model.block_stats(X, y, request), 5)
        lines.append(
            f"| {rows:,} | {model.num_params(KAN_DIM):,} | {rate:,.0f} | {single:,.0f} | {everything:,.0f} "
            f"| {rate / everything:.1f} |"
        )
    return lines


def pipeline_table() -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from distributed import Client, LocalCluster

    from dpstream.algorithms import DPSGD
    from dpstream.models import LinearRegressionModel
    from dpstream.noise import NoiseKey
    from dpstream.pipelines import LakeSpec, plan_on_lake, shuffle_once, train_on_lake

    folder = tempfile.mkdtemp(prefix="gpu-lake-")
    rng = np.random.default_rng(2)
    files, rows = 8, 250_000
    os.makedirs(f"{folder}/raw")
    for i in range(files):
        X = rng.standard_normal((rows, DIM)).astype(np.float32)
        y = X @ np.linspace(-1, 1, DIM).astype(np.float32) + rng.standard_normal(rows).astype(np.float32)
        table = pa.table({**{f"x{j}": X[:, j] for j in range(DIM)}, "y": y})
        pq.write_table(table, f"{folder}/raw/part-{i}.parquet")
    spec = LakeSpec(f"{folder}/raw", tuple(f"x{j}" for j in range(DIM)), "y")
    manifest = shuffle_once(spec, f"{folder}/shuffled", rows_per_file=250_000)
    key = NoiseKey.from_secret(b"b" * 32)
    algorithm = DPSGD(1.0, 1e-6, clip_norm=4.0, learning_rate=0.5, batch_size=131_072)
    lines = [
        "| worker backend | rows | steps | seconds | rows/s | max |Δparams| vs NumPy |",
        "|---|---|---|---|---|---|",
    ]
    results = {}
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="32GiB"
        ) as cluster,
        Client(cluster) as client,
    ):
        for backend in (
            "numpy",
            "cupy",
            "cupy",
        ):  # the second CuPy run: blocks already decoded and on the device
            start = time.perf_counter()
            result, _ = train_on_lake(
                manifest,
                plan_on_lake(manifest, algorithm, LinearRegressionModel(backend=backend)),
                client,
                key,
                mode="scatter",
            )
            seconds = time.perf_counter() - start
            results.setdefault(backend, result.params)
            difference = float(np.abs(result.params - results["numpy"]).max())
            lines.append(
                f"| {backend} | {manifest.num_rows:,} | {result.report.steps} | {seconds:.2f} | "
                f"{manifest.num_rows / seconds:,.0f} | {difference:.2e} |"
            )
    return lines


def main() -> None:
    import cupy

    cores = os.cpu_count() or 1
    name, peak = device_report()
    report = [
        f"GPU benchmark on {name} (peak memory bandwidth {peak / 1e12:.2f} TB/s), {cores} CPU cores, "
        f"{platform.processor() or platform.machine()}, CuPy {cupy.__version__}, NumPy {np.__version__}",
        "",
        "### GLM statistics (linear model, d = 64, float32)",
        *glm_table(cores, peak),
        "",
        f"### KAN statistics ({KAN_HIDDEN * KAN_DIM * (KAN_GRID + 3):,} parameters)",
        *kan_table(cores),
        "",
        "### Data plane: train_on_lake (scatter-gather) with one Dask worker",
        *pipeline_table(),
    ]
    text = "\n".join(report)
    print(text, flush=True)
    if os.environ.get("BENCH_GPU_OUT"):
        with open(os.environ["BENCH_GPU_OUT"], "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
