"""Delta Lake and Iceberg sources: a pinned version's live rows, exactly, and nothing else.

Every test writes a real table with its own library (``deltalake``, ``pyiceberg`` with a SQL catalog),
changes it the way data engineers do (deletes, updates, overwrites, compaction, deletion vectors,
positional and equality deletes), and checks the rows dpstream validates and shuffles against the
table's own reader, the files it opens against the version's live files, and the table's bytes against
a snapshot taken before.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import shutil

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from dpstream.pipelines import LakeError, LakeSpec, shuffle_once, validate_lake
from dpstream.pipelines.shuffle.once import read_manifest
from dpstream.pipelines.sources.protocol import SourceVersion, open_source
from dpstream.pipelines.sources.spec import SourceSpec

from .tables import add_deletion_vector, add_iceberg_deletes

FEATURES = ("key", "x1")


def events(rows: int, start: int = 0, seed: int = 0) -> pa.Table:
    """Rows whose feature ``key`` names them (it is the id, as a float), a label and a partition column."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + rows)
    return pa.table(
        {
            "id": ids,
            "key": ids.astype(np.float64),
            "x1": rng.standard_normal(rows),
            "y": rng.standard_normal(rows),
            "g": ids % 3,
        }
    )


def tree_digest(root: str) -> dict[str, str]:
    """Every file under ``root`` with the SHA-256 of its bytes: the table, before and after."""
    found = {}
    for path in sorted(glob.glob(f"{root}/**/*", recursive=True)):
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return found


@pytest.fixture()
def opened(monkeypatch):
    """The paths every fsspec filesystem opens in this process."""
    paths: list[str] = []
    original = fsspec.spec.AbstractFileSystem.open

    def spy(self, path, *args, **kwargs):
        paths.append(self._strip_protocol(path))
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(fsspec.spec.AbstractFileSystem, "open", spy)
    return paths


def shuffled_keys(manifest) -> np.ndarray:
    fs, root = fsspec.core.url_to_fs(manifest.url)
    parts = [f"{root}/{manifest.generation}/{part.name}" for part in manifest.parts]
    return np.sort(
        np.concatenate([pq.read_table(fs.open(p, "rb"), columns=["key"])["key"].to_numpy() for p in parts])
    )


def live_delta_files(table: DeltaTable) -> set[str]:
    return {os.path.normpath(uri) for uri in table.file_uris()}


@pytest.fixture()
def deleted_and_compacted(tmp_path):
    """A Delta table of 3,000 rows in ten appends of 300 (versions 0-9); 30 % deleted by two deletes that
    rewrite five files and remove one (versions 10, 11); then compacted into one file (version 12)."""
    url = str(tmp_path / "events")
    for start in range(0, 3000, 300):
        write_deltalake(url, events(300, start, seed=start), mode="append")
    DeltaTable(url).delete("id % 10 < 3 and id < 1500")
    DeltaTable(url).delete("id >= 2550")
    DeltaTable(url).optimize.compact()
    assert DeltaTable(url).version() == 12 and len(DeltaTable(url).file_uris()) == 1
    return url


def test_delta_after_deletes_and_compaction_validates_and_shuffles_exactly_the_live_rows(
    deleted_and_compacted, tmp_path, opened
):
    url = deleted_and_compacted
    table = DeltaTable(url)
    expected = np.sort(table.to_pyarrow_table(columns=["key"])["key"].to_numpy())
    assert expected.size == 2100 and table.version() == 12
    on_disk = {os.path.normpath(p) for p in glob.glob(f"{url}/**/*.parquet", recursive=True)}
    removed = on_disk - live_delta_files(table)
    assert len(removed) >= 10  # the appends' files and the deletes' rewrites stay until VACUUM
    before = tree_digest(url)

    spec = LakeSpec(url, FEATURES, "y")
    summary = validate_lake(spec)
    assert summary.num_rows == 2100
    assert summary.version == SourceVersion("delta", 12, table.metadata().id, summary.version.committed_at)
    assert {os.path.normpath(f.path) for f in summary.files} == live_delta_files(table)
    manifest = shuffle_once(spec, str(tmp_path / "shuffled"), rows_per_file=500, summary=summary)

    assert manifest.source_rows == manifest.num_rows == 2100
    assert np.array_equal(shuffled_keys(manifest), expected)
    read = {os.path.normpath(path) for path in opened if path.endswith(".parquet") and path.startswith(url)}
    assert read == live_delta_files(table) and not read & removed
    assert tree_digest(url) == before  # the source table is only read
    recorded = read_manifest(str(tmp_path / "shuffled"))
    assert recorded.source_version == summary.version and recorded.row_order.split("/")[0].endswith(
        "@delta-12"
    )


