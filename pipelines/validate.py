"""Validation of a lake before any privacy budget is spent: footers first, then a streaming scan.

Every error is a ``LakeError`` whose message names the file, the column and (where known) the row,
and says how to fix it. Validation reads the lake and never writes it; given a ``ValidationCache`` it
records its per-file checks under the lake's ``shuffled_url`` and reads again only files that changed
(``dpstream.pipelines.validation_cache``).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpstream.pipelines.convert_spec import ConvertSpec, prepared_feature_type
from dpstream.pipelines.lake import (
    STREAM_BUFFER_BYTES,
    LakeError,
    LakeFile,
    LakeSpec,
    file_identity,
    file_stamp,
    fingerprint,
    native_open,
)
from dpstream.pipelines.memory import release_after, sum_is_finite
from dpstream.pipelines.sources import (
    SourceVersion,
    TableFile,
    check_field_ids,
    live_batches,
    pin,
    plain_schema,
    table_schema,
)
from dpstream.pipelines.validation_cache import ValidationCache
from dpstream.pipelines.waiting import DEFAULT_WORKER_TIMEOUT, gather_within
from dpstream.storage import open_url

if TYPE_CHECKING:
    from dpstream.models.kinds import LabelContract

__all__ = ["LakeSummary", "FileCheck", "check_file", "check_values", "check_user_ids", "validate_lake"]

SCAN_BATCH_ROWS = 65_536
# A classifier's label contract (dpstream.models.kinds.LabelContract: two classes coded {0, 1} or
# {−1, +1}, or the positions 0..K−1 of a public class list) is fixed in advance, so checking a lake
# against it releases nothing beyond the refusal to the operator.
_SHOWN_VALUES = 8


@dataclass(frozen=True)
class LakeSummary:
    spec: LakeSpec
    files: tuple[LakeFile, ...]
    schema: pa.Schema
    num_features: int
    fingerprint: str
    stray_files: tuple[str, ...] = ()  # visible files without the .parquet suffix: not read, reported
    version: SourceVersion = SourceVersion()  # the table version validated (a Parquet folder has none)

    def stray_note(self) -> str | None:
        """One line naming the files validation did not read, or None."""
        if not self.stray_files:
            return None
        names = [_name(path) for path in self.stray_files]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return (
            f"{len(names)} file(s) in {self.spec.url} are not Parquet and are not read: {shown}; convert them "
            "(`dpstream convert`) or move them out of the lake"
        )

    @property
    def num_rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def file_identities(self) -> tuple[str, ...]:
        """The content identities of the source files, and a table's lineage (``SourceVersion.lineage``): the
        units the ledger charges. A file's deletes do not enter: its remaining rows are among its records."""
        lineage = () if self.version.lineage is None else (self.version.lineage,)
        return tuple(sorted({f.identity for f in self.files} | set(lineage)))


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _raw_width(schema: pa.Schema, preprocess: ConvertSpec, path: str) -> int:
    """The width of the rows ``preprocess`` presents, once the raw columns it converts as numbers are numbers
    (a categorical column, and a label coded by public classes, may hold anything)."""
    numeric = [*preprocess.columns, *(() if preprocess.label_classes else (preprocess.label,))]
    for column in numeric:
        kind = schema.field(column).type
        if not any(test(kind) for test in (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)):
            fix = (
                "a regression's label is a number (a classifier's class names go in model.classes)"
                if column == preprocess.label
                else "list its public values in preprocess.categories (one-hot), or leave it out of lake.features"
            )
            raise LakeError(f"{_name(path)}: column {column!r} has non-numeric type {kind}; {fix}")
    return len(preprocess.output_columns())


def presented_schema(schema: pa.Schema, spec: LakeSpec) -> pa.Schema:
    """The schema of the rows ``spec`` presents from files of the raw ``schema`` (itself, without
    preprocessing): float32 features where every raw numeric feature is a float32 or narrower, else
    float64 (``prepared_feature_type``); the label float64 (int64 when coded by public classes), the user
    column as stored."""
    preprocess = spec.preprocess
    if preprocess is None:
        return schema
    label = pa.int64() if preprocess.label_classes else pa.float64()
    feature = prepared_feature_type([schema.field(name).type for name in preprocess.columns])
    fields = [pa.field(name, feature) for name in spec.features] + [pa.field(spec.label, label)]
    if spec.user_column is not None:
        fields.append(schema.field(spec.user_column))
    return pa.schema(fields)


