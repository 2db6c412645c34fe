"""The shuffle with contribution bounding against the plain shuffle of the same lake (target ≤ 1.5×):
`python -m benchmarks.user_shuffle` (in `make bench`; `--rounds R`, `--files F`).

The lake: F files of 250,000 rows, 16 float features, a label and a string person id (a Zipf panel:
rows per person Zipf(1.7) capped at 2,000, persons spread over every file). Each round shuffles it
four ways on the same 2-worker LocalCluster, interleaved, each from the same validation summary (validation
is the same scan for both): the plain row shuffle, the user-level shuffle with k = 64, and with k =
2,048 (every row kept: the gather writes as many rows as the plain shuffle, the costliest case) and k =
"auto" (its extra pass counts each output's people; the charge is a no-op here). Ratios are to the
plain shuffle of the same round; medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import markdown_table
from dpstream.pipelines import LakeSpec, UserBounding, connect, shuffle_once, validate_lake

ROOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), ".bench", "people")
ROWS, DIM = 250_000, 16
FEATURES = tuple(f"x{j}" for j in range(DIM))


def write_source(files: int) -> str:
    source = os.path.join(ROOT, f"raw-{files}")
    if os.path.exists(os.path.join(source, f"f{files - 1:02d}.parquet")):
        return source
    os.makedirs(source, exist_ok=True)
    rng = np.random.default_rng(0)
    counts = np.minimum(rng.zipf(1.7, files * ROWS), 2000)
    counts = counts[: int(np.searchsorted(np.cumsum(counts), files * ROWS)) + 1]
    ids = np.repeat(np.arange(counts.size), counts)[: files * ROWS]
    ids = ids[rng.permutation(ids.size)]
    for i in range(files):
        part = ids[i * ROWS : (i + 1) * ROWS]
        X = rng.standard_normal((ROWS, DIM), dtype=np.float32)
        table = pa.table(
            {
                **{name: X[:, j] for j, name in enumerate(FEATURES)},
                "y": X[:, 0].astype(np.float64),
                "person": pa.array(np.char.add("person-", part.astype(str)), pa.string()),
            }
        )
        pq.write_table(table, os.path.join(source, f"f{i:02d}.parquet"))
    return source


def _timed(spec: LakeSpec, target: str, client, summary, users=None) -> tuple[float, object]:
    shutil.rmtree(target, ignore_errors=True)
    start = time.perf_counter()
    manifest = shuffle_once(
        spec,
        target,
        rows_per_file=ROWS,
        client=client,
        summary=summary,
        users=users,
        charge=(lambda charge_id, mu: None) if users is not None else None,
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(target, ignore_errors=True)
    return seconds, manifest


def main(rounds: int = 5, files: int = 8) -> None:
    source = write_source(files)
    rows_spec = LakeSpec(source, FEATURES, "y")
    user_spec = LakeSpec(source, FEATURES, "y", user_column="person")
    client = connect(n_workers=2, memory_limit="3GiB")
    table, ratios = [], {"k = 64": [], "k = 2,048": [], "k = auto": []}
    try:
        summary_rows = validate_lake(rows_spec, client=client)
        summary_users = validate_lake(user_spec, client=client)
        for round_index in range(rounds):
            plain, _ = _timed(rows_spec, os.path.join(ROOT, "plain"), client, summary_rows)
            fixed, manifest = _timed(
                user_spec, os.path.join(ROOT, "k64"), client, summary_users, UserBounding("person", 64)
            )
            every, every_manifest = _timed(
                user_spec, os.path.join(ROOT, "k2048"), client, summary_users, UserBounding("person", 2048)
            )
            auto, auto_manifest = _timed(
                user_spec, os.path.join(ROOT, "auto"), client, summary_users, UserBounding("person", "auto")
            )
            ratios["k = 64"].append(fixed / plain)
            ratios["k = 2,048"].append(every / plain)
            ratios["k = auto"].append(auto / plain)
            table.append(
                [
                    str(round_index + 1),
                    f"{plain:.2f}",
                    f"{fixed:.2f} ({fixed / plain:.2f}×)",
                    f"{every:.2f} ({every / plain:.2f}×)",
                    f"{auto:.2f} ({auto / plain:.2f}×), k = {auto_manifest.unit.max_rows_per_user}",
                ]
            )
    finally:
        client.close()
    print(
        f"{files * ROWS:,} rows of {manifest.num_users:,} people, {DIM} features; k = 64 keeps "
        f"{manifest.num_rows:,} rows, k = 2,048 all {every_manifest.num_rows:,}\n"
    )
    print(
        markdown_table(
            ["round", "plain shuffle s", "bounded, k = 64 s", "bounded, k = 2,048 s", "bounded, k = auto s"],
            table,
        )
    )
    for name, values in ratios.items():
        print(f"median bounded ({name}) / plain shuffle: {float(np.median(values)):.2f} (target ≤ 1.5)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    arguments = parser.parse_args()
    main(arguments.rounds, arguments.files)
