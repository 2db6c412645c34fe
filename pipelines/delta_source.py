"""A Delta Lake table at one version, through ``deltalake``: the version's add actions, its deletion vectors
(``DeltaTable.deletion_vectors``) and the partition values its log records (``sources.Source``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake import LakeSpec
from dpstream.pipelines.sources import (
    PinnedSource,
    SourceVersion,
    TableFile,
    as_of_datetime,
    encode_positions,
    iso_time,
)
from dpstream.pipelines.table_options import delta_storage_options

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
        version = SourceVersion("delta", table.version(), table.metadata().id, iso_time(committed))
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
