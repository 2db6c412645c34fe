"""Parquet lakes: where they live, which columns are features, and how to read row ranges.

A lake is a directory or prefix of Parquet files on a local path, ``file://`` or ``s3://`` (storage
options and endpoint from the config or the environment, e.g. ``AWS_ENDPOINT_URL``). Features are a
list of numeric columns or one fixed-size-list column; the label is one numeric column.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.storage import is_local, open_url

__all__ = [
    "LakeError",
    "LakeSpec",
    "LakeFile",
    "list_parquet_files",
    "list_lake",
    "read_row_group",
    "read_footer",
    "read_block",
    "LruCache",
    "table_to_arrays",
    "fingerprint",
    "file_identity",
    "aligned",
    "aligned_empty",
]


class LakeError(ValueError):
    """A lake cannot be used as given. The message names the file, column and row, and the fix."""


@dataclass(frozen=True)
class LakeSpec:
    url: str
    features: tuple[str, ...] | str  # column names, or one fixed-size-list column
    label: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.features, (list, tuple)):
            if not self.features:
                raise LakeError(
                    "features is empty: name the numeric feature columns or one fixed-size-list column"
                )
            object.__setattr__(self, "features", tuple(self.features))
        elif not isinstance(self.features, str) or not self.features:
            raise LakeError(
                f"features must be a list of column names or one column name, got {self.features!r}"
            )
        if not isinstance(self.label, str) or not self.label:
            raise LakeError(f"label must be a column name, got {self.label!r}")

    @property
    def columns(self) -> list[str]:
        names = [self.features] if isinstance(self.features, str) else list(self.features)
        return names + [self.label]

    def filesystem(self):
        return open_url(self.url, self.storage_options)


@dataclass(frozen=True)
class LakeFile:
    path: str
    rows: int
    size: int
    identity: str = ""  # content identity (file_identity): what the ledger charges


_HASH_CHUNK = 8 << 20
_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")


def file_identity(fs: Any, path: str) -> str:
    """The identity of one file's content, independent of its name, location and of any config.

    ``md5:<hex>`` is the MD5 of the bytes. It is what S3 reports as the ETag of an object uploaded in
    one part, so a byte-for-byte copy between a disk and a bucket keeps its identity without being
    read; a local file is hashed (one sequential read). An object store's multipart ETag
    (``<hex>-<parts>``) is used as ``etag:<value>``: the same bytes uploaded with another part size get
    another identity. MD5 is used as a content identifier here, not as a defence against forgery: the
    operator who writes the lake is trusted, the ledger guards against accidental re-spending.
    """
    if not is_local(fs):
        info = fs.info(path)
        etag = str(info.get("ETag") or info.get("etag") or info.get("md5") or "").strip('"').lower()
        if etag:
            return f"md5:{etag}" if _MD5_ETAG.match(etag) else f"etag:{etag}"
    digest = hashlib.md5(usedforsecurity=False)
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return f"md5:{digest.hexdigest()}"


def list_parquet_files(spec: LakeSpec) -> tuple[Any, list[str]]:
    """The lake's Parquet files, sorted by path (hidden and temporary files ignored)."""
    fs, paths, _ = list_lake(spec)
    return fs, paths


def list_lake(spec: LakeSpec) -> tuple[Any, list[str], list[str]]:
    """(filesystem, the lake's Parquet files, the other visible files), each sorted by path.

    Names starting with "." or "_" (``_SUCCESS``, ``.crc``, our temporary folders) are bookkeeping and
    not listed; any other file without the ``.parquet`` suffix is "stray": not read, but reported, since
    a user who dropped a CSV or a ``.parq`` file into the lake expects it to count."""
    try:
        fs, root = spec.filesystem()
        if fs.isfile(root):
            return fs, [root], []
        visible = [p for p in fs.find(root) if not p.rsplit("/", 1)[-1].startswith((".", "_"))]
    except (PermissionError, OSError) as error:
        raise LakeError(
            f"cannot read the lake location {spec.url}: {type(error).__name__}: {error}. Check the path, the "
            "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the endpoint (AWS_ENDPOINT_URL)"
        ) from None
    parquet = sorted(p for p in visible if p.endswith(".parquet"))
    return fs, parquet, sorted(p for p in visible if not p.endswith(".parquet"))


