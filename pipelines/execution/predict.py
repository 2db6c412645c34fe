"""Batch scoring: a published model over a lake of any size (a Parquet folder, or one version of a Delta
or Iceberg table: its live rows, ``dpstream.pipelines.sources.protocol``), on the Dask cluster.

``predict_lake(model, lake_url, out_url, client=...)`` runs one task per lake file. A task streams its
file in record batches of at most ``batch_rows`` rows (only the model's features and the ``keep``
columns are decoded), scores each batch with ``ModelDocument.predict`` and appends it to its output
file through a ``pyarrow.parquet.ParquetWriter``: a worker holds one batch at a time, whatever the
size of the file or the lake (``benchmarks/predict_memory.py`` measures the peak RSS). Output file i
holds the predictions of input file i (sorted by path) in row order, so they line up with the input
row for row.

Why not ``dask.dataframe.read_parquet(...).map_partitions(...).to_parquet(...)`` or dask-ml's
``ParallelPostFit`` (a wrapper around the same ``map_partitions``): a partition is a whole row group
or file in memory, the output names and order are Dask's, and ``to_parquet`` writes in place. Here
memory is bounded by the batch, and the output appears only when complete: parts are written under a
temporary folder in ``out_url`` and moved into place after every task succeeded, then ``_predict.json``
records the model's run id, the table version scored, the input files and the row counts. A failure
leaves ``out_url`` as it was. With ``out_format="delta"`` the finished parts become a new Delta table in
one commit (``deltalake.convert_to_deltalake``: its version 0 adds every part) before the record.

Columns are selected by name, so a lake whose columns are in another order scores the same. ``keep``
columns are copied beside the predictions: in the CSV's units where ``dpstream convert`` mapped them
(values it clipped stay at their bound) and a coded label as its class name; an id column (``convert
--id``) as it is. The source lake is only read; ``out_url`` may not be inside it, contain it, or already hold files.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.export import ModelDocument
from dpstream.locations import Protected, check_write_location
from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import STREAM_BUFFER_BYTES, native_open
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.memory import release_after, sum_is_finite
from dpstream.pipelines.preprocessing.range_map import map_rows_into
from dpstream.pipelines.preprocessing.rows import convert_rows
from dpstream.pipelines.preprocessing.spec import INTERCEPT_COLUMN, ConvertSpec
from dpstream.pipelines.shuffle.scatter_gather import column_compression
from dpstream.pipelines.sources.protocol import (
    SourceVersion,
    TableFile,
    check_field_ids,
    live_batches,
    pin,
    table_schema,
)
from dpstream.pipelines.sources.spec import SourceSpec
from dpstream.pipelines.sources.table_options import delta_storage_options
from dpstream.pipelines.waiting import gather_within, report_each
from dpstream.storage import open_url, url_of, write_json_atomic

__all__ = ["predict_lake", "check_predictions_location", "PredictSummary", "PREDICT_RECORD"]

PREDICT_RECORD = "_predict.json"
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class PredictSummary:
    files: tuple[str, ...]  # the output files, in input order
    rows: int
    source: SourceVersion = SourceVersion()  # the table version scored (a Parquet folder has none)


def _check_columns(
    schema: pa.Schema, source: str, features: list[str], keep: list[str], numeric: list[str], on_read: bool
) -> None:
    missing = [name for name in features if name not in schema.names]
    if missing:
        fix = (
            "the model prepares the raw columns of its training table ([preprocess]): score a table that has them"
            if on_read
            else "score a lake converted like its training lake"
        )
        raise LakeError(
            f"{source}: column {missing[0]!r} is not in the file (columns: {', '.join(schema.names)}); the model "
            f"reads its features by name: {fix}"
        )
    missing = [name for name in keep if name not in schema.names]
    if missing:
        raise LakeError(
            f"{source}: --keep names {missing[0]!r}, which is not in the file (columns: {', '.join(schema.names)}); "
            + (
                "keep a column of the scored table"
                if on_read
                else "a CSV column that is no feature reaches the lake with `dpstream convert --id COLUMN`"
            )
        )
    for name in numeric:
        kind = schema.field(name).type
        if not any(
            test(kind)
            for test in (pa.types.is_floating, pa.types.is_integer, pa.types.is_boolean, pa.types.is_decimal)
        ):
            raise LakeError(f"{source}: feature column {name!r} has type {kind}, expected a numeric column")


def check_predictions_location(
    out_url: str, lake_url: str, storage_options: dict[str, Any] | None = None
) -> None:
    """Refuse (``LakeError``) predictions written into the scored lake, or into any data location (a lake,
    a shuffled lake, a ledger, a Delta table: ``dpstream.locations``), where they would join that data."""
    try:
        check_write_location(
            out_url,
            "the predictions' folder",
            [Protected(lake_url, "the lake being scored (it is only read)")],
            storage_options=storage_options,
        )
    except ValueError as error:
        raise LakeError(str(error)) from None


def score_file(
    model: ModelDocument,
    source: str,
    source_options: dict[str, Any],
    target_url: str,
    target_options: dict[str, Any],
    keep: tuple[str, ...],
    batch_rows: int,
    listed: TableFile | None = None,
) -> int:
    """Score one input file into ``target_url`` batch by batch; returns its row count (a Dask task).
    ``listed``: the file as a table version lists it (its deleted rows are skipped, its partition
    columns added)."""
    in_fs, in_path = open_url(source, source_options)
    out_fs, out_path = open_url(target_url, target_options)
    listed = listed or TableFile(in_path)
    features = list(model.features)
    on_read = _read_preprocessing(model)
    # With preprocessing applied on read, the file holds the raw columns it prepares (numbers, categories).
    numeric = features if on_read is None else list(on_read.columns)
    raw = numeric if on_read is None else [*on_read.columns, *on_read.categorical]
    wanted = list(dict.fromkeys(raw + list(keep)))
    out_fs.makedirs(out_path.rsplit("/", 1)[0], exist_ok=True)  # a no-op on object stores
    rows, writer = 0, None
    with native_open(in_fs, in_path) as handle, native_open(out_fs, out_path, "wb") as sink:
        # pre_buffer=False: pyarrow would otherwise cache every row group of the selected columns, i.e.
        # hold the whole file (measured: RSS + the file size on a 319 MiB file), and the memory bound is gone.
        reader = pq.ParquetFile(handle, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES)
        schema = table_schema(reader.schema_arrow, listed, wanted)
        _check_columns(schema, source, raw, list(keep), numeric, on_read is not None)
        check_field_ids(schema, listed, wanted, source)
        units = _original_units(model)
        # One feature buffer for the file's batches, filled column by column: a fresh np.column_stack per
        # batch cost 4.6 ms of 23 per 65,536 rows in page faults (profiled). Row-major like
        # np.column_stack's, so the model's matrix product (and its last bit) is unchanged.
        buffer = np.empty((batch_rows, len(features)), dtype=np.float64)
        direct = _direct_bounds(on_read, features)
        for batch in live_batches(reader, listed, wanted, batch_rows):
            X = (
                buffer[: batch.num_rows]
                if batch.num_rows <= batch_rows
                else np.empty((batch.num_rows, len(features)))
            )
            _prepare_into(X, batch, features, on_read, direct, rows, in_path)
            if not sum_is_finite(X) and not np.all(np.isfinite(X)):
                row = rows + int(np.argmax(~np.all(np.isfinite(X), axis=1)))
                raise LakeError(
                    f"{source}: row {row} has a missing or infinite feature; impute or drop it first"
                )
            scored = model.predict(X)
            table = pa.table({**{name: units(name, batch.column(name)) for name in keep}, **scored})
            if writer is None:
                writer = _predictions_writer(sink, table)
            writer.write_table(table)
            rows += batch.num_rows
        if writer is None:  # an empty file still gets its (empty) output
            empty = model.predict(np.zeros((0, len(features))))
            writer = pq.ParquetWriter(sink, pa.table(empty).schema)
        writer.close()
    return rows


def _prepare_into(
    X: np.ndarray,
    batch: pa.RecordBatch,
    features: list[str],
    on_read: ConvertSpec | None,
    direct: list[tuple[float, float] | None] | None,
    offset: int,
    path: str,
) -> None:
    """The model's features of ``batch`` (its rows start at row ``offset`` of ``path``) into ``X``: prepared
    straight into X where the preparation on read allows (``_direct_bounds``: bit for bit what
    ``convert_rows`` then ``_fill_rows`` give), else through those."""
    if direct is not None and map_rows_into(
        [batch.column(name).to_numpy(zero_copy_only=False) for name in on_read.columns],
        direct,
        on_read.scale_range,
        X,
    ):
        return
    inputs = batch
    if on_read is not None:
        inputs = convert_rows(batch, on_read, offset, path.rsplit("/", 1)[-1], with_label=False)
    _fill_rows(X, [inputs.column(name).to_numpy(zero_copy_only=False) for name in features])


def _predictions_writer(sink: Any, table: pa.Table) -> pq.ParquetWriter:
    """The Parquet writer of an output file whose first batch is ``table``."""
    # Dictionary pages only for kept text columns (labels, segments): predictions and ids are nearly all
    # distinct, and encoding them as dictionaries first cost 6.8 ms of 23 per batch.
    textual = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    # Snappy only where it shrinks a column: predictions do not compress, and Snappy's pass over them made
    # scoring a file of 1,000,000 rows × 16 take 1.15-1.17× as long (one process, two interleaved runs of 7).
    return pq.ParquetWriter(
        sink, table.schema, compression=column_compression(table), use_dictionary=textual or False
    )


def _fill_rows(X: Any, columns: list[Any]) -> None:
    """X[:, j] = columns[j] for every column, cast as an assignment casts (``np.stack`` into X: 1.2 ms for
    65,536 rows × 16 float32 columns, against 1.9 for the same copy 4,096 rows at a time and 4.6 a whole
    column at a time, which crosses every cache line of the row-major X once per column)."""
    np.stack(columns, axis=1, out=X, casting="unsafe")


def _direct_bounds(
    on_read: ConvertSpec | None, features: list[str]
) -> list[tuple[float, float] | None] | None:
    """Each raw feature's public bounds (None: kept as it is) where the preparation on read is a range map or
    nothing for every feature, column for column, and at most an intercept after them (no one-hot groups),
    so ``map_rows_into`` can prepare a batch straight into the model's matrix; else None."""
    prepared = [*on_read.columns, *([INTERCEPT_COLUMN] if on_read.intercept else [])] if on_read else None
    if on_read is None or prepared != features or on_read.categorical:
        return None
    return [tuple(on_read.bounds[name]) if name in on_read.bounds else None for name in on_read.columns]


