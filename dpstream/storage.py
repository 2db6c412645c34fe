"""Atomic small-object storage on any fsspec filesystem (local disk, ``file://``, ``s3://``).

Ledgers, manifests and checkpoints are small documents that must never be seen half-written:

* local filesystems: write a temporary file in the target directory, fsync it, then ``os.replace``
  (overwrite) or ``os.link`` (exclusive create, fails if the target exists) — both atomic on POSIX;
* object stores: one PUT of the complete object, which S3 makes visible atomically; exclusive
  create uses a conditional PUT (``If-None-Match: *``).
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import os
import secrets
import tempfile
from collections.abc import Callable
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dpstream.extras import missing_extra

__all__ = [
    "open_url",
    "is_local",
    "write_atomic",
    "write_bytes_atomic",
    "write_json_atomic",
    "read_json",
    "location",
    "url_of",
    "overlap",
    "check_exclusive_create",
    "punch_hole",
]


def open_url(
    url: str, storage_options: dict[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path) for a local path, ``file://`` or ``s3://`` URL."""
    if not isinstance(url, (str, os.PathLike)) or not str(url).strip():
        raise ValueError(f"expected a local path or URL such as s3://bucket/prefix, got {url!r}")
    try:
        fs, path = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
    except ImportError as error:  # fsspec's "Install s3fs to access S3" sets no module name
        extra = missing_extra(error, "s3fs" if str(url).startswith(("s3://", "s3a://")) else None)
        raise (extra or error) from None
    return fs, path.rstrip("/") or path


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def url_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The location ``path`` on ``fs`` as a user (or another process) opens it: the path itself on local
    disk, else protocol://path (``open_url`` inverts it)."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


def location(url: str) -> tuple[str, str]:
    """(protocol, normalised path) of a URL without touching storage: symlinks resolved on local disk,
    so two spellings of one folder compare equal."""
    protocol, path = fsspec.core.split_protocol(str(url))
    protocol = protocol or "file"
    if protocol in ("file", "local"):
        return "file", os.path.realpath(os.path.expanduser(path))
    return protocol, "/" + path.strip("/")


def overlap(first: str, second: str) -> str | None:
    """How two locations overlap: ``"equal"``, ``"inside"`` (first inside second), ``"contains"``, or None."""
    (p1, a), (p2, b) = location(first), location(second)
    if p1 != p2:
        return None
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    if a == b:
        return "equal"
    if a.startswith(b.rstrip("/") + "/"):
        return "inside"
    if b.startswith(a.rstrip("/") + "/"):
        return "contains"
    return None


def write_atomic(
    fs: fsspec.AbstractFileSystem,
    path: str,
    write: Callable[[BinaryIO], None],
    *,
    exclusive: bool = False,
    durable: bool = True,
    private: bool = False,
) -> None:
    """Call ``write(handle)`` to produce the object at ``path``, so readers see either the old object or
    the whole new one; if ``write`` raises, nothing is left behind.

    On a local disk ``write`` streams into a temporary file beside ``path`` that is renamed into place
    (an encoder writing straight to the file avoids growing an in-memory copy: the shuffle's Parquet
    outputs); on an object store it writes into memory, sent in one request (an object store makes each
    PUT visible whole). ``exclusive=True`` raises ``FileExistsError`` instead of replacing an existing
    object. ``durable=False`` skips the fsync on local disks: for scratch data that an interrupted run
    discards and rewrites (the shuffle's scratch files), where the rename alone gives the all-or-nothing view.
    A local file gets the permissions a plain ``open`` would give under the process umask (the temporary
    file's 0600 would keep workers running as another user of the group from reading a shuffled part),
    except with ``private=True`` (a checkpoint, which holds the noise key): owner only.
    """
    if is_local(fs):
        try:
            _write_local(path, write, exclusive=exclusive, durable=durable, private=private)
        except OSError as error:
            if error.errno in _REFUSED_WRITES:
                # Named by the file the caller writes, not the temporary file beside it the error names.
                raise type(error)(error.errno, error.strerror, path) from None
            raise
        return
    buffer = io.BytesIO()
    write(buffer)
    data = buffer.getvalue()
    if exclusive:
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            raise
        except Exception as error:  # botocore wraps HTTP 412 in a generic OSError subclass
            if "PreconditionFailed" in repr(error) or "412" in str(error):
                raise FileExistsError(path) from error
            raise
    else:
        fs.pipe_file(path, data)


# A local write the location refuses: full, over quota, too large, read-only, or not ours to write.
_REFUSED_WRITES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


