"""An Apache Iceberg table at one snapshot, through ``pyiceberg``: a catalog from the config or the newest
metadata file under the URL, ``scan(snapshot_id=...).plan_files()``, positional delete files applied,
equality deletes and deletion-vector (Puffin) deletes refused (``sources.Source``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.sources.deletes import encode_positions
from dpstream.pipelines.sources.formats import SourceFormat, register
from dpstream.pipelines.sources.protocol import (
    PinnedSource,
    SourceVersion,
    TableFile,
    as_of_datetime,
    iso_time,
)
from dpstream.pipelines.sources.table_options import iceberg_properties
from dpstream.storage import location

__all__ = ["IcebergSource"]


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
        if source.version is not None and source.pinned_by == "version":
            raise LakeError(
                f"lake.version pins a Delta version, but {url} is an Iceberg table: pin a snapshot with "
                "lake.snapshot_id (`table.snapshots()` in pyiceberg lists them)"
            )
        snapshot = (
            table.snapshot_by_id(source.version)
            if source.version is not None
            else table.snapshot_as_of_timestamp(int(as_of_datetime(source.as_of).timestamp() * 1000))
            if source.as_of is not None
            else table.current_snapshot()
        )
        if snapshot is None:
            known = ", ".join(str(s.snapshot_id) for s in table.snapshots()[-5:]) or "none"
            raise LakeError(
                f"the Iceberg table at {url} has no snapshot {source.version or source.as_of or '(it is empty)'}; "
                f"its latest snapshots: {known}. Check lake.snapshot_id / lake.as_of"
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
                    vectors = "; a format v3 deletion vector" if delete.file_format.name == "PUFFIN" else ""
                    raise LakeError(
                        f"the Iceberg table at {url} deletes rows with a {delete.file_format.name} delete file "
                        f"({delete.file_path}{vectors}): dpstream applies Parquet positional delete files only. "
                        "Rewrite the table's deletes (e.g. Spark's rewrite_position_delete_files)"
                    )
                positional.setdefault(delete.file_path, set()).add(task.file.file_path)
        removed = _iceberg_deletes(fs, positional)
        schema = (
            table.metadata.schema_by_id(snapshot.schema_id) if snapshot.schema_id is not None else None
        ) or table.schema()
        field_ids = tuple((field.name, field.field_id) for field in schema.fields)
        files = [
            TableFile(
                fs._strip_protocol(task.file.file_path),
                int(task.file.record_count),
                encode_positions(removed.get(task.file.file_path, np.zeros(0, np.int64))),
                field_ids=field_ids,
            )
            for task in tasks
        ]
        if not files:
            raise LakeError(f"the Iceberg table at {url} holds no rows at snapshot {snapshot.snapshot_id}")
        version = SourceVersion(
            "iceberg", snapshot.snapshot_id, str(table.metadata.table_uuid), iso_time(snapshot.timestamp_ms)
        )
        return PinnedSource(version, fs, tuple(sorted(files, key=lambda file: file.path)))


_EQUALITY_REFUSAL = (
    "the Iceberg table at {url} has equality delete files at snapshot {snapshot}, which dpstream does not apply "
    "(they delete rows by value, in files written before them): compact the table (e.g. Spark's "
    "rewrite_data_files) so its deletes are applied, or pin a snapshot before them with lake.snapshot_id"
)


def _iceberg_deletes(fs: Any, positional: dict[str, set[str]]) -> dict[str, np.ndarray]:
    """{data file URI: deleted positions} from the positional delete files (columns file_path, pos)."""
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
    hint = f"{root}/metadata/version-hint.text"
    if fs.exists(
        hint
    ):  # a Hadoop-style table names its current metadata file; an orphan of a failed commit is not it
        with fs.open(hint, "rb") as handle:
            number = handle.read().decode().strip()
        for name in (f"v{number}.metadata.json", f"{number}.metadata.json"):
            if fs.exists(f"{root}/metadata/{name}"):
                return fs.unstrip_protocol(f"{root}/metadata/{name}")
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
    if location(table.location()) != location(url):
        raise LakeError(
            f"lake.table {name!r} lives at {table.location()}, not at lake.url {url}: set lake.url to the table's "
            "location (dpstream protects it from every output it writes)"
        )


def _holds_iceberg(fs: Any, root: str) -> bool:
    return bool(fs.isdir(f"{root}/metadata") and fs.glob(f"{root}/metadata/*.metadata.json"))


register(
    SourceFormat(
        "iceberg",
        detect=_holds_iceberg,
        open=IcebergSource,
        described="an Apache Iceberg table (metadata/*.metadata.json)",
        marker="metadata",
        marker_files="*.metadata.json",
    )
)
