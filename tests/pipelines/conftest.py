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