def test_delta_time_travel_pins_a_version_by_number_or_time(deleted_and_compacted):
    url = deleted_and_compacted
    spec = LakeSpec(url, FEATURES, "y")
    first = validate_lake(dataclasses.replace(spec, source=SourceSpec(version=0)))
    assert first.num_rows == 300 and first.version.version == 0
    history = {entry["version"]: entry["timestamp"] for entry in DeltaTable(url).history()}
    assert first.version.committed_at.startswith(
        np.datetime_as_string(np.datetime64(history[0], "ms"), unit="ms")[:19]
    )
    after_appends = validate_lake(dataclasses.replace(spec, source=SourceSpec(version=9)))
    assert after_appends.num_rows == 3000
    as_of = pd_iso(history[9])  # the newest version committed by then (two may share a millisecond)
    current_then = max(version for version, stamp in history.items() if stamp <= history[9] + 1)
    pinned = validate_lake(dataclasses.replace(spec, source=SourceSpec(as_of=as_of)))
    assert pinned.version.version == current_then >= 9
    with pytest.raises(
        LakeError, match=r"cannot be read at version 99 \(its versions run from 0 to 12\): .*lake.version"
    ):
        validate_lake(dataclasses.replace(spec, source=SourceSpec(version=99)))


def pd_iso(milliseconds: int) -> str:
    """An ISO-8601 UTC time a moment after ``milliseconds``: the version committed at it is current then."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp((milliseconds + 1) / 1000, UTC).isoformat()


def test_delta_updates_and_overwrites_are_read_as_the_version_has_them(tmp_path):
    url = str(tmp_path / "events")
    write_deltalake(url, events(600))
    DeltaTable(url).update(updates={"y": "y + 1000"}, predicate="id < 100")
    updated = validate_lake(LakeSpec(url, FEATURES, "y"))
    assert updated.num_rows == 600 and updated.version.version == 1
    write_deltalake(url, events(250, start=5000), mode="overwrite")
    before = tree_digest(url)
    overwritten = validate_lake(LakeSpec(url, FEATURES, "y"))
    assert overwritten.num_rows == 250 and overwritten.version.version == 2
    manifest = shuffle_once(LakeSpec(url, FEATURES, "y"), str(tmp_path / "shuffled"), rows_per_file=50)
    assert np.array_equal(shuffled_keys(manifest), np.arange(5000, 5250, dtype=float))
    assert tree_digest(url) == before


def test_delta_deletion_vectors_drop_their_rows(tmp_path, opened):
    url = str(tmp_path / "events")
    write_deltalake(url, events(1000), configuration={"delta.enableDeletionVectors": "true"})
    data_file = os.path.basename(next(iter(live_delta_files(DeltaTable(url)))))
    deleted = list(range(0, 1000, 4))
    version = add_deletion_vector(fsspec.filesystem("file"), url, data_file, deleted, 1000)
    vectors = pa.table(DeltaTable(url).deletion_vectors())  # the library's own decoding of the fixture
    assert np.flatnonzero(~np.array(vectors["selection_vector"][0].as_py())).tolist() == deleted
    before = tree_digest(url)

    summary = validate_lake(LakeSpec(url, FEATURES, "y"))
    assert summary.num_rows == 750 and summary.version.version == version
    manifest = shuffle_once(LakeSpec(url, FEATURES, "y"), str(tmp_path / "shuffled"), rows_per_file=150)
    assert np.array_equal(shuffled_keys(manifest), np.setdiff1d(np.arange(1000.0), deleted))
    assert tree_digest(url) == before
    # The vector is the version's: the version before it reads every row of the same file.
    assert validate_lake(LakeSpec(url, FEATURES, "y", source=SourceSpec(version=0))).num_rows == 1000


def test_delta_partition_columns_come_from_the_log(tmp_path):
    """A Delta table's partition column is not in its data files: as a feature it is read from the log."""
    url = str(tmp_path / "events")
    write_deltalake(url, events(900), partition_by=["g"])
    spec = LakeSpec(url, ("key", "g"), "y")
    summary = validate_lake(spec)
    assert summary.num_rows == 900 and all(f.constants for f in summary.files)
    manifest = shuffle_once(spec, str(tmp_path / "shuffled"), rows_per_file=300, summary=summary)
    fs, root = fsspec.core.url_to_fs(manifest.url)
    table = pa.concat_tables(
        pq.read_table(f"{root}/{manifest.generation}/{part.name}", columns=["key", "g"])
        for part in manifest.parts
    )
    assert np.array_equal(table["g"].to_numpy(), table["key"].to_numpy().astype(np.int64) % 3)