def _feature_width(schema: pa.Schema, spec: LakeSpec, path: str) -> int:
    for column in spec.read_columns if spec.preprocess is not None else spec.columns:
        copies = len(schema.get_all_field_indices(column))
        if copies > 1:
            raise LakeError(
                f"{_name(path)}: column {column!r} appears {copies} times in the file's schema, so which one to read "
                "is ambiguous; rewrite the file with distinct column names"
            )
        if copies == 0:
            raise LakeError(
                f"{_name(path)}: column {column!r} is missing (columns present: {', '.join(schema.names)}); "
                "fix the feature/label names in the config"
            )
    if spec.preprocess is not None:
        return _raw_width(schema, spec.preprocess, path)
    label_type = schema.field(spec.label).type
    if not (pa.types.is_integer(label_type) or pa.types.is_floating(label_type)):
        raise LakeError(
            f"{_name(path)}: label column {spec.label!r} has non-numeric type {label_type}; convert it to a number"
        )
    if isinstance(spec.features, str):
        feature_type = schema.field(spec.features).type
        if not pa.types.is_fixed_size_list(feature_type) and not pa.types.is_list(feature_type):
            raise LakeError(
                f"{_name(path)}: feature column {spec.features!r} has type {feature_type}, not a list of numbers; "
                "use one fixed-size-list column or a list of numeric columns"
            )
        value_type = feature_type.value_type
        if not (pa.types.is_integer(value_type) or pa.types.is_floating(value_type)):
            raise LakeError(
                f"{_name(path)}: feature column {spec.features!r} holds {value_type}, not numbers"
            )
        return feature_type.list_size if pa.types.is_fixed_size_list(feature_type) else -1
    for column in spec.features:
        column_type = schema.field(column).type
        if not (pa.types.is_integer(column_type) or pa.types.is_floating(column_type)):
            raise LakeError(
                f"{_name(path)}: feature column {column!r} has non-numeric type {column_type}; drop it from the "
                "features or convert it (e.g. one-hot encode with `dpstream convert`)"
            )
    return len(spec.features)


def _check_user_column(schema: pa.Schema, spec: LakeSpec, path: str) -> None:
    """The user unit's id column is present once, of a type whose values name a person exactly."""
    column = spec.user_column
    copies = len(schema.get_all_field_indices(column))
    if copies != 1:
        present = (
            "appears twice" if copies > 1 else f"is missing (columns present: {', '.join(schema.names)})"
        )
        raise LakeError(
            f"{_name(path)}: privacy.user_column {column!r} {present}; name the column that identifies a person"
        )
    kind = schema.field(column).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        raise LakeError(
            f"{_name(path)}: privacy.user_column {column!r} has type {kind}; a person's id must be an integer or a "
            "string (a float or a timestamp can name two people alike after rounding): cast it when writing the lake"
        )


def check_user_ids(values: Any, spec: LakeSpec, path: str, offset: int = 0) -> None:
    """No row without its person: a null (or empty string) id could not be bounded with the rest of that
    person's rows."""
    missing = values.is_null().to_numpy(zero_copy_only=False)
    kind = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        missing = missing | pc.fill_null(pc.equal(values.cast(kind), ""), False).to_numpy(
            zero_copy_only=False
        )
    if missing.any():
        row = offset + int(np.flatnonzero(missing)[0])
        raise LakeError(
            f"{_name(path)}: row {row} of privacy.user_column {spec.user_column!r} is missing (null or empty); every "
            "row needs its person's id (drop the row, or give it the id it belongs to)"
        )


