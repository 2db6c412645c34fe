"""A Delta Lake table read as a source against a Parquet folder of the same bytes:
`python -m benchmarks.table_sources` (in `make bench`; `--rounds R`, `--files F`).

The table: F appends of 250,000 rows (16 float features, a label), 30 % of the rows deleted by one
``DeltaTable.delete`` (which rewrites every file) and compacted by ``optimize.compact``; its log then
holds 2F + 2 commits and its folder 2F + 1 files, of which the compacted ones are live. The reference is
a Parquet folder holding byte copies of the version's live files, so both sides read the same bytes and
the ratio is what the table costs: replaying its log, listing its version's files, and the deletes.
Each round validates both (in this process, so the comparison is of the reads, not of the cluster) and
shuffles both on one 2-worker LocalCluster, interleaved; medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
import pyarrow as pa

from benchmarks.common import markdown_table
from dpstream.pipelines import LakeSpec, connect, shuffle_once, validate_lake

ROOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), ".bench", "tables")
ROWS, DIM = 250_000, 16
FEATURES = tuple(f"x{j}" for j in range(DIM))


def write_table(files: int) -> tuple[str, str]:
    """(the Delta table, the Parquet folder of byte copies of its live files)."""
    from deltalake import DeltaTable, write_deltalake

    table_url, folder = os.path.join(ROOT, f"delta-{files}"), os.path.join(ROOT, f"copies-{files}")
    if os.path.exists(os.path.join(folder, "_done")):
        return table_url, folder
    shutil.rmtree(ROOT, ignore_errors=True)
    rng = np.random.default_rng(0)
    for index in range(files):
        X = rng.standard_normal((ROWS, DIM), dtype=np.float32)
        ids = np.arange(index * ROWS, (index + 1) * ROWS)
        columns = {name: X[:, j] for j, name in enumerate(FEATURES)}
        write_deltalake(
            table_url, pa.table({**columns, "y": X[:, 0].astype(np.float64), "id": ids}), mode="append"
        )
    DeltaTable(table_url).delete("id % 10 < 3")
    DeltaTable(table_url).optimize.compact()
    os.makedirs(folder)
    for index, uri in enumerate(sorted(DeltaTable(table_url).file_uris())):
        shutil.copyfile(uri.removeprefix("file://"), os.path.join(folder, f"part-{index:03d}.parquet"))
    open(os.path.join(folder, "_done"), "w").close()
    return table_url, folder


def _timed(step) -> tuple[float, object]:
    start = time.perf_counter()
    result = step()
    return time.perf_counter() - start, result


def main(rounds: int = 5, files: int = 6) -> None:
    table_url, folder = write_table(files)
    specs = {"Delta table (version after delete + compact)": LakeSpec(table_url, FEATURES, "y")}
    specs["Parquet folder, same bytes"] = LakeSpec(folder, FEATURES, "y")
    timings: dict[str, dict[str, list[float]]] = {name: {"validate": [], "shuffle": []} for name in specs}
    rows = {}
    client = connect(n_workers=2, memory_limit="3GiB")
    try:
        for _ in range(rounds):
            for name, spec in specs.items():
                seconds, summary = _timed(lambda spec=spec: validate_lake(spec))
                timings[name]["validate"].append(seconds)
                rows[name] = summary.num_rows
                target = os.path.join(ROOT, "shuffled")
                shutil.rmtree(target, ignore_errors=True)
                seconds, _ = _timed(
                    lambda spec=spec, summary=summary: shuffle_once(
                        spec, target, client=client, summary=summary, rows_per_file=ROWS
                    )
                )
                timings[name]["shuffle"].append(seconds)
    finally:
        client.close()
    reference = "Parquet folder, same bytes"
    base = {phase: float(np.median(timings[reference][phase])) for phase in ("validate", "shuffle")}
    table = []
    for name in specs:
        medians = {phase: float(np.median(timings[name][phase])) for phase in ("validate", "shuffle")}
        table.append(
            [
                name,
                f"{rows[name]:,}",
                f"{medians['validate']:.2f} s",
                f"{medians['validate'] / base['validate']:.2f}x",
                f"{medians['shuffle']:.2f} s",
                f"{medians['shuffle'] / base['shuffle']:.2f}x",
            ]
        )
    print(
        markdown_table(
            ["source", "live rows", "validate", "ratio", "shuffle (2 workers)", "ratio"],
            table,
        )
    )
    print(
        f"\nmedians over {rounds} interleaved rounds; {files} appends of {ROWS:,} rows, 30 % deleted, compacted"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=6)
    arguments = parser.parse_args()
    main(arguments.rounds, arguments.files)
