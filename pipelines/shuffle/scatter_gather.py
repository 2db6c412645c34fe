"""A shuffle's reads and writes: the scratch file a scatter task writes for one source file and the
gathers read back by byte range, the committed parts, and the tasks that run them on a cluster.

Each source file i gets **one scratch file** (``_scratch/from-0000i.arrow``): its rows for output 0, then
for output 1, and so on, each output's slice a self-contained, uncompressed Arrow IPC stream (the gather
reads it back without decoding: Parquet would cost an encode and a decode of every value, and shuffled
floats do not compress). The scatter task returns where each slice ends; the gather of output j reads
slice j of every scratch file by byte range, writes its part, and on a local disk then frees those
ranges (``punch_hole``), so the scratch shrinks as the parts grow and a shuffle needs about twice the
lake's size of disk, not three times. S scratch files for S source files, not one per (source, output)
pair: the data-plane lake's 1,600 piece files cost ~3 s of a 12.9 s one-process shuffle to create, write,
read and unlink (``python -m benchmarks.shuffle_profile``), and at 10⁴ files each way their
10⁸ files would not fit any filesystem. The scratch lives in the uncommitted generation's folder and is
deleted before the commit; it is written atomically but not fsynced (an interrupted shuffle's
generation is never committed).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.blocks import footer_bytes, footer_identity
from dpstream.pipelines.lake.files import LakeFile, open_unchanged, pins_reads
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.memory import release_after
from dpstream.pipelines.preprocessing.spec import RAW_LABEL_COLUMN
from dpstream.pipelines.shuffle.generations import SCRATCH
from dpstream.pipelines.shuffle.manifest import Part
from dpstream.pipelines.sources.deletes import deleted_positions
from dpstream.pipelines.sources.protocol import live_table, stored_columns
from dpstream.pipelines.validation.persons import check_user_ids
from dpstream.pipelines.validation.values import check_values
from dpstream.pipelines.waiting import completed_within
from dpstream.storage import is_local, open_url, punch_hole, write_atomic

__all__ = [
    "Slices",
    "write_scratch",
    "output_slices",
    "read_slices",
    "release_slices",
    "ROW_GROUP_ROWS",
    "write_part",
    "column_compression",
    "written_part",
    "run_tasks",
    "read_validated",
    "scatter_arguments",
    "carries_raw_labels",
]

# One output's slices, one row per source file that sent it rows: (i, first byte, end byte) of source
# file i's scratch file. An int64 array (24 bytes a slice, not ~180 as Python tuples): the coordinator
# holds every output's, sources × outputs of them (360,000 at 3·10⁸ rows).
Slices = np.ndarray


def scratch_path(root: str, source: int) -> str:
    return f"{root}/{SCRATCH}/from-{source:05d}.arrow"


def write_scratch(folder_url: str, out_options: dict, index: int, table: pa.Table, counts: Any) -> np.ndarray:
    """Source file ``index``'s scratch file: consecutive slices of ``table``, ``counts[j]`` rows for
    output j, each an Arrow IPC stream of its own. Returns the byte where each output's slice ends
    (``output_slices`` turns every source's ends into each output's slices). A retried task writes the
    same bytes (same rows, same order): the ends it returns are the first attempt's."""
    out_fs, root = open_url(folder_url, out_options)
    ends = np.zeros(len(counts), dtype=np.int64)

    def write(handle: Any) -> None:
        position = row = 0
        for target, count in enumerate(counts):
            if count:
                # Each slice built in memory, then one write: the IPC writer's many small writes each
                # cross into Python when streamed into a Python file (0.40 against 0.31 s for 4 tasks).
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, table.schema) as writer:
                    writer.write_table(table.slice(row, int(count)))
                data = sink.getvalue()
                handle.write(memoryview(data))
                position += data.size
                row += int(count)
            ends[target] = position

    path = scratch_path(root, index)
    if is_local(out_fs):
        write_atomic(out_fs, path, write, durable=False)
        return ends
    # Streamed, a multipart upload visible only once complete (``write_atomic`` would hold the whole
    # file in memory twice, beside the table); a failed write is aborted, never left half-written.
    handle = out_fs.open(path, "wb")
    try:
        write(handle)
    except BaseException:
        getattr(handle, "discard", lambda: None)()
        raise
    handle.close()
    return ends


def output_slices(ends: list[np.ndarray]) -> list[Slices]:
    """Every output's slices, in source-file order, from the scatter tasks' ``write_scratch`` ends (one
    array per source file, in order); a source that sent an output no rows has no slice for it."""
    stops = np.stack(ends).astype(np.int64)  # (sources, outputs)
    starts = np.zeros_like(stops)
    starts[:, 1:] = stops[:, :-1]
    slices = []
    for target in range(stops.shape[1]):
        sources = np.flatnonzero(stops[:, target] > starts[:, target])
        slices.append(np.column_stack([sources, starts[sources, target], stops[sources, target]]))
    return slices


