"""The worker allocator setting and the statistics kernel.

Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (to hand freed memory back to
the OS). Setting any glibc malloc tunable by environment also switches off glibc's *dynamic* mmap
threshold, so every temporary above 128 KiB (the kernel's per-chunk products, ~1 MiB each) is a fresh
``mmap`` whose pages are faulted in again on every chunk. That was the NumPy kernel's cost (3× at 31
clip norms); the Numba kernels (``dpstream.models.glm_cpu``) allocate their few chunk-sized
scratch arrays once per call, and this benchmark shows the setting no longer matters. It runs the
statistics kernel (``LinearRegressionModel.block_stats``, 262,144 × 64 float32 blocks, 1 and 31 clip norms) in child
processes under each environment, interleaved over rounds, and reports rows/s and peak RSS:

* ``plain``: no malloc variable (a process outside Dask);
* ``dask default``: ``MALLOC_TRIM_THRESHOLD_=65536`` (what a Dask worker gets);
* ``raised thresholds``: Dask's variable with an 8 MiB mmap and a 32 MiB trim threshold (fast, but not
  applied to workers: see ``pipelines/execution/cluster.py`` for the bit-for-bit reason).

Run: ``python -m benchmarks.allocator`` (part of ``make bench``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

ROUNDS = 5
CHILD = r"""
import json, resource, time
import numpy as np
from dpstream.models import LinearRegressionModel, StatsRequest
rng = np.random.default_rng(0)
X = rng.standard_normal((262_144, 64)).astype(np.float32)
y = rng.standard_normal(262_144)
model, out = LinearRegressionModel(), {}
for norms in (1, 31):
    request = StatsRequest(params=rng.standard_normal(64) * 0.1, clip_norms=np.geomspace(0.01, 100, norms))
    model.block_stats(X, y, request)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        model.block_stats(X, y, request)
        times.append(time.perf_counter() - start)
    out[norms] = X.shape[0] / float(np.median(times))
out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def environments() -> dict[str, dict[str, str]]:
    raised = {"MALLOC_MMAP_THRESHOLD_": str(8 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(32 * 2**20)}
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    base.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    dask_default = {**base, "MALLOC_TRIM_THRESHOLD_": "65536"}
    return {
        "plain": base,
        "dask default": dask_default,
        "raised thresholds": {**dask_default, **raised},
    }


def main() -> None:
    results: dict[str, list[dict]] = {name: [] for name in environments()}
    for _ in range(ROUNDS):
        for name, env in environments().items():
            done = subprocess.run(
                [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
            )
            results[name].append(json.loads(done.stdout))
    print(
        f"Statistics kernel (Numba), 262,144 × 64 float32, one thread; medians of {ROUNDS} interleaved rounds"
    )
    print(
        "| worker environment | 1 clip norm rows/s | 31 clip norms rows/s | vs plain (1 / 31) | peak RSS MiB |"
    )
    print("|---|---|---|---|---|")
    plain = {k: float(np.median([r[k] for r in results["plain"]])) for k in ("1", "31")}
    for name, runs in results.items():
        rate = {k: float(np.median([r[k] for r in runs])) for k in ("1", "31")}
        rss = float(np.median([r["rss_mib"] for r in runs]))
        print(
            f"| {name} | {rate['1']:,.0f} | {rate['31']:,.0f} | {rate['1'] / plain['1']:.2f} / "
            f"{rate['31'] / plain['31']:.2f} | {rss:,.0f} |"
        )


if __name__ == "__main__":
    main()
