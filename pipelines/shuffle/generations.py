"""Shuffle generations: immutable shuffled copies of a lake, committed with an exclusive create.

Layout under ``lake.shuffled_url``::

    _generations/000001.json      the manifest of generation 1 (dpstream.pipelines.shuffle.manifest), its commit record
    _generations/000002.json      ... each created exclusively; the highest number is the current one
    _g-<stamp>-<hex>/part-NNNNN.parquet   one generation's parts, never modified once committed
    _g-<stamp>-<hex>/_started.json        written first: when and by whom the shuffle started
    _g-<stamp>-<hex>/_scratch/...         the scatter's scratch files, one per source file (a gather frees
                                          its slices once its part is written; all are gone before the commit)
    _validated/<key>.json                 validation's per-file checks (dpstream.pipelines.validation.cache)

A shuffle writes a new generation folder of its own and commits it by creating the next numbered
record with an exclusive create (``O_EXCL`` hard link on a local disk, a conditional PUT with
``If-None-Match: *`` on S3; ``dpstream.storage.write_atomic``). Of two shuffles that commit the same
number, one wins; the other finds the winner's record and either reuses it (same source and columns)
or commits after it. A reshuffle is a new generation: nothing a run may be reading is ever modified or
deleted, and a run reads only the generation it pinned when it was planned (``Manifest.row_order``
names it in the checkpoint and the ledger entry, so a resume reads it again).

``prune`` is the only deletion: superseded generations (but not those a run that may still resume has
pinned, as its ledger entry records), and the folders of shuffles that stopped writing more than
``STALE_SECONDS`` ago. A run still reading a superseded generation when it is pruned stops with an error
naming the missing part (its parts are verified as they are read): prune when no run is in flight.
"""

from __future__ import annotations

import datetime as _dt
import re
import secrets
import time
from typing import Any

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.shuffle.manifest import GENERATION_NAME, PART_NAME, Manifest
from dpstream.pipelines.validation.cache import CACHE_FOLDER
from dpstream.storage import check_exclusive_create, open_url, read_json, write_json_atomic

__all__ = ["GenerationStore", "holds_only_shuffles", "COMMITS", "LEGACY_NAMES", "STALE_SECONDS"]

COMMITS = "_generations"
STARTED = "_started.json"
SCRATCH = "_scratch"
_COMMIT_NAME = re.compile(r"\A(\d{6})\.json\Z")
# What the single-folder layout of earlier dpstream versions wrote at the root (cleared by a reshuffle).
LEGACY_NAMES = ("_manifest.json", "_shuffle_in_progress.json", "_scratch")
STALE_SECONDS = 24 * 3600  # an uncommitted generation older than this is an interrupted shuffle


def _is_ours(name: str) -> bool:
    return name in (COMMITS, CACHE_FOLDER) or bool(GENERATION_NAME.match(name))


def _is_legacy(name: str) -> bool:
    return name in LEGACY_NAMES or bool(PART_NAME.match(name))