def _read_slice(fs: Any, root: str, source: int, start: int, end: int) -> pa.Table:
    path = scratch_path(root, source)
    try:
        if is_local(fs):
            # Read by Arrow into its pool, not first into a Python ``bytes`` (1.07 of the 12.9 s of a
            # one-process shuffle of 8 M rows × 64).
            with pa.OSFile(path) as handle:
                handle.seek(start)
                data = handle.read_buffer(end - start)
        else:
            data = pa.py_buffer(fs.cat_file(path, start=start, end=end))
        if data.size != end - start:
            raise EOFError(f"{data.size} of {end - start} bytes")
        return pa.ipc.open_stream(data).read_all()
    except (OSError, EOFError, pa.ArrowInvalid) as error:
        raise LakeError(
            f"{path}: bytes {start:,}-{end:,} are not the slice the scatter wrote ({error}): the scratch file is "
            "gone or was changed (another process wrote into or pruned this shuffle's folder?). Nothing was "
            "committed; shuffle again"
        ) from error


def read_slices(fs: Any, root: str, slices: Slices, columns: list[str] | None = None) -> pa.Table | None:
    """The rows of ``slices`` (one output's), ``columns`` of them; None when there are none. Slices of
    source files with and without ``RAW_LABEL_COLUMN`` (a converted lake beside other files) concatenate,
    null where a file had none."""
    if len(slices) == 0:
        return None
    pieces = [_read_slice(fs, root, *piece) for piece in slices.tolist()]
    table = pa.concat_tables(pieces, promote_options="default")
    return table.select(columns) if columns is not None else table


def release_slices(fs: Any, root: str, slices: Slices) -> None:
    """Free ``slices``' disk blocks once their output's part is written (a local disk: ``punch_hole``):
    the scratch then never holds much more than the parts still to write. Elsewhere (an object store
    bills objects, not a disk peak) the scratch files go with the scratch folder before the commit.
    Freeing is only a saving: where it fails (a filesystem without hole punching, a scratch file of
    another user) the shuffle goes on, and its disk peak is the lake's size more; said once per process."""
    global _WARNED
    if not is_local(fs):
        return
    for source, start, end in slices.tolist():
        try:
            freed = punch_hole(scratch_path(root, source), [(start, end)])
        except FileNotFoundError:
            continue  # the scratch folder is already gone: nothing left to free
        except OSError as error:
            freed, reason = False, str(error)
        else:
            reason = "the filesystem cannot punch holes"
        if not freed:
            if not _WARNED:
                _WARNED = True
                logging.getLogger(__name__).warning(
                    "the shuffle cannot free its scratch files' space as it goes (%s): it needs about three "
                    "times the lake's size of disk at its peak instead of two",
                    reason,
                )
            return


_WARNED = False
ROW_GROUP_ROWS = 65_536  # a part's row groups hold at most this many rows (``write_part``): a block


def write_part(
    fs: Any, path: str, table: pa.Table, row_group_rows: int, users: list[tuple[int, int]] | None = None
) -> Part:
    """Write ``table`` atomically and durably, with page checksums, in equal row groups of at most
    ``row_group_rows`` (a 200,000-row part: 4 of 50,000, not 3 of 65,536 and one of 3,392, which gave
    one of two workers 1.5× the decoding: blocks go to workers by index), or
    with ``users`` ((rows, people) of each row group: a user-level part, each group whole people);
    returns the part as committed (its row groups, size and content identity, read back from what was
    written)."""
    compression = column_compression(table)
    group_rows = max(1, math.ceil(table.num_rows / max(1, math.ceil(table.num_rows / row_group_rows))))

    def encode(handle) -> None:
        if users is None:
            pq.write_table(
                table,
                handle,
                use_dictionary=False,
                row_group_size=group_rows,
                write_page_checksum=True,
                compression=compression,
            )
            return
        with pq.ParquetWriter(
            handle, table.schema, use_dictionary=False, write_page_checksum=True, compression=compression
        ) as writer:
            start = 0
            for rows, _ in users:
                writer.write_table(table.slice(start, rows), row_group_size=rows)
                start += rows

    write_atomic(fs, path, encode, exclusive=True)  # a generation's part is written once
    part = written_part(fs, path, tuple(count for _, count in users) if users is not None else ())
    if users is not None and part.row_groups != tuple(rows for rows, _ in users):
        raise RuntimeError(f"{path}: row groups {part.row_groups} written for people's groups {users}")
    return part


COMPRESSION_SAMPLE_ROWS = 4_096
WORTH_COMPRESSING = 0.8  # Snappy's output over its input, on a column's first rows, at or below which it pays


