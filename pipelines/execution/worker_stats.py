"""A worker's side of a scatter-gather step: its cache of decoded blocks, the statistics of its pieces of
a step, and the background decoding of the next step's blocks (runs in the worker's process).

The client's side (``dpstream.pipelines.execution.executor.DaskExecutor``) sends each worker its pieces
of a step, through the worker's step server (``dpstream.pipelines.execution.step_servers``) or as a
task; both run ``pieces_stats`` here, so the same process-wide caches serve either path. A worker keeps
the last 4 decoded blocks, keyed by the shuffle's identity (``Manifest.row_order``) as well as the path
and row group: a long-lived worker must never serve a block of an earlier shuffle written at the same
path.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from dpstream.models import BatchStats, Model, StatsRequest
from dpstream.pipelines.lake.blocks import LruCache, PartCheck, read_block
from dpstream.pipelines.lake.spec import LakeSpec

__all__ = ["slice_stats", "warm_blocks", "prefetch_in_background", "pieces_stats"]

_BLOCKS = LruCache(4)  # per worker process (module docstring)


def _block_arrays(
    path: str, group: int, spec: LakeSpec, lake: str = "", check: PartCheck | None = None
) -> tuple[np.ndarray, np.ndarray]:
    return _BLOCKS.get(
        (lake, path, group), lambda: read_block(spec.filesystem()[0], path, spec, group, lake, check)
    )


def slice_stats(
    path: str,
    group: int,
    spec: LakeSpec,
    start: int,
    stop: int,
    model: Model,
    request: StatsRequest,
    role: str,
    lake: str = "",
    check: PartCheck | None = None,
) -> BatchStats:
    """Statistics of rows [start, stop) of one block of the shuffled lake (runs on a worker), or of a
    user-level shuffle's people [start, stop) of the block (``spec.user_column``: each person's rows
    combined, ``Model.block_stats(users=...)``); ``lake`` is the shuffle's identity (``Manifest.row_order``)
    that keys the worker's caches, ``check`` what the part must be (its size and content identity in the
    manifest)."""
    X, y, *people = _block_arrays(path, group, spec, lake, check)
    if not people:
        return model.block_stats(X[start:stop], y[start:stop], request, role=role)
    (users,) = people
    first = int(users[0]) if users.size else 0  # a block's codes are consecutive: whole people, in order
    lo, hi = np.searchsorted(users, [first + start, first + stop], side="left")
    return model.block_stats(X[lo:hi], y[lo:hi], request, role=role, users=users[lo:hi])


def warm_blocks(blocks: list[tuple[str, int, PartCheck | None]], spec: LakeSpec, lake: str = "") -> int:
    """Read and decode (path, row group, check) blocks into this worker's cache; returns how many (runs on
    a worker)."""
    for path, group, check in blocks:
        _block_arrays(path, group, spec, lake, check)
    return len(blocks)


_PREFETCHER: ThreadPoolExecutor | None = None  # per worker process, started by its first prefetch
_PREFETCH_LOCK = threading.Lock()
_PREFETCHING: Future | None = None  # the last prefetch handed to it


def _warm_quietly(blocks: list[tuple[str, int, PartCheck | None]], spec: LakeSpec, lake: str) -> None:
    try:
        warm_blocks(blocks, spec, lake)
    except Exception:  # noqa: BLE001 - the step that needs the block reads it again and reports the error
        pass


def prefetch_in_background(
    blocks: list[tuple[str, int, PartCheck | None]], spec: LakeSpec, lake: str
) -> None:
    """Decode ``blocks`` into this worker's cache on its one background prefetch thread (runs on a worker),
    in place of a prefetch handed to it earlier that has not started (an older step's blocks)."""
    global _PREFETCHER, _PREFETCHING
    with _PREFETCH_LOCK:
        if _PREFETCHER is None:
            _PREFETCHER = ThreadPoolExecutor(1, thread_name_prefix="dpstream-prefetch")
        if _PREFETCHING is not None:
            _PREFETCHING.cancel()
        _PREFETCHING = _PREFETCHER.submit(_warm_quietly, blocks, spec, lake)


def pieces_stats(
    pieces: list[tuple[str, int, int, int, str, PartCheck | None]],
    spec: LakeSpec,
    model: Model,
    request: StatsRequest,
    lake: str = "",
    prefetch: list[tuple[str, int, PartCheck | None]] | None = None,
) -> list[BatchStats]:
    """``slice_stats`` for each (path, row group, first row, end row, role, check) piece, in the given
    order (one worker's share of a step, one task); then, on one background thread of this worker
    process, the decoding of the ``prefetch`` blocks (the next step's) into its cache, while the result
    travels and the coordinator applies the step. A block the next task asks for while it is being
    decoded is waited for, not decoded twice (``LruCache``); a failed prefetch is dropped, and the task
    that needs the block reads it again and reports the error."""
    stats = [
        slice_stats(path, group, spec, lo, hi, model, request, role, lake, check)
        for path, group, lo, hi, role, check in pieces
    ]
    if prefetch:
        prefetch_in_background(prefetch, spec, lake)
    return stats
