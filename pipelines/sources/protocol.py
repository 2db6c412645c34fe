"""Sources: the version of a lake a run reads, its files, and their rows with the table's deletes honoured.

A source is a protocol (``Source.pin``): given a ``LakeSpec`` it pins one version of the data and lists
that version's live files (``TableFile``: the path, the rows the format's metadata records, the positions
it deletes inside the file, and the values of partition columns the file does not store). Three
implementations:

* ``ParquetFolder``: every ``*.parquet`` under the URL (``lake.files.list_lake``); it has no versions.
* ``DeltaSource`` (``sources.delta``): a Delta Lake table at one version, through ``deltalake`` (the version's add actions;
  deletion vectors from ``DeltaTable.deletion_vectors``; partition values from the log).
* ``IcebergSource`` (``sources.iceberg``): an Apache Iceberg table at one snapshot, through ``pyiceberg`` (a catalog from the
  config, or the newest ``metadata/*.metadata.json`` under the URL; ``scan(snapshot_id=...).plan_files``;
  positional delete files applied; equality deletes and deletion-vector (Puffin) deletes refused).

A table's folder keeps files that deletes, updates, overwrites and compaction removed; only the pinned
version's files are ever opened (``validate`` checks them, the shuffle and ``predict`` read them), each
through ``live_table``, which drops the deleted positions and adds the partition columns.

The pinned version (``SourceVersion``) goes into the shuffle's manifest, so a resumed run validates
the same version again (``LakeSpec.pinned``), and into the ledger entry, model.json and the report.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import list_lake
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.sources.deletes import deleted_positions
from dpstream.pipelines.sources.formats import AUTO, PARQUET, declared_formats, source_format
from dpstream.storage import is_local

__all__ = [
    "Source",
    "SourceVersion",
    "TableFile",
    "PinnedSource",
    "open_source",
    "pin",
    "detect_format",
    "live_table",
    "stored_columns",
    "check_field_ids",
]


@dataclass(frozen=True)
class SourceVersion:
    """What a run read: the format, the table's version (a Delta version or an Iceberg snapshot id; None
    for a Parquet folder), the table's id (its lineage: every version of one table shares it) and when
    that version was committed."""

    format: str = "parquet"
    version: int | None = None
    table_id: str | None = None
    committed_at: str | None = None

    @property
    def tag(self) -> str:
        """A suffix for the data version a run records (``Manifest.row_order``); "" for a Parquet folder."""
        return "" if self.version is None else f"@{self.format}-{self.version}"

    @property
    def lineage(self) -> str | None:
        """An identity every version of the table shares: the ledger charges each run on the table to it,
        so a compaction, which rewrites every file under new content identities, does not start the
        same records afresh."""
        return None if self.table_id is None else f"{self.format}-table:{self.table_id}"

    def describe(self) -> str:
        if self.version is None:
            return "a Parquet folder"
        name = {"delta": "Delta Lake table", "iceberg": "Iceberg table"}[self.format]
        what = "version" if self.format == "delta" else "snapshot"
        when = f", committed {self.committed_at}" if self.committed_at else ""
        return f"{name} {what} {self.version}{when}"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "version": self.version,
            "table_id": self.table_id,
            "committed_at": self.committed_at,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any] | None) -> SourceVersion:
        if not document:
            return cls()
        version = document.get("version")
        return cls(
            str(document.get("format") or "parquet"),
            None if version is None else int(version),
            document.get("table_id"),
            document.get("committed_at"),
        )


@dataclass(frozen=True)
class TableFile:
    """One live data file of a pinned version, before it is checked (``validate.check_file``)."""

    path: str  # on the source's filesystem
    rows: int | None = None  # the rows the table's metadata records (None: a Parquet folder's file)
    deleted: bytes = b""  # the positions the version deletes inside the file (``deleted_positions``)
    # Columns the file does not store (a Delta table's partition columns): (name, value, Arrow type).
    constants: tuple[tuple[str, Any, pa.DataType], ...] = ()
    # An Iceberg snapshot's columns as field ids: (name, id). A data file's column of that name must carry
    # the id, else it is another column (renamed, or dropped and added again since the file was written).
    field_ids: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PinnedSource:
    version: SourceVersion
    fs: Any
    files: tuple[TableFile, ...]
    stray: tuple[str, ...] = ()  # visible files not read (a Parquet folder's non-Parquet files)


class Source(Protocol):
    """A lake's data at one version: ``pin`` resolves the version asked for and lists its files."""

    def pin(self) -> PinnedSource: ...


