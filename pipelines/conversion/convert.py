"""CSV → Parquet lake, with explicit column selection and explicit policies for missing values and
categorical columns, so real data (e.g. examples/data/california_housing/housing.csv) can be prepared.

Nothing is inferred from the sensitive data that would be released: imputation constants, category
lists and feature ranges (for clipping and scaling onto ``scale_range``) are supplied by the user as
public values (docs/design.md, "What counts as a release"). A label with bounds is also written as it
was before clipping (``RAW_LABEL_COLUMN``), which training never reads: the held-out evaluation scores
the model against it, in the label's units. The CSV is streamed in batches; parts are
written under a temporary folder and moved into place only when the whole file converted, so a
failure leaves nothing behind. The source is only read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from dpstream.person_ids import missing_ids, normalise_ids, normalised_uniques
from dpstream.pipelines.conversion.sample import person_sample_mask, sample_mask
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.preprocessing.rows import convert_rows, require_columns
from dpstream.pipelines.preprocessing.spec import ConvertSpec
from dpstream.pipelines.shuffle.scatter_gather import ROW_GROUP_ROWS, write_part
from dpstream.storage import open_url, read_json, write_json_atomic

__all__ = [
    "csv_to_parquet",
    "convert_csv",
    "ConvertedLake",
    "check_csv_columns",
    "check_empty_location",
    "read_convert_record",
    "CONVERT_RECORD",
]

CONVERT_RECORD = "_convert.json"


def read_convert_record(
    lake_url: str, storage_options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The preprocessing ``csv_to_parquet`` recorded in a lake it wrote, or None for another lake."""
    fs, root = open_url(lake_url, storage_options)
    path = f"{root}/{CONVERT_RECORD}"
    return read_json(fs, path) if fs.exists(path) else None


def check_csv_columns(
    source_url: str, needed: list[str], storage_options: dict[str, Any] | None = None
) -> None:
    """Refuse a selection naming a column the CSV's header lacks, reading the header only: ``dpstream
    convert`` asks this first, so a misspelt label is reported as such, not as a column without bounds."""
    source_fs, source_path = open_url(source_url, storage_options)
    if not source_fs.exists(source_path):
        raise LakeError(f"{source_url} does not exist; check the path")
    with source_fs.open(source_path, "rb") as handle:
        names = pcsv.open_csv(handle).schema.names
    require_columns(source_path.rsplit("/", 1)[-1], needed, names)


