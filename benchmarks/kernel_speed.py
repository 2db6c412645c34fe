"""Kernel speed: rows/s of the linear model's batch statistics against NumPy ``X.T @ (X @ w)`` on the
same float32 blocks in the same run (d = 64; blocks of 4,096 and 65,536 rows in row-major order, and
65,536-row column-major blocks as the lake reader decodes them). Target: ratio ≥ 0.6.
dpstream's kernel runs BLAS on one thread (bit-for-bit identical statistics on any worker), so a
second row compares against NumPy limited to one BLAS thread too: the per-core ratio.
Run: ``python -m benchmarks.kernel_speed``."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import markdown_table, median_time
from dpstream.models import LinearRegressionModel, StatsRequest

DIM = 64
TOTAL_ROWS = 2**21  # 2,097,152 rows per measurement, cut into blocks


def main() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((TOTAL_ROWS, DIM)).astype(np.float32)
    y = rng.standard_normal(TOTAL_ROWS).astype(np.float32)
    w = rng.standard_normal(DIM) * 0.1
    w32 = w.astype(np.float32)
    model = LinearRegressionModel()
    # Column-major blocks are what ``dpstream.pipelines.lake.files`` decodes from Parquet (one copy per column).
    blocks_by_order = {
        "C": X,
        "F": [np.asfortranarray(X[s : s + 65_536]) for s in range(0, TOTAL_ROWS, 65_536)],
    }
    rows = []
    for block, order in ((4096, "C"), (65_536, "C"), (65_536, "F")):
        starts = range(0, TOTAL_ROWS, block)
        source = blocks_by_order[order]

        def piece(s, source=source, block=block):
            return source[s : s + block] if order == "C" else source[s // block]

        def reference():
            for s in starts:
                Xb = piece(s)
                Xb.T @ (Xb @ w32)

        def reference_one_thread():
            with threadpool_limits(limits=1, user_api="blas"):
                reference()

        def ours(request):
            for s in starts:
                model.block_stats(piece(s), y[s : s + block], request)

        one = StatsRequest(w, clip_norms=[1.0])
        many = StatsRequest(w, clip_norms=2.0 ** np.arange(-15, 16))  # DP-AMBSSGD's 31 candidates
        window = StatsRequest(w, clip_norms=2.0 ** np.arange(-2, 3))  # its default window of 5
        # Interleave reference and candidate runs and take the median of the paired ratios, so
        # drift on this noisy 2-core machine hits both sides alike.
        for label, request, repeats, ref in (
            ("1 clip norm", one, 9, reference),
            ("1 clip norm vs 1-thread NumPy", one, 9, reference_one_thread),
            ("5 clip norms (DP-AMBSSGD window)", window, 5, reference),
            ("31 clip norms", many, 3, reference),
        ):
            ref_times, our_times = [], []
            for _ in range(repeats):
                ref_times.append(median_time(ref, repeats=1))
                our_times.append(median_time(lambda: ours(request), repeats=1))
            ratio = float(np.median(np.array(ref_times) / np.array(our_times)))
            rows.append(
                [
                    f"{block:,} ({order})",
                    label,
                    f"{TOTAL_ROWS / np.median(ref_times) / 1e6:.1f}",
                    f"{TOTAL_ROWS / np.median(our_times) / 1e6:.1f}",
                    f"{ratio:.2f}",
                ]
            )
    print(
        f"d = {DIM}, float32, {TOTAL_ROWS:,} rows per pass, median of 9 paired runs (3 for 31 clip norms)\n"
    )
    print(
        markdown_table(
            ["block rows (layout)", "statistics", "NumPy X.T@(X@w) M rows/s", "dpstream M rows/s", "ratio"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