def stored_columns(columns: list[str], constants: tuple[tuple[str, Any, pa.DataType], ...]) -> list[str]:
    """The ``columns`` a data file stores (a partition column's value comes from the table's metadata)."""
    derived = {name for name, _, _ in constants}
    return [name for name in columns if name not in derived]


_PLAIN = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with Arrow's view types as their plain types: deltalake records ``string_view`` in the files
    it writes, and the checks of a column's type (an id, a category) are of its values, not their layout."""
    return pa.schema([field.with_type(_PLAIN.get(field.type, field.type)) for field in schema])


def table_schema(stored: pa.Schema, listed: TableFile, columns: list[str]) -> pa.Schema:
    """The schema of a file's rows as the version presents them: its stored schema (view types plain), with
    the partition columns among ``columns`` that the file does not store."""
    schema = plain_schema(stored)
    for name, _, kind in listed.constants:
        if name in columns and name not in schema.names:
            schema = schema.append(pa.field(name, kind))
    return schema


def live_batches(
    reader: pq.ParquetFile, listed: TableFile, columns: list[str], batch_rows: int
) -> Iterator[pa.Table]:
    """The live rows of ``listed``'s file, ``columns`` of them, a batch of at most ``batch_rows`` stored rows
    at a time (``live_table``): what validation and scoring stream, one batch in memory."""
    deleted, physical = deleted_positions(listed.deleted), 0
    for stored in reader.iter_batches(
        batch_size=batch_rows, columns=stored_columns(columns, listed.constants)
    ):
        yield live_table(stored, deleted, listed.constants, columns, physical)
        physical += stored.num_rows


def live_table(
    table: pa.Table | pa.RecordBatch,
    deleted: np.ndarray,
    constants: tuple[tuple[str, Any, pa.DataType], ...],
    columns: list[str],
    offset: int = 0,
) -> pa.Table:
    """The rows of ``table`` (physical rows ``offset`` on of its file) that the pinned version keeps, with
    the partition columns among ``columns`` added from their values."""
    table = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    if any(field.type in _PLAIN for field in table.schema):
        table = table.cast(plain_schema(table.schema))
    if deleted.size:  # sorted: the batch's deletes are one slice of them
        first, last = np.searchsorted(deleted, [offset, offset + table.num_rows])
        inside = deleted[first:last] - offset
        if inside.size:
            keep = np.ones(table.num_rows, dtype=bool)
            keep[inside] = False
            table = table.filter(pa.array(keep))
    for name, value, kind in constants:
        if name in columns and name not in table.column_names:
            table = table.append_column(pa.field(name, kind), pa.array([value] * table.num_rows, type=kind))
    return table


def check_field_ids(schema: pa.Schema, listed: TableFile, columns: list[str], name: str) -> None:
    """Refuse (``LakeError``) a data file whose column of a name ``columns`` reads is not the snapshot's
    column of that name: Iceberg matches columns by field id, and a file written before a rename (or a
    drop and re-add) holds another column's values under the name."""
    wanted = dict(listed.field_ids)
    for column in columns:
        if column not in wanted or column not in schema.names:
            continue  # not a table column, or not in the file: validation names what is missing
        found = (schema.field(column).metadata or {}).get(b"PARQUET:field_id")
        if found is None or int(found) != wanted[column]:
            held = "no field id" if found is None else f"field id {int(found)}"
            raise LakeError(
                f"{name}: column {column!r} has {held}, but the table's {column!r} at this snapshot is field id "
                f"{wanted[column]}: the file was written before the column was renamed or re-added, so its values "
                "under that name are another column's. Rewrite the table's data files (compaction), or pin an earlier "
                "snapshot with lake.snapshot_id"
            )


