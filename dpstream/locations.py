"""Where dpstream may write: one rule for every output location, checked before anything is written.

A run writes to several places (the publish folder, the operator's metrics, checkpoints, the ledger,
the shuffled lake, predictions, log files); it reads the source lake and its shuffled generations.
Writing into one of those data locations could add rows to a lake, overwrite a part a run is reading,
or put a noise key in a published folder. So every write location is checked by ``check_write_location``:

1. against the **protected locations** the caller knows (``Protected``: the source lake, the shuffled
   lake, the ledger, the checkpoints, the config's folder, the publish folder): it may not equal one,
   contain one, or lie inside one, except where a location allows writes inside it (the config's folder
   holds ``runs/`` by default; the ledger holds the default checkpoints);
2. against what the location's own ancestors hold (``data_marker``): a folder written by dpstream as
   data (a converted lake's ``_convert.json``, a shuffled lake's ``_generations``, a ledger's marker or
   a lake folder of one, predictions' ``_predict.json``, a run's publish or operator folder by the claim
   its run wrote there), a Delta table's ``_delta_log``, or Parquet
   files directly in the folder or its parent. A lake is read recursively, so a file written anywhere
   below one becomes part of it.

The errors name the setting, both locations and the fix.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dpstream.storage import location, open_url, overlap

__all__ = [
    "Protected",
    "check_write_location",
    "data_marker",
    "DATA_MARKERS",
    "register_data_marker",
    "RELEASE_CLAIM",
    "OPERATOR_CLAIM",
]

# The claims a run writes in its publish and operator folders (``flows.locations.claim_run_folders``).
RELEASE_CLAIM = "_dpstream_release.json"
OPERATOR_CLAIM = "_dpstream_operator.json"

# A name in a folder that makes it a data location, and what it says the folder is.
DATA_MARKERS = {
    "_convert.json": "a lake written by `dpstream convert`",
    "_generations": "a shuffled lake",
    "_manifest.json": "a shuffled lake",
    "_dpstream_ledger.json": "a privacy ledger",
    "_predict.json": "predictions written by `dpstream predict`",
    RELEASE_CLAIM: "a run's publish folder (its releases only)",
    OPERATOR_CLAIM: "a run's operator folder (its non-private metrics only)",
}


def register_data_marker(name: str, reason: str) -> None:
    """Declare one more name that makes a folder a data location: a table format's log folder, declared
    by the module that reads that format (``dpstream.pipelines.sources.delta``)."""
    if DATA_MARKERS.get(name, reason) != reason:
        raise ValueError(f"data marker {name!r} is already declared as {DATA_MARKERS[name]!r}")
    DATA_MARKERS[name] = reason


# A publish folder written before runs claimed theirs: its release files alone mark it.
LEGACY_PUBLISH_FILES = frozenset({"model.json", "privacy_report.md"})


@dataclass(frozen=True)
class Protected:
    url: str
    name: str  # what it is, as the message says it: "the source lake (lake.url)"
    inside_ok: bool = False  # writing inside it is allowed (the config's folder, the ledger's checkpoints)


def _phrase(relation: str) -> str:
    return {"equal": "is", "inside": "lies inside", "contains": "contains"}[relation]


def check_write_location(
    url: str,
    what: str,
    protected: Iterable[Protected] = (),
    *,
    storage_options: dict[str, Any] | None = None,
    scan: bool = True,
    own_marker: str | None = None,
) -> None:
    """Refuse (``ValueError``) writing ``what`` (a setting's name, e.g. "--output (the publish folder)") at
    ``url`` when it overlaps a ``protected`` location or lies in a data location (module docstring);
    ``scan=False`` skips the look at the ancestors (for a location the caller created itself).
    ``own_marker``: a marker the location itself may hold, because the caller checks whose it is (a
    run's publish folder, which its own resumed run writes again); above the location it still refuses."""
    for place in protected:
        relation = overlap(url, place.url)
        if relation is None or (relation == "inside" and place.inside_ok):
            continue
        raise ValueError(
            f"{what} {url} {_phrase(relation)} {place.name} {place.url}; nothing was written. Choose a location "
            "outside it"
        )
    if scan:
        found = data_marker(url, storage_options, own_marker)
        if found is not None:
            folder, reason = found
            where = "is" if location(folder) == location(url) else "lies inside"
            raise ValueError(
                f"{what} {url} {where} {folder}, which holds {reason}: files written there would join that data. "
                "Nothing was written; choose a location outside it"
            )


def data_marker(
    url: str, storage_options: dict[str, Any] | None = None, own_marker: str | None = None
) -> tuple[str, str] | None:
    """(folder, what it holds) for the nearest of ``url`` and its ancestors that is a data location, or None.

    dpstream's markers count at any depth; Parquet files only in ``url`` itself and its parent (a lake
    directly around the location), so a stray file high up (``/tmp/x.parquet``) refuses nothing."""
    try:
        fs, path = open_url(url, storage_options)
    except (ValueError, ImportError):
        return None
    protocol, _ = location(url)
    depth = 0
    while True:
        names = _names(fs, path)
        if depth == 0 and own_marker is not None:
            names -= {own_marker, *(LEGACY_PUBLISH_FILES if own_marker == RELEASE_CLAIM else ())}
        for name, reason in DATA_MARKERS.items():
            if name in names:
                return _shown(fs, path, protocol), reason
        if LEGACY_PUBLISH_FILES <= names:
            return _shown(fs, path, protocol), "a run's publish folder (its releases only)"
        if {"budget.json", "files.json"} <= names:
            return _shown(fs, path, protocol), "a privacy ledger's lake folder"
        if depth <= 1 and any(name.endswith(".parquet") for name in names):
            return _shown(fs, path, protocol), "Parquet files (a lake)"
        parent = posixpath.dirname(path.rstrip("/"))
        if not parent or parent == path or (protocol != "file" and "/" not in path.strip("/")):
            return None  # the filesystem's root, or the bucket itself
        path, depth = parent, depth + 1


def _names(fs: Any, path: str) -> set[str]:
    try:
        fs.invalidate_cache(path)
        if not fs.isdir(path):
            return set()
        return {entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(path, detail=False)}
    except (OSError, ValueError):  # unreadable or not a folder: nothing known there
        return set()


def _shown(fs: Any, path: str, protocol: str) -> str:
    return path if protocol == "file" else fs.unstrip_protocol(path)
