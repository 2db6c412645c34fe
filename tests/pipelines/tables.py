"""Delta Lake and Iceberg tables for the source tests, written by their own libraries.

Where a library does not write a feature, a commit carrying it is added here by the format's
specification, and the library's own reader is the check that it is well formed:
* ``add_deletion_vector``: delta-rs deletes by rewriting files (copy-on-write) and never writes deletion
  vectors, so a commit re-adds a file with one (Delta protocol, "Deletion Vectors": a RoaringTreemap in
  the portable format behind a magic number, stored in ``deletion_vector_<uuid>.bin`` with its size and
  CRC-32); ``DeltaTable.deletion_vectors()`` decodes it back.
* ``add_iceberg_deletes``: pyiceberg deletes copy-on-write too, so a snapshot adds a positional (or
  equality) delete file through pyiceberg's own snapshot producer with a delete manifest; its
  ``scan().to_arrow()`` applies the positional ones.
"""

from __future__ import annotations

import json
import struct
import time
import uuid
import zlib
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_DV_MAGIC = 1681511377


def z85(data: bytes) -> str:
    """ZeroMQ's Base85 (RFC 32/Z85), which Delta uses for a deletion vector's UUID."""
    out = []
    for start in range(0, len(data), 4):
        value = int.from_bytes(data[start : start + 4], "big")
        chars = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chars.append(_Z85[digit])
        out += reversed(chars)
    return "".join(out)


def add_deletion_vector(
    fs: Any,
    table_path: str,
    file_name: str,
    positions: list[int],
    rows: int,
    partition_values: dict[str, str] | None = None,
) -> int:
    """Commit a new version of the Delta table at ``table_path`` (on ``fs``) that deletes ``positions``
    of its data file ``file_name`` (the path its add action records, percent-encoded; ``rows`` rows, in
    the partition ``partition_values``) with a deletion vector; returns the version."""
    bitmap = struct.pack("<i", _DV_MAGIC) + BitMap64(positions).serialize()
    ident = uuid.uuid4()
    body = b"\x01" + struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
    with fs.open(f"{table_path}/deletion_vector_{ident}.bin", "wb") as handle:
        handle.write(body)
    log = f"{table_path}/_delta_log"
    version = max(int(path.rsplit("/", 1)[-1][:20]) for path in fs.glob(f"{log}/*.json")) + 1
    size, now = fs.size(f"{table_path}/{unquote(file_name)}"), int(time.time() * 1000)
    partition = dict(partition_values or {})
    vector = {
        "storageType": "u",
        "pathOrInlineDv": z85(ident.bytes),
        "offset": 1,
        "sizeInBytes": len(bitmap),
        "cardinality": len(set(positions)),
    }
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}},
        {
            "remove": {
                "path": file_name,
                "dataChange": True,
                "deletionTimestamp": now,
                "extendedFileMetadata": True,
                "partitionValues": partition,
                "size": size,
            }
        },
        {
            "add": {
                "path": file_name,
                "partitionValues": partition,
                "size": size,
                "modificationTime": now,
                "dataChange": True,
                "stats": json.dumps({"numRecords": rows}),
                "deletionVector": vector,
            }
        },
    ]
    with fs.open(f"{log}/{version:020d}.json", "wb") as handle:
        handle.write(("\n".join(json.dumps(action) for action in actions) + "\n").encode())
    return version


def add_iceberg_deletes(
    table: Any, deletes: dict[str, list[int]] | pa.Table, equality_ids: list[int] | None = None
):
    """Commit a snapshot to the pyiceberg ``table`` with one delete file: positional ({data file path:
    positions}) or, with ``equality_ids``, equality deletes (a table of the deleted values)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles
    from pyiceberg.typedef import Record

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class AddDeletes(_FastAppendFiles):
        def new_manifest_writer(self, spec):
            return DeleteManifestWriter(
                spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
            )

    if equality_ids is None:
        rows = sorted((path, int(position)) for path, positions in deletes.items() for position in positions)
        data = pa.table(
            {"file_path": [row[0] for row in rows], "pos": pa.array([row[1] for row in rows], pa.int64())}
        )
        content = DataFileContent.POSITION_DELETES
    else:
        data, content = deletes, DataFileContent.EQUALITY_DELETES
    path = f"{table.location().rstrip('/')}/data/deletes-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create() as handle:
        pq.write_table(data, handle)
    delete_file = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=data.num_rows,
        file_size_in_bytes=len(table.io.new_input(path)),
        equality_ids=equality_ids,
        _table_format_version=2,
    )
    delete_file.spec_id = table.spec().spec_id
    with table.transaction() as transaction:
        producer = AddDeletes(operation=Operation.DELETE, transaction=transaction, io=table.io)
        producer.append_data_file(delete_file)
        producer.commit()
