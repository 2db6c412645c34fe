"""The distributed step executor: the coordinator's ``Executor`` on a Dask cluster (scatter-gather).

For step t the coordinator sends the algorithm's request; the executor cuts the step's row span into
slices at file boundaries of the shuffled lake, maps ``slice_stats`` over them on the workers (one
round trip; the parameters travel with the request) and merges the results in slice order, starting
from zero statistics — the same fold the in-memory executor performs over the same files, so the
result is bit-for-bit identical whatever the number of workers.

Each file is pinned to one worker (file index modulo the workers present), whose process keeps the
last two decoded files in a small cache: consecutive steps read consecutive slices of the same file,
so each file is read and decoded once. A worker holds at most two files plus the task's slice.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from dpstream.algorithms.base import StepSpan
from dpstream.models import GLM, BatchStats, StatsRequest
from pipelines.lake import LakeSpec, read_rows
from pipelines.shuffle import Manifest

__all__ = ["DaskExecutor", "slice_stats", "lake_blocks"]

_CACHE: "OrderedDict[str, tuple[np.ndarray, np.ndarray]]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_FILES = 2


def _file_arrays(path: str, rows: int, spec: LakeSpec) -> tuple[np.ndarray, np.ndarray]:
    with _CACHE_LOCK:
        if path in _CACHE:
            _CACHE.move_to_end(path)
            return _CACHE[path]
    fs, _ = spec.filesystem()
    arrays = read_rows(fs, path, spec, 0, rows)
    with _CACHE_LOCK:
        _CACHE[path] = arrays
        while len(_CACHE) > _CACHE_FILES:
            _CACHE.popitem(last=False)
    return arrays


def slice_stats(path: str, rows: int, spec: LakeSpec, start: int, stop: int, model: GLM, request: StatsRequest, role: str) -> BatchStats:
    """Statistics of rows [start, stop) of one file of the shuffled lake (runs on a worker)."""
    X, y = _file_arrays(path, rows, spec)
    return model.block_stats(X[start:stop], y[start:stop], request, role=role)


def lake_blocks(manifest: Manifest, storage_options: dict[str, Any] | None = None):
    """The shuffled lake's files in training order as (X, y) blocks, for the in-memory executor."""
    spec = manifest.spec(storage_options)
    fs, _ = spec.filesystem()
    for path, (_, rows) in zip(manifest.paths(storage_options), manifest.files):
        yield read_rows(fs, path, spec, 0, rows)


class DaskExecutor:
    def __init__(self, client: Any, manifest: Manifest, model: GLM, storage_options: dict[str, Any] | None = None):
        self.client = client
        self.manifest = manifest
        self.model = model
        self.spec = manifest.spec(storage_options)
        self.paths = manifest.paths(storage_options)
        self.rows = [rows for _, rows in manifest.files]
        self.starts = np.concatenate([[0], np.cumsum(self.rows)]).tolist()
        self.workers = sorted(client.scheduler_info()["workers"])

    def _slices(self, start: int, stop: int, role: str) -> list[tuple[int, int, int, str]]:
        """(file index, first row, end row) pieces of global rows [start, stop), in order."""
        pieces = []
        index = bisect.bisect_right(self.starts, start) - 1
        while start < stop:
            file_start, file_stop = self.starts[index], self.starts[index + 1]
            end = min(stop, file_stop)
            pieces.append((index, start - file_start, end - file_start, role))
            start, index = end, index + 1
        return pieces

    def compute(self, span: StepSpan, request: StatsRequest) -> BatchStats:
        pieces = []
        if span.stat_rows is not None:
            pieces += self._slices(*span.stat_rows, "stat")
        pieces += self._slices(*span.gradient_rows, "gradient")
        futures = [
            self.client.submit(
                slice_stats, self.paths[i], self.rows[i], self.spec, lo, hi, self.model, request, role,
                workers=[self.workers[i % len(self.workers)]], allow_other_workers=True, pure=False,
            )
            for i, lo, hi, role in pieces
        ]
        stats = BatchStats.zeros(len(request.clip_norms), request.params.size)
        for part in self.client.gather(futures):
            stats = stats + part
        return stats