def detect_format(spec: LakeSpec) -> str:
    """``spec.source.format``, or for ``"auto"`` the declared format whose table the URL's root holds
    (``dpstream.pipelines.sources.formats``: a Delta table's ``_delta_log/``, an Iceberg table's
    ``metadata/*.metadata.json``), else a Parquet folder (an Iceberg table named in a catalog has no root)."""
    if spec.source.format != AUTO:
        return spec.source.format
    fs, root = spec.filesystem()
    try:
        for declared in declared_formats():
            if declared.detect(fs, root):
                return declared.name
    except (PermissionError, OSError):
        pass  # list_lake reports an unreadable location with its fix
    return "iceberg" if spec.source.table is not None else PARQUET


def open_source(spec: LakeSpec) -> Source:
    """The source ``spec`` describes (its format detected where it says ``"auto"``)."""
    kind = detect_format(spec)
    if kind != PARQUET:
        return source_format(kind).open(spec)
    if spec.source.version is not None or spec.source.as_of is not None:
        raise LakeError(
            f"lake.version / lake.as_of pin a table's version, but {spec.url} is a Parquet folder, which has none; "
            "remove them (or set lake.format to the table's format)"
        )
    return ParquetFolder(spec)


def pin(spec: LakeSpec) -> PinnedSource:
    """``open_source(spec).pin()``, refused (``LakeError``) when the version lists a file outside
    ``spec.url``: a table's metadata holds absolute paths, so a byte copy of a table, a shallow clone or a
    table with a data path elsewhere reads files that dpstream neither fingerprints as this lake's
    location nor protects from its own writes."""
    pinned = open_source(spec).pin()
    fs, root = spec.filesystem()
    where = (
        _resolved if is_local(fs) else (lambda path: path)
    )  # `../t`, `t//x` or a link name the same folder
    root = where(root)
    prefix = root.rstrip("/") + "/"
    outside = [
        file.path
        for file in pinned.files
        if not (where(file.path) == root or where(file.path).startswith(prefix))
    ]
    if outside and is_local(fs) and _resolved(outside[0]) != os.path.normpath(outside[0]):
        raise LakeError(
            f"{outside[0]} is a symbolic link (or lies in a linked folder) to {_resolved(outside[0])}, outside "
            f"{spec.url} ({len(outside)} such "
            "file(s)): dpstream reads only files inside the lake's folder, the location its fingerprint and its own "
            "writes are checked against. Copy (or hard-link) the files into the folder, or point lake.url at the "
            "folder that holds them"
        )
    if outside:
        raise LakeError(
            f"{pinned.version.describe()} at {spec.url} lists data file {outside[0]}, outside {spec.url} "
            f"({len(outside)} such file(s)): a copied or cloned table still points at the original's files. Point "
            "lake.url at the table that holds them, or rewrite the copy's files into its own location"
        )
    return pinned


def _resolved(path: str) -> str:
    return os.path.realpath(path)


@dataclass(frozen=True)
class ParquetFolder:
    spec: LakeSpec

    def pin(self) -> PinnedSource:
        fs, paths, stray = list_lake(self.spec)
        return PinnedSource(SourceVersion(), fs, tuple(TableFile(path) for path in paths), tuple(stray))


def as_of_datetime(as_of: str) -> datetime:
    stamp = datetime.fromisoformat(as_of)
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def iso_time(milliseconds: int | None) -> str | None:
    if milliseconds is None:
        return None
    return datetime.fromtimestamp(milliseconds / 1000, UTC).isoformat(timespec="milliseconds")


def pinned_spec(spec: LakeSpec, version: SourceVersion) -> LakeSpec:
    """``spec`` pinned to ``version`` (a resumed run reads the version it started on)."""
    if version.version is None:
        return spec
    return replace(
        spec, source=replace(spec.source, format=version.format, version=version.version, as_of=None)
    )
