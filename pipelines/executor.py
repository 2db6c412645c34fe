"""The distributed step executor: the coordinator's ``Executor`` on a Dask cluster (scatter-gather).

The unit of work is a *block*: one Parquet row group of the shuffled lake (65,536 rows, written by
shuffle-once and listed in the manifest). For step t the coordinator sends the algorithm's request;
the executor cuts the step's row span at block boundaries, sends each worker one task with its pieces
(``pieces_stats``; one round trip, one task per worker whatever the number of row groups; the
parameters travel with the request) and merges the results in piece order, starting from zero
statistics — the same fold the in-memory executor performs over the same blocks, so the result is
bit-for-bit identical whatever the number of workers.

Each block is pinned to one worker (block index modulo the workers present, so neighbouring blocks of
one step land on different workers), whose process keeps the last 4 decoded blocks and the parsed
footers of its last 8 files (``pipelines.lake.read_block``): consecutive steps read consecutive slices
of the same blocks, so each block is read and decoded once, and a worker never holds more than a few
blocks. While a step's slowest worker finishes, the others decode their blocks of the next step
(``_prefetch``).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from dpstream.algorithms.base import StepSpan
from dpstream.models import BatchStats, Model, StatsRequest
from pipelines.lake import LakeSpec, LruCache, read_block, read_row_group
from pipelines.shuffle import Manifest

__all__ = ["DaskExecutor", "slice_stats", "pieces_stats", "warm_blocks", "lake_blocks"]

# Per worker process, keyed by the shuffle's identity (``Manifest.row_order``) as well as the path: a
# long-lived worker must never serve a block of an earlier shuffle written at the same path.
_BLOCKS = LruCache(4)
PREFETCH_BLOCKS = 2  # per worker and step: half the cache


def _block_arrays(path: str, group: int, spec: LakeSpec, lake: str = "") -> tuple[np.ndarray, np.ndarray]:
    return _BLOCKS.get((lake, path, group), lambda: read_block(spec.filesystem()[0], path, spec, group, lake))


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
) -> BatchStats:
    """Statistics of rows [start, stop) of one block of the shuffled lake (runs on a worker); ``lake`` is
    the shuffle's identity (``Manifest.row_order``) that keys the worker's caches."""
    X, y = _block_arrays(path, group, spec, lake)
    return model.block_stats(X[start:stop], y[start:stop], request, role=role)


def warm_blocks(blocks: list[tuple[str, int]], spec: LakeSpec, lake: str = "") -> int:
    """Read and decode (path, row group) blocks into this worker's cache; returns how many (runs on a worker)."""
    for path, group in blocks:
        _block_arrays(path, group, spec, lake)
    return len(blocks)


def pieces_stats(
    pieces: list[tuple[str, int, int, int, str]],
    spec: LakeSpec,
    model: Model,
    request: StatsRequest,
    lake: str = "",
) -> list[BatchStats]:
    """``slice_stats`` for each (path, row group, first row, end row, role) piece, in the given order
    (one worker's share of a step, one task)."""
    return [
        slice_stats(path, group, spec, lo, hi, model, request, role, lake)
        for path, group, lo, hi, role in pieces
    ]


def lake_blocks(manifest: Manifest, storage_options: dict[str, Any] | None = None):
    """The shuffled lake's blocks (row groups) in training order as (X, y), for the in-memory executor."""
    spec = manifest.spec(storage_options)
    fs, _ = spec.filesystem()
    for _, path, group, _ in manifest.blocks(storage_options):
        yield read_row_group(fs, path, spec, group)


class DaskExecutor:
    def __init__(
        self,
        client: Any,
        manifest: Manifest,
        model: Model,
        storage_options: dict[str, Any] | None = None,
        prefetch: bool = True,
    ):
        self.client = client
        self.prefetch = prefetch  # off only to measure a bare step (benchmarks)
        self.manifest = manifest
        self.model = model
        self.spec = manifest.spec(storage_options)
        self.blocks = manifest.blocks(storage_options)
        self.starts = np.concatenate([[0], np.cumsum([rows for *_, rows in self.blocks])]).tolist()
        self.workers = sorted(client.scheduler_info()["workers"])
        self.lake = manifest.row_order  # keys the workers' block and footer caches

    def _slices(self, start: int, stop: int, role: str) -> list[tuple[int, int, int, str]]:
        """(block index, first row, end row, role) pieces of global rows [start, stop), in order."""
        pieces = []
        index = bisect.bisect_right(self.starts, start) - 1
        while start < stop:
            block_start, block_stop = self.starts[index], self.starts[index + 1]
            end = min(stop, block_stop)
            pieces.append((index, start - block_start, end - block_start, role))
            start, index = end, index + 1
        return pieces

    def _prefetch(self, start: int, rows: int) -> None:
        """Warm the workers' caches with the blocks of rows [start, start + rows): the next step's, since the
        plans' spans follow one another. A worker runs it, at low priority, after its share of this step,
        while it would otherwise wait for the slowest worker at the step's barrier (decoding is the
        critical path: issue 18). At most ``PREFETCH_BLOCKS`` per worker, so the 4-block cache keeps
        this step's blocks. Statistics are unchanged: the same blocks are decoded either way."""
        from distributed import fire_and_forget

        stop = min(start + rows, self.starts[-1])
        if start >= stop:
            return
        first = bisect.bisect_right(self.starts, start) - 1
        last = bisect.bisect_right(self.starts, stop - 1) - 1
        by_worker: dict[int, list[tuple[str, int]]] = {}
        for index in range(first, last + 1):
            blocks = by_worker.setdefault(index % len(self.workers), [])
            if len(blocks) < PREFETCH_BLOCKS:
                blocks.append(tuple(self.blocks[index][1:3]))
        for worker, blocks in by_worker.items():
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
        # One task per worker per step, not per piece: the scheduler's cost per task (~3 ms) would
        # otherwise grow with the row groups a step touches. Each task returns its pieces' statistics
        # one by one, so the merge below runs in piece order exactly as before (bit-for-bit).
        by_worker: dict[int, list[int]] = {}
        for position, (i, *_rest) in enumerate(pieces):
            by_worker.setdefault(i % len(self.workers), []).append(position)
        futures = {
            worker: self.client.submit(
                pieces_stats,
                [(*self.blocks[pieces[p][0]][1:3], *pieces[p][1:]) for p in positions],
                self.spec,
                self.model,
                request,
                self.lake,
                workers=[self.workers[worker]],
                allow_other_workers=True,
                pure=False,
            )
            for worker, positions in by_worker.items()
        }
        if self.prefetch:
            self._prefetch(span.gradient_rows[1], span.rows)
        parts: list[BatchStats | None] = [None] * len(pieces)
        for worker, results in zip(futures, self.client.gather(list(futures.values())), strict=True):
            for position, part in zip(by_worker[worker], results, strict=True):
                parts[position] = part
        stats = BatchStats.zeros(len(request.clip_norms), request.params.size)
        for part in parts:
            stats = stats + part
        return stats
