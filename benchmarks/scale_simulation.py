"""Scale by simulation: what a step costs the scheduler, the client and the workers as
tasks per step and workers grow, and what that predicts for a 10¹⁰-row lake on 100 workers.

Measured here, in one run:

1. Per-core rates with one BLAS thread on a 65,536 × 64 float32 row group: Parquet decode
   (``read_row_group`` from a local file), the linear model's statistics for 1 clip norm (DP-SGD), a window
   of 5 (DP-AMBSSGD) and the moments XᵀX, Xᵀy (AdaSSP), and the coordinator's DP-SGD step at batch 4,096
   (kernel, noise draw, update) as ``run`` does it in streaming mode.
2. Step overhead on LocalClusters of 2, 8 and 16 single-threaded worker processes over a tiny lake of
   1,024 row groups of 50 rows × 8 features, stepping over 1 to 1,024 row groups (median of 5 per point).
   From them, seconds per step = a + b·(tasks − 1) + g·row groups / min(workers, cores): a the fixed
   round trip (client → scheduler → worker → client, merge), b each further task, g a row group's fixed
   cost on a worker (its slice read, the pieces' statistics, the result); ``fit_overheads`` says which
   points give which constant.

Then the extrapolation table for N = 10¹⁰ rows × 64 features on 100 single-core workers, with the
assumptions it prints. This machine has 2 cores: 16 worker processes share them, so b includes
contention, an upper bound for real, separate workers.

Run: ``python -m benchmarks.scale_simulation`` (part of ``make bench``; about 3 minutes).
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from benchmarks.common import markdown_table, median_time
from benchmarks.step_overhead import tiny_lake

BLOCK_ROWS, DIM = 65_536, 64
TINY_GROUPS, TINY_GROUP_ROWS = 1_024, 50
WORKERS, GROUPS_PER_STEP = (2, 8, 16), (1, 16, 128, 1_024)
CORES = os.cpu_count() or 2

# The extrapolated deployment.
LAKE_ROWS, CLUSTER_WORKERS, DPSGD_BATCH = 10**10, 100, 4_096
ROW_BYTES = 4 * DIM + 8  # float32 features and a float64 label, uncompressed (random data does not compress)
S3_BYTES_PER_SECOND = 100e6  # one single-threaded reader per worker from S3 in-region (assumption)
COORDINATOR_NIC_BYTES_PER_SECOND = 1.25e9  # 10 Gbit/s into the coordinator (assumption)


def per_core_rates() -> dict[str, float]:
    """Rows per second on one core for decode, the three kernels and the coordinator's DP-SGD step."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from threadpoolctl import threadpool_limits

    from dpstream.algorithms import DPSGD
    from dpstream.coordinator import InMemoryExecutor, run
    from dpstream.models import LinearRegressionModel, StatsRequest
    from dpstream.noise import NoiseKey
    from dpstream.pipelines import LakeSpec
    from dpstream.pipelines.lake.blocks import read_row_group

    rng = np.random.default_rng(0)
    X = rng.standard_normal((BLOCK_ROWS, DIM), dtype=np.float32)
    y = X.astype(np.float64) @ (np.linspace(-1, 1, DIM) / 8) + rng.standard_normal(BLOCK_ROWS)
    folder = tempfile.mkdtemp(prefix="scale-rates-")
    columns = tuple(f"x{j}" for j in range(DIM))
    pq.write_table(
        pa.table({**{name: X[:, j] for j, name in enumerate(columns)}, "y": y}),
        f"{folder}/block.parquet",
        use_dictionary=False,
    )
    spec = LakeSpec(folder, columns, "y")
    fs, _ = spec.filesystem()
    model, w = LinearRegressionModel(), rng.standard_normal(DIM) * 0.1
    requests = {
        "kernel, 1 clip norm": StatsRequest(w, clip_norms=[1.0]),
        "kernel, 5 clip norms": StatsRequest(w, clip_norms=2.0 ** np.arange(-2, 3)),
        "kernel, moments (AdaSSP)": StatsRequest(w, kind="moments", row_norm_bound=8.0, label_bound=4.0),
    }
    rates = {
        "decode": BLOCK_ROWS
        / median_time(lambda: read_row_group(fs, f"{folder}/block.parquet", spec, 0), repeats=5, warmup=True)
    }
    with threadpool_limits(limits=1, user_api="blas"):
        for label, request in requests.items():
            rates[label] = BLOCK_ROWS / median_time(
                lambda r=request: model.block_stats(X, y, r), repeats=5, warmup=True
            )
        rows = 16 * BLOCK_ROWS
        big_X, big_y = np.tile(X, (16, 1)), np.tile(y, 16)
        algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=DPSGD_BATCH)
        key = NoiseKey.generate()

        def streaming_steps():
            executor = InMemoryExecutor(model, [(big_X, big_y)])
            run(algorithm, executor, num_rows=rows, num_params=DIM, initial_params=np.zeros(DIM), key=key)

        rates["coordinator, DP-SGD step"] = rows / median_time(streaming_steps, repeats=3, warmup=True)
    return rates