def _check_class_labels(
    values: np.ndarray, seen: set[float], path: str, spec: LakeSpec, labels: LabelContract
) -> None:
    """Add the label values of a batch to ``seen``; refuse as soon as they fit none of the contract's
    public label sets."""
    seen.update(float(v) for v in np.unique(values)[: _SHOWN_VALUES + 1])
    if not any(seen <= allowed for allowed in labels.allowed()):
        shown = sorted(seen)[:_SHOWN_VALUES]
        more = ", ..." if len(seen) > _SHOWN_VALUES else ""
        raise LakeError(
            f"{_name(path)}: label column {spec.label!r} holds the values {{{', '.join(f'{v:g}' for v in shown)}{more}}}, "
            f"but this classifier needs {labels.describe()}; list the classes in model.classes (in the order of "
            "their codes), recode the label column (`dpstream convert --label-classes A,B,C`), or use "
            "model.kind = 'linear' for a continuous target"
        )


def check_values(
    batch: pa.RecordBatch | pa.Table,
    spec: LakeSpec,
    path: str,
    offset: int = 0,
    width: int = -1,
    labels_seen: set[float] | None = None,
    labels: LabelContract | None = None,
) -> int:
    """Check the used columns of one batch of rows that start at row ``offset`` of ``path``: no null, NaN or
    inf, every vector of the same length, and (``labels_seen`` given) the classifier's label contract ``labels``.
    Returns the vector width (``width`` when known, else the first row's)."""
    for column in spec.columns:
        values = batch.column(column)
        if pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type):
            lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
            expected = width if width > 0 else int(lengths[0])
            wrong = np.flatnonzero(lengths != expected)
            if wrong.size:
                row = offset + int(wrong[0])
                raise LakeError(
                    f"{_name(path)}: row {row} of column {column!r} has a vector of length "
                    f"{int(lengths[wrong[0]])}, expected {expected}; every feature vector must have the same length"
                )
            width = expected
            values = pc.list_flatten(values)
            stride = expected
        else:
            stride = 1
        if values.null_count:
            row = offset + int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]) // stride
            raise LakeError(
                f"{_name(path)}: row {row} of column {column!r} is missing (null); drop or impute it"
            )
        numbers = values.to_numpy(zero_copy_only=False)
        if numbers.dtype.kind == "f" and not sum_is_finite(numbers):
            bad = np.flatnonzero(~np.isfinite(numbers))
            if bad.size:
                row = offset + int(bad[0]) // stride
                raise LakeError(
                    f"{_name(path)}: row {row} of column {column!r} is {numbers[bad[0]]}; remove or impute "
                    "non-finite values before training"
                )
        if labels_seen is not None and labels is not None and column == spec.label:
            _check_class_labels(numbers, labels_seen, path, spec, labels)
    return width


def _scan(
    fs,
    listed: TableFile,
    spec: LakeSpec,
    width: int,
    labels_seen: set[float] | None = None,
    labels: LabelContract | None = None,
) -> tuple[int, int]:
    """Stream the file's live rows (its table version's deletes dropped) once through ``check_values``.
    Returns (the vector width, the live rows). A row a message names counts live rows."""
    path, live = listed.path, 0
    with native_open(fs, path) as handle:
        # pre_buffer=False: the default caches every row group of the columns, i.e. the whole file in memory.
        reader = pq.ParquetFile(handle, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES)
        for rows in live_batches(reader, listed, spec.read_columns, SCAN_BATCH_ROWS):
            rows = spec.present(rows, path, live)
            width = check_values(rows, spec, path, live, width, labels_seen, labels)
            if spec.user_column is not None:
                check_user_ids(rows.column(spec.user_column), spec, path, live)
            live += rows.num_rows
    return width, live


@dataclass(frozen=True)
class FileCheck:
    """What checking one file found (``check_file``): its ``LakeFile``, schema, vector width and
    label values (at most ``_SHOWN_VALUES`` + 1 of them), or the message of its first problem."""

    file: LakeFile | None = None
    schema: pa.Schema | None = None
    width: int = -1
    labels: frozenset[float] = frozenset()
    error: str | None = None


