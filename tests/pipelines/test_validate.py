"""Every bad lake gets a clear error naming the file, column and row, before any budget is spent."""

import dataclasses
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.models.kinds.base import LabelContract
from dpstream.pipelines import LakeError, LakeSpec, shuffle_once, validate_lake
from dpstream.pipelines.sources.spec import SourceSpec

from .conftest import DIM, feature_spec, local_put, make_table, write_lake


def test_valid_lake_summary(lake):
    summary = validate_lake(lake)
    assert summary.num_rows == 20_000 and summary.num_features == DIM and len(summary.files) == 4
    assert summary.fingerprint == validate_lake(lake).fingerprint
    assert summary.fingerprint.startswith("lake-")


def test_fixed_size_list_features(tmp_path):
    root = str(tmp_path / "vec")
    write_lake(local_put, root, vector=True)
    assert validate_lake(feature_spec(root, vector=True)).num_features == DIM


def corrupt(lake_root, name, table):
    pq.write_table(table, os.path.join(lake_root, name))


# Each turns the lake's day=02.parquet bad; the CLI tests reuse them (exit code 2).
BAD_FILE_MUTATIONS = [
    (lambda t: t.drop_columns(["x3"]), r"day=02.parquet: column 'x3' is missing"),
    (
        lambda t: t.set_column(t.schema.get_field_index("x1"), "x1", pa.array(["a"] * t.num_rows)),
        r"day=02.parquet: feature column 'x1' has non-numeric type string",
    ),
    (
        lambda t: t.set_column(t.schema.get_field_index("y"), "y", pa.array(["a"] * t.num_rows)),
        r"label column 'y' has non-numeric type",
    ),
    (
        lambda t: t.set_column(
            t.schema.get_field_index("x2"),
            "x2",
            pa.array(np.where(np.arange(t.num_rows) == 1234, np.nan, 1.0).astype(np.float32)),
        ),
        r"day=02.parquet: row 1234 of column 'x2' is nan",
    ),
    (
        lambda t: t.set_column(
            t.schema.get_field_index("y"), "y", pa.array(np.where(np.arange(t.num_rows) == 77, np.inf, 1.0))
        ),
        r"row 77 of column 'y' is inf",
    ),
    (
        lambda t: t.set_column(
            t.schema.get_field_index("y"), "y", pa.array([None] * 5 + [1.0] * (t.num_rows - 5), pa.float64())
        ),
        r"row 0 of column 'y' is missing \(null\)",
    ),
    (
        lambda t: t.set_column(t.schema.get_field_index("x0"), "x0", t.column("x0").cast(pa.float64())),
        r"schema drift: column 'x0' is double in day=02.parquet but float",
    ),
    (lambda t: t.slice(0, 0), r"day=02.parquet is an empty file \(0 rows\)"),
]


@pytest.mark.parametrize("on_cluster", [False, True], ids=["in-process", "dask-tasks"])
@pytest.mark.parametrize("mutate, match", BAD_FILE_MUTATIONS)
def test_bad_lakes(lake, mutate, match, on_cluster, request):
    client = request.getfixturevalue("dask_client") if on_cluster else None
    path = os.path.join(lake.url, "day=02.parquet")
    corrupt(lake.url, "day=02.parquet", mutate(pq.read_table(path)))
    with pytest.raises(LakeError, match=match):
        validate_lake(lake, client=client)


def test_validation_on_workers_gives_the_same_summary(lake, dask_client):
    here, there = validate_lake(lake), validate_lake(lake, client=dask_client)
    assert there == here
    assert [f.identity for f in there.files] == [f.identity for f in here.files]


def test_the_first_bad_file_in_path_order_is_reported_whichever_task_ends_first(lake, dask_client):
    # day=00 is large, so its task ends last; its problem is still the one reported.
    first = os.path.join(lake.url, "day=00.parquet")
    table = pq.read_table(first)
    big = pa.concat_tables([table] * 40)
    values = np.ones(big.num_rows)
    values[-1] = np.nan
    corrupt(
        lake.url, "day=00.parquet", big.set_column(big.schema.get_field_index("y"), "y", pa.array(values))
    )
    corrupt(lake.url, "day=03.parquet", pq.read_table(os.path.join(lake.url, "day=03.parquet")).slice(0, 0))
    for client in (None, dask_client):
        with pytest.raises(LakeError, match=rf"day=00.parquet: row {big.num_rows - 1} of column 'y' is nan"):
            validate_lake(lake, client=client)


def test_wrong_vector_length(tmp_path):
    root = str(tmp_path / "vec")
    os.makedirs(root)
    rows = [[0.1] * DIM] * 10 + [[0.1] * (DIM - 1)] + [[0.1] * DIM] * 5
    pq.write_table(
        pa.table({"features": pa.array(rows, pa.list_(pa.float32())), "y": np.zeros(16)}), f"{root}/a.parquet"
    )
    with pytest.raises(
        LakeError, match=r"a.parquet: row 10 of column 'features' has a vector of length 5, expected 6"
    ):
        validate_lake(feature_spec(root, vector=True))


