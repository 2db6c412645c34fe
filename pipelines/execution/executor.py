"""The distributed step executor: the coordinator's ``Executor`` on a Dask cluster (scatter-gather).

The unit of work is a *block*: one Parquet row group of the shuffled lake (65,536 rows, written by
shuffle-once and listed in the manifest). For step t the coordinator sends the algorithm's request;
the executor cuts the step's row span at block boundaries, sends each worker one call with its pieces
(``pieces_stats``, run by the worker's step server, ``dpstream.pipelines.execution.step_servers``, or as a task
where it has none; one round trip per worker whatever the number of row groups; the parameters travel
with the request) and merges the results in piece order, starting from zero
statistics — the same fold the in-memory executor performs over the same blocks, so the result is
bit-for-bit identical whatever the number of workers.

Each block is pinned to one worker (block index modulo the workers present, so neighbouring blocks of
one step land on different workers), whose process keeps the last 4 decoded blocks and the parsed
footers of its last 8 files (``dpstream.pipelines.lake.files.read_block``): consecutive steps read consecutive slices
of the same blocks, so each block is read and decoded once, and a worker never holds more than a few
blocks. After its share of a step, each worker decodes its blocks of the next step (the coordinator's
``_prefetch_blocks``) on a background thread (``prefetch_in_background``).

Blocks are read only from the generation the manifest names, and each part is checked against its
size and content identity when a worker first opens it (``dpstream.pipelines.lake.files.read_block``).
The workers are looked up every few seconds: a share whose worker left is run as a task on another
(``dpstream.pipelines.execution.waiting``), and a cluster left without workers for ``worker_timeout`` seconds stops the run
instead of hanging it.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from dpstream.algorithms.base import StepSpan
from dpstream.models import BatchStats, Model, StatsRequest
from dpstream.pipelines.execution.step_servers import StepServers, servers_suit
from dpstream.pipelines.execution.waiting import DEFAULT_WORKER_TIMEOUT, gather_within, live_workers
from dpstream.pipelines.lake.files import LakeSpec, LruCache, PartCheck, read_block
from dpstream.pipelines.shuffle.manifest import Manifest

__all__ = ["DaskExecutor", "slice_stats", "pieces_stats", "warm_blocks", "lake_blocks", "with_user_offset"]

# Per worker process, keyed by the shuffle's identity (``Manifest.row_order``) as well as the path: a
# long-lived worker must never serve a block of an earlier shuffle written at the same path.
_BLOCKS = LruCache(4)
PREFETCH_BLOCKS = 2  # per worker and step: half the cache
WORKERS_REFRESH_SECONDS = 5.0


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


def lake_blocks(manifest: Manifest, storage_options: dict[str, Any] | None = None):
    """The shuffled lake's blocks (row groups) in training order as (X, y), or (X, y, users) for a
    user-level shuffle (person codes ascending through the lake: ``InMemoryExecutor(by_user=True)``);
    each part is checked against its manifest entry as it is opened."""
    spec = manifest.spec(storage_options)
    fs, _ = spec.filesystem()
    checks = manifest.part_checks(storage_options)
    offsets = manifest.block_user_offsets()
    for (_, path, group, _), offset in zip(manifest.blocks(storage_options), offsets, strict=True):
        yield with_user_offset(read_block(fs, path, spec, group, manifest.row_order, checks[path]), offset)


def with_user_offset(block: tuple[np.ndarray, ...], offset: int) -> tuple[np.ndarray, ...]:
    """A block with its part-local person codes made lake-wide (``Manifest.block_user_offsets``); a row
    block as it is."""
    if len(block) == 2:
        return block
    X, y, users = block
    return X, y, users + offset


class DaskExecutor:
    def __init__(
        self,
        client: Any,
        manifest: Manifest,
        model: Model,
        storage_options: dict[str, Any] | None = None,
        prefetch: bool = True,
        worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
        servers: bool = True,
    ):
        self.client = client
        self.prefetch = prefetch  # off only to measure a bare step (benchmarks)
        self.worker_timeout = worker_timeout
        self.manifest = manifest
        self.model = model
        self.spec = manifest.spec(storage_options)
        self.blocks = manifest.blocks(storage_options)
        self.checks = manifest.part_checks(storage_options)
        # A plan's spans count rows, or a user-level shuffle's people (whole people per block).
        self.by_user = manifest.is_user_level
        units = (
            [people for part in manifest.parts for people in part.users]
            if self.by_user
            else [rows for *_, rows in self.blocks]
        )
        self.starts = np.concatenate([[0], np.cumsum(units)]).astype(np.int64).tolist()
        self.workers = live_workers(client)
        self._workers_seen_at = time.monotonic()
        self.lake = manifest.row_order  # keys the workers' block and footer caches
        # Off only to measure the task path alone (benchmarks.step_timeline); tasks serve any share that
        # a server cannot.
        self.servers = (
            StepServers(client, self.spec, model, self.lake) if servers and servers_suit(client) else None
        )

    def close(self) -> None:
        """Release the workers' step servers (a later step starts them again)."""
        if self.servers is not None:
            self.servers.close()

    def _refresh_workers(self) -> None:
        """Look the workers up again every ``WORKERS_REFRESH_SECONDS`` (one scheduler call), so tasks are not
        pinned to a worker that left; a step whose worker leaves meanwhile is re-run by ``gather_within``."""
        if not self.workers or time.monotonic() - self._workers_seen_at >= WORKERS_REFRESH_SECONDS:
            self.workers = live_workers(self.client)
            self._workers_seen_at = time.monotonic()

    def _piece(self, index: int, lo: int, hi: int, role: str) -> tuple[str, int, int, int, str, PartCheck]:
        """A ``pieces_stats`` piece: rows [lo, hi) of block ``index`` in ``role``."""
        path, group, check = self._block(index)
        return path, group, lo, hi, role, check

    def _block(self, index: int) -> tuple[str, int, PartCheck]:
        """(path, row group, check) of block ``index``."""
        path, group = self.blocks[index][1:3]
        return path, group, self.checks[path]

    def _slices(self, start: int, stop: int, role: str) -> list[tuple[int, int, int, str]]:
        """(block index, first unit, end unit, role) pieces of global units (rows, or people) [start, stop),
        in order."""
        pieces = []
        index = bisect.bisect_right(self.starts, start) - 1
        while start < stop:
            block_start, block_stop = self.starts[index], self.starts[index + 1]
            end = min(stop, block_stop)
            pieces.append((index, start - block_start, end - block_start, role))
            start, index = end, index + 1
        return pieces

    def _prefetch_blocks(self, start: int, rows: int) -> dict[int, list[tuple[str, int, PartCheck]]]:
        """The blocks of rows [start, start + rows) by worker: the next step's, since the plans' spans
        follow one another, at most ``PREFETCH_BLOCKS`` per worker, so the 4-block cache keeps this
        step's blocks. Each worker decodes its share after its part of this step, while it would
        otherwise wait for the slowest worker and the round trip (decoding is the critical
        path). Statistics are unchanged: the same blocks are decoded either way."""
        stop = min(start + rows, self.starts[-1])
        if start >= stop or not self.workers:
            return {}
        first = bisect.bisect_right(self.starts, start) - 1
        last = bisect.bisect_right(self.starts, stop - 1) - 1
        by_worker: dict[int, list[tuple[str, int, PartCheck]]] = {}
        for index in range(first, last + 1):
            blocks = by_worker.setdefault(index % len(self.workers), [])
            if len(blocks) < PREFETCH_BLOCKS:
                blocks.append(self._block(index))
        return by_worker

    def _warm(self, worker: int, blocks: list[tuple[str, int, PartCheck]]) -> None:
        """The prefetch of a worker with no piece of this step, by its server, or by a low-priority task
        (the others decode theirs at the end of their share of the step, with no call of its own: on 2
        cores the scheduler's and the client's cost per task was a third of the step's time)."""
        from distributed import fire_and_forget

        if self.servers is not None and self.servers.warm(self.workers[worker], blocks):
            return
        fire_and_forget(
            self.client.submit(
                warm_blocks,
                blocks,
                self.spec,
                self.lake,
                workers=[self.workers[worker]],
                allow_other_workers=True,
                priority=-1,
                pure=False,
            )
        )

    def compute(self, span: StepSpan, request: StatsRequest) -> BatchStats:
        pieces = []
        if span.stat_rows is not None and request.thresholds is not None:
            pieces += self._slices(*span.stat_rows, "stat")
        pieces += self._slices(*span.gradient_rows, "gradient")
        # One call (or task) per worker per step, not per piece: the cost per call would otherwise grow
        # with the row groups a step touches. Each returns its pieces' statistics one by one, so the
        # merge below runs in piece order exactly as before (bit-for-bit).
        self._refresh_workers()
        by_worker: dict[int, list[int]] = {}
        for position, (i, *_rest) in enumerate(pieces):
            by_worker.setdefault(i % max(len(self.workers), 1), []).append(position)
        tasks = [[self._piece(*pieces[p]) for p in positions] for positions in by_worker.values()]
        prefetch = self._prefetch_blocks(span.gradient_rows[1], span.rows) if self.prefetch else {}

        def submit(task: int, worker: str | None, warm: list | None = None) -> Any:
            return self.client.submit(
                pieces_stats,
                tasks[task],
                self.spec,
                self.model,
                request,
                self.lake,
                warm,
                workers=None if worker is None else [worker],
                allow_other_workers=worker is not None,
                pure=False,
            )

        # No worker yet (an adaptive cluster scales up on pending tasks): unpinned, gather_within waits.
        pinned = [self.workers[worker] if self.workers else None for worker in by_worker]
        warm = [prefetch.get(index) for index in by_worker]
        # Each worker's server answers its share in one direct call; a share without one (or whose call
        # fails, below) runs as a task, which computes the same statistics.
        calls = [
            self.servers.stats(worker, tasks[task], request, warm[task]) if self.servers else None
            for task, worker in enumerate(pinned)
        ]
        futures = {
            task: submit(task, pinned[task], warm[task]) for task, call in enumerate(calls) if call is None
        }
        for worker, blocks in prefetch.items():
            if worker not in by_worker:
                self._warm(worker, blocks)
        gathered: list[Any] = [None] * len(tasks)
        for task, call in enumerate(calls):
            if call is not None:
                gathered[task] = self.servers.result(pinned[task], call)
                if gathered[task] is StepServers.FAILED:
                    futures[task] = submit(task, None)
                    self._workers_seen_at = -math.inf  # look the workers up again at the next step
        if futures:
            order = list(futures)
            values = gather_within(
                self.client,
                [futures[task] for task in order],
                [pinned[task] if calls[task] is None else None for task in order],
                lambda position: submit(order[position], None),
                self.worker_timeout,
            )
            for task, value in zip(order, values, strict=True):
                gathered[task] = value
        parts: list[BatchStats | None] = [None] * len(pieces)
        for positions, results in zip(by_worker.values(), gathered, strict=True):
            for position, part in zip(positions, results, strict=True):
                parts[position] = part
        stats = BatchStats.zeros(len(request.clip_norms), request.params.size)
        for part in parts:
            stats = stats + part
        return stats
