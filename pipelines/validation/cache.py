"""What validation found per source file, kept while the file is unchanged.

Every ``dpstream train`` validates the lake again before it spends budget, and ``dpstream shuffle``
after ``dpstream validate`` did so twice: each time a full read of every file (its content identity
and every value). At 3·10⁸ rows that pass cost more than training itself. A file's
*stamp* (``lake.file_stamp``: inode, size, modification and status-change times on a disk; ETag, size
and time on an object store) changes whenever the file is written or replaced, so a file whose stamp
is the one recorded when it was last checked holds the bytes that were checked: its check (rows, size,
content identity, the digest of its rows, schema, vector width, label values, the rows whose person id
is not in its normal form) is reused, and only files that changed are read.
What is reused is what a full check would find again; the privacy argument (the ledger's content
identities, the shuffle reading only files with the validated stamp) is unchanged.

Kept under the lake's ``shuffled_url`` in ``_validated/<key>.json``, one document per validation
setting: ``key`` hashes what a check depends on (the lake's URL, columns, label, preprocessing, user
column and its id rule, source pin, a classifier's label contract, ``VALIDATION_RULES`` and dpstream's version), never
credentials. Only strong stamps are trusted (``ValidationCache.strong``). Files
of table versions with deletes, partition values or field ids are always checked again (their check
depends on the version's metadata, not only on the file). A lost or unreadable cache only costs a
full validation; writes are atomic, and two validations racing keep one writer's entries. Nothing is
recorded where a shuffle could not write (``dpstream.pipelines.shuffle.location.validation_cache``): a
``shuffled_url`` inside the source lake or holding files a shuffle did not write.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pyarrow as pa

from dpstream import __version__
from dpstream.pipelines.lake.files import LakeFile, file_stamp
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.storage import open_url, read_json, write_json_atomic

__all__ = ["ValidationCache", "CACHE_FOLDER"]

CACHE_FOLDER = "_validated"
# Part of every key: bump it whenever what a file's check finds can change (``validate.check_file``,
# ``check_values``, ``convert_rows``), so an upgrade reads every file again instead of trusting checks
# made under the old rules.
VALIDATION_RULES = 2  # 2: a file's check records its rows' digest and the ids the person rule changes


def _setting_key(spec: LakeSpec, labels: Any) -> str:
    setting = (
        VALIDATION_RULES,
        __version__,
        spec.url,
        spec.features,
        spec.label,
        spec.user_column,
        spec.user_id_case_fold,
        spec.source,
        spec.preprocess,
        labels,
    )
    return hashlib.sha256(repr(setting).encode()).hexdigest()[:32]


class ValidationCache:
    """The checks recorded for one validation setting under ``shuffled_url`` (module docstring)."""

    def __init__(
        self,
        shuffled_url: str,
        spec: LakeSpec,
        labels: Any,
        storage_options: dict | None = None,
        deferred: bool = False,
    ):
        """``deferred``: ``store`` keeps the entries until ``commit`` (a command that may still refuse the
        lake after validating it writes nothing)."""
        self.fs, root = open_url(shuffled_url, storage_options or {})
        self.path = f"{root}/{CACHE_FOLDER}/{_setting_key(spec, labels)}.json"
        self.deferred, self._pending = deferred, None

    def _document(self) -> dict[str, Any]:
        try:
            document = read_json(self.fs, self.path)
        except Exception:  # noqa: BLE001 - a missing or damaged cache only means a full validation
            return {}
        return document if isinstance(document, dict) else {}

    def load(self) -> dict[str, dict[str, Any]]:
        """path -> recorded check; empty when there is none or it cannot be read."""
        files = self._document().get("files", {})
        return files if isinstance(files, dict) else {}

    def merged(self, fingerprint: str) -> tuple[int, int] | None:
        """The (people, spellings) the id rule merged in the lake of ``fingerprint`` (its files' content
        identities: ``lake.fingerprint``) as recorded, else None. Counting them reads every file's ids again
        (``persons.count_merged_ids``); the count is a function of the lake's content and this
        setting (the key holds the id rule), so it is kept like the files' checks."""
        record = self._document().get("merged")
        if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
            return None
        counts = record.get("counts")
        if not (
            isinstance(counts, list) and len(counts) == 2 and all(type(n) is int and n >= 0 for n in counts)
        ):
            return None
        return counts[0], counts[1]

    def recorded(self, fs: Any, listed: Any) -> list[tuple | None]:
        """For each listed file, its recorded check (``reuse``) where its stamp is still the recorded one,
        else None (to be checked)."""
        entries = self.load()
        found: list[tuple | None] = []
        for file in listed:
            entry = entries.get(file.path) if self.cacheable(file) else None
            try:
                found.append(self.reuse(entry, file_stamp(fs, file.path), file.rows) if entry else None)
            except OSError:
                found.append(None)
        return found

    @staticmethod
    def cacheable(listed: Any) -> bool:
        """Whether a file's check depends on the file alone (no table version's deletes, partition values
        or field ids)."""
        return not (listed.deleted or listed.constants or listed.field_ids)

    @staticmethod
    def strong(stamp: str) -> bool:
        """Whether ``stamp`` changes with any rewrite: a local file's (its ctime cannot be set back), or an
        object's with an ETag. A store without ETags gives size and time only, which a same-size rewrite
        within the time's resolution keeps: such files are always checked again."""
        return stamp.startswith("local:") or (stamp.startswith("object:") and bool(stamp.split(":")[1]))

    @staticmethod
    def reuse(entry: dict[str, Any] | None, stamp: str, listed_rows: int | None) -> tuple | None:
        """(LakeFile, schema, width, labels, rows digest, respelled id rows) of a recorded check whose
        stamp is ``stamp``, else None."""
        if (
            not entry
            or not ValidationCache.strong(stamp)
            or entry.get("stamp") != stamp
            or entry.get("listed_rows") != listed_rows
        ):
            return None
        try:
            schema = pa.ipc.read_schema(pa.BufferReader(base64.b64decode(entry["schema"])))
            file = LakeFile(entry["path"], int(entry["rows"]), int(entry["size"]), entry["identity"], stamp)
            labels = frozenset(float(value) for value in entry["labels"])
            digest, respelled = entry["digest"], int(entry["respelled"])
            if not isinstance(digest, str) or not digest:
                return None
            return file, schema, int(entry["width"]), labels, digest, respelled
        except (KeyError, TypeError, ValueError, pa.ArrowInvalid):
            return None

    def store(self, entries: dict[str, dict[str, Any]], merged: tuple[str, int, int] | None = None) -> None:
        """Record the files' checks (``entry``), and ``merged``: (fingerprint, people, spellings) of a
        lake whose merged ids were counted (``merged``)."""
        document: dict[str, Any] = {"files": entries}
        if merged is not None:
            document["merged"] = {"fingerprint": merged[0], "counts": [merged[1], merged[2]]}
        if self.deferred:
            self._pending = document
            return
        self._write(document)

    def commit(self) -> None:
        """Write what ``store`` kept (a deferred cache); nothing if validation did not pass."""
        if self._pending is not None:
            self._write(self._pending)
            self._pending = None

    def _write(self, document: dict[str, Any]) -> None:
        try:
            write_json_atomic(self.fs, self.path, document)
        except Exception:  # noqa: BLE001 - a read-only location: the next validation reads every file again
            pass

    @staticmethod
    def entry(
        file: LakeFile,
        schema: pa.Schema,
        width: int,
        labels: frozenset[float],
        listed_rows: int | None,
        digest: str = "",
        respelled: int = 0,
    ) -> dict:
        """The record of one file's check: what ``reuse`` gives back while the file keeps its stamp."""
        return {
            "path": file.path,
            "rows": file.rows,
            "size": file.size,
            "identity": file.identity,
            "stamp": file.stamp,
            "listed_rows": listed_rows,
            "schema": base64.b64encode(schema.serialize().to_pybytes()).decode(),
            "width": width,
            "labels": sorted(labels),
            "digest": digest,
            "respelled": respelled,
        }
