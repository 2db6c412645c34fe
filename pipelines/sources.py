"""Sources: the version of a lake a run reads, its files, and their rows with the table's deletes honoured.

A source is a protocol (``Source.pin``): given a ``LakeSpec`` it pins one version of the data and lists
that version's live files (``TableFile``: the path, the rows the format's metadata records, the positions
it deletes inside the file, and the values of partition columns the file does not store). Three
implementations:

* ``ParquetFolder``: every ``*.parquet`` under the URL (``lake.list_lake``); it has no versions.
* ``DeltaSource``: a Delta Lake table at one version, through ``deltalake`` (the version's add actions;
  deletion vectors from ``DeltaTable.deletion_vectors``; partition values from the log).
* ``IcebergSource``: an Apache Iceberg table at one snapshot, through ``pyiceberg`` (a catalog from the
  config, or the newest ``metadata/*.metadata.json`` under the URL; ``scan(snapshot_id=...).plan_files``;
  positional delete files applied; equality deletes and deletion-vector (Puffin) deletes refused).

A table's folder keeps files that deletes, updates, overwrites and compaction removed; only the pinned
version's files are ever opened (``validate`` checks them, the shuffle and ``predict`` read them), each
through ``live_table``, which drops the deleted positions and adds the partition columns.

The pinned version (``SourceVersion``) goes into the shuffle's manifest, so a resumed run validates
the same version again (``LakeSpec.pinned``), and into the ledger entry, model.json and the report.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from dpstream.pipelines.lake import LakeError, LakeSpec, list_lake
from dpstream.pipelines.table_options import delta_storage_options, iceberg_properties

__all__ = [
    "Source",
    "SourceVersion",
    "TableFile",
    "PinnedSource",
    "open_source",
    "detect_format",
    "live_table",
    "stored_columns",
    "deleted_positions",
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
    constants: tuple[tuple[str, Any, str], ...] = ()


@dataclass(frozen=True)
class PinnedSource:
    version: SourceVersion
    fs: Any
    files: tuple[TableFile, ...]
    stray: tuple[str, ...] = ()  # visible files not read (a Parquet folder's non-Parquet files)


class Source(Protocol):
    """A lake's data at one version: ``pin`` resolves the version asked for and lists its files."""

    def pin(self) -> PinnedSource: ...


def encode_positions(positions: np.ndarray) -> bytes:
    """Deleted positions as they travel with a file (sorted little-endian int64, compressed by Arrow's
    zstd codec only when it shrinks them)."""
    if positions.size == 0:
        return b""
    raw = np.unique(positions.astype(np.int64)).astype("<i8").tobytes()
    packed = pa.compress(raw, codec="zstd", asbytes=True)
    return b"Z" + len(raw).to_bytes(8, "little") + packed if len(packed) < len(raw) else b"R" + raw


def deleted_positions(encoded: bytes) -> np.ndarray:
    """The sorted row positions a file's ``deleted`` field deletes."""
    if not encoded:
        return np.zeros(0, np.int64)
    if encoded[:1] == b"Z":
        size = int.from_bytes(encoded[1:9], "little")
        raw = pa.decompress(encoded[9:], decompressed_size=size, codec="zstd", asbytes=True)
    else:
        raw = encoded[1:]
    return np.frombuffer(raw, dtype="<i8").astype(np.int64)


def deletes_digest(encoded: bytes, constants: tuple[tuple[str, Any, str], ...]) -> str:
    """What a version does to a file beyond its bytes: its deleted positions and partition values."""
    digest = hashlib.sha256(deleted_positions(encoded).astype("<i8").tobytes())
    digest.update(repr(sorted(constants)).encode())
    return digest.hexdigest()[:24]


def stored_columns(columns: list[str], constants: tuple[tuple[str, Any, str], ...]) -> list[str]:
    """The ``columns`` a data file stores (a partition column's value comes from the table's metadata)."""
    derived = {name for name, _, _ in constants}
    return [name for name in columns if name not in derived]


def live_table(
    table: pa.Table | pa.RecordBatch,
    deleted: np.ndarray,
    constants: tuple[tuple[str, Any, str], ...],
    columns: list[str],
    offset: int = 0,
) -> pa.Table:
    """The rows of ``table`` (physical rows ``offset`` on of its file) that the pinned version keeps, with
    the partition columns among ``columns`` added from their values."""
    table = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    if deleted.size:
        inside = deleted[(deleted >= offset) & (deleted < offset + table.num_rows)] - offset
        if inside.size:
            keep = np.ones(table.num_rows, dtype=bool)
            keep[inside] = False
            table = table.filter(pa.array(keep))
    for name, value, type_name in constants:
        if name in columns and name not in table.column_names:
            kind = pa.type_for_alias(type_name)
            table = table.append_column(pa.field(name, kind), pa.array([value] * table.num_rows, type=kind))
    return table


