"""Data-plane benchmarks: throughput, shuffle cost and worker memory on a 2-worker cluster.

Lake: 8,000,000 rows × 64 float32 features + label in 40 files (written once under .bench/).
1. Training throughput as a ratio to two scans of the shuffled lake: every row group read with pyarrow
   and decoded to NumPy by one Dask task each on the same 2 workers (the reference the targets were set
   against), and the fastest plain decode found (``plain_decode``: whole files, one thread each, a
   ``multiprocessing`` pool of 2), which is the true bound. DP-AMBSSGD uses scatter-gather; DP-λCGD with
   batch 1,024 uses streaming. Targets ≥ 0.6 and ≥ 0.3.
2. Shuffle-once time as a ratio to a plain read-and-write copy of the same lake by the same workers.
   Target ≤ 3.
3. Peak RSS per worker while training (scatter-gather) with a memory limit of 512 MiB per worker on a
   16,000,000-row lake (4.2 GB): 4× the workers' total memory. An idle worker process with its imports
   takes about 154 MiB here, and Numba with the loaded statistics kernels another ~107 MiB, so 512 MiB
   leaves ~250 MiB of working room (384 MiB did before the Numba kernels). Target: under the limit.
Run: ``python -m benchmarks.data_plane`` (about 9 minutes; writes ~10 GB under .bench/);
``python -m benchmarks.data_plane --shuffle 5`` repeats only the copy and the shuffle (median ratio; `make bench` runs it too).
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import RssSampler, markdown_table
from dpstream.algorithms import DPAMBSSGD, DPSGD
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey, make_noise_process
from dpstream.pipelines import LakeSpec, connect, plan_on_lake, shuffle_once, train_on_lake, validate_lake
from dpstream.pipelines.lake.blocks import read_row_group

ROOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), ".bench", "lake8m")
FILES, ROWS, DIM = 40, 200_000, 64
SPEC_COLUMNS = tuple(f"x{j}" for j in range(DIM))


def write_source(files: int = FILES, name: str = "raw") -> str:
    source = os.path.join(ROOT, name)
    if os.path.exists(os.path.join(source, f"f{files - 1:02d}.parquet")):
        return source
    os.makedirs(source, exist_ok=True)
    w = np.linspace(-1, 1, DIM) / 8
    for i in range(files):
        rng = np.random.default_rng(i)
        X = rng.standard_normal((ROWS, DIM), dtype=np.float32)
        y = X.astype(np.float64) @ w + rng.standard_normal(ROWS)
        table = pa.table(
            {**{name: X[:, j] for j, name in enumerate(SPEC_COLUMNS)}, "y": y, "day": np.full(ROWS, i // 4)}
        )
        pq.write_table(table, os.path.join(source, f"f{i:02d}.parquet"), use_dictionary=False)
    return source


def _scan(path: str, group: int, spec: LakeSpec) -> int:
    fs, _ = spec.filesystem()
    X, _ = read_row_group(fs, path, spec, group)
    return X.shape[0]


def plain_decode(arguments: tuple[str, tuple[str, ...]]) -> int:
    """The fastest plain decode of one file found: pyarrow reads the whole file's ``columns``
    on one thread and each is copied once into a column-major float32 matrix; no Dask, no fsspec, no
    per-row-group open. Run by a ``multiprocessing`` pool of as many processes as the cluster has
    workers (``plain_decode_seconds``)."""
    path, columns = arguments
    table = pq.read_table(path, columns=list(columns), use_threads=False)
    X = np.empty((table.num_rows, len(columns)), dtype=np.float32, order="F")
    for j, name in enumerate(columns):
        X[:, j] = table.column(name).to_numpy()
    return X.shape[0]


def plain_decode_seconds(
    paths: list[str], columns: tuple[str, ...], processes: int = 2, repeats: int = 3
) -> float:
    """The median of ``repeats`` plain decodes of ``paths`` by a pool of ``processes``."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(plain_decode, [(path, columns) for path in paths[:processes]])  # start-up outside the timing
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            pool.map(plain_decode, [(path, columns) for path in paths], chunksize=1)
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def _copy(source: str, target: str) -> int:
    table = pq.read_table(source)
    pq.write_table(table, target, use_dictionary=False)
    return table.num_rows


def _dask_p2p_shuffle(client, source: str, target: str) -> float:
    """Seconds for the side-by-side peer: ``dask.dataframe`` reads the lake, shuffles it on a random key
    with the p2p method (Arrow batches exchanged between workers in memory, spilled to disk by Dask) and
    writes Parquet. It gives a permutation but no manifest, no row-group layout and no resumable
    structure; the comparison is of raw data movement."""
    import dask.dataframe as dd

    def with_random_key(frame, partition_info=None):
        seed = 0 if partition_info is None else partition_info["number"]
        return frame.assign(shuffle_key=np.random.default_rng(seed).integers(0, 2**62, len(frame)))

    start = time.perf_counter()
    frame = dd.read_parquet(source).map_partitions(with_random_key)
    frame.shuffle("shuffle_key", shuffle_method="p2p").to_parquet(target, write_index=False)
    return time.perf_counter() - start


