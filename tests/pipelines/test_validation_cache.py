"""Validation reads again only the files that changed since their check was recorded."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpstream.models.kinds.base import LabelContract
from dpstream.pipelines import LakeError, LakeSpec, shuffle_once, validate_lake
from dpstream.pipelines.shuffle.location import validation_cache
from dpstream.pipelines.validation import validate as validate_module
from dpstream.pipelines.validation.cache import CACHE_FOLDER

from .conftest import DIM, local_put, make_table


@pytest.fixture()
def counted_checks(monkeypatch):
    """The files check_file reads, in call order."""
    read: list[str] = []
    check_file = validate_module.check_file

    def counting(url, *args, **kwargs):
        read.append(os.path.basename(url))
        return check_file(url, *args, **kwargs)

    monkeypatch.setattr(validate_module, "check_file", counting)
    return read


def test_unchanged_files_are_not_read_again_and_the_summary_is_the_same(lake, tmp_path, counted_checks):
    cache = validation_cache(str(tmp_path / "shuffled"), lake, None)
    first = validate_lake(lake, cache=cache)
    assert len(counted_checks) == 4 and os.listdir(tmp_path / "shuffled" / CACHE_FOLDER)
    again = validate_lake(lake, cache=validation_cache(str(tmp_path / "shuffled"), lake, None))
    assert len(counted_checks) == 4  # nothing read the second time
    assert again == first and again.fingerprint == first.fingerprint
    # The shuffle accepts the cache's folder in its location.
    assert shuffle_once(lake, str(tmp_path / "shuffled"), summary=again).num_rows == 20_000


def test_a_rewritten_file_is_checked_again_and_its_problem_found(lake, tmp_path, counted_checks):
    shuffled = str(tmp_path / "shuffled")
    validate_lake(lake, cache=validation_cache(shuffled, lake, None))
    path = os.path.join(lake.url, "day=02.parquet")
    table = make_table(5000, 2, start_id=10_000)
    values = table.column("x3").to_numpy().copy()
    values[17] = np.nan
    local_put(path, table.set_column(table.schema.get_field_index("x3"), "x3", [values]))
    counted_checks.clear()
    with pytest.raises(LakeError, match=r"day=02\.parquet.*row 17.*'x3'|day=02\.parquet.*'x3'.*row 17"):
        validate_lake(lake, cache=validation_cache(shuffled, lake, None))
    assert counted_checks == ["day=02.parquet"]


def test_another_setting_does_not_reuse_the_checks(lake, tmp_path, counted_checks):
    shuffled = str(tmp_path / "shuffled")
    validate_lake(lake, cache=validation_cache(shuffled, lake, None))
    other = LakeSpec(lake.url, tuple(f"x{j}" for j in range(DIM - 1)), "y")
    validate_lake(other, cache=validation_cache(shuffled, other, None))
    contract = LabelContract(num_classes=2)
    with pytest.raises(LakeError, match="label"):  # a regression label is not a class code
        validate_lake(lake, labels=contract, cache=validation_cache(shuffled, lake, contract))
    assert len(counted_checks) >= 9


def test_nothing_is_recorded_where_a_shuffle_could_not_write(lake, tmp_path):
    assert validation_cache(os.path.join(lake.url, "inside"), lake, None) is None
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    assert validation_cache(str(foreign), lake, None) is None
    validate_lake(lake, cache=None)
    assert not any(CACHE_FOLDER in names for _, names, _ in os.walk(lake.url))
    assert sorted(os.listdir(foreign)) == ["todo.txt"]


def test_a_damaged_cache_means_a_full_validation(lake, tmp_path, counted_checks):
    shuffled = tmp_path / "shuffled"
    first = validate_lake(lake, cache=validation_cache(str(shuffled), lake, None))
    (record,) = (shuffled / CACHE_FOLDER).iterdir()
    record.write_text("{not json")
    assert validate_lake(lake, cache=validation_cache(str(shuffled), lake, None)) == first
    assert len(counted_checks) == 8
    assert pq.read_metadata(os.path.join(lake.url, "day=00.parquet")).num_rows == 5000


def test_only_strong_stamps_are_trusted_and_a_deferred_cache_writes_on_commit(lake, tmp_path, counted_checks):
    """An object store without ETags stamps size and time only, which a same-size rewrite can keep: its
    files are read every time. A command that may still refuse the lake after validating it (the
    flows) records the checks only when it commits."""
    from dpstream.pipelines.validation.cache import ValidationCache

    assert ValidationCache.strong("local:1:2:3:4") and ValidationCache.strong("object:9b2cf5:10:2026")
    assert not ValidationCache.strong("object::10:2026") and not ValidationCache.strong("")
    shuffled = tmp_path / "shuffled"
    cache = validation_cache(str(shuffled), lake, None, deferred=True)
    validate_lake(lake, cache=cache)
    assert not shuffled.exists()
    cache.commit()
    (record,) = (shuffled / CACHE_FOLDER).iterdir()
    entry = next(iter(cache.load().values()))
    assert cache.reuse(entry, entry["stamp"], None) is not None
    assert cache.reuse(entry, f"object::{entry['size']}:t", None) is None
    assert record.stat().st_size > 0 and len(counted_checks) == 4