def fingerprint(files: list[LakeFile]) -> str:
    """The lake's identity for the privacy ledger: a hash of the multiset of its files' content identities.

    The unit is the data, not how a config reads it: file names, their order, the lake's URL and the
    columns a config selects or how it orders them do not enter, so none of them yields a fresh budget.
    Different bytes (new or rewritten files) give another fingerprint; the ledger then still charges the
    files the lakes share (``dpstream.privacy.ledger``)."""
    document = sorted([f.identity, f.size] for f in files)
    return "lake-" + hashlib.sha256(json.dumps(document).encode()).hexdigest()[:24]


ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any, order: str = "C") -> np.ndarray:
    """An uninitialised array whose data starts on a 64-byte boundary.

    BLAS kernels peel a data-dependent number of leading elements to reach SIMD alignment, so the
    order of a float reduction — hence its last bits — depends on the base address. Every block
    handed to the models starts on the same boundary, wherever it was decoded or shipped.
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset : offset + size].view(dtype).reshape(shape, order=order)


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` itself if it starts on the boundary, else an aligned copy with the same layout."""
    if array.ctypes.data % ALIGNMENT == 0:
        return array
    order = "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"
    copy = aligned_empty(array.shape, array.dtype, order)
    copy[...] = array
    return copy


def table_to_arrays(table: pa.Table, spec: LakeSpec) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) from an Arrow table: X float32/float64 (rows × features, 64-byte aligned), y float64."""
    if isinstance(spec.features, str):
        column = table.column(spec.features).combine_chunks()
        width = column.type.list_size if pa.types.is_fixed_size_list(column.type) else len(column[0])
        X = aligned(np.ascontiguousarray(column.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)))
    else:
        arrays = [table.column(name).to_numpy(zero_copy_only=False) for name in spec.features]
        dtype = np.result_type(*arrays) if arrays else np.float64
        dtype = dtype if dtype in (np.float32, np.float64) else np.float64
        X = aligned_empty((table.num_rows, len(arrays)), dtype, order="F")  # column copies stay contiguous
        for j, values in enumerate(arrays):
            X[:, j] = values
    y = aligned(
        np.ascontiguousarray(table.column(spec.label).to_numpy(zero_copy_only=False), dtype=np.float64)
    )
    return X, y


def read_row_group(
    fs: Any, path: str, spec: LakeSpec, group: int, metadata: pq.FileMetaData | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One row group of one Parquet file: the unit the executors read, cache and fold over. With the
    file's ``metadata`` (``read_footer``) the footer is not read and parsed again: for a file of 1,000
    row groups that is 7 of the 8 ms a row group costs."""
    with fs.open(path, "rb") as handle:
        table = pq.ParquetFile(handle, metadata=metadata).read_row_group(group, columns=spec.columns)
    return table_to_arrays(table, spec)


def read_footer(fs: Any, path: str) -> pq.FileMetaData:
    """The parsed footer of one Parquet file (row groups, schema), to pass to ``read_row_group``."""
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).metadata


class LruCache:
    """A small thread-safe least-recently-used cache for worker processes (decoded blocks, footers)."""

    def __init__(self, limit: int):
        self.limit, self._items, self._lock = limit, OrderedDict(), threading.Lock()

    def get(self, key: Any, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = load()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.limit:
                self._items.popitem(last=False)
        return value


# Per worker process, keyed by the shuffle's identity (``Manifest.row_order``) as well as the path: a
# long-lived worker must never use the footer of an earlier shuffle written at the same path.
_FOOTERS = LruCache(8)


def read_block(
    fs: Any, path: str, spec: LakeSpec, group: int, lake: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """``read_row_group`` with the file's footer parsed once per worker process and shuffle ``lake``."""
    footer = _FOOTERS.get((lake, path), lambda: read_footer(fs, path))
    return read_row_group(fs, path, spec, group, footer)
