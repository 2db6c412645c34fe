"""A shuffle's reads and writes: the scratch pieces a scatter task writes for one output and its gather
reads back, the committed parts, and the tasks that run them on a cluster.

A piece is an uncompressed Arrow IPC file: the gather reads it back without decoding (Parquet pieces
cost an encode and a decode of every value, and shuffled floats do not compress). Pieces live under the
uncommitted generation's scratch folder and are deleted before the commit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.pipelines.lake import footer_bytes, footer_identity
from dpstream.pipelines.manifest import Part
from dpstream.pipelines.waiting import completed_within
from dpstream.storage import write_atomic, write_bytes_atomic

__all__ = ["write_piece", "read_piece", "finished_pieces", "write_part", "run_on_cluster", "run_tasks"]

_PIECE = re.compile(r"from-\d{5}\.arrow$")


def write_piece(fs: Any, path: str, table: pa.Table) -> None:
    """Atomic but not fsynced: an interrupted shuffle's generation is never committed (issue 16 item 5)."""
    # Built in memory, then one write: streamed into the file through ``write_atomic`` the IPC writer's
    # many small writes each cross into Python (0.40 s against 0.31 s for 4 scatter tasks, measured).
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    write_bytes_atomic(fs, path, memoryview(sink.getvalue()), durable=False)


def read_piece(fs: Any, path: str) -> pa.Table:
    return pa.ipc.open_file(pa.BufferReader(fs.cat_file(path))).read_all()


def finished_pieces(fs: Any, folder: str) -> list[str]:
    """The pieces in ``folder`` in source-file order; a temporary file of a scatter task killed mid-write
    is not one."""
    return sorted(path for path in fs.ls(folder, detail=False) if _PIECE.match(path.rsplit("/", 1)[-1]))


def write_part(
    fs: Any, path: str, table: pa.Table, row_group_rows: int, users: list[tuple[int, int]] | None = None
) -> Part:
    """Write ``table`` atomically and durably, with page checksums, in row groups of ``row_group_rows``, or
    with ``users`` ((rows, people) of each row group: a user-level part, each group whole people);
    returns the part as committed (its row groups, size and content identity, read back from what was
    written)."""

    def encode(handle) -> None:
        if users is None:
            pq.write_table(
                table, handle, use_dictionary=False, row_group_size=row_group_rows, write_page_checksum=True
            )
            return
        with pq.ParquetWriter(handle, table.schema, use_dictionary=False, write_page_checksum=True) as writer:
            start = 0
            for rows, _ in users:
                writer.write_table(table.slice(start, rows), row_group_size=rows)
                start += rows

    write_atomic(fs, path, encode, exclusive=True)  # a generation's part is written once
    footer, size = footer_bytes(fs, path)
    metadata = pq.read_metadata(pa.BufferReader(footer))
    groups = tuple(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    people = tuple(count for _, count in users) if users is not None else ()
    if users is not None and groups != tuple(rows for rows, _ in users):
        raise RuntimeError(f"{path}: row groups {groups} written for people's groups {users}")
    return Part(
        path.rsplit("/", 1)[-1], int(metadata.num_rows), groups, size, footer_identity(footer), people
    )


def run_on_cluster(
    client: Any,
    function: Callable,
    arguments: list[tuple],
    done: Callable[[int, Any], None],
    worker_timeout: float,
) -> list:
    """Submit ``function(*args)`` for each args; results in submission order, ``done`` as each finishes."""
    futures = [client.submit(function, *args, pure=False) for args in arguments]
    results: list = [None] * len(futures)
    try:
        for index, result in completed_within(client, futures, worker_timeout):
            results[index] = result
            done(index, result)
    except BaseException:
        client.cancel(futures)  # none of them may write into a generation folder about to be discarded
        raise
    return results


def run_tasks(
    client: Any,
    function: Callable,
    arguments: list[tuple],
    done: Callable[[int, Any], None],
    worker_timeout: float,
) -> list:
    """``run_on_cluster``, or in turn in this process when ``client`` is None."""
    if client is not None:
        return run_on_cluster(client, function, arguments, done, worker_timeout)
    results = []
    for index, args in enumerate(arguments):
        results.append(function(*args))
        done(index, results[-1])
    return results