_TABLE_MARKERS = {"delta": "_delta_log", "iceberg": "metadata"}


def detect_format(spec: LakeSpec) -> str:
    """``spec.source.format``, or for ``"auto"`` the format the URL's root holds: ``_delta_log/`` is a Delta
    table, ``metadata/*.metadata.json`` an Iceberg table, anything else a Parquet folder."""
    if spec.source.format != "auto":
        return spec.source.format
    fs, root = spec.filesystem()
    try:
        if fs.isdir(f"{root}/_delta_log"):
            return "delta"
        if fs.isdir(f"{root}/metadata") and fs.glob(f"{root}/metadata/*.metadata.json"):
            return "iceberg"
    except (PermissionError, OSError):
        pass  # list_lake reports an unreadable location with its fix
    return "iceberg" if spec.source.table is not None else "parquet"


def open_source(spec: LakeSpec) -> Source:
    """The source ``spec`` describes (its format detected where it says ``"auto"``)."""
    kind = detect_format(spec)
    if kind == "delta":
        return DeltaSource(spec)
    if kind == "iceberg":
        return IcebergSource(spec)
    if spec.source.version is not None or spec.source.as_of is not None:
        raise LakeError(
            f"lake.version / lake.as_of pin a table's version, but {spec.url} is a Parquet folder, which has none; "
            "remove them (or set lake.format to the table's format)"
        )
    return ParquetFolder(spec)


@dataclass(frozen=True)
class ParquetFolder:
    spec: LakeSpec

    def pin(self) -> PinnedSource:
        fs, paths, stray = list_lake(self.spec)
        return PinnedSource(SourceVersion(), fs, tuple(TableFile(path) for path in paths), tuple(stray))


def _as_of_datetime(as_of: str) -> datetime:
    stamp = datetime.fromisoformat(as_of)
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def _iso(milliseconds: int | None) -> str | None:
    if milliseconds is None:
        return None
    return datetime.fromtimestamp(milliseconds / 1000, UTC).isoformat(timespec="milliseconds")


# Reader features whose data dpstream reads correctly: deletion vectors are applied; the others change
# nothing about which rows a data file holds or how its columns are named (a variant, a timestamp
# without zone or a widened type is a column type, which validation checks like any other).
_DELTA_READER_FEATURES = frozenset(
    {
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "checkpointProtection",
        "variantType",
        "variantType-preview",
        "typeWidening",
        "typeWidening-preview",
    }
)


@dataclass(frozen=True)
class DeltaSource:
    spec: LakeSpec

    def _table(self):
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        source, url = self.spec.source, self.spec.url
        options = delta_storage_options(url, self.spec.storage_options)
        try:
            table = DeltaTable(url, version=source.version, storage_options=options)
            if source.as_of is not None:
                table.load_as_version(_as_of_datetime(source.as_of))
        except TableNotFoundError:
            raise LakeError(
                f"{url} is not a Delta Lake table (no _delta_log/ there); check lake.url, or set lake.format"
            ) from None
        except (DeltaError, OSError, ValueError) as error:
            asked = (
                f"version {source.version}"
                if source.version is not None
                else f"as_of {source.as_of}"
                if source.as_of
                else "its latest version"
            )
            raise LakeError(
                f"the Delta table {url} cannot be read at {asked}: {str(error).splitlines()[0]}. Check lake.version "
                "/ lake.as_of (`deltalake.DeltaTable(url).history()` lists the versions; VACUUM removes old "
                "versions' files), the URL and the credentials"
            ) from None
        return table

    def pin(self) -> PinnedSource:
        table = self._table()
        url = self.spec.url
        protocol = table.protocol()
        unsupported = sorted(set(protocol.reader_features or ()) - _DELTA_READER_FEATURES)
        mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
        if unsupported or mapping != "none":
            feature = (
                f"reader feature(s) {', '.join(unsupported)}"
                if unsupported
                else f"column mapping ({mapping})"
            )
            raise LakeError(
                f"the Delta table {url} uses {feature}, which dpstream does not read (its data files' rows or column "
                "names are not the table's without it); export the version to a Parquet folder with a reader that "
                "supports it, or rewrite the table without the feature"
            )
        fs, _ = self.spec.filesystem()
        actions = pa.table(table.get_add_actions(flatten=True))
        uris = table.file_uris()
        if len(uris) != actions.num_rows:
            raise LakeError(
                f"the Delta table {url} lists {len(uris)} files but {actions.num_rows} add actions; run again"
            )
        removed = _delta_deletes(table, fs)
        partition_types = {field.name: field.type for field in pa.schema(table.schema().to_arrow())}
        files = []
        for index, uri in enumerate(uris):
            path = fs._strip_protocol(uri)
            constants = tuple(
                (
                    name.removeprefix("partition."),
                    actions.column(name)[index].as_py(),
                    str(partition_types[name[10:]]),
                )
                for name in actions.column_names
                if name.startswith("partition.")
            )
            positions = removed.get(path, np.zeros(0, np.int64))
            files.append(
                TableFile(
                    path,
                    int(actions.column("num_records")[index].as_py()),
                    encode_positions(positions),
                    constants,
                )
            )
        if not files:
            raise LakeError(
                f"the Delta table {url} holds no rows at version {table.version()}; check lake.version"
            )
        committed = _delta_commit_time(fs, self.spec, table.version())
        version = SourceVersion("delta", table.version(), table.metadata().id, _iso(committed))
        return PinnedSource(version, fs, tuple(sorted(files, key=lambda file: file.path)))