def _warm_kernels() -> None:
    """Import Numba and load (or compile) the statistics kernels in a worker before anything is timed."""
    from dpstream.models import StatsRequest

    X = np.asfortranarray(np.ones((64, DIM), dtype=np.float32))
    request = StatsRequest(np.zeros(DIM), clip_norms=[1.0, 2.0], thresholds=[1.0], statistic="gradient_norm")
    for role in ("stat", "gradient"):
        LinearRegressionModel().block_stats(X, np.ones(64), request, role=role)


def _fallbacks(clip_history: tuple[float, ...], window: int) -> int:
    """Steps whose DP-STAT ζ left the window around the previous ζ (each took a second round trip)."""
    levels = np.log2(np.asarray(clip_history))
    return int(np.sum(np.abs(np.diff(levels)) > window + 0.5))


def _copy_seconds(client, source: str) -> float:
    copy_dir = os.path.join(ROOT, "copy")
    os.makedirs(copy_dir, exist_ok=True)
    start = time.perf_counter()
    client.gather(
        [
            client.submit(_copy, os.path.join(source, f), os.path.join(copy_dir, f), pure=False)
            for f in sorted(os.listdir(source))
        ]
    )
    return time.perf_counter() - start


def shuffle_rounds(rounds: int = 5) -> None:
    """Copy and shuffle interleaved ``rounds`` times on the same workers: the ratio's median, since the
    copy alone swings 2× between runs on this machine (``python -m benchmarks.data_plane --shuffle 5``).

    Each round validates the lake cold (every file read: its content identity and values), then runs
    what ``dpstream shuffle`` runs after ``dpstream validate``: validation again, served by the
    validation cache for the unchanged files (``dpstream.pipelines.validation.cache``: one stat per
    file), and ``shuffle_once`` with its summary."""
    import shutil

    from dpstream.pipelines.shuffle.location import validation_cache

    source = write_source()
    spec = LakeSpec(source, SPEC_COLUMNS, "y")
    client = connect(n_workers=2, memory_limit="2GiB")
    rows = []
    try:
        for round_index in range(rounds):
            copy_seconds = _copy_seconds(client, source)
            target = os.path.join(ROOT, f"shuffle-round-{round_index}")
            shutil.rmtree(target, ignore_errors=True)
            start = time.perf_counter()
            validate_lake(spec, client=client, cache=validation_cache(target, spec, None))
            validation_seconds = time.perf_counter() - start
            start = time.perf_counter()
            summary = validate_lake(spec, client=client, cache=validation_cache(target, spec, None))
            shuffle_once(spec, target, rows_per_file=ROWS, client=client, summary=summary)
            shuffle_seconds = time.perf_counter() - start
            shutil.rmtree(target, ignore_errors=True)
            rows.append(
                [
                    str(round_index + 1),
                    f"{copy_seconds:.1f}",
                    f"{validation_seconds:.1f}",
                    f"{shuffle_seconds:.1f}",
                    (validation_seconds + shuffle_seconds) / copy_seconds,
                    shuffle_seconds / copy_seconds,
                ]
            )
    finally:
        client.close()
    print(
        markdown_table(
            [
                "round",
                "copy s",
                "validation, cold s",
                "shuffle after validation s",
                "ratio, cold validation + shuffle",
                "ratio, shuffle after `validate`",
            ],
            [[*row[:4], f"{row[4]:.2f}", f"{row[5]:.2f}"] for row in rows],
        )
    )
    cold, warm = (float(np.median([row[k] for row in rows])) for k in (4, 5))
    print(
        f"\nmedian shuffle / copy after `dpstream validate`: {warm:.2f} (target ≤ 2.5); with a cold validation: {cold:.2f}"
    )