def check_empty_location(out_url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Refuse converting into a location that holds anything (a conversion never writes over data), or
    that lies inside a lake: a lake is read with its subfolders, so the new files would be read as the
    outer lake's too and every row in them counted twice."""
    out_fs, root = open_url(out_url, storage_options)
    if out_fs.exists(root) and out_fs.ls(root, detail=False):
        raise LakeError(f"{out_url} is not empty; convert into a new location")
    parent = root.rstrip("/")
    while "/" in parent.strip("/"):
        parent = parent.rsplit("/", 1)[0]
        if not out_fs.isdir(parent):
            continue
        names = [name.rstrip("/").rsplit("/", 1)[-1] for name in out_fs.ls(parent, detail=False)]
        if any(name.endswith(".parquet") or name in (CONVERT_RECORD, "_delta_log") for name in names):
            raise LakeError(
                f"{out_url} lies inside {parent}, which holds a lake (Parquet files or a table log): a lake is "
                "read with its subfolders, so this one's rows would be read as that lake's too, each person "
                "twice. Convert into a location outside it"
            )


@dataclass(frozen=True)
class ConvertedLake:
    """What ``convert_csv`` wrote, and where every row of the CSV went (for the user's terminal only:
    exact counts of the sensitive rows, never written into the lake, its record or a model)."""

    paths: list[str]
    rows_read: int
    rows_for_bounds: int  # spent on the private bounds, left out of the lake
    rows_without_id: int  # dropped for a missing person id (``drop_missing_ids``)
    rows_dropped: int  # dropped by the policies: a missing value (missing="drop"), an unknown category

    @property
    def rows_written(self) -> int:
        return self.rows_read - self.rows_for_bounds - self.rows_without_id - self.rows_dropped


def csv_to_parquet(
    source_url: str,
    out_url: str,
    spec: ConvertSpec,
    *,
    storage_options: dict[str, Any] | None = None,
    block_size: int = 16 << 20,
) -> list[str]:
    """Convert one CSV file into Parquet parts under ``out_url``; returns the written paths
    (``convert_csv`` also says where every row went)."""
    return convert_csv(
        source_url, out_url, spec, storage_options=storage_options, block_size=block_size
    ).paths


def convert_csv(
    source_url: str,
    out_url: str,
    spec: ConvertSpec,
    *,
    drop_missing_ids: bool = False,
    storage_options: dict[str, Any] | None = None,
    block_size: int = 16 << 20,
) -> ConvertedLake:
    """Convert one CSV file into Parquet parts under ``out_url``. A row without its person's id (with
    ``spec.user_column``) is refused, or dropped and counted with ``drop_missing_ids``."""
    source_fs, source_path = open_url(source_url, storage_options)
    if not source_fs.exists(source_path):
        raise LakeError(f"{source_url} does not exist; check the path")
    check_empty_location(out_url, storage_options)
    out_fs, root = open_url(out_url, storage_options)
    staging = f"{root}/_tmp-{uuid.uuid4().hex[:8]}"
    name = source_path.rsplit("/", 1)[-1]
    parts, pending, offset = [], [], 0
    counts = {"read": 0, "bounds": 0, "without_id": 0, "dropped": 0}

    def batches():
        with source_fs.open(source_path, "rb") as handle:
            yield from pcsv.open_csv(handle, read_options=pcsv.ReadOptions(block_size=block_size))

    try:
        spec, provenance, every = _release_private_bounds(spec, batches(), name, drop_missing_ids)
        for batch in batches():
            rows = batch.num_rows
            without_id = _without_id(batch, offset, spec.user_column, name, drop_missing_ids)
            left_out = (
                (without_id | _sampled(batch, every, spec.user_column, offset)) if every else without_id
            )
            kept, positions = batch, None  # a batch that loses no row is converted as read, uncopied
            if left_out.any():
                kept = batch.filter(pa.array(~left_out))
                positions = offset + np.flatnonzero(~left_out)
            converted = convert_rows(kept, spec, offset, name, positions, raw_label=True)
            counts["read"] += rows
            counts["without_id"] += int(without_id.sum())
            counts["bounds"] += int(left_out.sum() - without_id.sum())
            counts["dropped"] += kept.num_rows - converted.num_rows
            pending.append(converted)
            offset += rows
            while sum(t.num_rows for t in pending) >= spec.rows_per_file:
                table = pa.concat_tables(pending)
                path = f"{staging}/part-{len(parts):05d}.parquet"
                write_part(out_fs, path, table.slice(0, spec.rows_per_file), ROW_GROUP_ROWS)
                parts.append(path)
                pending = [table.slice(spec.rows_per_file)]
        if pending and sum(t.num_rows for t in pending):
            path = f"{staging}/part-{len(parts):05d}.parquet"
            write_part(out_fs, path, pa.concat_tables(pending), ROW_GROUP_ROWS)
            parts.append(path)
        if not parts:
            raise LakeError(f"{source_url}: no rows left after applying the missing-value policy")
        final = []
        for path in parts:
            target = f"{root}/{path.rsplit('/', 1)[-1]}"
            out_fs.mv(path, target)
            final.append(target)
        # Bookkeeping ("_" prefix): not a lake file, not in the fingerprint; read by the train flow.
        record = {**spec.record(), "source": name}
        if provenance:
            record["private_bounds"] = provenance
        write_json_atomic(out_fs, f"{root}/{CONVERT_RECORD}", record)
        return ConvertedLake(final, counts["read"], counts["bounds"], counts["without_id"], counts["dropped"])
    except pa.ArrowInvalid as error:
        raise LakeError(
            f"{name}: the CSV could not be parsed ({error}); fix the file or its delimiter"
        ) from None
    finally:
        if out_fs.exists(staging):
            out_fs.rm(staging, recursive=True)


def _without_id(
    batch: pa.RecordBatch, offset: int, person: str | None, source: str, drop: bool
) -> np.ndarray:
    """The batch's rows without a person id (none without ``person``): refused, or with ``drop`` marked."""
    if person is None:
        return np.zeros(batch.num_rows, dtype=bool)
    missing = missing_ids(
        batch.column(person)
    )  # a null, an empty CSV cell, or only spaces or invisible characters
    if missing.any() and not drop:
        row = offset + int(np.flatnonzero(missing)[0])
        raise LakeError(
            f"{source}: data row {row} (line {row + 2} of the file) has no {person!r} (the person column): every "
            "row needs its person's id; fill it in, or pass --drop-missing-ids to leave such rows out (counted)"
        )
    return missing


def _sampled(batch: pa.RecordBatch, every: int, person: str | None, offset: int) -> np.ndarray:
    """The batch's rows spent on the private bounds: every ``every``-th row, or with ``person`` every row of
    the people in the public 1-in-``every`` partition of ids (``person_sample_mask``)."""
    if person is None:
        return sample_mask(offset, batch.num_rows, every)
    return person_sample_mask(batch.column(person), every)


def _release_private_bounds(
    spec: ConvertSpec, batches: Any, source: str, drop_missing_ids: bool
) -> tuple[ConvertSpec, dict[str, Any] | None, int]:
    """(the spec with the released bounds in place of the request, their provenance, the sampling period;
    0 without a request): one pass over the sampled rows, converted by the same policies with the
    requested columns left raw (``dpstream.pipelines.preprocessing.private_bounds``)."""
    request = spec.private_bounds
    if request is None:
        return spec, None, 0
    raw = replace(spec, private_bounds=None, require_bounds=False)
    sample: dict[str, list[np.ndarray]] = {column: [] for column in request.columns}
    person = request.user_column
    people: list[np.ndarray] = []  # the sampled rows' people (user unit), for their 1/k_u weights
    sampled_people: set = set()
    offset, sampled = 0, 0
    for batch in batches:
        without_id = _without_id(batch, offset, person, source, drop_missing_ids)
        mask = _sampled(batch, request.sample_every, person, offset) & ~without_id
        sampled += int(mask.sum())  # positions, public: rows dropped for missing values still count
        positions = offset + np.flatnonzero(mask)
        chosen = batch.filter(pa.array(mask))
        table = convert_rows(chosen, raw, offset, source, positions)
        for column in request.columns:
            sample[column].append(table.column(column).to_numpy())
        if person is not None:  # people as the shuffle forms them: one person however the id is spelled
            sampled_people.update(normalise_ids(chosen.column(person).unique()).to_pylist())
            _, normalised, indices = normalised_uniques(table.column(person))
            people.append(normalised.to_numpy(zero_copy_only=False)[indices])
        offset += batch.num_rows
    values = {column: np.concatenate(arrays) for column, arrays in sample.items()}
    if person is None:
        bounds, provenance = request.release(values, sampled)
    else:  # q·U: the people sampled, counted before missing values dropped rows (as positions are)
        codes = np.unique(np.concatenate(people), return_inverse=True)[1].ravel() if people else None
        bounds, provenance = request.release(values, len(sampled_people), codes)
    return (
        replace(spec, bounds={**spec.bounds, **bounds}, private_bounds=None),
        provenance,
        request.sample_every,
    )
