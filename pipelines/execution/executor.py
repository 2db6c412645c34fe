"""The distributed step executor: the coordinator's ``Executor`` on a Dask cluster (scatter-gather).

The unit of work is a *block*: one Parquet row group of the shuffled lake (65,536 rows, written by
shuffle-once and listed in the manifest). For step t the coordinator sends the algorithm's request;
the executor cuts the step's row span at block boundaries, sends each worker one call with its pieces
(``dpstream.pipelines.execution.worker_stats.pieces_stats``, run by the worker's step server,
``dpstream.pipelines.execution.step_servers``, or as a task where it has none; one round trip per
worker whatever the number of row groups; the parameters travel with the request) and merges the
results in piece order, starting from zero statistics — the same fold the in-memory executor performs
over the same blocks, so the result is bit-for-bit identical whatever the number of workers.

Each block is pinned to one worker (block index modulo the workers present, so neighbouring blocks of
one step land on different workers), whose process keeps the last 4 decoded blocks and the parsed
footers of its last 8 files (``dpstream.pipelines.lake.blocks.read_block``): consecutive steps read consecutive slices
of the same blocks, so each block is read and decoded once, and a worker never holds more than a few
blocks. After its share of a step, each worker decodes its blocks of the next step (the coordinator's
``_prefetch_blocks``) on a background thread (``worker_stats.prefetch_in_background``).

Blocks are read only from the generation the manifest names, and each part is checked against its
size and content identity when a worker first opens it (``dpstream.pipelines.lake.blocks.read_block``).
The workers are looked up every few seconds: a share whose worker left is run as a task on another
(``dpstream.pipelines.waiting``), and a cluster left without workers for ``worker_timeout`` seconds stops the run
instead of hanging it.
"""

from __future__ import annotations

import bisect
import math
import time
from typing import Any

import numpy as np
from distributed import fire_and_forget

from dpstream.algorithms.base import StepSpan
from dpstream.models import BatchStats, Model, StatsRequest
from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT
from dpstream.pipelines.execution.step_servers import StepServers, servers_suit
from dpstream.pipelines.execution.worker_stats import pieces_stats, warm_blocks
from dpstream.pipelines.lake.blocks import PartCheck, read_block
from dpstream.pipelines.shuffle.manifest import Manifest
from dpstream.pipelines.waiting import gather_within, live_workers

__all__ = ["DaskExecutor", "lake_blocks", "with_user_offset"]

PREFETCH_BLOCKS = 2  # per worker and step: half of its cache (``worker_stats``)
WORKERS_REFRESH_SECONDS = 5.0


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