def main() -> None:
    source = write_source()
    spec = LakeSpec(source, SPEC_COLUMNS, "y")
    client = connect(n_workers=2, memory_limit="2GiB")
    try:
        copy_seconds = _copy_seconds(client, source)
        shuffled = os.path.join(ROOT, f"shuffled-{int(time.time())}")
        start = time.perf_counter()
        manifest = shuffle_once(spec, shuffled, rows_per_file=ROWS, client=client)
        shuffle_seconds = time.perf_counter() - start
        p2p_seconds = _dask_p2p_shuffle(client, source, os.path.join(ROOT, f"p2p-{int(time.time())}"))
        paths = manifest.paths()
        shuffled_spec = manifest.spec()
        scans = []
        for _ in range(3):  # the reference is noisy on this machine: median of 3 scans
            start = time.perf_counter()
            client.gather(
                [
                    client.submit(_scan, path, group, shuffled_spec, pure=False)
                    for _, path, group, _ in manifest.blocks()
                ]
            )
            scans.append(time.perf_counter() - start)
        scan_seconds = float(np.median(scans))
        plain_seconds = plain_decode_seconds(paths, (*SPEC_COLUMNS, "y"))
        rows = manifest.num_rows
        client.run(_warm_kernels)
        results = []
        for label, algorithm, mode in (
            (
                "DP-AMBSSGD, scatter-gather (window of 5 candidates)",
                DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm"),
                "scatter",
            ),
            (
                "DP-AMBSSGD, scatter-gather (all 31 candidates)",
                DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm", candidate_window=None),
                "scatter",
            ),
            (
                "DP-λCGD batch 1,024, streaming",
                DPSGD(
                    1.0,
                    1e-6,
                    clip_norm=4.0,
                    learning_rate=0.5,
                    batch_size=1024,
                    noise=make_noise_process("lambda", correlation=0.5),
                ),
                "streaming",
            ),
        ):
            start = time.perf_counter()
            result, used = train_on_lake(
                manifest,
                plan_on_lake(manifest, algorithm, LinearRegressionModel()),
                client,
                NoiseKey.generate(),
                mode=mode,
            )
            seconds = time.perf_counter() - start
            window = getattr(algorithm, "candidate_window", None)
            fallbacks = (
                f"{_fallbacks(result.state.clip_history, window)} of {result.report.steps - 1}"
                if window is not None
                else "n/a"
            )
            results.append(
                [
                    label,
                    used,
                    fallbacks,
                    f"{rows / seconds:,.0f}",
                    f"{rows / scan_seconds:,.0f}",
                    f"{scan_seconds / seconds:.2f}",
                    f"{rows / plain_seconds:,.0f}",
                    f"{plain_seconds / seconds:.2f}",
                ]
            )
        print(
            f"Lake: {rows:,} rows × {DIM} float32 in {len(paths)} files; 2 worker processes, 1 thread each\n"
        )
        print(
            markdown_table(
                [
                    "training",
                    "mode",
                    "follow-up round trips",
                    "rows/s",
                    "Dask-task scan rows/s",
                    "ratio",
                    "plain 2-process decode rows/s",
                    "ratio",
                ],
                results,
            )
        )
        print()
        print(
            markdown_table(
                ["operation", "seconds", "ratio to copy"],
                [
                    ["plain read-and-write copy", f"{copy_seconds:.1f}", "1.00"],
                    [
                        "shuffle once (two passes, manifest)",
                        f"{shuffle_seconds:.1f}",
                        f"{shuffle_seconds / copy_seconds:.2f}",
                    ],
                    [
                        "dask.dataframe p2p shuffle + to_parquet (peer)",
                        f"{p2p_seconds:.1f}",
                        f"{p2p_seconds / copy_seconds:.2f}",
                    ],
                ],
            )
        )
        big_spec = LakeSpec(write_source(80, "raw16m"), SPEC_COLUMNS, "y")
        big = shuffle_once(
            big_spec, os.path.join(ROOT, f"shuffled16m-{int(time.time())}"), rows_per_file=ROWS, client=client
        )
    finally:
        client.close()
    memory_limit = 512 * 2**20
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"  # lets the nanny's malloc trimming return memory
    client = connect(n_workers=2, memory_limit=memory_limit)
    try:
        pids = [info["pid"] for info in client.run(lambda: {"pid": os.getpid()}).values()]
        lake_bytes = sum(os.path.getsize(p) for p in big.paths())
        manifest = big
        with RssSampler(pids) as sampler:
            train_on_lake(
                manifest,
                plan_on_lake(
                    manifest,
                    DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm"),
                    LinearRegressionModel(),
                ),
                client,
                NoiseKey.generate(),
                mode="scatter",
            )
        after = [info["pid"] for info in client.run(lambda: {"pid": os.getpid()}).values()]
        restarts = len(set(pids) - set(after))
        print()
        print(
            f"Memory: lake {lake_bytes / 2**30:.2f} GiB on disk = {lake_bytes / (2 * memory_limit):.1f}× the workers' "
            f"total limit (2 × 512 MiB); worker restarts during training: {restarts}\n"
        )
        print(
            markdown_table(
                ["worker", "peak RSS", "limit", "under the limit"],
                [
                    [str(i), f"{peak / 2**20:.0f} MiB", "512 MiB", str(peak < memory_limit)]
                    for i, peak in enumerate(sampler.peaks)
                ],
            )
        )
    finally:
        client.close()


def main_and_clean_up() -> None:
    """``main``, then its shuffled and peer outputs removed (about 9 GB a run; the sources stay)."""
    import glob

    try:
        main()
    finally:
        for pattern in ("shuffled-*", "shuffled16m-*", "p2p-*"):
            for path in glob.glob(os.path.join(ROOT, pattern)):
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--shuffle"]:
        shuffle_rounds(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    else:
        main_and_clean_up()
