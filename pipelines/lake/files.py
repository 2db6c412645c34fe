"""Parquet lakes: where they live, which columns are features, and how to read row ranges.

A lake is a directory or prefix of Parquet files on a local path, ``file://`` or ``s3://`` (storage
options and endpoint from the config or the environment, e.g. ``AWS_ENDPOINT_URL``). Features are a
list of numeric columns or one fixed-size-list column; the label is one numeric column.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.memory import pool_empty
from dpstream.pipelines.preprocessing.spec import ConvertSpec, convert_rows
from dpstream.pipelines.sources.spec import SourceSpec
from dpstream.storage import is_local, open_url

__all__ = [
    "LakeError",
    "LakeSpec",
    "SourceSpec",
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
    "file_stamp",
    "PartCheck",
    "footer_bytes",
    "footer_identity",
    "read_verified_footer",
    "shown_part",
    "open_unchanged",
    "pins_reads",
    "SHUFFLE_STORE_MARKERS",
    "aligned",
    "aligned_empty",
    "native_open",
]


@dataclass(frozen=True)
class LakeSpec:
    url: str
    features: tuple[str, ...] | str  # column names, or one fixed-size-list column
    label: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    # The user unit: the source's id column (hashed by the shuffle, never a feature), or a shuffled
    # lake's dense user codes (``dpstream.pipelines.shuffle.users.USER_CODE_COLUMN``). None: the row.
    user_column: str | None = None
    source: SourceSpec = field(default_factory=SourceSpec)  # its format and the version to read
    # Public preprocessing applied to each row as it is read (``ConvertSpec.on_read``): the source holds
    # its raw columns, and ``features``/``label`` name the columns the preprocessing presents.
    preprocess: ConvertSpec | None = None
    # How a text id in ``user_column`` names a person (``dpstream.person_ids``): case folded
    # (``privacy.user_id_case_fold``) or not; NFKC, stripped and without format characters either way.
    user_id_case_fold: bool = True

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
        if self.preprocess is not None and (
            not self.preprocess.on_read
            or self.features != tuple(self.preprocess.output_columns())
            or self.label != self.preprocess.label
        ):
            raise LakeError(
                "a lake read with preprocessing presents its columns: features = preprocess.output_columns(), "
                "label = preprocess.label, and the preprocessing applied on read (on_read=True)"
            )
        if self.user_column is not None:
            if not isinstance(self.user_column, str) or not self.user_column:
                raise LakeError(f"user_column must be a column name, got {self.user_column!r}")
            if self.user_column in self.columns:
                role = "the label" if self.user_column == self.label else "a feature"
                raise LakeError(
                    f"privacy.user_column {self.user_column!r} is {role}: a person's id is never trained on; "
                    "drop it from the features (or name another label)"
                )

    @property
    def columns(self) -> list[str]:
        names = [self.features] if isinstance(self.features, str) else list(self.features)
        return names + [self.label]

    @property
    def read_columns(self) -> list[str]:
        """The columns read from the source: ``columns`` (or, with ``preprocess``, the raw columns it
        converts) and the user column, if any."""
        users = [self.user_column] if self.user_column is not None else []
        if self.preprocess is None:
            return self.columns + users
        raw = self.preprocess
        return list(dict.fromkeys([*raw.columns, *raw.categorical, raw.label, *users]))

    def present(self, rows: pa.Table, path: str, offset: int = 0) -> pa.Table:
        """A source file's ``rows`` (starting at live row ``offset`` of ``path``) as the lake presents them:
        ``columns`` and the user column, the raw columns converted by ``preprocess`` when it is set. Every
        row is kept (``ConvertSpec.on_read``); a value it cannot convert raises ``LakeError`` naming it."""
        if self.preprocess is None:
            return rows
        converted = convert_rows(rows, self.preprocess, offset, path.rsplit("/", 1)[-1])
        if self.user_column is not None:
            converted = converted.append_column(self.user_column, rows.column(self.user_column))
        return converted

    def filesystem(self):
        return open_url(self.url, self.storage_options)


@dataclass(frozen=True)
class LakeFile:
    path: str
    rows: int
    size: int
    identity: str = ""  # content identity (file_identity): what the ledger charges
    # What the file looked like when validated (file_stamp): the shuffle reads it only if unchanged.
    stamp: str = ""
    # A table version's deletes inside the file (sources.deleted_positions; ``rows`` counts the rows left)
    # and the values of the partition columns it does not store: (name, value, Arrow type).
    deleted: bytes = b""
    constants: tuple[tuple[str, Any, pa.DataType], ...] = ()


def file_stamp(fs: Any, path: str) -> str:
    """A cheap signature that changes whenever the file at ``path`` is written, replaced or renamed over.

    Local disk: inode, size, and modification and status-change times in ns; any write, or a rename
    onto the path, changes one of them (``ctime`` cannot be set by a user). The device number is left
    out: on a network file system two workers' machines may number one mount differently. Object
    store: the ETag, size and modification time of the object (a new PUT changes them)."""
    if is_local(fs):
        st = os.stat(path)
        return f"local:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    fs.invalidate_cache(path)
    info = fs.info(path)
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    return f"object:{etag}:{info.get('size')}:{info.get('LastModified') or info.get('mtime') or ''}"


def pins_reads(fs: Any) -> bool:
    """Whether ``open_unchanged`` pins the bytes read to the stamp on ``fs``: a local disk (the stamp is
    compared after the reads) or S3 (every ranged read is conditional on the ETag)."""
    return is_local(fs) or "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def native_open(fs: Any, path: str, mode: str = "rb") -> Any:
    """``path`` opened by Arrow itself on a local disk (``pa.OSFile``), through ``fs`` elsewhere: through
    fsspec's Python file object every page read or written crosses into Python (profiled: 24-26 ms against
    15.5 ms per block)."""
    return pa.OSFile(path, mode) if is_local(fs) else fs.open(path, mode)


@contextlib.contextmanager
def open_unchanged(fs: Any, path: str, stamp: str, changed: str | None = None) -> Iterator[Any]:
    """Open ``path`` for reading, refusing (``LakeError``) unless it is the file whose ``stamp``
    (``file_stamp``) was taken when it was checked; ``stamp=""`` opens it unchecked. ``changed`` words the
    refusal after the file's name (default: a source file changed since validation).

    Local disk: the stamp is compared before opening and again after the caller's reads. S3: the object's
    ETag at opening must be the stamp's, and s3fs sends every ranged read with ``If-Match`` on it, so a
    replacement during the read fails instead of mixing two objects' bytes."""
    if not stamp:
        with fs.open(path, "rb") as handle:
            yield handle
        return
    refusal = LakeError(
        f"{shown_part(path)} {changed}"
        if changed
        else f"{path.rsplit('/', 1)[-1]} changed after the lake was validated (rewritten, replaced or renamed over); "
        "nothing from it was used. Run again once nothing writes to the lake, and validate what changed"
    )
    local = stamp.startswith("local:")
    try:
        if local and file_stamp(fs, path) != stamp:
            raise refusal
        with native_open(fs, path) as handle:
            if not local:  # the ETag of the HEAD the open made (s3fs), else one more look
                details = getattr(handle, "details", None)
                etag = details.get("ETag") if isinstance(details, dict) else None
                if etag is None and file_stamp(fs, path) != stamp:
                    raise refusal
                if etag is not None and str(etag).strip('"') != stamp.split(":")[1]:
                    raise refusal
            yield handle
        if local and file_stamp(fs, path) != stamp:
            raise refusal
    except FileNotFoundError:
        raise LakeError(
            f"{shown_part(path)} was removed after it was checked; nothing from it was used"
        ) from None
    except OSError as error:
        if type(error).__name__ == "FileExpired":  # s3fs: the object changed between two ranged reads
            raise refusal from None
        raise


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