def _read_preprocessing(model: ModelDocument) -> ConvertSpec | None:
    """The preprocessing the model's training applied to the lake's rows as it read them (a config's
    ``[preprocess]``), which scoring applies to the scored rows alike; None for a model trained on columns
    as stored (a lake ``dpstream convert`` wrote is scored in its converted form)."""
    if not model.preprocessing or not model.preprocessing.get("on_read"):
        return None
    return ConvertSpec.from_record(model.preprocessing)


def _original_units(model: ModelDocument):
    """(column, values) → the values in the CSV's units where ``dpstream convert`` scaled or coded the column
    (``ConvertSpec.original_units``), else untouched (an id passes through as it is; so does every column
    of a lake preprocessed as it is read, which holds them in their own units)."""
    if not model.preprocessing or model.preprocessing.get("on_read"):
        return lambda name, values: values
    spec = ConvertSpec.from_record(model.preprocessing)

    def units(name: str, values: pa.Array) -> pa.Array:
        if name != spec.label and name not in spec.bounds:
            return values
        return pa.array(spec.original_units(name, values.to_numpy(zero_copy_only=False)))

    return units


def predict_lake(
    model: ModelDocument,
    lake_url: str,
    out_url: str,
    *,
    client: Any = None,
    keep: tuple[str, ...] = (),
    storage_options: dict[str, Any] | None = None,
    batch_rows: int = BATCH_ROWS,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    source: SourceSpec | None = None,
    out_format: str = "parquet",
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> PredictSummary:
    """Score every live row of ``lake_url`` into ``out_url`` (module docstring); ``client`` is a
    ``distributed.Client`` (None: in this process). ``source``: the lake's format and version (default:
    detected, the latest). ``out_format="delta"``: the predictions become a new Delta table, created by
    one commit once every part is written. ``progress(files)``, given the number of files to score,
    returns the step called as each one is scored (``RunProgress.files``)."""
    options = dict(storage_options or {})
    if out_format not in ("parquet", "delta"):
        raise LakeError(f"--format must be parquet or delta, got {out_format!r}")
    check_predictions_location(out_url, lake_url, options)
    _check_kept_columns(model, keep)
    spec = LakeSpec(lake_url, model.features, model.label, options, source=source or SourceSpec())
    pinned = pin(spec)
    fs, listed = pinned.fs, pinned.files
    files = [file.path for file in listed]
    if not files:
        raise LakeError(f"the lake {lake_url} holds no .parquet files; check the URL")
    out_fs, root = open_url(out_url, options)
    if out_fs.exists(root) and out_fs.ls(root, detail=False):
        raise LakeError(f"{out_url} is not empty; write predictions to a new location")
    created = not out_fs.exists(root)  # a failure removes the folder it made, so a retry can use it
    staging = f"{root}/_tmp-{uuid.uuid4().hex[:8]}"
    parts = [f"{staging}/part-{index:05d}.parquet" for index in range(len(files))]
    sources = [url_of(fs, path) for path in files]
    arguments = [
        (model, source, options, url_of(out_fs, part), options, tuple(keep), batch_rows, file)
        for source, part, file in zip(sources, parts, listed, strict=True)
    ]
    on_file = progress(len(arguments)) if progress is not None else None
    try:
        if client is None:
            counts = [_scored(score_file(*args), on_file) for args in arguments]
        else:
            futures = [client.submit(release_after, score_file, *args, pure=False) for args in arguments]
            counts = gather_within(client, report_each(futures, on_file), worker_timeout=worker_timeout)
        final = _publish(out_fs, root, parts, out_url, options, out_format)
        write_json_atomic(
            out_fs,
            f"{root}/{PREDICT_RECORD}",
            {
                "format": "dpstream-predictions/1",
                "model_run_id": model.run_id,
                "model_kind": model.kind,
                "source": pinned.version.to_json(),
                "output_format": out_format,
                "inputs": sources,
                "outputs": final,
                "rows": [int(c) for c in counts],
                "columns": list(keep) + model.output_columns(),
            },
        )
        return PredictSummary(tuple(final), int(sum(counts)), pinned.version)
    finally:
        if out_fs.exists(staging):
            out_fs.rm(staging, recursive=True)
        if created and out_fs.isdir(root) and not out_fs.ls(root, detail=False):
            out_fs.rm(root, recursive=True)


def _scored(rows: int, on_file: Callable[[], None] | None) -> int:
    if on_file is not None:
        on_file()
    return rows


def _check_kept_columns(model: ModelDocument, keep: tuple[str, ...]) -> None:
    """Refuse a kept column named like one of the model's output columns."""
    clashes = [name for name in keep if name in model.output_columns()]
    if clashes:
        raise LakeError(
            f"--keep names {clashes[0]!r}, which is an output column; rename it in the lake or drop it"
        )


def _publish(
    out_fs: Any, root: str, parts: list[str], out_url: str, options: dict[str, Any], out_format: str
) -> list[str]:
    """Move the finished ``parts`` from the staging folder into ``root`` (with ``out_format="delta"``, then
    make them a Delta table: ``_commit_delta``); returns their URLs. A failure removes the parts it moved."""
    final, moved = [], []
    try:
        for part in parts:
            destination = f"{root}/{part.rsplit('/', 1)[-1]}"
            out_fs.mv(part, destination)
            moved.append(destination)
            final.append(url_of(out_fs, destination))
        if out_format == "delta":
            _commit_delta(out_url, options)
    except BaseException:
        for destination in moved:  # ours alone (the folder was empty): a failed commit leaves nothing
            out_fs.rm(destination)
        raise
    return final


def _commit_delta(out_url: str, options: dict[str, Any]) -> None:
    """Make the folder of finished parts a Delta table: one commit (version 0) adds every part, so a reader
    sees no table, or all of it. The parts' footers give the statistics."""
    from deltalake import convert_to_deltalake

    convert_to_deltalake(
        out_url, mode="error", storage_options=delta_storage_options(out_url, options), name="predictions"
    )