def check_file(
    url: str, spec: LakeSpec, labels: LabelContract | None = None, listed: TableFile | None = None
) -> FileCheck:
    """Footer, identity and a streaming scan of one file, with no knowledge of the other files: the
    per-file unit ``validate_lake`` runs in a loop or as one Dask task per file. A problem is returned
    as ``FileCheck.error`` (its ``LakeError`` message), not raised, so the caller can order problems by
    file whatever order the tasks finish in. ``listed``: the file as a table version lists it (the rows
    its metadata records, its deletes, its partition values)."""
    fs, path = open_url(url, spec.storage_options)
    listed = TableFile(path) if listed is None else listed
    try:
        try:
            stamp = file_stamp(fs, path)
            with fs.open(path, "rb") as handle:
                parquet = pq.ParquetFile(handle)
                schema, rows = plain_schema(parquet.schema_arrow), parquet.metadata.num_rows
        except PermissionError as error:
            raise LakeError(
                f"{_name(path)} cannot be read here: {error}. Grant read access to whoever validates the lake (with "
                "[cluster] prepare_on = 'workers', the Dask workers' role; 'flow' validates in the flow's process)"
            ) from None
        except (pa.ArrowInvalid, OSError) as error:
            raise LakeError(
                f"{_name(path)} is corrupt or truncated ({error}); restore it from its source or remove it from the lake"
            ) from None
        if listed.rows is not None and rows != listed.rows:
            raise LakeError(
                f"{_name(path)} holds {rows:,} rows, but the table's metadata records {listed.rows:,} for it: it is "
                "not the file the table's version lists (replaced outside the table); repair the table"
            )
        if rows == 0 and listed.rows is None:
            raise LakeError(f"{_name(path)} is an empty file (0 rows); remove it from the lake")
        check_field_ids(schema, listed, spec.read_columns, _name(path))
        schema = table_schema(schema, listed, spec.read_columns)
        width = _feature_width(schema, spec, path)
        if spec.user_column is not None:
            _check_user_column(schema, spec, path)
        classes = labels is not None and bool(labels.allowed())
        seen: set[float] | None = set() if classes else None
        width, live = _scan(fs, listed, spec, width, seen, labels)
        identity = file_identity(fs, path)
        file = LakeFile(path, live, int(fs.size(path)), identity, stamp, listed.deleted, listed.constants)
        if file_stamp(fs, path) != stamp:
            raise LakeError(
                f"{_name(path)} changed while it was being validated; run again once nothing writes to the lake"
            )
    except LakeError as error:
        return FileCheck(error=str(error))
    return FileCheck(file, schema, width, frozenset(seen or ()))


def _check_files(
    fs,
    listed: tuple[TableFile, ...],
    spec: LakeSpec,
    labels: LabelContract | None,
    client,
    worker_timeout: float,
    cache: ValidationCache | None = None,
) -> list[FileCheck]:
    """Each listed file's check in path order: reused from ``cache`` where the file is unchanged since it
    was recorded (``dpstream.pipelines.validation_cache``), else run (``check_file``). Without a client
    the checks stop at the first problem, which validate_lake then reports: the list ends there."""
    reused = cache.recorded(fs, listed) if cache is not None else [None] * len(listed)
    checks = [None if found is None else FileCheck(*found) for found in reused]
    missing = [index for index, check in enumerate(checks) if check is None]
    run = _run_checks(fs, tuple(listed[index] for index in missing), client, worker_timeout, spec, labels)
    for index, check in zip(missing, run, strict=False):
        checks[index] = check
    return list(itertools.takewhile(lambda check: check is not None, checks))


def _run_checks(
    fs,
    listed: tuple[TableFile, ...],
    client,
    worker_timeout: float,
    spec: LakeSpec,
    labels: LabelContract | None,
) -> list[FileCheck]:
    if not listed:
        return []
    urls = [fs.unstrip_protocol(file.path) for file in listed]
    if client is None:
        checks = []
        for url, file in zip(urls, listed, strict=True):
            checks.append(check_file(url, spec, labels, file))
            if checks[-1].error:  # a later file cannot change which problem is reported
                break
        return checks
    futures = [
        client.submit(release_after, check_file, url, spec, labels, file, pure=False)
        for url, file in zip(urls, listed, strict=True)
    ]
    return gather_within(client, futures, worker_timeout=worker_timeout)