# Names at the root of a folder that make it a dpstream shuffled lake (generations, or the earlier
# single-folder layout): never a source.
SHUFFLE_STORE_MARKERS = ("_generations", "_manifest.json")


def list_lake(spec: LakeSpec) -> tuple[Any, list[str], list[str]]:
    """(filesystem, the lake's Parquet files, the other visible files), each sorted by path.

    A file is bookkeeping, not listed, when any part of its path below the lake's root starts with "."
    or "_" (``_SUCCESS``, ``.crc``, the ``_tmp-*`` folders of an unfinished write, the ``_g-*``
    generations of a shuffled lake). A Delta Lake or Iceberg table anywhere under the root is refused
    (``_refuse_table_formats``): its Parquet files are not its rows. Any other file without the ``.parquet`` suffix is "stray":
    not read, but reported, since a user who dropped a CSV or a ``.parq`` file into the lake expects it
    to count. A dpstream shuffled lake is refused as a source: its generations hold the same records."""
    try:
        fs, root = spec.filesystem()
        if fs.isfile(root):
            return fs, [root], []
        found = fs.find(root)
    except (PermissionError, OSError) as error:
        raise LakeError(
            f"cannot read the lake location {spec.url}: {type(error).__name__}: {error}. Check the path, the "
            "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the endpoint (AWS_ENDPOINT_URL)"
        ) from None
    prefix = root.rstrip("/") + "/"
    relative = [p[len(prefix) :] if p.startswith(prefix) else p.rsplit("/", 1)[-1] for p in found]
    stores = sorted(
        {
            r.rsplit("/", 1)[0] if "/" in r else "."
            for r in relative
            if r.rsplit("/", 1)[-1] == "_manifest.json"
        }
        | {
            r.split("/_generations/", 1)[0] if "/_generations/" in r else "."
            for r in relative
            if "_generations/" in r
        }
    )
    if stores == ["."]:
        raise LakeError(
            f"{spec.url} is a shuffled lake written by dpstream (lake.shuffled_url), not a source: its shuffles "
            "hold the same records again. Point lake.url at the source lake"
        )
    if stores:
        raise LakeError(
            f"{spec.url} holds a shuffled lake written by dpstream in {stores[-1]}/, whose shuffles hold the same "
            "records again: move it out of the lake (or point lake.url at the source alone)"
        )
    _refuse_table_formats(spec.url, relative)
    visible = [
        path
        for path, rel in zip(found, relative, strict=True)
        if not any(c.startswith((".", "_")) for c in rel.split("/"))
    ]
    parquet = sorted(p for p in visible if p.endswith(".parquet"))
    return fs, parquet, sorted(p for p in visible if not p.endswith(".parquet"))


