"""What a Dask worker's allocator setting costs the data plane's NumPy work, and what avoids the cost.

``python -m benchmarks.allocator_costs`` times, per block of 65,536 rows, in two child processes: one
plain, one with ``MALLOC_TRIM_THRESHOLD_=65536`` as Dask's nanny starts its workers (glibc then hands
every freed block over 64 KiB back to the kernel, and the next array of that size pays fresh pages):

- filling a block-sized matrix (65,536 × 17 float32, column-major) from ``np.empty`` and from Arrow's
  pool (``pipelines.memory.pool_empty``);
- the row-norm look of AdaSSP's clipping, as float64 copies (the path ``clip_rows`` always took before)
  and as ``clipping.certainly_within``;
- the public-range map of one column, as the NumPy expression and as ``range_map.map_range``;
- filling ``predict``'s row-major matrix a column at a time, 4,096 rows at a time, and with ``np.stack``
  into it (``_fill_rows``).

Medians of 50 repeats, in milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

ROWS, DIM = 65_536, 17


def _median_ms(function, repeats: int = 50) -> float:
    function()  # first call outside the timing (Numba's compile or cache load)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def measure() -> dict[str, float]:
    from dpstream.models.clipping import certainly_within
    from dpstream.pipelines.execution.predict import _fill_rows
    from dpstream.pipelines.memory import pool_empty
    from dpstream.pipelines.preprocessing.range_map import map_range

    rng = np.random.default_rng(0)
    source = np.asfortranarray(rng.normal(0, 0.2, (ROWS, DIM)).astype(np.float32))
    column = rng.normal(5, 3, ROWS)
    columns = [source[:, j].copy() for j in range(DIM)]
    X = np.empty((ROWS, DIM))

    def fill_numpy():
        block = np.empty((ROWS, DIM), np.float32, order="F")
        block[...] = source

    def fill_pool():
        block = pool_empty(ROWS * DIM, np.float32).reshape((ROWS, DIM), order="F")
        block[...] = source

    def by_columns():
        for j, values in enumerate(columns):
            X[:, j] = values

    def by_row_blocks():  # _fill_rows before np.stack: 4,096 rows at a time
        for start in range(0, ROWS, 4096):
            rows = X[start : start + 4096]
            for j, values in enumerate(columns):
                rows[:, j] = values[start : start + 4096]

    return {
        "block fill, np.empty": _median_ms(fill_numpy),
        "block fill, Arrow pool": _median_ms(fill_pool),
        "row norms, float64 copies": _median_ms(
            lambda: np.sqrt((source.astype(np.float64) ** 2).sum(axis=1))
        ),
        "row norms, certainly_within": _median_ms(lambda: certainly_within(source, 4.0)),
        "range map, NumPy expression": _median_ms(
            lambda: (-1.0 + 2.0 * (np.clip(column, 0, 10) - 0) / 10).astype(np.float32)
        ),
        "range map, map_range": _median_ms(lambda: map_range(column, (0, 10), (-1.0, 1.0), np.float32)),
        "predict fill, column at a time": _median_ms(by_columns),
        "predict fill, 4,096 rows at a time": _median_ms(by_row_blocks),
        "predict fill, _fill_rows (np.stack)": _median_ms(lambda: _fill_rows(X, columns)),
    }


def main() -> None:
    if "--child" in sys.argv:
        print(json.dumps(measure()))
        return
    results = {}
    for label, extra in (
        ("plain", {}),
        ("MALLOC_TRIM_THRESHOLD_=65536", {"MALLOC_TRIM_THRESHOLD_": "65536"}),
    ):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **extra}
        output = subprocess.run(
            [sys.executable, "-m", "benchmarks.allocator_costs", "--child"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        results[label] = json.loads(output.strip().splitlines()[-1])
    print("| per block of 65,536 rows, ms (median of 50) | plain process | as a Dask worker's allocator |")
    print("|---|---|---|")
    for name in results["plain"]:
        print(
            f"| {name} | {results['plain'][name]:.2f} | {results['MALLOC_TRIM_THRESHOLD_=65536'][name]:.2f} |"
        )


if __name__ == "__main__":
    main()