def test_a_delta_feature_dpstream_cannot_read_is_refused_in_one_line(tmp_path):
    url = str(tmp_path / "events")
    write_deltalake(url, events(100))
    first = f"{url}/_delta_log/{0:020d}.json"
    with open(first) as handle:
        lines = handle.read().splitlines()
    with open(first, "w") as handle:  # a table written with column mapping (names in files are physical ids)
        for line in lines:
            if '"protocol"' in line:
                line = (
                    '{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["columnMapping"],'
                    '"writerFeatures":["columnMapping"]}}'
                )
            handle.write(line + "\n")
    with pytest.raises(
        LakeError, match=r"uses reader feature\(s\) columnMapping, which dpstream does not read"
    ) as error:
        validate_lake(LakeSpec(url, FEATURES, "y"))
    assert "\n" not in str(error.value)


def test_the_fingerprint_is_the_data_a_byte_copy_is_the_same_lake_and_the_lineage_is_charged(
    deleted_and_compacted, tmp_path
):
    url = deleted_and_compacted
    latest = validate_lake(LakeSpec(url, FEATURES, "y"))
    copy = str(tmp_path / "copy")
    shutil.copytree(url, copy)
    assert validate_lake(LakeSpec(copy, FEATURES, "y")).fingerprint == latest.fingerprint

    grown_url = str(tmp_path / "grown")
    shutil.copytree(url, grown_url)
    write_deltalake(grown_url, events(100, start=9000), mode="append")
    grown = validate_lake(LakeSpec(grown_url, FEATURES, "y"))
    assert grown.fingerprint != latest.fingerprint
    assert set(latest.file_identities) < set(grown.file_identities)  # appended files: a grown lake

    before_delete = validate_lake(LakeSpec(url, FEATURES, "y", source=SourceSpec(version=9)))
    shared = set(before_delete.file_identities) & set(latest.file_identities)
    assert shared == {f"delta-table:{DeltaTable(url).metadata().id}"}  # compaction rewrote every file

    from dpstream.privacy import BudgetExceededError, Ledger, LifetimeBudget

    ledger = Ledger(str(tmp_path / "ledger"))
    budget = LifetimeBudget(epsilon=8.0, delta=1e-6)
    charge = {"mechanism": "test", "relation": "replace-one"}
    ledger.lake(before_delete.fingerprint, budget, before_delete.file_identities).claim("old", 1.0, **charge)
    compacted = ledger.lake(latest.fingerprint, budget, latest.file_identities)
    assert compacted.spent_mu() == pytest.approx(1.0)  # the same records, though every file is new
    with pytest.raises(BudgetExceededError):
        compacted.claim("new", budget.mu, **charge)