def _refuse_table_formats(url: str, relative: list[str]) -> None:
    """Refuse a Delta Lake or Apache Iceberg table read as a folder of Parquet files: its folder keeps the
    files that deletes, updates, overwrites and compaction removed (until VACUUM / expiry), and deletion
    vectors or delete files remove rows inside live files, so every Parquet file under it is not the
    table's rows. Reading them would train on deleted and duplicated records, and break the bound on each
    record's contribution."""
    for rel in relative:
        parts = rel.split("/")
        if "_delta_log" in parts[:-1]:
            table, kind = (
                "/".join(parts[: parts.index("_delta_log")]) or ".",
                "a Delta Lake table (_delta_log/)",
            )
        elif len(parts) >= 2 and parts[-2] == "metadata" and parts[-1].endswith(".metadata.json"):
            table, kind = "/".join(parts[:-2]) or ".", "an Apache Iceberg table (metadata/*.metadata.json)"
        else:
            continue
        where = url if table == "." else f"{url.rstrip('/')}/{table}"
        raise LakeError(
            f"{where} is {kind}: its folder keeps Parquet files that deletes, updates and compaction removed, and "
            "its deletes can hide rows inside live files, so reading every Parquet file under it would train on "
            f"deleted and duplicated records. Point lake.url at the table itself ({where}) and set lake.format "
            "to 'auto' (the default), 'delta' or 'iceberg': dpstream then reads one version's live rows"
        )