def step_overheads() -> list[tuple[int, int, int, float]]:
    """(workers, row groups per step, tasks, median seconds) on LocalClusters over the tiny lake."""
    from dpstream.algorithms import StepSpan
    from dpstream.models import LinearRegressionModel, StatsRequest
    from dpstream.pipelines import DaskExecutor, connect

    manifest = tiny_lake(TINY_GROUPS * TINY_GROUP_ROWS, TINY_GROUP_ROWS)
    request = StatsRequest(params=np.zeros(8))
    points = []
    for workers in WORKERS:
        client = connect(n_workers=workers, memory_limit="512MiB")
        try:
            # Tasks only, as this cost model has always counted them: a step served by the workers'
            # step servers costs less (benchmarks.step_timeline), so the extrapolation stays conservative.
            executor = DaskExecutor(client, manifest, LinearRegressionModel(), prefetch=False, servers=False)
            for groups in GROUPS_PER_STEP:
                span = StepSpan(0, (0, groups * TINY_GROUP_ROWS))
                seconds = median_time(
                    lambda span=span: executor.compute(span, request), repeats=5, warmup=True
                )
                points.append((workers, groups, min(workers, groups), seconds))
        finally:
            client.close()
    return points


def fit_overheads(points) -> tuple[float, float, float]:
    """(a, b, g) of seconds per step = a + b·(tasks − 1) + g·groups / min(workers, cores), each from the points
    that isolate it: a from the one-group steps (one task), b from the 16-group steps (the slope in tasks,
    where each task's own work is small), g from the 2-worker steps (no more workers than cores here;
    more processes than cores measure contention, not the cluster)."""
    a = float(np.median([seconds for _, groups, _, seconds in points if groups == 1]))
    few = [(tasks, seconds) for _, groups, tasks, seconds in points if groups == 16]
    b = max(0.0, float(np.polyfit([t - 1 for t, _ in few], [s for _, s in few], 1)[0]))
    pairs = [(groups, seconds) for workers, groups, _, seconds in points if workers == min(WORKERS)]
    g = max(0.0, float(np.polyfit([r for r, _ in pairs], [s for _, s in pairs], 1)[0])) * min(
        min(WORKERS), CORES
    )
    return a, b, g


