"""Two source files holding the same records are refused, however they are encoded.

A byte copy or a link of a file shares its content identity (``lake.file_identity``), but the same rows
rewritten (another compression, other row group sizes, another writer, the rows in another order) do
not: a single training pass would still use each of those records twice, under a guarantee that counts
it once. So every file's check also computes a **digest of its decoded rows** (``RowsDigest``): each
row's values in the columns the model reads (the features and the label, or the raw columns
``[preprocess]`` converts) are hashed to 64 bits (numbers by value, text and bytes by SipHash, vectors
element by element with their positions, a null as itself) and mixed across columns in their order; the
file's digest is two sums modulo 2⁶⁴ of the row hashes, each through its own finaliser (128 bits), with
the row count. A sum does not depend on the order of the rows nor on how they are cut into row groups
or batches. Two files whose rows differ get equal digests only by accident: two 64-bit row hashes
colliding (about N²/2⁶⁵ for N rows) or both sums meeting; a refusal names both files, so a false one is
seen, not silent. It is vectorised with NumPy over the batches validation already decodes, so it adds
no read; the validation cache keeps it beside the file's identity. The user unit's id column is left
out: a copy whose ids were re-spelled or re-keyed still repeats every record, and hashing a column of
mostly distinct strings would cost more than every other check together (a Python string per distinct
id; 0.4 s a million rows, measured).

Two files with equal row counts and digests are refused (``refuse_copies``), naming both and the fix,
from ``MIN_COPY_ROWS`` rows up: two genuinely different files of a few rows of discrete values (a
micro-batch of yes/no answers) can hold the same multiset of rows, and a repeat of so few records is
not worth refusing a lake for.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.files import LakeFile

__all__ = ["RowsDigest", "column_hashes", "refuse_copies", "MIN_COPY_ROWS"]

MIN_COPY_ROWS = 64

_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64's finaliser
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_COLUMN = np.uint64(0xD6E8FEB86659FD93)  # odd: the per-column multiplier of the row hash
_NULL = np.uint64(0x6A09E667F3BCC909)  # a null value's hash (the first word of SHA-512's IV)
_SECOND = np.uint64(0xC2B2AE3D27D4EB4F)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 whose output bits each depend on every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _C1
    x = x ^ (x >> np.uint64(27))
    x = x * _C2
    return x ^ (x >> np.uint64(31))


def _text_hashes(values: pa.Array) -> np.ndarray:
    """SipHash (pandas' public key) of each distinct value once, then taken per row."""
    encoded = values.dictionary_encode()
    dictionary, indices = encoded.dictionary, encoded.indices
    if pa.types.is_string_view(dictionary.type) or pa.types.is_binary_view(dictionary.type):
        dictionary = dictionary.cast(pa.large_binary())
    hashed = pd.util.hash_array(np.asarray(dictionary.to_numpy(zero_copy_only=False), dtype=object))
    return hashed[pc.fill_null(indices, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)]


def _list_hashes(values: pa.Array) -> np.ndarray:
    """Each list's hash: its elements' hashes, each mixed with its position, summed, with its length."""
    lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(values)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    positions = np.arange(len(flat), dtype=np.uint64) - np.repeat(starts[:-1], lengths).astype(np.uint64)
    elements = _mix(column_hashes(flat) + positions * _GOLDEN)
    summed = np.concatenate([[np.uint64(0)], np.cumsum(elements, dtype=np.uint64)])
    return _mix(summed[starts[1:]] - summed[starts[:-1]] + lengths.astype(np.uint64) * _COLUMN)


def _as_text(values: pa.Array) -> pa.Array:
    """Each value as text: Arrow's cast where it has one, else Python's ``str`` (a struct, a map)."""
    try:
        return pc.cast(values, pa.large_string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return pa.array(
            [None if value is None else str(value) for value in values.to_pylist()], pa.large_string()
        )


def column_hashes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each value of one column (uint64), by value: independent of the file's encoding,
    compression, dictionary or chunking; equal values hash alike."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        hashes = _list_hashes(values)
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        numbers = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
        signed = pa.types.is_signed_integer(kind)
        hashes = _mix(numbers.astype(np.int64).view(np.uint64) if signed else numbers.astype(np.uint64))
    elif pa.types.is_floating(kind):
        numbers = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.float64) + 0.0  # −0 → +0
        hashes = _mix(numbers.view(np.uint64) ^ _GOLDEN)
    elif pa.types.is_dictionary(kind):  # by value: as the same values stored plain
        indices = pc.fill_null(values.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        hashes = column_hashes(values.dictionary)[indices]
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        hashes = _text_hashes(values)
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        hashes = _text_hashes(values)
    else:  # decimals, dates, times, views: hashed by their text (Arrow's cast), rare in a lake's used columns
        hashes = _text_hashes(_as_text(values))
    if values.null_count:
        hashes = np.where(values.is_null().to_numpy(zero_copy_only=False), _NULL, hashes)
    return np.asarray(hashes, dtype=np.uint64)


class RowsDigest:
    """The multiset digest of a file's rows (module docstring), accumulated batch by batch."""

    def __init__(self) -> None:
        self.rows = 0
        self._sums = np.zeros(2, dtype=np.uint64)

    def add(self, rows: pa.Table | pa.RecordBatch, columns: list[str]) -> None:
        """Add the rows of one batch, hashed over ``columns`` (in that order)."""
        if rows.num_rows == 0:
            return
        combined = np.zeros(rows.num_rows, dtype=np.uint64)
        for index, column in enumerate(columns):
            combined = combined * _COLUMN + column_hashes(rows.column(column)) + np.uint64(index)
        first = _mix(combined)
        second = _mix(first ^ _SECOND)
        self._sums += np.array([first.sum(dtype=np.uint64), second.sum(dtype=np.uint64)], dtype=np.uint64)
        self.rows += rows.num_rows

    def hexdigest(self) -> str:
        return f"rows-sum128:{int(self._sums[0]):016x}{int(self._sums[1]):016x}"


def refuse_copies(files: tuple[LakeFile, ...], digests: tuple[str, ...], table: bool = False) -> None:
    """Refuse two files with one content identity (a copy or link of one file), then two with the same
    rows however encoded (equal row counts and ``digests``, one per file): training on both would use
    each of their records twice in one pass, under a guarantee that counts it once. In a table
    (``table``) that is the same batch of rows appended twice: its files are the table's to change, not
    the user's. A file without live rows (its table version deleted them all) repeats nothing."""
    prefix = os.path.commonpath([file.path for file in files]) if len(files) > 1 else ""

    def shown(*paths: str) -> list[str]:
        return [path[len(prefix) :].lstrip("/") or path.rsplit("/", 1)[-1] for path in paths]

    first_of: dict[str, LakeFile] = {}
    for file in files:
        earlier = first_of.setdefault(file.identity, file)
        if earlier is not file:
            names = shown(earlier.path, file.path)
            raise LakeError(
                f"{names[0]} and {names[1]} have the same content ({file.identity}): "
                + ("two files of " if table else "a copy or link of one file inside ")
                + (
                    "the table (the same rows appended twice) would put each of its records in one training pass "
                    "twice. Delete the duplicate rows through the table, or pin a version before them"
                    if table
                    else "the lake would put each of its records in one training pass twice. Remove the copy from the lake"
                )
            )
    same_rows: dict[tuple[int, str], LakeFile] = {}
    for file, digest in zip(files, digests, strict=True):
        if file.rows < MIN_COPY_ROWS or not digest:
            continue
        earlier = same_rows.setdefault((file.rows, digest), file)
        if earlier is not file:
            names = shown(earlier.path, file.path)
            raise LakeError(
                f"{names[0]} and {names[1]} hold the same {file.rows:,} rows (the same values in every column read, "
                f"in any order and whatever the encoding: {digest}): "
                + (
                    "the table holds one batch of rows twice, and a training pass would use each of its records "
                    "twice. Delete the duplicate rows through the table, or pin a version before them"
                    if table
                    else "one is a rewritten copy of the other, and a training pass would use each of its records "
                    f"twice. Remove one of them ({names[1]} or {names[0]}) from the lake"
                )
            )
