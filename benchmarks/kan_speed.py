"""KAN batch statistics speed (CPU): rows/s of ``KANModel.block_stats`` at about 10⁶ parameters
(d = 64, G = 5 so p = 8, m = 2,048: m·d·p = 1,048,576) against a NumPy/BLAS reference on the same
arrays in the same run: the two products every exact method needs, H Wᵀ (forward) and Aᵀ H (the
clipped sum), with NumPy's default (multi-threaded) BLAS and limited to one thread (dpstream runs BLAS
on one thread for bit-for-bit statistics). The GPU comparison needs a CUDA device; see
BENCHMARKS.md. Run: ``python -m benchmarks.kan_speed``."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import markdown_table, median_time
from dpstream.models import KANModel, StatsRequest
from dpstream.models.bspline import dense_basis

DIM, HIDDEN, GRID, ROWS = 64, 2048, 5, 8192


def main() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (ROWS, DIM)).astype(np.float32)
    y = np.where(rng.random(ROWS) > 0.5, 1.0, -1.0)
    model = KANModel(num_hidden=HIDDEN, grid_size=GRID, input_map="cube")
    W = model.init_params(DIM)
    request = StatsRequest(params=W, clip_norms=np.array([1.0]))
    H = dense_basis(X.astype(np.float64), GRID).reshape(ROWS, -1)
    Wm = W.reshape(HIDDEN, -1)
    A = rng.standard_normal((ROWS, HIDDEN))

    def reference():
        H @ Wm.T
        A.T @ H

    def reference_one_thread():
        with threadpool_limits(limits=1, user_api="blas"):
            reference()

    rows = []
    ours = median_time(lambda: model.block_stats(X, y, request), repeats=5)
    for label, function in (
        ("NumPy, default BLAS threads", reference),
        ("NumPy, 1 BLAS thread", reference_one_thread),
    ):
        ref = median_time(function, repeats=5)
        rows.append([label, f"{ROWS / ref:,.0f}", f"{ROWS / ours:,.0f}", f"{ref / ours:.2f}"])
    print(
        markdown_table(
            ["reference (H Wᵀ and Aᵀ H only)", "reference rows/s", "dpstream KAN stats rows/s", "ratio"], rows
        )
    )
    print(f"\n{model.num_params(DIM):,} parameters; {ROWS:,} rows per measurement, median of 5")


if __name__ == "__main__":
    main()