def extrapolate(rates: dict[str, float], a: float, b: float, g: float) -> list[list[str]]:
    """Rows of the 10¹⁰-row table: algorithm, steps, seconds and the bounding resource."""
    from dpstream.algorithms import DPAMBSSGD

    per_row_s3 = ROW_BYTES / S3_BYTES_PER_SECOND
    per_row_decode = 1.0 / rates["decode"]
    table = []

    def scatter(label: str, steps: int, kernel: str) -> None:
        rows_per_worker = LAKE_ROWS / steps / CLUSTER_WORKERS
        groups = LAKE_ROWS / steps / BLOCK_ROWS
        parts = {
            "S3": rows_per_worker * per_row_s3,
            "decode": rows_per_worker * per_row_decode,
            "kernel": rows_per_worker / rates[kernel],
            "scheduler": a + b * (min(CLUSTER_WORKERS, math.ceil(groups)) - 1) + g * groups / CLUSTER_WORKERS,
        }
        total = steps * sum(parts.values())
        table.append([label, f"{steps:,}", "scatter", _duration(total), _bound(parts)])

    steps = DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm").plan(LAKE_ROWS, DIM).num_steps
    scatter("DP-AMBSSGD (window of 5)", steps, "kernel, 5 clip norms")
    scatter("AdaSSP", 1, "kernel, moments (AdaSSP)")
    dpsgd_steps = LAKE_ROWS // DPSGD_BATCH

    def dpsgd(mode: str, seconds: float, bound: str) -> None:
        table.append([f"DP-SGD batch {DPSGD_BATCH:,}", f"{dpsgd_steps:,}", mode, _duration(seconds), bound])

    # Scatter at batch 4,096: one worker holds a step's rows; the other 99 wait (no read-ahead).
    per_step = DPSGD_BATCH * (per_row_s3 + per_row_decode + 1 / rates["kernel, 1 clip norm"]) + a + g
    dpsgd("scatter", dpsgd_steps * per_step, "one worker per step: S3 + decode serial")
    parallel_reads = LAKE_ROWS * (per_row_s3 + per_row_decode) / CLUSTER_WORKERS
    funnel = {
        "coordinator NIC": LAKE_ROWS * ROW_BYTES / COORDINATOR_NIC_BYTES_PER_SECOND,
        "coordinator CPU": LAKE_ROWS / rates["coordinator, DP-SGD step"],
        "workers' S3 + decode": parallel_reads,
    }
    dpsgd("streaming (funnel)", max(funnel.values()), _bound(funnel))
    # The alternative to funnelling every block to the coordinator: the parameters travel to the worker
    # holding the next block, which runs that block's 16 steps; reads run ahead on every worker. Serial
    # work: the steps themselves.
    hops = LAKE_ROWS / BLOCK_ROWS
    resident = {
        "steps on one worker at a time": LAKE_ROWS / rates["coordinator, DP-SGD step"] + hops * a,
        "workers' S3 + decode": parallel_reads,
    }
    dpsgd("worker-resident steps (not built)", max(resident.values()), _bound(resident))
    return table


def _bound(parts: dict[str, float]) -> str:
    total = sum(parts.values())
    name, largest = max(parts.items(), key=lambda item: item[1])
    return f"{name} ({largest / total:.0%})"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.1f} min"


def main() -> None:
    rates = per_core_rates()
    print("Per-core rates (one BLAS thread, 65,536 × 64 float32):\n")
    print(markdown_table(["operation", "rows/s"], [[name, f"{rate:,.0f}"] for name, rate in rates.items()]))
    points = step_overheads()
    print(
        f"\nStep cost over a tiny lake ({TINY_GROUPS:,} row groups of {TINY_GROUP_ROWS} rows), medians of 5:\n"
    )
    print(
        markdown_table(
            ["workers", "row groups per step", "tasks", "seconds per step"],
            [[str(w), f"{r:,}", str(t), f"{s:.4f}"] for w, r, t, s in points],
        )
    )
    a, b, g = fit_overheads(points)
    print(
        f"\nFit: a = {a * 1e3:.2f} ms per step, b = {b * 1e3:.2f} ms per further task, g = {g * 1e3:.2f} ms per row group"
    )
    print(
        f"\nExtrapolation: {LAKE_ROWS:.0e} rows × {DIM} features ({LAKE_ROWS * ROW_BYTES / 1e12:.2f} TB uncompressed) on "
        f"{CLUSTER_WORKERS} single-core workers; S3 {S3_BYTES_PER_SECOND / 1e6:.0f} MB/s per worker, coordinator NIC "
        f"{COORDINATOR_NIC_BYTES_PER_SECOND * 8 / 1e9:.0f} Gbit/s, row groups of {BLOCK_ROWS:,} rows, no read-ahead "
        "in scatter mode beyond two blocks per worker (a task reads, decodes and computes in turn):\n"
    )
    print(
        markdown_table(
            ["algorithm", "steps", "mode", "time", "bounding resource (share)"], extrapolate(rates, a, b, g)
        )
    )


if __name__ == "__main__":
    main()
