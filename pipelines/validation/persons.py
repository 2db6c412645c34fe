"""Validation of the user unit's id column: its type, a person for every row, and the spellings merged.

``check_user_column`` and ``check_user_ids`` run inside each file's check (``validate.check_file``);
``check_user_ids`` also counts the distinct stored ids the rule of ``dpstream.person_ids``
changes (``HEAVY`` with case folding, `` heavy``, ``heavy\\u200b``). Only when some file holds such a row
can two spellings name one person, so only then does ``count_merged_ids`` read the id column of every
file once more and report how many people were spelled more than one way: a clean lake (integer ids, or
text ids already in their normal form) costs nothing more, and the validation cache keeps the count for
the lake's content (``merged_ids``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpstream.person_ids import is_text, missing_ids, normalise_ids
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import STREAM_BUFFER_BYTES, native_open
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.memory import release_after
from dpstream.pipelines.sources.protocol import TableFile, live_batches
from dpstream.pipelines.validation.values import file_name
from dpstream.pipelines.waiting import gather_within
from dpstream.storage import open_url

if TYPE_CHECKING:
    from dpstream.pipelines.validation.cache import ValidationCache

__all__ = [
    "MergedIds",
    "check_user_column",
    "check_user_ids",
    "count_merged_ids",
    "distinct_ids",
    "merged_ids",
]

_BATCH_ROWS = 262_144


def check_user_column(schema: pa.Schema, spec: LakeSpec, path: str) -> None:
    """The user unit's id column is present once, of a type whose values name a person exactly."""
    column = spec.user_column
    copies = len(schema.get_all_field_indices(column))
    if copies != 1:
        present = (
            "appears twice" if copies > 1 else f"is missing (columns present: {', '.join(schema.names)})"
        )
        raise LakeError(
            f"{file_name(path)}: privacy.user_column {column!r} {present}; name the column that identifies a person"
        )
    kind = schema.field(column).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (
        pa.types.is_integer(kind)
        or is_text(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        raise LakeError(
            f"{file_name(path)}: privacy.user_column {column!r} has type {kind}; a person's id must be an integer or a "
            "string (a float or a timestamp can name two people alike after rounding): cast it when writing the lake"
        )


def check_user_ids(values: Any, spec: LakeSpec, path: str, offset: int = 0) -> int:
    """No row without its person: a null id, an empty one, or one of only spaces or invisible characters
    (empty once normalised) could not be bounded with the rest of that person's rows. Returns how many
    of the batch's distinct text ids the rule (``spec.user_id_case_fold``) changes: non-zero when some
    spelling may merge with another (``count_merged_ids`` then counts them across the lake)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    missing = values.is_null().to_numpy(zero_copy_only=False)
    changed = 0
    if is_text(values.type) and len(values):
        decoded = values.dictionary_decode() if pa.types.is_dictionary(values.type) else values
        uniques = pc.unique(decoded)  # the rule once per distinct id
        normalised = normalise_ids(uniques, spec.user_id_case_fold)
        changed = int(pc.sum(pc.fill_null(pc.not_equal(normalised, uniques), False)).as_py() or 0)
        if pc.any(pc.equal(normalised, "")).as_py():
            missing = missing | missing_ids(decoded)
    if missing.any():
        row = offset + int(np.flatnonzero(missing)[0])
        raise LakeError(
            f"{file_name(path)}: row {row} of privacy.user_column {spec.user_column!r} is missing (null or empty): an "
            "id of only spaces or invisible characters names no one either. Every row needs its person's id (drop "
            "the row, or give it the id it belongs to)"
        )
    return changed


@dataclass(frozen=True)
class MergedIds:
    """What the rule merged across the whole lake: ``people``, the people (normalised ids) reached by
    more than one stored spelling, and ``spellings``, the distinct stored spellings less the distinct
    people (each merged person counts its extra spellings)."""

    people: int = 0
    spellings: int = 0


def distinct_ids(url: str, spec: LakeSpec, listed: TableFile) -> pa.Array:
    """The distinct stored ids of one file's live rows (its table version's deletes dropped)."""
    fs, path = open_url(url, spec.storage_options)
    found: list[pa.Array] = []
    with native_open(fs, path) as handle:
        reader = pq.ParquetFile(handle, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES)
        for rows in live_batches(reader, listed, [spec.user_column], _BATCH_ROWS):
            values = rows.column(spec.user_column).combine_chunks()
            if pa.types.is_dictionary(values.type):
                values = values.dictionary_decode()
            found.append(pc.unique(values))
    return pc.unique(pa.concat_arrays(found)) if found else pa.array([], pa.string())


def count_merged_ids(
    fs: Any,
    listed: tuple[TableFile, ...],
    spec: LakeSpec,
    client: Any = None,
    worker_timeout: float | None = None,
) -> MergedIds:
    """``MergedIds`` of the lake's files (``listed``): each file's distinct ids (one Dask task per file
    with ``client``), then their union normalised once. Exact: ids are compared, not hashed."""
    urls = [fs.unstrip_protocol(file.path) for file in listed]
    if client is None:
        per_file = [distinct_ids(url, spec, file) for url, file in zip(urls, listed, strict=True)]
    else:
        futures = [
            client.submit(release_after, distinct_ids, url, spec, file, pure=False)
            for url, file in zip(urls, listed, strict=True)
        ]
        options = {} if worker_timeout is None else {"worker_timeout": worker_timeout}
        per_file = gather_within(client, futures, **options)
    spellings = pc.unique(pa.chunked_array(per_file))
    people = pc.value_counts(normalise_ids(spellings, spec.user_id_case_fold)).field("counts")
    return MergedIds(
        people=int(pc.sum(pc.greater(people, 1)).as_py() or 0),
        spellings=len(spellings) - len(people),
    )


def merged_ids(
    fs: Any,
    listed: tuple[TableFile, ...],
    spec: LakeSpec,
    respelled: bool,
    client: Any,
    worker_timeout: float | None,
    cache: ValidationCache | None,
    fingerprint: str,
) -> MergedIds:
    """The people the id rule merged in the validated lake of ``fingerprint``: none without a user
    column or unless some file holds an id the rule changes (``respelled``); else as the validation
    cache recorded them for this lake's content, or counted (``count_merged_ids``: the ids read again)."""
    if spec.user_column is None or not respelled:
        return MergedIds()
    recorded = cache.merged(fingerprint) if cache is not None else None
    if recorded is not None:
        return MergedIds(*recorded)
    return count_merged_ids(fs, listed, spec, client, worker_timeout)