def test_corrupt_and_truncated_files(lake):
    path = os.path.join(lake.url, "day=01.parquet")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(LakeError, match=r"day=01.parquet is corrupt or truncated"):
        validate_lake(lake)
    open(path, "wb").write(b"not parquet at all")
    with pytest.raises(LakeError, match=r"day=01.parquet is corrupt or truncated"):
        validate_lake(lake)


def test_a_file_the_reader_may_not_read_is_not_called_corrupt(lake, monkeypatch):
    import dpstream.pipelines.validation.validate as validate_module

    real_open_url = validate_module.open_url

    def denied(url, options=None):
        fs, path = real_open_url(url, options)

        class Denied(type(fs)):
            def open(self, *args, **kwargs):
                raise PermissionError("Access Denied")

        return Denied(), path

    monkeypatch.setattr(validate_module, "open_url", denied)
    with pytest.raises(
        LakeError, match=r"day=00.parquet cannot be read here: Access Denied. Grant read access.*prepare_on"
    ):
        validate_lake(lake)


def test_empty_and_missing_lakes(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(LakeError, match="is empty: no .parquet files"):
        validate_lake(feature_spec(str(tmp_path / "empty")))
    with pytest.raises(
        LakeError, match=r"nowhere does not exist \(no such folder or prefix\): check lake.url"
    ):
        validate_lake(feature_spec(str(tmp_path / "nowhere")))


def test_unreadable_s3_location(s3_server):
    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": s3_server}}
    with pytest.raises(
        LakeError, match=r"cannot read the lake location s3://no-such-bucket/lake.*credentials"
    ):
        validate_lake(feature_spec("s3://no-such-bucket/lake", **options))


def test_bad_spec_values():
    with pytest.raises(LakeError, match="features is empty"):
        LakeSpec("x", (), "y")
    with pytest.raises(LakeError, match="label must be a column name"):
        LakeSpec("x", ("a",), "")


def test_nothing_written_when_validation_fails(lake, tmp_path):
    corrupt(lake.url, "day=03.parquet", make_table(10, 3).drop_columns(["y"]))
    before = {p: os.path.getmtime(os.path.join(lake.url, p)) for p in os.listdir(lake.url)}
    with pytest.raises(LakeError, match="column 'y' is missing"):
        shuffle_once(lake, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    assert before == {p: os.path.getmtime(os.path.join(lake.url, p)) for p in os.listdir(lake.url)}


def test_file_url_scheme(lake):
    spec = LakeSpec("file://" + lake.url, lake.features, lake.label)
    assert validate_lake(spec).num_rows == 20_000


def test_fingerprint_is_the_data_not_the_config(lake, tmp_path):
    """Reordered or other columns, renamed files, a byte copy elsewhere: one fingerprint. New bytes: another."""
    import shutil

    base = validate_lake(lake).fingerprint
    reordered = LakeSpec(lake.url, tuple(reversed(lake.features)), "y")
    other_columns = LakeSpec(lake.url, ("x0", "row_id"), "x1")
    assert validate_lake(reordered).fingerprint == base
    assert validate_lake(other_columns).fingerprint == base
    copy = tmp_path / "copy" / "renamed"
    shutil.copytree(lake.url, copy)
    for i, name in enumerate(sorted(os.listdir(copy))):
        os.rename(copy / name, copy / f"file-{9 - i}.parquet")
    assert validate_lake(feature_spec(str(copy))).fingerprint == base
    summary = validate_lake(feature_spec(str(copy)))
    assert len(summary.file_identities) == 4 and all(i.startswith("md5:") for i in summary.file_identities)
    local_put(str(copy / "appended.parquet"), make_table(100, 99))
    grown = validate_lake(feature_spec(str(copy)))
    assert grown.fingerprint != base and set(summary.file_identities) < set(grown.file_identities)


def test_s3_copy_of_a_local_lake_has_the_same_fingerprint(lake, s3_bucket):
    """S3 reports a single-part object's MD5 as its ETag: the copy is recognised without reading it."""
    import s3fs

    url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    for name in os.listdir(lake.url):
        fs.pipe_file(f"{url[5:]}/copied/{name}", open(os.path.join(lake.url, name), "rb").read())
    assert (
        validate_lake(feature_spec(f"{url}/copied", **options)).fingerprint == validate_lake(lake).fingerprint
    )


def labelled_lake(root, label_cycles) -> object:
    """Two files whose labels cycle through ``label_cycles[i]``: the spec of the lake."""
    for i, labels in enumerate(label_cycles):
        table = make_table(300, i)
        values = np.resize(np.array(labels, dtype=np.float64), 300)
        local_put(
            str(root / f"part-{i}.parquet"),
            table.set_column(table.schema.get_field_index("y"), "y", pa.array(values)),
        )
    return feature_spec(str(root))


@pytest.mark.parametrize(
    "labels, ok",
    [
        ([0, 1], True),
        ([-1, 1], True),
        ([1, 1], True),
        ([0.0, 1.0], True),
        ([0, 1, 2], False),
        ([-1, 0, 1], False),
        ([0.25, 0.5], False),
    ],
)
def test_classification_labels_are_a_public_binary_set(tmp_path, labels, ok):
    spec = labelled_lake(tmp_path / "raw", [labels, labels])
    validate_lake(spec)  # a regression lake takes any finite label
    if ok:
        validate_lake(spec, labels=LabelContract(num_classes=2))
    else:
        with pytest.raises(
            LakeError,
            match=r"part-0\.parquet: label column 'y' holds the values \{.*\}, but this classifier needs two "
            r"classes coded \{0, 1\} or \{-1, \+1\}",
        ):
            validate_lake(spec, labels=LabelContract(num_classes=2))


def test_k_public_classes_are_their_positions(tmp_path):
    spec = labelled_lake(tmp_path / "raw", [[0, 1, 2], [2, 1]])
    validate_lake(spec, labels=LabelContract(classes=("lo", "mid", "hi")))
    with pytest.raises(
        LakeError, match=r"holds the values \{0, 1, 2\}, but this classifier needs two classes"
    ):
        validate_lake(spec, labels=LabelContract(num_classes=2))
    with pytest.raises(LakeError, match=r"needs 2 classes \(lo, hi\) coded as|needs two classes \(lo, hi\)"):
        validate_lake(spec, labels=LabelContract(classes=("lo", "hi")))


def test_continuous_label_refused_for_a_classifier_shows_few_values(lake):
    with pytest.raises(LakeError, match=r"holds the values \{(-?\d[^,]*, ){8}\.\.\.\}"):
        validate_lake(lake, labels=LabelContract(num_classes=2))


def test_stray_files_are_reported_not_silently_ignored(lake):
    with open(os.path.join(lake.url, "extra rows.csv"), "w") as handle:
        handle.write("x0,y\n1,2\n")
    with open(os.path.join(lake.url, "_SUCCESS"), "w"):
        pass  # bookkeeping: neither read nor reported
    summary = validate_lake(lake)
    assert [os.path.basename(path) for path in summary.stray_files] == ["extra rows.csv"]
    assert "extra rows.csv" in summary.stray_note() and "not read" in summary.stray_note()
    assert summary.num_rows == 20_000  # the CSV is not counted


def test_a_lake_of_only_stray_files_says_what_it_found(tmp_path):
    os.makedirs(tmp_path / "csvs")
    (tmp_path / "csvs" / "data.csv").write_text("x0,y\n1,2\n")
    with pytest.raises(
        LakeError, match=r"no .parquet files found \(it holds 1 other file\(s\), e.g. data.csv"
    ):
        validate_lake(feature_spec(str(tmp_path / "csvs")))


def test_a_duplicated_column_is_named_as_duplicated_not_missing(lake):
    path = os.path.join(lake.url, "day=02.parquet")
    table = pq.read_table(path)
    doubled = pa.Table.from_arrays(
        list(table.columns) + [table.column("x1")], names=table.column_names + ["x1"]
    )
    pq.write_table(doubled, path)
    with pytest.raises(
        LakeError, match=r"day=02.parquet: column 'x1' appears 2 times .* distinct column names"
    ):
        validate_lake(lake)


@pytest.mark.parametrize(
    "marker, where, kind",
    [
        ("_delta_log/00000000000000000000.json", "", "a Delta Lake table"),
        ("events/_delta_log/00000000000000000003.checkpoint.parquet", "/events", "a Delta Lake table"),
        ("metadata/00001-5d8f.metadata.json", "", "an Apache Iceberg table"),
    ],
    ids=["delta", "nested-delta", "iceberg"],
)
def test_a_table_format_is_never_read_as_a_parquet_folder(lake, marker, where, kind):
    """A Delta or Iceberg folder keeps files its deletes and compactions removed: reading every Parquet file
    under it would train on deleted rows, so lake.format = "parquet" on it is refused, naming
    the table and the way out (a table below the URL's root is refused whatever the format says)."""
    path = os.path.join(lake.url, marker)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("{}")
    as_folder = dataclasses.replace(lake, source=SourceSpec(format="parquet"))
    for spec in (as_folder, lake) if where else (as_folder,):
        with pytest.raises(
            LakeError, match=rf"^{re.escape(lake.url + where)} is {kind}.*Point lake.url at the table itself"
        ):
            validate_lake(spec)
