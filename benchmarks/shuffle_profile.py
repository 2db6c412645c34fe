"""Where one process's shuffle of the data-plane lake spends its time.

``python -m benchmarks.shuffle_profile``: validates ``benchmarks.data_plane``'s lake (8 M rows × 64
float32 in 40 files, written there if missing), then runs ``shuffle_once`` in this process (no Dask: the
tasks run one after another) under cProfile, with ``MALLOC_TRIM_THRESHOLD_=65536`` and one thread as in
a Dask worker, and prints the 25 functions with the most time of their own.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> None:
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") != "65536":  # the allocator must be set before start-up
        env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
        raise SystemExit(
            subprocess.run([sys.executable, "-m", "benchmarks.shuffle_profile"], env=env).returncode
        )
    import cProfile
    import pstats
    import shutil
    import time

    from benchmarks.data_plane import ROOT, ROWS, SPEC_COLUMNS, write_source
    from dpstream.pipelines import LakeSpec, shuffle_once, validate_lake

    spec = LakeSpec(write_source(), SPEC_COLUMNS, "y")
    summary = validate_lake(spec)
    target = os.path.join(ROOT, "shuffle-profile")
    shutil.rmtree(target, ignore_errors=True)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    try:
        shuffle_once(spec, target, rows_per_file=ROWS, summary=summary)
    finally:
        profile.disable()
        shutil.rmtree(target, ignore_errors=True)
    print(f"shuffle in one process: {time.perf_counter() - start:.1f} s")
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