def holds_only_shuffles(fs: Any, root: str) -> bool:
    """Whether the folder ``root`` is missing or holds only what shuffles write in this layout (read only)."""
    try:
        names = [path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return True
    return all(name.startswith(".") or _is_ours(name) for name in names)


# Either file is what makes a folder an earlier dpstream's shuffle; part-NNNNN.parquet files alone do not.
_LEGACY_MARKERS = ("_manifest.json", "_shuffle_in_progress.json")


class GenerationStore:
    """The shuffle generations under one ``shuffled_url`` (module docstring)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.fs, self.root = open_url(url, storage_options)
        check_exclusive_create(self.fs, self.root)

    def _names(self) -> list[str]:
        self.fs.invalidate_cache(self.root)
        try:
            if not self.fs.exists(self.root):
                return []
            names = [path.rstrip("/").rsplit("/", 1)[-1] for path in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:
            return []
        # Hidden names are transient bookkeeping: a write's temporary file, a conditional-write probe.
        return [name for name in names if not name.startswith(".")]

    def check_usable(self, *, clear_legacy: bool = False) -> None:
        """Refuse a location that holds anything a shuffle did not write (nothing is deleted). A shuffle in
        the single-folder layout of an earlier dpstream is refused too, or removed with ``clear_legacy``
        (a reshuffle), deleting only the files that layout wrote."""
        names = self._names()
        legacy_layout = any(marker in names for marker in _LEGACY_MARKERS)
        foreign = sorted(
            name for name in names if not (_is_ours(name) or (legacy_layout and _is_legacy(name)))
        )
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise LakeError(
                f"lake.shuffled_url {self.url} holds files a shuffle did not write ({shown}); nothing was deleted. "
                "Point lake.shuffled_url at a new or empty folder"
            )
        legacy = sorted(name for name in names if legacy_layout and _is_legacy(name))
        if legacy and not clear_legacy:
            raise LakeError(
                f"lake.shuffled_url {self.url} holds a shuffle written by an earlier dpstream (one folder that a "
                "reshuffle rewrote in place); run `dpstream shuffle CONFIG --reshuffle` to replace it by an immutable "
                "generation (it deletes only that shuffle's files), or point lake.shuffled_url at a new folder"
            )
        for name in legacy:
            self.fs.rm(f"{self.root}/{name}", recursive=True)

    def numbers(self) -> list[int]:
        """The committed generations' numbers, ascending."""
        folder = f"{self.root}/{COMMITS}"
        self.fs.invalidate_cache(folder)
        try:
            names = [path.rsplit("/", 1)[-1] for path in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(int(match.group(1)) for name in names if (match := _COMMIT_NAME.match(name)))

    def _record(self, number: int) -> str:
        return f"{self.root}/{COMMITS}/{number:06d}.json"

    def read(self, number: int) -> Manifest:
        path = self._record(number)
        manifest = Manifest.from_json(read_json(self.fs, path), self.url, f"{COMMITS}/{number:06d}.json")
        if manifest.number != number:
            raise LakeError(
                f"{COMMITS}/{number:06d}.json records generation number {manifest.number}: it was copied or edited; "
                "shuffle again with `dpstream shuffle CONFIG --reshuffle`"
            )
        return manifest

    def current(self) -> Manifest | None:
        """The committed generation with the highest number, or None before the first shuffle."""
        numbers = self.numbers()
        return self.read(numbers[-1]) if numbers else None

    def find(self, generation: str) -> Manifest:
        """The committed manifest of the generation folder ``generation`` (a run's pinned data version)."""
        for number in reversed(self.numbers()):
            manifest = self.read(number)
            if manifest.generation == generation:
                return manifest
        raise LakeError(
            f"shuffle generation {generation} is not committed at {self.url} (it was pruned, or the run was started "
            "on another shuffled lake): the run cannot resume, since its remaining steps must read that shuffle's "
            "rows. Start a new run id"
        )

    def new_generation(self, source_url: str) -> str:
        """A fresh generation folder, with its start record; returns its name."""
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"_g-{stamp}-{secrets.token_hex(4)}"
        write_json_atomic(
            self.fs,
            f"{self.root}/{name}/{STARTED}",
            {"started_at": time.time(), "source_url": source_url},
            exclusive=True,
        )
        return name

    def folder(self, generation: str) -> str:
        return f"{self.root}/{generation}"

    def discard(self, generation: str) -> None:
        """Delete an uncommitted generation folder (this process's own, after a failure or a lost race)."""
        if generation in {self.read(n).generation for n in self.numbers()}:
            raise RuntimeError(f"generation {generation} is committed; it is never deleted by a shuffle")
        if self.fs.exists(self.folder(generation)):
            self.fs.rm(self.folder(generation), recursive=True)

    def try_commit(self, manifest: Manifest) -> bool:
        """Create ``manifest``'s record at its number; False when another shuffle committed that number first."""
        try:
            write_json_atomic(self.fs, self._record(manifest.number), manifest.to_json(), exclusive=True)
        except FileExistsError:
            return False
        return True

    def prune(self, keep: frozenset[str] = frozenset(), now: float | None = None) -> list[str]:
        """Delete superseded generations, except those in ``keep`` (the generations runs that may still
        resume have pinned: ``pinned_by_runs``), and the folders of shuffles that stopped writing more
        than ``STALE_SECONDS`` ago (its newest file's modification time; an unfinished shuffle that is
        still writing is left alone). Returns what was deleted, as generation names."""
        now = time.time() if now is None else now
        numbers = self.numbers()
        committed = {n: self.read(n).generation for n in numbers}
        current = committed[numbers[-1]] if numbers else None
        removed = []
        for number, generation in committed.items():
            if generation != current and generation not in keep:
                self.fs.rm(self._record(number))  # the record first: a crash leaves an uncommitted folder
                if self.fs.exists(self.folder(generation)):
                    self.fs.rm(self.folder(generation), recursive=True)
                removed.append(generation)
        for name in self._names():
            if GENERATION_NAME.match(name) and name not in committed.values() and self._stale(name, now):
                self.fs.rm(self.folder(name), recursive=True)
                removed.append(name)
        return removed

    def _stale(self, generation: str, now: float) -> bool:
        """Whether an uncommitted generation's newest file is older than ``STALE_SECONDS`` (by the
        storage's own clock for its files: local modification times, S3's LastModified)."""
        newest = 0.0
        for info in self.fs.find(self.folder(generation), detail=True).values():
            modified = info.get("mtime") or info.get("LastModified") or info.get("created")
            if hasattr(modified, "timestamp"):
                modified = modified.timestamp()
            newest = max(newest, float(modified or 0.0))
        return now - newest > STALE_SECONDS

    def uncommitted(self) -> list[str]:
        """Generation folders with no commit record: shuffles in progress or interrupted."""
        committed = {self.read(n).generation for n in self.numbers()}
        return sorted(n for n in self._names() if GENERATION_NAME.match(n) and n not in committed)