def column_compression(table: pa.Table) -> dict[str, str]:
    """Parquet's codec for each leaf column of ``table``: Snappy for the columns it shrinks, none for the
    others. A column of shuffled measurements does not compress, and Snappy's pass over it cost 0.6-0.8
    of the 8.3 s of the data-plane shuffle of 8 M rows × 64 float32 (`python -m benchmarks.data_plane
    --shuffle 5`), and again on every read; a one-hot, integer or constant column still
    shrinks several-fold. Judged on the first ``COMPRESSION_SAMPLE_ROWS`` rows (a random sample of a
    shuffled part; a converted lake's or the predictions' first rows in source order). A nested column
    (a vector of features) is several leaves in Parquet (``v.list.element``): each takes its column's
    choice."""
    sample = table.slice(0, COMPRESSION_SAMPLE_ROWS)
    chosen = []
    for field, column in zip(table.schema, sample.columns, strict=True):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, pa.schema([field])) as writer:
            writer.write_batch(pa.record_batch([column.combine_chunks()], schema=pa.schema([field])))
        raw = sink.getvalue()
        packed = pa.compress(raw, "snappy", asbytes=False)
        chosen += [("snappy" if packed.size <= WORTH_COMPRESSING * raw.size else "none")] * _leaves(
            field.type
        )
    sink = pa.BufferOutputStream()
    pq.write_table(table.slice(0, 0), sink)  # Parquet's own names for the leaves, in schema order
    schema = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    paths = [schema.column(index).path for index in range(len(schema))]
    if len(paths) != len(chosen):  # a type whose leaves are counted otherwise: compress it all as before
        return dict.fromkeys(paths, "snappy")
    return dict(zip(paths, chosen, strict=True))


def _leaves(kind: pa.DataType) -> int:
    """How many Parquet leaf columns a column of Arrow type ``kind`` becomes."""
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(index).type) for index in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(kind.value_type)
    return 1


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
    ``LakeSummary``): its URL, its ``LakeFile``, ``spec``, the vector width, where its scratch file goes, ``i``,
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
    refused if its row count changed, then converted by the lake's preprocessing (``LakeSpec.present``),
    with a clipped label's raw values (``RAW_LABEL_COLUMN``: the stored labels [preprocess] clips, or
    those a converted lake stores);
    where the filesystem does not pin the bytes read (``pins_reads``), its values (and a user-level
    lake's ids) are checked again."""
    fs, path = open_url(source, spec.storage_options)
    with open_unchanged(fs, path, file.stamp) as handle:
        parquet = pq.ParquetFile(handle, pre_buffer=True)  # as pq.read_table reads: ranges coalesced
        columns = stored_columns(spec.read_columns, file.constants)
        if spec.preprocess is None and carries_raw_labels(spec, parquet.schema_arrow):
            columns.append(RAW_LABEL_COLUMN)  # a converted lake's raw labels, carried for the evaluation
        table = parquet.read(columns=columns)
    table = live_table(table, deleted_positions(file.deleted), file.constants, spec.read_columns)
    if table.num_rows != file.rows:
        raise LakeError(
            f"{path.rsplit('/', 1)[-1]} holds {table.num_rows:,} rows, but {file.rows:,} when it was validated: it "
            "changed since; run again once nothing writes to the lake"
        )
    table = with_raw_label(spec.present(table, path), table, spec)
    if not pins_reads(fs):
        check_values(table, spec, path, 0, width)
        if spec.user_column is not None:
            check_user_ids(table.column(spec.user_column), spec, path)
    return table, path


def with_raw_label(presented: pa.Table, stored: pa.Table, spec: LakeSpec) -> pa.Table:
    """``presented`` (the rows [preprocess] prepared from ``stored``, one for one: preprocessing on read
    keeps every row) with each one's label as stored, as float64 (``RAW_LABEL_COLUMN``), where the
    preprocessing clips the label; else as it is."""
    if spec.preprocess is None or not spec.preprocess.keeps_raw_label:
        return presented
    raw = pc.cast(stored.column(spec.preprocess.label), pa.float64())
    return presented.append_column(pa.field(RAW_LABEL_COLUMN, pa.float64()), raw)


def carries_raw_labels(spec: LakeSpec, schema: pa.Schema) -> bool:
    """Whether a shuffle of ``spec``'s lake (of source ``schema``, as validated) carries each row's raw
    label (``RAW_LABEL_COLUMN``, ``read_validated``): its [preprocess] clips the label, or it is a lake
    ``dpstream convert`` wrote with them (and trains on other columns)."""
    if spec.preprocess is not None:
        return spec.preprocess.keeps_raw_label
    return RAW_LABEL_COLUMN in schema.names and RAW_LABEL_COLUMN not in spec.columns