def validate_lake(
    spec: LakeSpec,
    *,
    labels: LabelContract | None = None,
    client=None,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    cache: ValidationCache | None = None,
) -> LakeSummary:
    """Check the whole lake before any budget is spent; ``LakeError`` names the file, column and row.

    Each file is checked on its own (``check_file``: footer, content identity, every value of the used
    columns), one Dask task per file when ``client`` is given, else in turn here; then the files are
    compared in path order. The problem reported is that of the first file, in path order, that has
    one: its own (unreadable, empty, a missing or non-numeric column, a null, NaN or inf, a vector of
    another length) or a disagreement with the files before it (schema drift, vector width, labels).

    ``labels``, a classifier's ``LabelContract``, also requires the label column's values to form one of
    its public label sets ({0, 1} or {−1, +1} for two classes, 0..K−1 for K). Two files with the
    same content identity are refused (their records would be used twice). On a cluster left without
    workers for ``worker_timeout`` seconds it stops (``dpstream.pipelines.waiting.NoWorkersError``).
    ``cache`` (``ValidationCache``): files unchanged since their check was recorded are not read again."""
    pinned = pin(spec)
    fs, paths, stray = pinned.fs, [file.path for file in pinned.files], pinned.stray
    if not paths:
        inside = spec.url.rstrip("/").rsplit("/", 1)[-1] in ("_delta_log", "metadata")
        found = (
            " (it is a table's log or metadata folder: point lake.url at the table, the folder that holds it)"
            if inside
            else f" (it holds {len(stray)} other file(s), e.g. {_name(stray[0])}: convert CSV with `dpstream convert`)"
            if stray
            else ""
        )
        raise LakeError(f"the lake {spec.url} is empty: no .parquet files found{found}; check the URL")
    checks = _check_files(fs, pinned.files, spec, labels, client, worker_timeout, cache)
    first = checks[0]
    seen: set[float] = set()
    for path, check in zip(paths, checks, strict=False):
        if check.error:
            raise LakeError(check.error)
        for column in spec.read_columns:
            before, now = first.schema.field(column).type, check.schema.field(column).type
            if before != now:
                raise LakeError(
                    f"schema drift: column {column!r} is {now} in {_name(path)} but {before} in "
                    f"{_name(paths[0])}; rewrite the files with one schema"
                )
        if check.width != first.width:
            raise LakeError(
                f"{_name(path)}: row 0 of column {spec.features!r} has a vector of length {check.width}, expected "
                f"{first.width}; every feature vector must have the same length"
            )
        if labels is not None and labels.allowed():
            _check_class_labels(np.array(sorted(check.labels)), seen, path, spec, labels)
    files = tuple(check.file for check in checks)
    _refuse_copies(files, table=pinned.version.version is not None)
    if sum(file.rows for file in files) == 0:
        raise LakeError(
            f"{pinned.version.describe()} at {spec.url} holds no rows: its deletes removed every row"
        )
    identity = fingerprint(files, pinned.version.lineage)
    schema = presented_schema(first.schema, spec)
    if cache is not None:  # only a lake that passed: a refused one leaves nothing behind
        cache.store(
            {
                file.path: cache.entry(check.file, check.schema, check.width, check.labels, file.rows)
                for file, check in zip(pinned.files, checks, strict=True)
                if cache.cacheable(file)
            }
        )
    return LakeSummary(spec, files, schema, first.width, identity, tuple(stray), pinned.version)


def _refuse_copies(files: tuple[LakeFile, ...], table: bool = False) -> None:
    """Two files with one content identity hold the same records: training on both would use each of them
    twice in one pass, under a guarantee that counts it once. In a table (``table``) that is the same
    batch of rows appended twice: its files are the table's to change, not the user's."""
    first_of: dict[str, LakeFile] = {}
    prefix = os.path.commonpath([file.path for file in files]) if len(files) > 1 else ""
    for file in files:
        earlier = first_of.setdefault(file.identity, file)
        if earlier is not file:
            shown = [path[len(prefix) :].lstrip("/") or _name(path) for path in (earlier.path, file.path)]
            raise LakeError(
                f"{shown[0]} and {shown[1]} have the same content ({file.identity}): "
                + ("two files of " if table else "a copy or link of one file inside ")
                + (
                    "the table (the same rows appended twice) would put each of its records in one training pass "
                    "twice. Delete the duplicate rows through the table, or pin a version before them"
                    if table
                    else "the lake would put each of its records in one training pass twice. Remove the copy from the lake"
                )
            )
