"""Where a shuffle may write, and so where validation may keep its cache of checks.

A shuffle's output (``lake.shuffled_url``) may not equal, contain or lie inside the source lake, nor
equal or contain a protected location such as the pipeline config's folder; a non-empty one must hold
dpstream shuffles only (``dpstream.pipelines.shuffle.generations``). Validation records its per-file
checks there (``dpstream.pipelines.validation.cache``) only where a shuffle could write.
"""

from __future__ import annotations

from typing import Any

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.generations import holds_only_shuffles
from dpstream.pipelines.validation.cache import ValidationCache
from dpstream.storage import open_url, overlap

__all__ = ["check_output_location", "validation_cache"]


def check_output_location(out_url: str, source_url: str, protected: tuple[str, ...] = ()) -> None:
    """Refuse an output that equals, contains or lies inside the source lake, or equals or contains a
    protected location (the pipeline config's folder): shuffling there could overwrite or delete them."""
    relation = overlap(out_url, source_url)
    if relation is not None:
        where = {
            "equal": "is the source lake",
            "inside": "lies inside the source lake",
            "contains": "contains the source lake",
        }[relation]
        raise LakeError(
            f"lake.shuffled_url {out_url} {where} {source_url}; the source is never written to: "
            "point lake.shuffled_url at a new folder outside the lake"
        )
    for folder in protected:
        relation = overlap(out_url, folder)
        if relation in ("equal", "contains"):
            raise LakeError(
                f"lake.shuffled_url {out_url} {'is' if relation == 'equal' else 'contains'} the folder {folder} "
                "(the pipeline config's folder); point lake.shuffled_url at a new folder of its own, e.g. "
                "'shuffled' beside the config"
            )


def validation_cache(
    shuffled_url: str,
    spec: LakeSpec,
    labels: Any,
    storage_options: dict | None = None,
    deferred: bool = False,
) -> ValidationCache | None:
    """The cache under ``shuffled_url``, or None where a shuffle would refuse to write (inside or around
    the source lake, a folder holding other files): validation never writes where the shuffle may not."""
    try:
        check_output_location(shuffled_url, spec.url)
        fs, root = open_url(shuffled_url, storage_options or {})
        if not holds_only_shuffles(fs, root):  # nothing is created to find out
            return None
    except (LakeError, ValueError, OSError):
        return None
    return ValidationCache(shuffled_url, spec, labels, storage_options, deferred)
