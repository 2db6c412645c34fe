"""A source file whose rows repeat another's is refused however it was re-encoded (compression, row
groups, row order), and the digest that finds it is kept by the validation cache."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.pipelines import LakeError, validate_lake
from dpstream.pipelines.shuffle.location import validation_cache
from dpstream.pipelines.validation import validate as validate_module
from dpstream.pipelines.validation.content_digest import RowsDigest, column_hashes

from .conftest import DIM, feature_spec, local_put, make_table, write_lake


def _reencoded_copy(lake_url: str, name: str, copy: str, seed: int = 0) -> None:
    """``name``'s rows rewritten as ``copy``: zstd instead of snappy, other row groups, rows permuted."""
    table = pq.read_table(os.path.join(lake_url, name))
    table = table.take(np.random.default_rng(seed).permutation(table.num_rows))
    pq.write_table(table, os.path.join(lake_url, copy), compression="zstd", row_group_size=777)


def _digest(table: pa.Table, columns: list[str], batch: int | None = None) -> str:
    digest = RowsDigest()
    for part in table.to_batches(max_chunksize=batch) if batch else [table]:
        digest.add(part, columns)
    return digest.hexdigest()


def test_a_reencoded_copy_is_refused_naming_both_files(lake):
    _reencoded_copy(lake.url, "day=02.parquet", "day=99.parquet")
    assert os.path.getsize(os.path.join(lake.url, "day=99.parquet")) != os.path.getsize(
        os.path.join(lake.url, "day=02.parquet")
    )
    with pytest.raises(LakeError) as refused:
        validate_lake(lake)
    message = str(refused.value)
    assert "day=02.parquet and day=99.parquet hold the same 5,000 rows" in message, message
    assert "Remove one of them" in message


def test_a_reencoded_copy_of_a_vector_lake_is_refused(tmp_path):
    root = str(tmp_path / "vectors")
    write_lake(local_put, root, files=3, rows=2000, vector=True)
    spec = feature_spec(root, vector=True)
    assert validate_lake(spec).num_rows == 6000
    _reencoded_copy(root, "day=01.parquet", "day=07.parquet", seed=3)
    with pytest.raises(LakeError, match=r"day=01\.parquet and day=07\.parquet hold the same 2,000 rows"):
        validate_lake(spec)


def test_the_digest_depends_on_the_values_only():
    table = make_table(3000, 5)
    columns = [*(f"x{j}" for j in range(DIM)), "y", "row_id"]
    digest = _digest(table, columns)
    shuffled = table.take(np.random.default_rng(1).permutation(table.num_rows))
    assert _digest(shuffled, columns, batch=257) == digest  # order and batches do not enter
    assert _digest(table.combine_chunks().cast(table.schema), columns, batch=1000) == digest
    # One value one ulp away, one row fewer, or one row twice: another digest.
    values = table.column("x3").to_numpy().copy()
    values[1234] = np.nextafter(values[1234], np.inf)
    assert _digest(table.set_column(table.schema.get_field_index("x3"), "x3", [values]), columns) != digest
    assert _digest(table.slice(1), columns) != digest
    doubled = pa.concat_tables([table.slice(0, 1), table.slice(0, 2999)])
    assert doubled.num_rows == table.num_rows and _digest(doubled, columns) != digest
    # Two columns whose values are swapped are other rows.
    swapped = table.rename_columns([{"x0": "x1", "x1": "x0"}.get(name, name) for name in table.column_names])
    assert _digest(swapped, columns) != digest


def test_text_lists_and_nulls_hash_by_value():
    assert (
        column_hashes(pa.array(["a", "b", None, "a"]))
        == column_hashes(pa.array(["a", "b", None, "a"]).dictionary_encode())
    ).all()
    hashes = column_hashes(pa.array(["a", "b", None, "a"]))
    assert hashes[0] == hashes[3] and len(set(hashes[:3].tolist())) == 3
    lists = column_hashes(pa.array([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], None]))
    assert lists[0] == lists[2] and lists[0] != lists[1] and lists[3] != lists[0]
    assert (column_hashes(pa.array([0.0, -0.0])) == column_hashes(pa.array([0.0, 0.0]))).all()
    numbers = pa.array([1.5, 2.5, None, 1.5])
    assert (column_hashes(numbers) == column_hashes(numbers.dictionary_encode())).all()
    assert (
        column_hashes(pa.array(["a", "b"])) == column_hashes(pa.array(["a", "b"], pa.large_string()))
    ).all()


def test_the_cache_keeps_the_digest_so_a_later_copy_is_found_reading_only_it(lake, tmp_path, monkeypatch):
    read: list[str] = []
    check_file = validate_module.check_file

    def counting(url, *args, **kwargs):
        read.append(os.path.basename(url))
        return check_file(url, *args, **kwargs)

    monkeypatch.setattr(validate_module, "check_file", counting)
    shuffled = str(tmp_path / "shuffled")
    validate_lake(lake, cache=validation_cache(shuffled, lake, None))
    assert len(read) == 4
    _reencoded_copy(lake.url, "day=01.parquet", "day=50.parquet")
    read.clear()
    with pytest.raises(LakeError, match=r"day=01\.parquet and day=50\.parquet hold the same 5,000 rows"):
        validate_lake(lake, cache=validation_cache(shuffled, lake, None))
    assert read == ["day=50.parquet"]  # day=01's digest came from the cache


def test_files_that_share_some_rows_are_not_copies(lake):
    table = pq.read_table(os.path.join(lake.url, "day=02.parquet"))
    pq.write_table(table.slice(0, 4999), os.path.join(lake.url, "day=98.parquet"), compression="zstd")
    assert validate_lake(lake).num_rows == 20_000 + 4999


def test_two_tiny_files_of_the_same_discrete_rows_are_not_refused(tmp_path):
    """Below MIN_COPY_ROWS two different files (e.g. micro-batches of yes/no answers) may hold the same
    multiset of rows by chance; from it up the same rows are a copy."""
    from dpstream.pipelines.validation.content_digest import MIN_COPY_ROWS

    def answers(rows: int, first: float):  # the same rows in another order: other bytes
        values = np.tile([first, 1.0 - first], rows // 2)
        return pa.table({**{f"x{j}": values for j in range(DIM)}, "y": values})

    for name, first in (("a", 0.0), ("b", 1.0)):
        local_put(str(tmp_path / "small" / f"{name}.parquet"), answers(MIN_COPY_ROWS - 2, first))
        local_put(str(tmp_path / "large" / f"{name}.parquet"), answers(MIN_COPY_ROWS, first))
    assert validate_lake(feature_spec(str(tmp_path / "small"))).num_rows == 2 * (MIN_COPY_ROWS - 2)
    with pytest.raises(LakeError, match=f"a.parquet and b.parquet hold the same {MIN_COPY_ROWS} rows"):
        validate_lake(feature_spec(str(tmp_path / "large")))