def _delta_commit_time(fs: Any, spec: LakeSpec, version: int) -> int | None:
    """The commit time (ms) of ``version``, from its commit's ``commitInfo`` (None when the log no longer
    holds the commit, or it records none). Read here rather than with ``DeltaTable.history``, which lists
    the whole log (and never returned against the moto S3 server)."""
    _, root = spec.filesystem()
    try:
        with fs.open(f"{root}/_delta_log/{version:020d}.json", "rb") as handle:
            for line in handle:
                action = json.loads(line)
                if "commitInfo" in action:
                    stamp = action["commitInfo"].get("inCommitTimestamp") or action["commitInfo"].get(
                        "timestamp"
                    )
                    return int(stamp) if stamp is not None else None
    except (FileNotFoundError, ValueError):
        return None
    return None


def _delta_deletes(table, fs) -> dict[str, np.ndarray]:
    """{path: deleted positions} for the files the version's deletion vectors touch."""
    reader = pa.RecordBatchReader.from_stream(table.deletion_vectors())
    deleted = {}
    for batch in reader:
        for uri, keep in zip(
            batch.column("filepath").to_pylist(), batch.column("selection_vector"), strict=True
        ):
            mask = np.asarray(keep.values.to_numpy(zero_copy_only=False), dtype=bool)
            deleted[fs._strip_protocol(uri)] = np.flatnonzero(~mask)
    return deleted


_METADATA_NUMBER = re.compile(r"^(?:v)?(\d+)(?:-[0-9a-f-]+)?\.metadata\.json$")