def _write_local(
    path: str, write: Callable[[BinaryIO], None], *, exclusive: bool, durable: bool, private: bool
) -> None:
    """``write_atomic`` on a local disk: a temporary file beside ``path``, renamed (or linked) into place."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        if not private:
            os.fchmod(fd, 0o666 & ~process_umask())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if exclusive:
            os.link(tmp, path)  # atomic, and fails with FileExistsError if path exists
        else:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02  # <linux/falloc.h>
_fallocate: Any = None


def punch_hole(path: str, ranges: list[tuple[int, int]]) -> bool:
    """Free the disk blocks of the byte ranges ``[start, end)`` of the local file ``path``, keeping its
    size (``fallocate(2)`` with ``FALLOC_FL_PUNCH_HOLE``: those bytes then read as zeros). Returns False,
    freeing nothing, where the kernel or filesystem cannot (not Linux, or e.g. an old NFS): the caller's
    data is unchanged and only its disk peak is higher. A range inside one filesystem block (4 KiB) is
    zeroed but frees nothing."""
    global _fallocate
    if _fallocate is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            function = getattr(libc, "fallocate64", None) or libc.fallocate  # 64-bit offsets everywhere
            function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
            function.restype = ctypes.c_int
            _fallocate = function
        except (AttributeError, OSError):
            _fallocate = False
    if _fallocate is False:
        return False
    fd = os.open(path, os.O_WRONLY)
    try:
        for start, end in ranges:
            if end > start and _fallocate(
                fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, start, end - start
            ):
                return False
    finally:
        os.close(fd)
    return True


_EXCLUSIVE_CHECKED: set[tuple[str, str]] = set()


def check_exclusive_create(fs: fsspec.AbstractFileSystem, root: str) -> None:
    """Refuse an object store that ignores conditional writes (``If-None-Match: *``): the ledger's claims
    and the shuffle's commits rest on an exclusive create failing when the object exists. Probed once per
    process and bucket (three requests); local disks need no probe (``os.link``)."""
    if is_local(fs):
        return
    bucket = root.strip("/").split("/", 1)[0]
    if (fs.unstrip_protocol(bucket), bucket) in _EXCLUSIVE_CHECKED:
        return
    probe = f"{root.rstrip('/')}/.dpstream-exclusive-probe-{secrets.token_hex(8)}"
    write_bytes_atomic(fs, probe, b"1", exclusive=True)
    try:
        try:
            write_bytes_atomic(fs, probe, b"2", exclusive=True)
        except FileExistsError:
            _EXCLUSIVE_CHECKED.add((fs.unstrip_protocol(bucket), bucket))
            return
        raise RuntimeError(
            f"{fs.unstrip_protocol(root)}: this object store accepted a second create of one object: it ignores "
            "conditional writes (If-None-Match: *), which dpstream's ledger and shuffle commits rely on to be safe "
            "between concurrent runs. Use a store that supports them (AWS S3 does), or a local or shared file system"
        )
    finally:
        fs.rm(probe)


def write_bytes_atomic(
    fs: fsspec.AbstractFileSystem,
    path: str,
    data: bytes | memoryview,
    *,
    exclusive: bool = False,
    durable: bool = True,
    private: bool = False,
) -> None:
    """Write ``data`` (any bytes-like object) to ``path`` atomically (``write_atomic``)."""

    def write(handle: BinaryIO) -> None:
        handle.write(data)

    write_atomic(fs, path, write, exclusive=exclusive, durable=durable, private=private)


def process_umask() -> int:
    """The process umask, read from ``/proc/self/status`` (setting it to read it back, ``os.umask``, would
    race with other threads creating files); 0o022 where the kernel does not report it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def write_json_atomic(
    fs: fsspec.AbstractFileSystem, path: str, document: Any, *, exclusive: bool = False
) -> None:
    data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    write_bytes_atomic(fs, path, data, exclusive=exclusive)


def read_json(fs: fsspec.AbstractFileSystem, path: str) -> Any:
    # One whole-object read: a file opened and then read in ranges fails on object stores when another
    # process replaces it in between (s3fs's FileExpired, a concurrent ledger update); an atomic
    # replacement then gives this read either the old or the new document.
    raw = fs.cat_file(path)
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        problem = f"{error.msg} at line {error.lineno}"
    except UnicodeDecodeError as error:  # binary bytes: json.loads decodes before it parses
        problem = f"binary bytes, not UTF-8 text, at byte {error.start}"
    raise ValueError(
        f"{url_of(fs, path)} is not valid JSON ({problem}); "
        "it was not written by dpstream or was edited by hand — restore it from a backup"
    )
