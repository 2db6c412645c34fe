"""`dpstream predict` on a lake 4× the workers' memory: peak worker RSS and speed against a raw scan.

A synthetic lake of ``FILES`` Parquet files (16 float64 features and an id, uncompressed row groups of
65,536 rows) whose decoded size is 4× one worker's ``memory_limit`` is scored by ``predict_lake`` with a
linear model on a LocalCluster of 2 single-threaded workers. A sampler polls every worker's RSS every
50 ms during the run. The reference is a raw scan in the same process layout: one Dask task per file
that reads the same columns batch by batch (``ParquetFile.iter_batches``) and only sums them, on the
same workers. Reported: peak RSS per worker against its memory limit and the lake's decoded size, and
rows/s of each; medians of ``REPEATS`` runs (predictions are removed between runs).

Run: ``python -m benchmarks.predict_memory`` (about 45 s on 2 cores; writes ~2 GB under a temporary
folder, removed at the end).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import RssSampler, markdown_table

FEATURES = [f"x{j}" for j in range(16)]
MEMORY_LIMIT = 512 << 20
FILES = 8
REPEATS = 3
ROW_BYTES = 8 * (len(FEATURES) + 1)


def write_lake(root: str, rows_per_file: int) -> None:
    rng = np.random.default_rng(0)
    for index in range(FILES):
        writer = None
        for start in range(0, rows_per_file, 1 << 20):
            count = min(1 << 20, rows_per_file - start)
            columns = {"id": np.arange(start, start + count) + index * rows_per_file}
            columns.update({name: rng.standard_normal(count) for name in FEATURES})
            table = pa.table(columns)
            if writer is None:
                writer = pq.ParquetWriter(
                    f"{root}/part-{index:05d}.parquet", table.schema, compression="none"
                )
            writer.write_table(table, row_group_size=65_536)
        writer.close()


def scan_file(path: str) -> int:
    total = 0.0
    rows = 0
    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(
        batch_size=65_536, columns=FEATURES + ["id"]
    ):
        total += sum(float(np.sum(batch.column(name).to_numpy())) for name in FEATURES)
        rows += batch.num_rows
    return rows


def main() -> None:
    from distributed import Client, LocalCluster

    from dpstream.export import ModelDocument
    from dpstream.pipelines.execution.predict import predict_lake

    rows_per_file = 4 * MEMORY_LIMIT // ROW_BYTES // FILES
    work = tempfile.mkdtemp(prefix="predict-bench-")
    try:
        os.makedirs(f"{work}/lake")
        write_lake(f"{work}/lake", rows_per_file)
        total_rows = rows_per_file * FILES
        # A model built in memory (not read from a model.json, whose privacy report a run writes): scoring
        # uses its kind, features and parameters only.
        model = ModelDocument(
            kind="linear",
            settings={},
            features=tuple(FEATURES),
            label="y",
            params=np.linspace(-1, 1, len(FEATURES)),
            preprocessing=None,
            privacy={},
            run_id="bench-predict",
        )
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=None,
            host="127.0.0.1",
        )
        client = Client(cluster)
        paths = [f"{work}/lake/part-{i:05d}.parquet" for i in range(FILES)]
        results = {"predict": [], "scan": []}
        peaks = {"predict": 0, "scan": 0}
        pids = list(client.run(os.getpid).values())
        with RssSampler(pids, interval=0.05) as idle:
            time.sleep(0.2)
        for repeat in range(REPEATS):
            with RssSampler(pids, interval=0.05) as sampler:
                start = time.perf_counter()
                assert sum(client.gather(client.map(scan_file, paths, pure=False))) == total_rows
                results["scan"].append(time.perf_counter() - start)
            peaks["scan"] = max(peaks["scan"], *sampler.peaks)
            with RssSampler(pids, interval=0.05) as sampler:
                start = time.perf_counter()
                summary = predict_lake(
                    model, f"{work}/lake", f"{work}/out{repeat}", client=client, keep=("id",)
                )
                results["predict"].append(time.perf_counter() - start)
            assert summary.rows == total_rows
            peaks["predict"] = max(peaks["predict"], *sampler.peaks)
            shutil.rmtree(f"{work}/out{repeat}")
        client.close()
        cluster.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    decoded = total_rows * ROW_BYTES
    mib = 1 << 20
    rows = [
        [
            name,
            f"{np.median(results[name]):.1f}",
            f"{total_rows / np.median(results[name]) / 1e6:.2f}",
            f"{np.median(results['scan']) / np.median(results[name]):.2f}",
            f"{peaks[name] / mib:.0f}",
        ]
        for name in ("scan", "predict")
    ]
    print(
        markdown_table(
            ["run (2 workers)", "seconds (median)", "M rows/s", "speed / raw scan", "peak worker RSS MiB"],
            rows,
        )
    )
    print(
        f"\nlake: {total_rows:,} rows, {decoded / mib:,.0f} MiB decoded = {decoded / MEMORY_LIMIT:.1f}× the "
        f"{MEMORY_LIMIT / mib:.0f} MiB memory_limit of each worker; idle worker RSS {max(idle.peaks) / mib:.0f} MiB; "
        f"medians of {REPEATS} runs"
    )


if __name__ == "__main__":
    main()
