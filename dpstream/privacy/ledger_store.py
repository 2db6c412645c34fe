"""Where a privacy ledger's documents live: the store seam between the ledger's policy and storage.

The ledger (``dpstream.privacy.ledger``, ``ledgers``) decides what to charge and when to refuse; a store
only keeps small JSON documents under keys such as ``<lake>/runs/<run id>.json``, with the one guarantee
the charging protocol rests on: **``create`` is exclusive**, so of two processes creating one key exactly
one succeeds. The protocol's steps map onto it: a claim is a ``create``, a commit a ``replace``, an abort a
``create`` of the aborted record then a ``remove``, and every check a ``list`` and ``read`` of entries.

``FsspecLedgerStore`` keeps the documents as files under any fsspec URL: on a local disk a temporary file
renamed (``replace``) or linked (``create``: ``os.link`` fails when the key exists); on an object store
one PUT, conditional for ``create`` (``If-None-Match: *``, probed once per bucket). Another store (a
database table, a key-value service) implements the same six methods.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from typing import Any, Protocol

from dpstream.storage import check_exclusive_create, open_url, read_json, url_of, write_json_atomic

__all__ = ["LedgerStore", "FsspecLedgerStore"]


class LedgerStore(Protocol):
    """The documents of the ledgers under one location, by key (``<folder>/<name>.json``)."""

    url: str

    def read(self, key: str) -> Any | None:
        """The document at ``key``, or None when there is none. A damaged one raises ``ValueError`` naming
        it and the fix; an unreachable store raises its client's error (the outage policy waits)."""

    def create(self, key: str, document: Any) -> bool:
        """Write ``document`` at ``key`` only if no document is there: True when this call created it."""

    def replace(self, key: str, document: Any) -> None:
        """Write ``document`` at ``key`` whole, replacing what is there."""

    def remove(self, key: str) -> None:
        """Remove the document at ``key`` (none there: nothing to do)."""

    def list(self, folder: str) -> list[str]:
        """The keys of the documents directly in ``folder`` (``""``: the top), sorted; none when absent."""

    def age_seconds(self, key: str) -> float | None:
        """How long ago the document at ``key`` was written, or None when the store cannot tell."""

    def show(self, key: str) -> str:
        """``key`` as an operator opens it (a path or URL), for messages."""


class FsspecLedgerStore:
    """``LedgerStore`` on files under a local path or any fsspec URL (module docstring)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.url = url
        self.fs, self.root = open_url(url, storage_options)

    def check_exclusive_create(self) -> None:
        """Refuse an object store that ignores conditional writes (``dpstream.storage``)."""
        check_exclusive_create(self.fs, self.root)

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def read(self, key: str) -> Any | None:
        path = self._path(key)
        # Never from a cached listing: a write whose answer was lost may have landed meanwhile.
        self.fs.invalidate_cache(posixpath.dirname(path))
        try:
            return read_json(self.fs, path)
        except (FileNotFoundError, NotADirectoryError):  # a key under a document names no document
            return None

    def create(self, key: str, document: Any) -> bool:
        try:
            write_json_atomic(self.fs, self._path(key), document, exclusive=True)
        except FileExistsError:
            return False
        return True

    def replace(self, key: str, document: Any) -> None:
        write_json_atomic(self.fs, self._path(key), document)

    def remove(self, key: str) -> None:
        try:
            self.fs.rm(self._path(key))
        except FileNotFoundError:
            pass

    def list(self, folder: str) -> list[str]:
        path = self._path(folder)
        self.fs.invalidate_cache(path)
        try:
            found = self.fs.ls(path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        prefix = f"{folder}/" if folder else ""
        return sorted(f"{prefix}{posixpath.basename(p.rstrip('/'))}" for p in found if p.rstrip("/") != path)

    def age_seconds(self, key: str) -> float | None:
        try:
            modified = self.fs.modified(self._path(key))
        except (OSError, NotImplementedError):
            return None
        if modified.tzinfo is None:
            modified = modified.replace(tzinfo=_dt.UTC)
        return (_dt.datetime.now(_dt.UTC) - modified).total_seconds()

    def show(self, key: str) -> str:
        return url_of(self.fs, self._path(key))
