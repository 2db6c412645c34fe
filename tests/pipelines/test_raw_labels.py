"""A clipped label's raw values (``RAW_LABEL_COLUMN``): written by `dpstream convert`, added as a lake with
[preprocess] is read, carried by the shuffle beside each row's prepared label, never a training column."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from dpstream.pipelines import LakeError, LakeSpec, shuffle_once
from dpstream.pipelines.conversion.convert import csv_to_parquet
from dpstream.pipelines.preprocessing.spec import RAW_LABEL_COLUMN, ConvertSpec
from dpstream.pipelines.shuffle.users import UserBounding

BOUNDS = (-30.0, 60.0)  # the delay's public range, in minutes


def delays(rows: int, seed: int = 0) -> pa.Table:
    """Flight delays in minutes, a heavy right tail past the public bound of 60, and a few early ones."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, rows)
    delay = np.round(-40 + 60 * x + rng.gamma(0.6, 40, rows), 0)
    return pa.table({"x": x, "delay": delay, "flight": np.arange(rows) % 50})


def spec(**overrides) -> ConvertSpec:
    kwargs = dict(
        columns=("x",), label="delay", bounds={"x": (0.0, 1.0), "delay": BOUNDS}, scale_range=(-1.0, 1.0)
    )
    kwargs.update(overrides)
    return ConvertSpec(**kwargs)


def converted(tmp_path: Path, rows: int = 3000, **overrides) -> tuple[str, pa.Table]:
    csv = tmp_path / "delays.csv"
    source = delays(rows)
    pcsv.write_csv(source, csv)
    out = str(tmp_path / "lake")
    csv_to_parquet(str(csv), out, spec(**overrides))
    return out, source


def mapped(raw: np.ndarray) -> np.ndarray:
    """The prepared label: clipped to BOUNDS, mapped onto [−1, 1]."""
    low, high = BOUNDS
    return -1 + 2 * (np.clip(raw, low, high) - low) / (high - low)


def test_convert_keeps_a_clipped_labels_raw_values_beside_it(tmp_path):
    out, source = converted(tmp_path)
    lake = pq.read_table(out)
    raw = lake.column(RAW_LABEL_COLUMN).to_numpy()
    np.testing.assert_array_equal(raw, source.column("delay").to_numpy())
    np.testing.assert_allclose(lake.column("delay").to_numpy(), mapped(raw), rtol=0, atol=1e-12)
    assert ((raw < BOUNDS[0]) | (raw > BOUNDS[1])).mean() > 0.05  # the example does clip
    # Not a feature: the record (copied into every model.json) names the features without it.
    assert RAW_LABEL_COLUMN not in spec().output_columns()


@pytest.mark.parametrize(
    "overrides",
    [
        {"bounds": {"x": (0.0, 1.0)}, "unscaled": ("delay",)},  # kept as stored: its own raw value
        {"label": "late", "label_classes": ("no", "yes"), "bounds": {"x": (0.0, 1.0)}},  # a class code
    ],
)
def test_a_label_never_clipped_has_no_raw_column(tmp_path, overrides):
    csv = tmp_path / "delays.csv"
    table = delays(200)
    pcsv.write_csv(
        table.append_column("late", pa.array(np.where(table.column("delay").to_numpy() > 15, "yes", "no"))),
        csv,
    )
    csv_to_parquet(str(csv), str(tmp_path / "lake"), spec(**overrides))
    assert RAW_LABEL_COLUMN not in pq.read_table(tmp_path / "lake").column_names


def test_a_source_column_of_the_reserved_name_is_refused():
    with pytest.raises(LakeError, match="rename it"):
        spec(columns=("x", RAW_LABEL_COLUMN), bounds={"x": (0, 1), RAW_LABEL_COLUMN: (0, 1), "delay": BOUNDS})


def shuffled_rows(manifest) -> pa.Table:
    root = Path(manifest.url) / manifest.generation
    return pa.concat_tables([pq.read_table(root / part.name) for part in manifest.parts])


def check_carried(manifest, source: pa.Table) -> None:
    """Every shuffled row's raw label is its source row's, and its prepared label the raw one clipped."""
    rows = shuffled_rows(manifest)
    raw = rows.column(RAW_LABEL_COLUMN).to_numpy()
    assert RAW_LABEL_COLUMN in manifest.schema.names
    np.testing.assert_allclose(rows.column("delay").to_numpy(), mapped(raw), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.sort(raw), np.sort(source.column("delay").to_numpy()))


def test_the_shuffle_carries_a_converted_lakes_raw_labels(tmp_path):
    out, source = converted(tmp_path)
    manifest = shuffle_once(LakeSpec(out, ("x",), "delay"), str(tmp_path / "shuffled"), rows_per_file=600)
    check_carried(manifest, source)
    assert manifest.spec().read_columns == ["x", "delay"]  # training reads the features and the label only


def test_a_user_level_shuffle_carries_them_too(tmp_path):
    out, source = converted(tmp_path, passthrough=("flight",), user_column="flight")
    lake = LakeSpec(out, ("x",), "delay", user_column="flight")
    bounding = UserBounding("flight", 1000)  # every row of every flight kept: the sums compare whole
    manifest = shuffle_once(lake, str(tmp_path / "shuffled"), rows_per_file=600, users=bounding)
    check_carried(manifest, source)


def test_preprocess_on_read_carries_the_raw_labels_of_the_stored_rows(tmp_path):
    source = delays(2000)
    (tmp_path / "raw").mkdir()
    pq.write_table(source, tmp_path / "raw" / "part-0.parquet")
    prepare = spec(on_read=True, missing="impute")
    lake = LakeSpec(str(tmp_path / "raw"), tuple(prepare.output_columns()), "delay", preprocess=prepare)
    manifest = shuffle_once(lake, str(tmp_path / "shuffled"), rows_per_file=500)
    check_carried(manifest, source)


def test_a_lake_of_converted_and_other_files_still_shuffles(tmp_path):
    out, source = converted(tmp_path, rows_per_file=1500)
    other = pq.read_table(Path(out) / "part-00001.parquet").drop_columns([RAW_LABEL_COLUMN])
    pq.write_table(other, Path(out) / "part-00001.parquet")  # a file added without raw labels
    manifest = shuffle_once(LakeSpec(out, ("x",), "delay"), str(tmp_path / "shuffled"), rows_per_file=600)
    raw = shuffled_rows(manifest).column(RAW_LABEL_COLUMN)
    assert raw.null_count == 1500 and len(raw) == 3000
