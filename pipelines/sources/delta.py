"""A Delta Lake table at one version, through ``deltalake``: the version's add actions, its deletion vectors
(``DeltaTable.deletion_vectors``) and the partition values its log records (``sources.Source``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa

from dpstream.locations import register_data_marker
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
from dpstream.pipelines.sources.table_options import delta_storage_options

__all__ = ["DeltaSource"]


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
        if source.version is not None and source.pinned_by == "snapshot_id":
            raise LakeError(
                f"lake.snapshot_id pins an Iceberg snapshot, but {url} is a Delta Lake table: pin its version with "
                "lake.version"
            )
        options = delta_storage_options(url, self.spec.storage_options)
        try:
            table = DeltaTable(url, version=source.version, storage_options=options)
            if source.as_of is not None:
                table.load_as_version(as_of_datetime(source.as_of))
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
            latest = _latest_version(url, options)
            raise LakeError(
                f"the Delta table {url} cannot be read at {asked}"
                + (f" (its versions run from 0 to {latest})" if latest is not None else "")
                + f": {str(error).splitlines()[0]}. Check lake.version / lake.as_of (VACUUM and log cleanup remove "
                "old versions), the URL and the credentials"
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
        relative, records = actions.column("path").to_pylist(), actions.column("num_records").to_pylist()
        files = []
        for index, uri in enumerate(uris):
            # file_uris and the add actions list one snapshot in one order; a mismatch is refused, never guessed.
            if not uri.endswith(unquote(relative[index])):
                raise LakeError(
                    f"the Delta table {url}: file {uri} does not match add action {relative[index]}; dpstream cannot pair "
                    "the version's files with their metadata. Report this with the deltalake version"
                )
            path = _path(fs, uri)
            constants = tuple(
                (
                    name[len("partition.") :],
                    actions.column(name)[index].as_py(),
                    partition_types[name[len("partition.") :]],
                )
                for name in actions.column_names
                if name.startswith("partition.")
            )
            positions = removed.pop(path, np.zeros(0, np.int64))
            rows = None if records[index] is None else int(records[index])  # statistics are optional in Delta
            files.append(TableFile(path, rows, encode_positions(positions), constants))
        if removed:  # fail closed: a deletion vector whose file is not among the version's files
            raise LakeError(
                f"the Delta table {url} has a deletion vector for {sorted(removed)[0]}, which is not one of version "
                f"{table.version()}'s files as dpstream lists them; nothing was read. Report this with the deltalake version"
            )
        if not files:
            raise LakeError(
                f"the Delta table {url} holds no rows at version {table.version()}; check lake.version"
            )
        committed = _delta_commit_time(fs, self.spec, table.version())
        as_of = self.spec.source.as_of
        if (
            as_of is not None
            and committed is not None
            and committed > as_of_datetime(as_of).timestamp() * 1000
        ):
            raise LakeError(
                f"lake.as_of {as_of} is before the Delta table {url} existed (its first version was committed "
                f"{iso_time(committed)}): there was no data then. Check the date"
            )
        version = SourceVersion("delta", table.version(), table.metadata().id, iso_time(committed))
        return PinnedSource(version, fs, tuple(sorted(files, key=lambda file: file.path)))


def _latest_version(url: str, options: dict[str, str] | None) -> int | None:
    from deltalake import DeltaTable

    try:
        return DeltaTable(url, storage_options=options).version()
    except Exception:  # noqa: BLE001 - only for a message; the first error is the one reported
        return None


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
            deleted[_path(fs, unquote(uri))] = np.flatnonzero(~mask)
    return deleted


def _path(fs: Any, uri: str) -> str:
    """A data file's path on ``fs`` from a URI as ``file_uris`` gives it: the log's percent-encoded path
    decoded once, which is how the file is named in storage (a partition folder's own name may hold
    ``%20``: writers encode partition values in folder names). ``deletion_vectors`` gives the log's
    encoding: decode it once first."""
    return fs._strip_protocol(uri)


register(
    SourceFormat(
        "delta",
        detect=lambda fs, root: fs.isdir(f"{root}/_delta_log"),
        open=DeltaSource,
        described="a Delta Lake table (_delta_log/)",
        marker="_delta_log",
    )
)
# A folder holding a Delta log is a table: no run writes inside it (dpstream.locations.data_marker).
register_data_marker("_delta_log", "a Delta table")
