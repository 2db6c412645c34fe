"""Lakes written for the tests, and a 2-process LocalCluster shared by the session."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.pipelines import LakeSpec

DIM = 6
W_STAR = np.linspace(-1, 1, DIM)


def make_table(rows: int, seed: int, *, start_id: int = 0, vector: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, DIM)).astype(np.float32)
    y = X.astype(np.float64) @ W_STAR + 0.5 * rng.standard_normal(rows)
    columns = {"row_id": np.arange(start_id, start_id + rows), "day": np.full(rows, seed)}
    if vector:
        columns["features"] = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), DIM)
    else:
        columns.update({f"x{j}": X[:, j] for j in range(DIM)})
    columns["y"] = y
    return pa.table(columns)


def write_lake(fs_put, root: str, files: int = 4, rows: int = 5000, vector: bool = False) -> None:
    for i in range(files):
        fs_put(f"{root}/day={i:02d}.parquet", make_table(rows, i, start_id=i * rows, vector=vector))


def local_put(path: str, table: pa.Table) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, row_group_size=1500)


def feature_spec(url: str, vector: bool = False, **options) -> LakeSpec:
    features = "features" if vector else tuple(f"x{j}" for j in range(DIM))
    return LakeSpec(url, features, "y", options)


@pytest.fixture()
def lake(tmp_path):
    root = str(tmp_path / "raw")
    write_lake(local_put, root)
    return feature_spec(root)


@pytest.fixture(scope="session")
def dask_client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="2GiB"
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


HEAVY_PERSON = "cust-heavy"  # one person of HEAVY_ROWS rows, spread over every file
HEAVY_ROWS = 10_000
ID_PREFIX = b"cust-"  # every id starts so: a scan of written bytes for it finds any id in clear


def user_table(seed: int, people: int = 1500, start: int = 0, heavy_rows: int = 0) -> pa.Table:
    """Rows of ``people`` people with Zipf(1.7) rows each (at most 500), plus ``heavy_rows`` rows of
    ``HEAVY_PERSON``, shuffled; a person effect of std 0.3 on a linear target."""
    rng = np.random.default_rng(seed)
    counts = np.minimum(rng.zipf(1.7, people), 500)
    ids = np.repeat(np.array([f"cust-{start + u:06d}" for u in range(people)], dtype=object), counts)
    effect = np.repeat(rng.normal(0, 0.3, people), counts)
    ids = np.concatenate([ids, np.full(heavy_rows, HEAVY_PERSON, dtype=object)])
    effect = np.concatenate([effect, np.full(heavy_rows, 0.5)])
    order = rng.permutation(ids.size)
    ids, effect = ids[order], effect[order]
    X = rng.uniform(-1, 1, (ids.size, DIM))
    y = X @ W_STAR + effect + 0.3 * rng.standard_normal(ids.size)
    return pa.table(
        {**{f"x{j}": X[:, j] for j in range(DIM)}, "y": y, "customer": pa.array(ids, pa.string())}
    )


def write_user_lake(put, root: str, files: int = 3) -> dict[str, int]:
    """A Zipf panel over ``files`` files (people ids overlap across files: a person's rows are spread), one
    person of ``HEAVY_ROWS`` rows; returns every person's rows."""
    heavy = [HEAVY_ROWS // files + (i < HEAVY_ROWS % files) for i in range(files)]
    tables = [user_table(i, start=(i % 2) * 700, heavy_rows=heavy[i]) for i in range(files)]
    for i, table in enumerate(tables):
        put(f"{root}/part={i:02d}.parquet", table)
    ids = np.concatenate([t.column("customer").to_numpy(zero_copy_only=False) for t in tables])
    names, counts = np.unique(ids, return_counts=True)
    return dict(zip(names.tolist(), counts.tolist(), strict=True))


def user_spec(url: str, **options) -> LakeSpec:
    return LakeSpec(url, tuple(f"x{j}" for j in range(DIM)), "y", options, user_column="customer")


def flip_data_byte(path: str, offset: int = 200) -> None:
    """Flip one byte of a part's first data page: its size and footer unchanged, its page checksum not."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