def fingerprint(files: list[LakeFile], lineage: str | None = None) -> str:
    """The lake's identity for the privacy ledger: a hash of the multiset of its files' content identities
    (with, for a table version, each file's deletes and partition values, and the table's ``lineage``).

    The unit is the data, not how a config reads it: file names, their order, the lake's URL and the
    columns a config selects or how it orders them do not enter, so none of them yields a fresh budget;
    a byte copy of a table is the same lake. Different bytes (new or rewritten files) or other deletes
    give another fingerprint; the ledger then still charges the files the lakes share
    (``dpstream.privacy.ledger``)."""
    from dpstream.pipelines.sources.protocol import deletes_digest

    document: list[list[Any]] = sorted(
        [f.identity, f.size] + ([deletes_digest(f.deleted, f.constants)] if f.deleted or f.constants else [])
        for f in files
    )
    if lineage is not None:
        document.append(["lineage", lineage])
    return "lake-" + hashlib.sha256(json.dumps(document).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class PartCheck:
    """What a reader checks a part against: its size in bytes and its content identity."""

    size: int
    identity: str


_FOOTER_TAIL = 8  # 4-byte little-endian footer length, then the magic b"PAR1"


def footer_bytes(fs: Any, path: str) -> tuple[bytes, int]:
    """(the footer with its length and magic, the file's size) of one Parquet file, from two reads of its
    end. ``LakeError`` when the file is too short or has no Parquet footer (truncated or not Parquet)."""
    name = path.rsplit("/", 1)[-1]
    try:
        with fs.open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size < 12:
                raise LakeError(f"{name} is {size} bytes long: truncated, it holds no Parquet footer")
            handle.seek(size - _FOOTER_TAIL)
            tail = handle.read(_FOOTER_TAIL)
            length = int.from_bytes(tail[:4], "little")
            if tail[4:] != b"PAR1" or length + _FOOTER_TAIL + 4 > size:
                raise LakeError(f"{name} does not end in a Parquet footer: truncated or overwritten")
            handle.seek(size - _FOOTER_TAIL - length)
            return handle.read(length) + tail, size
    except FileNotFoundError:
        raise LakeError(f"{name} is missing") from None


def footer_identity(footer: bytes) -> str:
    return "footer-sha256:" + hashlib.sha256(footer).hexdigest()


_BEFORE_RUN = "Nothing was trained on it; shuffle again with `dpstream shuffle CONFIG --reshuffle`"
_DURING_RUN = (
    "The run stops here, and what it released so far stays charged; it cannot resume on a changed or pruned "
    "shuffle: reshuffle (`dpstream shuffle CONFIG --reshuffle`) and start a new run id"
)


def read_verified_footer(
    fs: Any, path: str, check: PartCheck | None, during_run: bool = False
) -> pq.FileMetaData:
    """The parsed footer of ``path``, refused (``LakeError`` naming the file) unless its size and content
    identity are ``check``'s (``check=None``: parsed unchecked, for files no manifest describes). The
    message's fix depends on whether a run is under way (``during_run``: a worker's first read of the
    part) or checking before anything is charged."""
    fix = _DURING_RUN if during_run else _BEFORE_RUN
    try:
        footer, size = footer_bytes(fs, path)
    except LakeError as error:
        if check is None:
            raise
        raise LakeError(
            f"{shown_part(path)}: {str(error).split(' ', 1)[1]}: the shuffled lake was changed after its shuffle. {fix}"
        ) from None
    if check is not None and (size != check.size or footer_identity(footer) != check.identity):
        raise LakeError(
            f"{shown_part(path)} is not the part its shuffle manifest committed (size {size:,} bytes, expected "
            f"{check.size:,}; content identity {footer_identity(footer)[:26]}..., expected {check.identity[:26]}...): "
            f"the shuffled lake was changed after its shuffle (a part copied over, replaced or truncated). {fix}"
        )
    try:
        return pq.read_metadata(pa.BufferReader(footer))
    except (pa.ArrowInvalid, OSError) as error:
        raise LakeError(f"{shown_part(path)} has a damaged Parquet footer ({error})") from None


def shown_part(path: str) -> str:
    """``<generation>/<part>`` of a part's path: the file a message names."""
    return "/".join(path.rsplit("/", 2)[-2:])


ALIGNMENT = 64
# Streaming readers (validation, scoring) read a column chunk through a buffer of this size instead of
# whole: a 1,000,000-row row group of 17 columns otherwise sits in memory compressed beside its decoded
# batch (peak 220 against 162 MiB reading one such file).
STREAM_BUFFER_BYTES = 1 << 20


def aligned_empty(shape: tuple[int, ...], dtype: Any, order: str = "C") -> np.ndarray:
    """An uninitialised array whose data starts on a 64-byte boundary.

    BLAS kernels peel a data-dependent number of leading elements to reach SIMD alignment, so the
    order of a float reduction — hence its last bits — depends on the base address. Every block
    handed to the models starts on the same boundary, wherever it was decoded or shipped.

    The memory comes from Arrow's pool (``pool_empty``): a block-sized ``np.empty`` in a Dask worker
    paid fresh pages at every decode (0.9 against 0.3 ms to fill 4.4 MB).
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = pool_empty(size + ALIGNMENT, np.uint8)
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
    fs: Any,
    path: str,
    spec: LakeSpec,
    group: int,
    metadata: pq.FileMetaData | None = None,
    stamp: str = "",
) -> tuple[np.ndarray, ...]:
    """One row group of one Parquet file: the unit the executors read, cache and fold over, as (X, y), or
    (X, y, users) when ``spec`` names a user column (a user-level shuffle's part-local user codes). With the
    file's ``metadata`` (``read_footer``) the footer is not read and parsed again: for a file of 1,000
    row groups that is 7 of the 8 ms a row group costs. With ``stamp`` (``file_stamp``) the file must
    still be the one whose footer was verified (``open_unchanged``); the pages' CRC32 checksums are
    verified wherever the writer stored them (the shuffle's parts)."""
    with open_unchanged(fs, path, stamp, _PART_CHANGED) as handle:
        try:
            table = pq.ParquetFile(handle, metadata=metadata, page_checksum_verification=True).read_row_group(
                group, columns=spec.read_columns
            )
        except OSError as error:
            if "CRC" not in str(error):
                raise
            raise LakeError(
                f"{shown_part(path)}: a page of row group {group} fails its checksum ({error}); it "
                f"{_PART_CHANGED}"
            ) from None
    arrays = table_to_arrays(table, spec)
    if spec.user_column is None:
        return arrays
    return (*arrays, table.column(spec.user_column).to_numpy().astype(np.int64, copy=False))


_PART_CHANGED = (
    "was changed while a run read it (a part copied over, replaced or truncated); the run stops rather than "
    "read other rows. Shuffle again with `dpstream shuffle CONFIG --reshuffle` before the next run"
)


def read_footer(fs: Any, path: str) -> pq.FileMetaData:
    """The parsed footer of one Parquet file (row groups, schema), to pass to ``read_row_group``."""
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).metadata


class LruCache:
    """A small thread-safe least-recently-used cache for worker processes (decoded blocks, footers). A
    key is loaded once: a second thread asking for a key being loaded waits for that load (a step's task
    for the block the worker's prefetch thread is decoding) instead of decoding it again."""

    def __init__(self, limit: int):
        self.limit, self._items, self._lock = limit, OrderedDict(), threading.Lock()
        self._loading: dict[Any, threading.Lock] = {}

    def get(self, key: Any, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._items:  # loaded by the thread this one waited for
                    self._items.move_to_end(key)
                    return self._items[key]
            try:
                value = load()
            except BaseException:
                with self._lock:
                    self._loading.pop(key, None)
                raise
            with self._lock:
                self._items[key] = value
                self._loading.pop(key, None)
                while len(self._items) > self.limit:
                    self._items.popitem(last=False)
        return value


# Per worker process, keyed by the shuffle's identity (``Manifest.row_order``) as well as the path: a
# long-lived worker must never use the footer of an earlier shuffle written at the same path.
_FOOTERS = LruCache(8)


def _verified_footer(fs: Any, path: str, check: PartCheck | None) -> tuple[pq.FileMetaData, str]:
    """(the footer, the file's stamp): verified against ``check`` and unchanged while it was read."""
    stamp = file_stamp(fs, path)
    metadata = read_verified_footer(fs, path, check, during_run=True)
    if file_stamp(fs, path) != stamp:
        raise LakeError(f"{shown_part(path)} {_PART_CHANGED}")
    return metadata, stamp


def read_block(
    fs: Any, path: str, spec: LakeSpec, group: int, lake: str = "", check: PartCheck | None = None
) -> tuple[np.ndarray, ...]:
    """``read_row_group`` with the file's footer read, checked against ``check`` (a shuffle part's size and
    content identity) and parsed once per worker process and shuffle ``lake``; every later read of the
    file refuses it if it changed since (``open_unchanged``)."""
    try:
        footer, stamp = _FOOTERS.get((lake, path), lambda: _verified_footer(fs, path, check))
    except FileNotFoundError:
        raise LakeError(f"{shown_part(path)} is missing. {_DURING_RUN}") from None
    return read_row_group(fs, path, spec, group, footer, stamp)
