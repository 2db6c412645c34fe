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

from dpstream.pipelines.generations import SCRATCH
from dpstream.pipelines.lake import (
    LakeError,
    LakeFile,
    LakeSpec,
    footer_bytes,
    footer_identity,
    native_open,
    open_unchanged,
    pins_reads,
)
from dpstream.pipelines.manifest import Part
from dpstream.pipelines.memory import release_after
from dpstream.pipelines.sources import deleted_positions, live_table, stored_columns
from dpstream.pipelines.validate import check_user_ids, check_values
from dpstream.pipelines.waiting import completed_within
from dpstream.storage import is_local, open_url, write_atomic, write_bytes_atomic

__all__ = [
    "write_piece",
    "read_piece",
    "finished_pieces",
    "write_part",
    "written_part",
    "remove_target",
    "run_tasks",
    "read_validated",
    "scatter_arguments",
    "write_pieces",
    "read_target",
]

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
    """A scratch piece; a local one read by Arrow into its pool (``native_open``), not first into a
    Python ``bytes`` (1.07 of the 12.9 s of a one-process shuffle of 8 M rows × 64, issue 34)."""
    if is_local(fs):
        with native_open(fs, path) as handle:
            return pa.ipc.open_file(handle).read_all()
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
    part = written_part(fs, path, tuple(count for _, count in users) if users is not None else ())
    if users is not None and part.row_groups != tuple(rows for rows, _ in users):
        raise RuntimeError(f"{path}: row groups {part.row_groups} written for people's groups {users}")
    return part


def written_part(fs: Any, path: str, people: tuple[int, ...] = ()) -> Part:
    """The part at ``path`` as committed: its row groups, size and content identity, read from its footer."""
    footer, size = footer_bytes(fs, path)
    metadata = pq.read_metadata(pa.BufferReader(footer))
    groups = tuple(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    return Part(
        path.rsplit("/", 1)[-1], int(metadata.num_rows), groups, size, footer_identity(footer), people
    )


def run_tasks(
    client: Any,
    function: Callable,
    arguments: list[tuple],
    done: Callable[[int, Any], None],
    worker_timeout: float,
) -> list:
    """``function(*args)`` for each args, as Dask tasks with ``client`` (in turn in this process without
    one); results in submission order, ``done(index, result)`` as each finishes."""
    if client is None:
        finished = ((index, function(*args)) for index, args in enumerate(arguments))
        futures: list = []
    else:
        futures = [client.submit(release_after, function, *args, pure=False) for args in arguments]
        finished = completed_within(client, futures, worker_timeout)
    results: list = [None] * len(arguments)
    try:
        for index, result in finished:
            results[index] = result
            done(index, result)
    except BaseException:
        if futures:
            client.cancel(futures)  # none of them may write into a generation folder about to be discarded
        raise
    return results


def scatter_arguments(
    spec: LakeSpec, summary: Any, folder_url: str, out_options: dict, extra: Callable[[int], tuple]
) -> list[tuple]:
    """The scatter tasks' arguments, one tuple per validated source file ``i`` of ``summary`` (a
    ``LakeSummary``): its URL, its ``LakeFile``, ``spec``, the vector width, where its pieces go, ``i``,
    then the shuffle's own ``extra(i)``."""
    source_fs, _ = spec.filesystem()
    return [
        (
            source_fs.unstrip_protocol(file.path),
            file,
            spec,
            summary.num_features,
            folder_url,
            out_options,
            i,
            *extra(i),
        )
        for i, file in enumerate(summary.files)
    ]


def read_validated(source: str, file: LakeFile, spec: LakeSpec, width: int) -> tuple[pa.Table, str]:
    """(the columns ``spec`` reads from source file ``file``, its path): read only if it is still the file
    validation saw (``file.stamp``), the rows its table version deleted dropped (``sources.live_table``),
    refused if its row count changed, then converted by the lake's preprocessing (``LakeSpec.present``);
    where the filesystem does not pin the bytes read (``pins_reads``), its values (and a user-level
    lake's ids) are checked again."""
    fs, path = open_url(source, spec.storage_options)
    with open_unchanged(fs, path, file.stamp) as handle:
        table = pq.read_table(handle, columns=stored_columns(spec.read_columns, file.constants))
    table = live_table(table, deleted_positions(file.deleted), file.constants, spec.read_columns)
    if table.num_rows != file.rows:
        raise LakeError(
            f"{path.rsplit('/', 1)[-1]} holds {table.num_rows:,} rows, but {file.rows:,} when it was validated: it "
            "changed since; run again once nothing writes to the lake"
        )
    table = spec.present(table, path)
    if not pins_reads(fs):
        check_values(table, spec, path, 0, width)
        if spec.user_column is not None:
            check_user_ids(table.column(spec.user_column), spec, path)
    return table, path


def write_pieces(folder_url: str, out_options: dict, index: int, table: pa.Table, counts: Any) -> None:
    """Source file ``index``'s pieces: consecutive slices of ``table``, ``counts[j]`` rows to output j."""
    out_fs, root = open_url(folder_url, out_options)
    offset = 0
    for target, count in enumerate(counts):
        if count:
            write_piece(
                out_fs,
                f"{root}/{SCRATCH}/to-{target:05d}/from-{index:05d}.arrow",
                table.slice(offset, int(count)),
            )
            offset += int(count)


def _target_folder(root: str, target: int) -> str:
    return f"{root}/{SCRATCH}/to-{target:05d}"


def remove_target(fs: Any, root: str, target: int) -> None:
    """Delete output ``target``'s pieces once its part is written: the scratch then never holds more than
    the parts still to write, so a shuffle needs about twice the lake's size of disk, not three times."""
    folder = _target_folder(root, target)
    if fs.exists(folder):
        fs.rm(folder, recursive=True)


def read_target(fs: Any, root: str, target: int, columns: list[str] | None = None) -> pa.Table | None:
    """The pieces written for output ``target`` (in source-file order), ``columns`` of them; None when
    there are none."""
    folder = _target_folder(root, target)
    if not fs.exists(folder):
        return None
    tables = [read_piece(fs, path) for path in finished_pieces(fs, folder)]
    if not tables:
        return None
    table = pa.concat_tables(tables)
    return table.select(columns) if columns is not None else table
