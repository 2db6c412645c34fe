"""Validation of a lake before any privacy budget is spent: footers first, then a streaming scan.

Every error is a ``LakeError`` whose message names the file, the column and (where known) the row,
and says how to fix it. Validation reads the lake and never writes it; given a ``ValidationCache`` it
records its per-file checks under the lake's ``shuffled_url`` and reads again only files that changed
(``dpstream.pipelines.validation.cache``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import (
    STREAM_BUFFER_BYTES,
    LakeFile,
    file_identity,
    file_stamp,
    fingerprint,
    native_open,
)
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.memory import release_after
from dpstream.pipelines.preprocessing.rows import prepared_feature_type
from dpstream.pipelines.sources.formats import declared_formats
from dpstream.pipelines.sources.protocol import (
    SourceVersion,
    TableFile,
    check_field_ids,
    live_batches,
    pin,
    plain_schema,
    table_schema,
)
from dpstream.pipelines.validation.cache import ValidationCache
from dpstream.pipelines.validation.columns import feature_width
from dpstream.pipelines.validation.content_digest import RowsDigest, refuse_copies
from dpstream.pipelines.validation.persons import MergedIds, check_user_column, check_user_ids, merged_ids
from dpstream.pipelines.validation.values import check_class_labels, check_values, file_name
from dpstream.pipelines.waiting import gather_within, report_each
from dpstream.storage import open_url

if TYPE_CHECKING:
    from dpstream.models.kinds.base import LabelContract

__all__ = ["LakeSummary", "FileCheck", "check_file", "presented_schema", "validate_lake"]

SCAN_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class LakeSummary:
    spec: LakeSpec
    files: tuple[LakeFile, ...]
    schema: pa.Schema
    num_features: int
    fingerprint: str
    stray_files: tuple[str, ...] = ()  # visible files without the .parquet suffix: not read, reported
    version: SourceVersion = SourceVersion()  # the table version validated (a Parquet folder has none)
    # The user unit: the people whose id was stored in more than one spelling (``validation.persons``).
    merged_ids: MergedIds = MergedIds()

    def stray_note(self) -> str | None:
        """One line naming the files validation did not read, or None."""
        if not self.stray_files:
            return None
        names = [file_name(path) for path in self.stray_files]
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


def _scan(
    fs,
    listed: TableFile,
    spec: LakeSpec,
    width: int,
    labels_seen: set[float] | None = None,
    labels: LabelContract | None = None,
) -> tuple[int, int, str, int]:
    """Stream the file's live rows (its table version's deletes dropped) once through ``check_values``.
    Returns (the vector width, the live rows, the digest of the rows as read (``content_digest``), the
    ids the person rule changes, counted per batch (``check_user_ids``)). A row a message names counts live rows."""
    path, live, respelled, digest = listed.path, 0, 0, RowsDigest()
    digested = [column for column in spec.read_columns if column != spec.user_column]  # content_digest
    with native_open(fs, path) as handle:
        # pre_buffer=False: the default caches every row group of the columns, i.e. the whole file in memory.
        reader = pq.ParquetFile(handle, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES)
        for rows in live_batches(reader, listed, spec.read_columns, SCAN_BATCH_ROWS):
            digest.add(rows, digested)
            rows = spec.present(rows, path, live)
            width = check_values(rows, spec, path, live, width, labels_seen, labels)
            if spec.user_column is not None:
                respelled += check_user_ids(rows.column(spec.user_column), spec, path, live)
            live += rows.num_rows
    return width, live, digest.hexdigest(), respelled


@dataclass(frozen=True)
class FileCheck:
    """What checking one file found (``check_file``): its ``LakeFile``, schema, vector width and
    label values (at most ``values.SHOWN_VALUES`` + 1 of them), or the message of its first problem; the digest
    of its rows (``content_digest``) and, under the user unit, non-zero when some stored id is not in its
    normal form (``persons.check_user_ids``: the distinct ones, counted per batch)."""

    file: LakeFile | None = None
    schema: pa.Schema | None = None
    width: int = -1
    labels: frozenset[float] = frozenset()
    error: str | None = None
    digest: str = ""
    respelled: int = 0


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
                f"{file_name(path)} cannot be read here: {error}. Grant read access to whoever validates the lake (with "
                "[cluster] prepare_on = 'workers', the Dask workers' role; 'flow' validates in the flow's process)"
            ) from None
        except (pa.ArrowInvalid, OSError) as error:
            raise LakeError(
                f"{file_name(path)} is corrupt or truncated ({error}); restore it from its source or remove it from the lake"
            ) from None
        if listed.rows is not None and rows != listed.rows:
            raise LakeError(
                f"{file_name(path)} holds {rows:,} rows, but the table's metadata records {listed.rows:,} for it: it is "
                "not the file the table's version lists (replaced outside the table); repair the table"
            )
        if rows == 0 and listed.rows is None:
            raise LakeError(f"{file_name(path)} is an empty file (0 rows); remove it from the lake")
        check_field_ids(schema, listed, spec.read_columns, file_name(path))
        schema = table_schema(schema, listed, spec.read_columns)
        width = feature_width(schema, spec, path)
        if spec.user_column is not None:
            check_user_column(schema, spec, path)
        classes = labels is not None and bool(labels.allowed())
        seen: set[float] | None = set() if classes else None
        width, live, digest, respelled = _scan(fs, listed, spec, width, seen, labels)
        identity = file_identity(fs, path)
        file = LakeFile(path, live, int(fs.size(path)), identity, stamp, listed.deleted, listed.constants)
        if file_stamp(fs, path) != stamp:
            raise LakeError(
                f"{file_name(path)} changed while it was being validated; run again once nothing writes to the lake"
            )
    except LakeError as error:
        return FileCheck(error=str(error))
    return FileCheck(file, schema, width, frozenset(seen or ()), digest=digest, respelled=respelled)


def _check_files(
    fs,
    listed: tuple[TableFile, ...],
    spec: LakeSpec,
    labels: LabelContract | None,
    client,
    worker_timeout: float,
    cache: ValidationCache | None = None,
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> list[FileCheck]:
    """Each listed file's check in path order: reused from ``cache`` where the file is unchanged since it
    was recorded (``dpstream.pipelines.validation.cache``), else run (``check_file``). Without a client
    the checks stop at the first problem, which validate_lake then reports: the list ends there."""
    reused = cache.recorded(fs, listed) if cache is not None else [None] * len(listed)
    checks = [None if found is None else _recorded_check(*found) for found in reused]
    missing = [index for index, check in enumerate(checks) if check is None]
    on_file = progress(len(missing)) if progress is not None else None  # the files read again
    run = _run_checks(
        fs, tuple(listed[index] for index in missing), client, worker_timeout, spec, labels, on_file
    )
    for index, check in zip(missing, run, strict=False):
        checks[index] = check
    return list(itertools.takewhile(lambda check: check is not None, checks))


def _recorded_check(
    file: LakeFile, schema: pa.Schema, width: int, labels: frozenset[float], digest: str, respelled: int
) -> FileCheck:
    """A check the validation cache recorded (``ValidationCache.reuse``), as ``check_file`` returned it."""
    return FileCheck(file, schema, width, labels, digest=digest, respelled=respelled)


def _run_checks(
    fs,
    listed: tuple[TableFile, ...],
    client,
    worker_timeout: float,
    spec: LakeSpec,
    labels: LabelContract | None,
    on_file: Callable[[], None] | None = None,
) -> list[FileCheck]:
    if not listed:
        return []
    urls = [fs.unstrip_protocol(file.path) for file in listed]
    if client is None:
        checks = []
        for url, file in zip(urls, listed, strict=True):
            checks.append(check_file(url, spec, labels, file))
            if on_file is not None:
                on_file()
            if checks[-1].error:  # a later file cannot change which problem is reported
                break
        return checks
    futures = [
        client.submit(release_after, check_file, url, spec, labels, file, pure=False)
        for url, file in zip(urls, listed, strict=True)
    ]
    return gather_within(client, report_each(futures, on_file), worker_timeout=worker_timeout)


def validate_lake(
    spec: LakeSpec,
    *,
    labels: LabelContract | None = None,
    client=None,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    cache: ValidationCache | None = None,
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> LakeSummary:
    """Check the whole lake before any budget is spent; ``LakeError`` names the file, column and row.

    Each file is checked on its own (``check_file``: footer, content identity, every value of the used
    columns), one Dask task per file when ``client`` is given, else in turn here; then the files are
    compared in path order. The problem reported is that of the first file, in path order, that has
    one: its own (unreadable, empty, a missing or non-numeric column, a null, NaN or inf, a vector of
    another length) or a disagreement with the files before it (schema drift, vector width, labels).

    ``labels``, a classifier's ``LabelContract``, also requires the label column's values to form one of
    its public label sets ({0, 1} or {−1, +1} for two classes, 0..K−1 for K). Two files with the
    same content identity, or the same rows however encoded (``content_digest``), are refused (their
    records would be used twice). Under the user unit, the people whose id is stored in more than one
    spelling are counted (``LakeSummary.merged_ids``; ``validation.persons``). On a cluster left without
    workers for ``worker_timeout`` seconds it stops (``dpstream.pipelines.waiting.NoWorkersError``).
    ``cache`` (``ValidationCache``): files unchanged since their check was recorded are not read again.
    ``progress(files)``, given the number of files to read, returns the step called as each is checked."""
    pinned = pin(spec)
    fs, paths, stray = pinned.fs, [file.path for file in pinned.files], pinned.stray
    if not paths:
        raise LakeError(_no_files(spec, stray))
    checks = _check_files(fs, pinned.files, spec, labels, client, worker_timeout, cache, progress)
    _compare_files(paths, checks, spec, labels)
    first = checks[0]
    files = tuple(check.file for check in checks)
    refuse_copies(files, tuple(check.digest for check in checks), table=pinned.version.version is not None)
    if sum(file.rows for file in files) == 0:
        raise LakeError(
            f"{pinned.version.describe()} at {spec.url} holds no rows: its deletes removed every row"
        )
    identity = fingerprint(files, pinned.version.lineage)
    respelled = any(check.respelled for check in checks)
    merged = merged_ids(fs, pinned.files, spec, respelled, client, worker_timeout, cache, identity)
    schema = presented_schema(first.schema, spec)
    if cache is not None:  # only a lake that passed: a refused one leaves nothing behind
        cache.store(
            {
                file.path: cache.entry(
                    check.file,
                    check.schema,
                    check.width,
                    check.labels,
                    file.rows,
                    check.digest,
                    check.respelled,
                )
                for file, check in zip(pinned.files, checks, strict=True)
                if cache.cacheable(file)
            },
            (identity, merged.people, merged.spellings) if spec.user_column is not None else None,
        )
    return LakeSummary(spec, files, schema, first.width, identity, tuple(stray), pinned.version, merged)


def _compare_files(
    paths: list[str], checks: list[FileCheck], spec: LakeSpec, labels: LabelContract | None
) -> None:
    """Raise the first file's problem in path order: its own (``FileCheck.error``), or a disagreement with
    the files before it (schema drift, vector width, a classifier's labels)."""
    first = checks[0]
    seen: set[float] = set()
    for path, check in zip(paths, checks, strict=False):
        if check.error:
            raise LakeError(check.error)
        for column in spec.read_columns:
            before, now = first.schema.field(column).type, check.schema.field(column).type
            if before != now:
                raise LakeError(
                    f"schema drift: column {column!r} is {now} in {file_name(path)} but {before} in "
                    f"{file_name(paths[0])}; rewrite the files with one schema"
                )
        if check.width != first.width:
            raise LakeError(
                f"{file_name(path)}: row 0 of column {spec.features!r} has a vector of length {check.width}, expected "
                f"{first.width}; every feature vector must have the same length"
            )
        if labels is not None and labels.allowed():
            check_class_labels(np.array(sorted(check.labels)), seen, path, spec, labels)


def _no_files(spec: LakeSpec, stray: list[str]) -> str:
    """Why a lake holds no Parquet file to read: the URL names nothing, a table's own log or metadata
    folder, a folder of other files, or an empty one."""
    fs, path = spec.filesystem()
    if not fs.exists(path):
        return f"the lake {spec.url} does not exist (no such folder or prefix): check lake.url"
    if spec.url.rstrip("/").rsplit("/", 1)[-1] in {table.marker for table in declared_formats()}:
        found = (
            " (it is a table's log or metadata folder: point lake.url at the table, the folder that holds it)"
        )
    elif stray:
        found = f" (it holds {len(stray)} other file(s), e.g. {file_name(stray[0])}: convert CSV with `dpstream convert`)"
    else:
        found = ""
    return f"the lake {spec.url} is empty: no .parquet files found{found}; check the URL"