@dataclass(frozen=True)
class IcebergSource:
    spec: LakeSpec

    def _table(self):
        source, url = self.spec.source, self.spec.url
        properties = iceberg_properties(url, self.spec.storage_options)
        try:
            if source.table is not None:
                from pyiceberg.catalog import load_catalog

                catalog = dict(source.catalog)
                catalog_name = catalog.pop("name", "default")
                table = load_catalog(catalog_name, **{**properties, **catalog}).load_table(source.table)
                _check_location(table, url, source.table)
                return table
            from pyiceberg.table import StaticTable

            return StaticTable.from_metadata(_newest_metadata(self.spec), properties=properties)
        except LakeError:
            raise
        except Exception as error:  # noqa: BLE001 - a catalog's errors have no common base; all mean "cannot load"
            where = f"table {source.table!r} of lake.catalog" if source.table else f"{url}/metadata/"
            raise LakeError(
                f"the Iceberg table at {url} cannot be loaded from {where}: {type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}. Check lake.table, lake.catalog and the credentials"
            ) from None

    def pin(self) -> PinnedSource:
        from pyiceberg.manifest import DataFileContent, FileFormat

        table, source, url = self._table(), self.spec.source, self.spec.url
        snapshot = (
            table.snapshot_by_id(source.version)
            if source.version is not None
            else table.snapshot_as_of_timestamp(int(_as_of_datetime(source.as_of).timestamp() * 1000))
            if source.as_of is not None
            else table.current_snapshot()
        )
        if snapshot is None:
            known = ", ".join(str(s.snapshot_id) for s in table.snapshots()[-5:]) or "none"
            raise LakeError(
                f"the Iceberg table at {url} has no snapshot {source.version or source.as_of or '(it is empty)'}; "
                f"its latest snapshots: {known}. Check lake.version / lake.as_of"
            )
        try:
            tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files())
        except ValueError as error:
            if "equality deletes" not in str(error):
                raise
            raise LakeError(_EQUALITY_REFUSAL.format(url=url, snapshot=snapshot.snapshot_id)) from None
        fs, _ = self.spec.filesystem()
        positional: dict[str, set[str]] = {}
        for task in tasks:
            if task.file.file_format != FileFormat.PARQUET:
                raise LakeError(
                    f"the Iceberg table at {url} holds {task.file.file_format.name} data file {task.file.file_path}; "
                    "dpstream reads Parquet data files only: rewrite the table's files as Parquet"
                )
            for delete in task.delete_files:
                if delete.content == DataFileContent.EQUALITY_DELETES:
                    raise LakeError(_EQUALITY_REFUSAL.format(url=url, snapshot=snapshot.snapshot_id))
                if delete.file_format != FileFormat.PARQUET:
                    raise LakeError(
                        f"the Iceberg table at {url} deletes rows with a {delete.file_format.name} delete file "
                        f"({delete.file_path}; format v3 deletion vectors): dpstream applies Parquet positional "
                        "delete files only. Rewrite the table's deletes (e.g. Spark's rewrite_position_delete_files)"
                    )
                positional.setdefault(delete.file_path, set()).add(task.file.file_path)
        removed = _iceberg_deletes(fs, positional)
        files = [
            TableFile(
                fs._strip_protocol(task.file.file_path),
                int(task.file.record_count),
                encode_positions(removed.get(task.file.file_path, np.zeros(0, np.int64))),
            )
            for task in tasks
        ]
        if not files:
            raise LakeError(f"the Iceberg table at {url} holds no rows at snapshot {snapshot.snapshot_id}")
        version = SourceVersion(
            "iceberg", snapshot.snapshot_id, str(table.metadata.table_uuid), _iso(snapshot.timestamp_ms)
        )
        return PinnedSource(version, fs, tuple(sorted(files, key=lambda file: file.path)))


_EQUALITY_REFUSAL = (
    "the Iceberg table at {url} has equality delete files at snapshot {snapshot}, which dpstream does not apply "
    "(they delete rows by value, in files written before them): compact the table (e.g. Spark's "
    "rewrite_data_files) so its deletes are applied, or pin a snapshot before them with lake.version"
)


def _iceberg_deletes(fs: Any, positional: dict[str, set[str]]) -> dict[str, np.ndarray]:
    """{data file URI: deleted positions} from the positional delete files (columns file_path, pos)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found: dict[str, list[np.ndarray]] = {}
    for delete_uri, data_uris in sorted(positional.items()):
        with fs.open(fs._strip_protocol(delete_uri), "rb") as handle:
            deletes = pq.read_table(handle, columns=["file_path", "pos"])
        for data_uri in sorted(data_uris):
            rows = deletes.filter(pc.equal(deletes.column("file_path"), data_uri))
            found.setdefault(data_uri, []).append(rows.column("pos").to_numpy().astype(np.int64))
    return {uri: np.unique(np.concatenate(parts)) for uri, parts in found.items()}


def _newest_metadata(spec: LakeSpec) -> str:
    """The newest ``metadata/*.metadata.json`` of the table at ``spec.url`` (by the version number its name
    starts with), as a URL pyiceberg opens; without a catalog this is the table's current state."""
    fs, root = spec.filesystem()
    numbered = []
    for path in fs.glob(f"{root}/metadata/*.metadata.json"):
        match = _METADATA_NUMBER.match(path.rsplit("/", 1)[-1])
        if match:
            numbered.append((int(match.group(1)), path))
    if not numbered:
        raise LakeError(
            f"{spec.url} has no metadata/*.metadata.json: it is not an Iceberg table's location; check lake.url, or "
            "name the table in its catalog (lake.table and lake.catalog)"
        )
    return fs.unstrip_protocol(max(numbered)[1])


def _check_location(table: Any, url: str, name: str) -> None:
    from dpstream.storage import location

    if location(table.location()) != location(url):
        raise LakeError(
            f"lake.table {name!r} lives at {table.location()}, not at lake.url {url}: set lake.url to the table's "
            "location (dpstream protects it from every output it writes)"
        )


def pinned_spec(spec: LakeSpec, version: SourceVersion) -> LakeSpec:
    """``spec`` pinned to ``version`` (a resumed run reads the version it started on)."""
    if version.version is None:
        return spec
    return replace(
        spec, source=replace(spec.source, format=version.format, version=version.version, as_of=None)
    )
