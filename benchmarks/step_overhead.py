"""Per-step cost of the scatter executor as a step spans more row groups.

A lake of 100,000 rows × 8 features shuffled into 1,000 row groups of 100 rows; a 2-worker
LocalCluster. For a step over 10, 100 and 1,000 row groups it times (median of 5) the executor's
``compute`` (one task per worker per step, ``pieces_stats``) against the same step submitted the way
the executor did before (one task per row-group slice, ``slice_stats``), same pinning, same merge. The
work per row group is tiny, so the difference is the scheduler's and the client's cost per task.

Run: ``python -m benchmarks.step_overhead`` (part of ``make bench``; about a minute).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import median_time

ROWS, FEATURES, GROUP_ROWS = 100_000, 8, 100


def per_slice_step(executor, span, request):
    """The step as the executor ran it before: one task per row-group slice, merged in piece order."""
    from dpstream.models import BatchStats
    from dpstream.pipelines.execution.worker_stats import slice_stats

    pieces = executor._slices(*span.gradient_rows, "gradient")
    futures = [
        executor.client.submit(
            slice_stats,
            *executor.blocks[i][1:3],
            executor.spec,
            lo,
            hi,
            executor.model,
            request,
            role,
            workers=[executor.workers[i % len(executor.workers)]],
            allow_other_workers=True,
            pure=False,
        )
        for i, lo, hi, role in pieces
    ]
    stats = BatchStats.zeros(len(request.clip_norms), request.params.size)
    for part in executor.client.gather(futures):
        stats = stats + part
    return stats


def tiny_lake(rows: int, group_rows: int, features: int = FEATURES):
    """A shuffled lake of ``rows`` × ``features`` float32 in row groups of ``group_rows`` (temporary folder):
    work per row group is tiny, so a step's time is the scheduler's, the client's and the worker's
    fixed costs."""
    import dpstream.pipelines.shuffle.rows as shuffle_module
    from dpstream.pipelines import LakeSpec, shuffle_once

    folder = tempfile.mkdtemp(prefix="tiny-lake-")
    X = np.random.default_rng(0).standard_normal((rows, features)).astype(np.float32)
    table = pa.table({**{f"x{j}": X[:, j] for j in range(features)}, "y": X.sum(axis=1)})
    os.makedirs(f"{folder}/raw")
    pq.write_table(table, f"{folder}/raw/part-0.parquet")
    default, shuffle_module.ROW_GROUP_ROWS = shuffle_module.ROW_GROUP_ROWS, group_rows  # in-process shuffle
    try:
        spec = LakeSpec(f"{folder}/raw", tuple(f"x{j}" for j in range(features)), "y")
        return shuffle_once(spec, f"{folder}/shuffled", rows_per_file=rows)
    finally:
        shuffle_module.ROW_GROUP_ROWS = default


def main() -> None:
    from dpstream.algorithms import StepSpan
    from dpstream.models import LinearRegressionModel, StatsRequest
    from dpstream.pipelines import DaskExecutor, connect

    manifest = tiny_lake(ROWS, GROUP_ROWS)
    request = StatsRequest(params=np.zeros(FEATURES))
    print(
        f"Scatter step cost: {ROWS:,} rows in {len(manifest.blocks()):,} row groups of {GROUP_ROWS}; 2 workers; medians of 5"
    )
    print("| row groups per step | tasks before / now | seconds before | seconds now | before / now |")
    print("|---|---|---|---|---|")
    client = connect(n_workers=2, memory_limit="1GiB")
    try:
        # Tasks only: what this benchmark compares is one task per worker against one per slice (the
        # step servers' round trip is benchmarks.step_timeline's).
        executor = DaskExecutor(client, manifest, LinearRegressionModel(), prefetch=False, servers=False)
        for groups in (10, 100, 1000):
            span = StepSpan(0, (0, groups * GROUP_ROWS))
            now = executor.compute(span, request)
            before = per_slice_step(executor, span, request)
            assert np.array_equal(now.clipped_sums, before.clipped_sums)  # same merge, same bits
            seconds_before = median_time(
                lambda span=span: per_slice_step(executor, span, request), repeats=5, warmup=True
            )
            seconds_now = median_time(
                lambda span=span: executor.compute(span, request), repeats=5, warmup=True
            )
            print(
                f"| {groups:,} | {groups:,} / {min(groups, len(executor.workers))} | {seconds_before:.3f} | "
                f"{seconds_now:.3f} | {seconds_before / seconds_now:.1f} |"
            )
    finally:
        client.close()


if __name__ == "__main__":
    main()