def test_iceberg_positional_deletes_are_applied_and_only_live_files_read(tmp_path, opened):
    table, catalog = iceberg_table(tmp_path)
    tasks = list(table.scan().plan_files())
    first = tasks[0].file
    deleted = list(range(0, first.record_count, 3)) + list(range(1, first.record_count, 10))
    add_iceberg_deletes(table, {first.file_path: deleted})
    table = catalog.load_table("ns.events")
    expected = np.sort(table.scan().to_arrow()["key"].to_numpy())
    assert expected.size == 1000 - len(set(deleted))
    location = table.location().removeprefix("file://")
    before = tree_digest(location)

    spec = LakeSpec(location, FEATURES, "y")
    summary = validate_lake(spec)
    assert summary.num_rows == expected.size
    assert summary.version == SourceVersion(
        "iceberg",
        table.current_snapshot().snapshot_id,
        str(table.metadata.table_uuid),
        summary.version.committed_at,
    )
    manifest = shuffle_once(spec, str(tmp_path / "shuffled"), rows_per_file=200, summary=summary)
    assert np.array_equal(shuffled_keys(manifest), expected)
    data = {f.file.file_path.removeprefix("file://") for f in table.scan().plan_files()}
    read = {p for p in opened if p.startswith(f"{location}/data/") and "deletes-" not in p}
    assert read == data
    assert tree_digest(location) == before

    named = dataclasses.replace(
        spec, source=SourceSpec(table="ns.events", catalog=tuple(catalog_settings(tmp_path).items()))
    )
    assert validate_lake(named).fingerprint == summary.fingerprint  # the catalog and the metadata file agree
    oldest = table.snapshots()[0].snapshot_id
    assert validate_lake(dataclasses.replace(spec, source=SourceSpec(version=oldest))).num_rows == 600


def test_iceberg_equality_deletes_are_refused_in_one_line(tmp_path):
    table, catalog = iceberg_table(tmp_path)
    add_iceberg_deletes(table, pa.table({"id": pa.array([3, 4], pa.int64())}), equality_ids=[1])
    with pytest.raises(
        LakeError, match=r"has equality delete files at snapshot \d+, which dpstream does not apply"
    ) as error:
        validate_lake(LakeSpec(table.location().removeprefix("file://"), FEATURES, "y"))
    assert "\n" not in str(error.value)


def catalog_settings(tmp_path) -> dict[str, str]:
    return {
        "name": "lake",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"file://{tmp_path}/warehouse",
    }


def iceberg_table(tmp_path, settings: dict[str, str] | None = None):
    """An Iceberg table ``ns.events`` of 1,000 rows in two appends (600, then 400), in a SQL catalog."""
    from pyiceberg.catalog import load_catalog

    settings = settings or catalog_settings(tmp_path)
    catalog = load_catalog(settings["name"], **{k: v for k, v in settings.items() if k != "name"})
    catalog.create_namespace("ns")
    data = events(1000)
    table = catalog.create_table("ns.events", schema=data.schema)
    table.append(data.slice(0, 600))
    table.append(data.slice(600))
    return catalog.load_table("ns.events"), catalog


