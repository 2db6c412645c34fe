"""A table format is one module plus one registry entry: a toy format registered here is detected at a
lake's root, opened by open_source, read by validation and accepted by lake.format, and the Delta and
Iceberg formats are declared the same way."""

from __future__ import annotations

import os

import pytest

from dpstream.pipelines import LakeError, LakeSpec, SourceSpec, open_source, validate_lake
from dpstream.pipelines.sources.formats import SourceFormat, format_names, register, unregister
from dpstream.pipelines.sources.protocol import ParquetFolder, detect_format

from .conftest import feature_spec, local_put, write_lake

MARKER = "_toy_log"


class ToySource(ParquetFolder):
    """A Parquet folder that says it is a toy table (what a real format would read from its log)."""


@pytest.fixture()
def toy():
    detect = lambda fs, root: fs.isdir(f"{root}/{MARKER}")  # noqa: E731
    register(
        SourceFormat("toy", detect=detect, open=ToySource, described="a toy table (_toy_log/)", marker=MARKER)
    )
    try:
        yield "toy"
    finally:
        unregister("toy")


def test_a_registered_format_is_detected_opened_and_read(toy, tmp_path):
    root = tmp_path / "table"
    write_lake(local_put, str(root), files=2, rows=1000)
    plain = feature_spec(str(root))
    assert detect_format(plain) == "parquet"
    os.makedirs(root / MARKER)
    assert detect_format(plain) == toy and isinstance(open_source(plain), ToySource)
    assert validate_lake(plain).num_rows == 2000
    assert format_names()[:4] == ("auto", "parquet", "delta", "iceberg") and format_names()[-1] == toy
    named = LakeSpec(plain.url, plain.features, plain.label, source=SourceSpec(toy))
    assert isinstance(open_source(named), ToySource)
    with pytest.raises(
        LakeError, match=r"lake.format must be one of auto, parquet, delta, iceberg, toy, got 'orc'"
    ):
        SourceSpec("orc")


def test_a_format_name_is_declared_once():
    for name in ("delta", "parquet", "auto"):
        with pytest.raises(ValueError, match="already declared"):
            register(
                SourceFormat(
                    name, detect=lambda fs, root: False, open=ParquetFolder, described="", marker="_x"
                )
            )


def test_a_registered_format_protects_its_tables_from_a_folder_read(toy, tmp_path):
    """Listing a Parquet folder that holds a toy table refuses it, as it does a Delta or Iceberg table:
    the marker and description come from the declaration."""
    outer = tmp_path / "outer"
    write_lake(local_put, str(outer / "events"), files=1, rows=100)
    os.makedirs(outer / "events" / MARKER)
    (outer / "events" / MARKER / "0001.log").write_text("{}")
    folder = LakeSpec(str(outer), feature_spec(str(outer)).features, "y", source=SourceSpec("parquet"))
    with pytest.raises(LakeError, match=r"events is a toy table \(_toy_log/\)"):
        validate_lake(folder)
    unregister("toy")
    register(
        SourceFormat("toy", detect=lambda fs, root: False, open=ToySource, described="", marker="_other")
    )
    assert validate_lake(folder).num_rows == 100