def test_a_version_pin_on_a_parquet_folder_is_refused(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    pq.write_table(events(10), folder / "a.parquet")
    assert (
        validate_lake(LakeSpec(str(folder / "a.parquet"), FEATURES, "y")).num_rows == 10
    )  # one file as a lake
    with pytest.raises(LakeError, match=r"is a Parquet folder, which has none"):
        open_source(LakeSpec(str(folder), FEATURES, "y", source=SourceSpec(version=3)))


@pytest.mark.timeout(180)
def test_delta_and_iceberg_tables_on_s3(s3_bucket, tmp_path):
    """The same on the moto S3 server: a Delta table after deletes and compaction, and an Iceberg table
    with positional deletes, validated and shuffled to S3; neither table changes."""
    bucket, options = s3_bucket
    endpoint = options["client_kwargs"]["endpoint_url"]
    fs = fsspec.filesystem("s3", **options)
    delta_url = f"{bucket}/events"
    store = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    for start in range(0, 2000, 500):
        write_deltalake(delta_url, events(500, start), mode="append", storage_options=store)
    DeltaTable(delta_url, storage_options=store).delete("id < 600")
    DeltaTable(delta_url, storage_options=store).optimize.compact()
    latest = DeltaTable(delta_url, storage_options=store)
    assert latest.version() == 5 and len(latest.file_uris()) == 1  # compacted into one file
    before = {path: fs.info(path)["ETag"] for path in fs.find(delta_url)}
    spec = LakeSpec(delta_url, FEATURES, "y", options)
    summary = validate_lake(spec)
    assert summary.num_rows == 1400 and summary.version.version == latest.version()
    manifest = shuffle_once(spec, f"{bucket}/shuffled", rows_per_file=350, summary=summary)
    expected = np.sort(
        DeltaTable(delta_url, storage_options=store).to_pyarrow_table(columns=["key"])["key"].to_numpy()
    )
    keys = np.sort(
        np.concatenate(
            [
                pq.read_table(
                    fs.open(f"{bucket}/shuffled/{manifest.generation}/{part.name}", "rb"), columns=["key"]
                )["key"].to_numpy()
                for part in manifest.parts
            ]
        )
    )
    assert np.array_equal(keys, expected)
    assert {path: fs.info(path)["ETag"] for path in fs.find(delta_url)} == before

    settings = {
        **catalog_settings(tmp_path),
        "warehouse": f"{bucket}/warehouse",
        "s3.endpoint": endpoint,
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "s3.region": "us-east-1",
    }
    table, _ = iceberg_table(tmp_path, settings)
    first = next(iter(table.scan().plan_files())).file
    add_iceberg_deletes(table, {first.file_path: list(range(0, first.record_count, 2))})
    location = table.location()
    iceberg = validate_lake(LakeSpec(location, FEATURES, "y", options))
    assert iceberg.num_rows == 1000 - (first.record_count + 1) // 2
    assert iceberg.version.format == "iceberg"


def test_storage_options_reach_both_libraries_in_their_own_spelling(monkeypatch):
    from dpstream.pipelines.sources.table_options import delta_storage_options, iceberg_properties

    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    options = {"key": "K", "secret": "S", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}
    assert delta_storage_options("s3://b/t", options) == {
        "AWS_ACCESS_KEY_ID": "K",
        "AWS_SECRET_ACCESS_KEY": "S",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
    }
    assert iceberg_properties("s3://b/t", options)["s3.endpoint"] == "http://127.0.0.1:9000"
    assert delta_storage_options("/data/t", options) is None and iceberg_properties("/data/t", options) == {}


def test_deletion_vectors_on_a_partition_whose_name_is_percent_encoded(tmp_path):
    """A partition folder's name is percent-encoded in storage (``city=New%20York``) and again in the log
    (``city=New%2520York``), and the deletion vectors name it as the log does: the deletes must still reach
    their file."""
    url = str(tmp_path / "events")
    data = events(600).append_column("city", pa.array(["New York", "Paris: Nord"] * 300))
    write_deltalake(url, data, partition_by=["city"], configuration={"delta.enableDeletionVectors": "true"})
    actions = pa.table(DeltaTable(url).get_add_actions(flatten=True)).to_pylist()
    target = next(action for action in actions if action["partition.city"] == "New York")
    assert "%2520" in target["path"]
    add_deletion_vector(
        fsspec.filesystem("file"), url, target["path"], list(range(0, 300, 3)), 300, {"city": "New York"}
    )
    summary = validate_lake(LakeSpec(url, FEATURES, "y"))
    assert summary.num_rows == 500
    manifest = shuffle_once(LakeSpec(url, FEATURES, "y"), str(tmp_path / "shuffled"), rows_per_file=100)
    new_york = np.sort(data.filter(pa.compute.equal(data["city"], "New York"))["key"].to_numpy())
    expected = np.sort(np.concatenate([np.delete(new_york, np.arange(0, 300, 3)), np.arange(1, 600, 2.0)]))
    assert np.array_equal(shuffled_keys(manifest), expected)


def test_partition_columns_of_any_type_and_files_without_statistics(tmp_path):
    """A timestamp partition column that no config reads does not stop the table being read; a log whose
    add actions carry no statistics (they are optional) is read with the rows the files hold."""
    from datetime import UTC, datetime

    url = str(tmp_path / "events")
    stamps = pa.array(
        [datetime(2026, 1, 1 + i % 2, tzinfo=UTC) for i in range(400)], pa.timestamp("us", tz="UTC")
    )
    write_deltalake(url, events(400).append_column("day", stamps), partition_by=["day"])
    assert validate_lake(LakeSpec(url, FEATURES, "y")).num_rows == 400
    log = f"{url}/_delta_log/{0:020d}.json"
    import json

    with open(log) as handle:
        actions = [json.loads(line) for line in handle]
    with open(log, "w") as handle:
        for action in actions:
            action.get("add", {}).pop("stats", None)
            handle.write(json.dumps(action) + "\n")
    assert validate_lake(LakeSpec(url, FEATURES, "y")).num_rows == 400


def test_iceberg_files_written_before_a_rename_are_refused_not_read_as_another_column(tmp_path):
    table, catalog = iceberg_table(tmp_path)
    with table.update_schema() as update:
        update.rename_column("x1", "old")
    table = catalog.load_table("ns.events")
    with table.update_schema() as update:
        update.add_column("x1", table.schema().find_field("old").field_type)
    table = catalog.load_table("ns.events")
    table.append(
        events(50, start=5000)
        .rename_columns(["id", "key", "old", "y", "g"])
        .append_column("x1", pa.array(np.ones(50)))
    )
    with pytest.raises(
        LakeError, match=r"column 'x1' has field id \d+, but the table's 'x1' at this snapshot is field id"
    ):
        validate_lake(LakeSpec(table.location().removeprefix("file://"), FEATURES, "y"))


def test_a_copied_iceberg_table_pointing_at_the_original_files_is_refused(tmp_path):
    table, _ = iceberg_table(tmp_path)
    location = table.location().removeprefix("file://")
    copy = str(tmp_path / "copy")
    shutil.copytree(location, copy)  # its metadata still names the original's data files
    with pytest.raises(LakeError, match=r"lists data file .* outside .*copy.*a copied or cloned table"):
        validate_lake(LakeSpec(copy, FEATURES, "y"))


def test_careless_version_settings_are_refused_naming_the_right_key(deleted_and_compacted, tmp_path):
    url = deleted_and_compacted
    spec = LakeSpec(url, FEATURES, "y")
    refusals = {
        SourceSpec(
            version=2, pinned_by="snapshot_id"
        ): r"lake.snapshot_id pins an Iceberg snapshot, .* lake.version",
        SourceSpec(
            as_of="2020-01-01T00:00:00+00:00"
        ): r"lake.as_of 2020-01-01.* is before the Delta table .* existed",
        SourceSpec(version=99): r"its versions run from 0 to 12",
    }
    for source, message in refusals.items():
        with pytest.raises(LakeError, match=message):
            validate_lake(dataclasses.replace(spec, source=source))
    with pytest.raises(LakeError, match=r"a table's log or metadata folder: point lake.url at the table"):
        validate_lake(LakeSpec(f"{url}/_delta_log", FEATURES, "y"))
    table, _ = iceberg_table(tmp_path)
    iceberg = LakeSpec(table.location().removeprefix("file://"), FEATURES, "y")
    with pytest.raises(LakeError, match=r"lake.version pins a Delta version, .* lake.snapshot_id"):
        validate_lake(dataclasses.replace(iceberg, source=SourceSpec(version=1, pinned_by="version")))


def test_a_table_reached_through_dot_dot_or_a_link_is_inside_itself(tmp_path):
    """A table's log holds absolute paths; `../tables/t`, `tables//t` or a symlink name the same folder and
    must not be refused as a copy pointing elsewhere."""
    from .conftest import make_table

    table = tmp_path / "tables" / "events"
    write_deltalake(str(table), make_table(300, 0))
    (tmp_path / "configs").mkdir()
    os.symlink(table, tmp_path / "link")
    names = [f"{tmp_path}/configs/../tables/events", f"{tmp_path}/tables//events", str(tmp_path / "link")]
    for url in names:
        assert validate_lake(LakeSpec(url, ("x0", "x1"), "y")).num_rows == 300, url


def test_a_parquet_folder_of_symbolic_links_is_refused_naming_the_link(tmp_path):
    """Files linked into the lake's folder live elsewhere: refused with the link and its target named
    (not as a cloned table), before anything is read; hard links are the lake's own files."""
    elsewhere, lake, hard = tmp_path / "elsewhere", tmp_path / "lake", tmp_path / "hard"
    for folder in (elsewhere, lake, hard):
        folder.mkdir()
    table = pa.table({"x0": np.arange(5.0), "x1": np.ones(5), "y": np.zeros(5)})
    pq.write_table(table, elsewhere / "part-0.parquet")
    (lake / "part-0.parquet").symlink_to(elsewhere / "part-0.parquet")
    with pytest.raises(
        LakeError, match=r"part-0.parquet is a symbolic link .* to .*elsewhere/part-0.parquet, outside .*lake"
    ):
        validate_lake(LakeSpec(str(lake), ("x0", "x1"), "y"))
    os.link(elsewhere / "part-0.parquet", hard / "part-0.parquet")
    assert sum(file.rows for file in validate_lake(LakeSpec(str(hard), ("x0", "x1"), "y")).files) == 5
