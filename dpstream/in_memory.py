"""The in-memory executor: the rows a process holds, read once and in order.

``InMemoryExecutor`` reads an iterator of (X, y) blocks (``RowStream``), or of (X, y, user codes)
blocks with every user's rows in one block (``UserStream``), so a Dask array or a generator of blocks
streams through without being materialised. The coordinator (``dpstream.coordinator``) drives it as it
drives the Dask executor of ``pipelines``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from dpstream.algorithms.base import StepSpan
from dpstream.models import BatchStats, Model, StatsRequest

__all__ = ["InMemoryExecutor", "RowStream", "UserStream"]


class RowStream:
    """Consecutive row ranges from an iterator of (X, y) blocks, read once and in order."""

    def __init__(self, blocks: Iterable[tuple[Any, Any]]):
        self._blocks: Iterator[tuple[Any, Any]] = iter(blocks)
        self._X: np.ndarray | None = None
        self._y: np.ndarray | None = None
        self._block_start = 0  # global index of the first row of the current block
        self._position = 0  # global index of the next unread row
        self._last_range: tuple[int, int] | None = None  # kept for one re-take (holds one step's rows)
        self._last_views: list[tuple[np.ndarray, np.ndarray]] = []

    def _next_block(self) -> bool:
        try:
            X, y = next(self._blocks)
        except StopIteration:
            return False
        if self._X is not None:
            self._block_start += self._X.shape[0]
        self._X, self._y = np.asarray(X), np.asarray(y)
        if self._X.ndim != 2 or self._y.shape != (self._X.shape[0],):
            raise ValueError(
                f"each block must be X of shape (rows, features) and y of shape (rows,), got {self._X.shape} and {self._y.shape}"
            )
        return True

    def take(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield views covering rows [start, stop); rows before ``start`` are skipped (never reread),
        except the range taken last, which may be taken again (a step's follow-up request)."""
        if (start, stop) == self._last_range:
            yield from self._last_views
            return
        if start < self._position:
            raise ValueError(f"rows {start}..{stop} were already consumed: the stream is single-pass")
        self._position = start
        views = []
        while self._position < stop:
            end_of_block = self._block_start + (0 if self._X is None else self._X.shape[0])
            if self._X is None or self._position >= end_of_block:
                if not self._next_block():
                    raise ValueError(
                        f"the data ended at row {self._position}, before row {stop} the plan needs"
                    )
                continue
            lo = self._position - self._block_start
            hi = min(stop, end_of_block) - self._block_start
            views.append((self._X[lo:hi], self._y[lo:hi]))
            yield views[-1]
            self._position = self._block_start + hi
        self._last_range, self._last_views = (start, stop), views


class UserStream:
    """Consecutive ranges of *users* from an iterator of (X, y, users) blocks: each row's user code, the
    codes ascending through the stream and every user's rows in one block (``dpstream.models.users.
    bound_contributions`` lays them out so). Under the user unit a plan's rows are users: span [a, b)
    is every row of users a..b−1. Read once and in order, like ``RowStream``."""

    def __init__(self, blocks: Iterable[tuple[Any, Any, Any]]):
        self._blocks = iter(blocks)
        self._block: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._last_user = -1  # the last user of every block read so far: none may continue later
        self._position = 0  # the next unread user
        self._last_range: tuple[int, int] | None = None
        self._last_views: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def _next_block(self) -> bool:
        try:
            X, y, users = next(self._blocks)
        except StopIteration:
            return False
        X, y, users = np.asarray(X), np.asarray(y), np.asarray(users, dtype=np.int64)
        if X.ndim != 2 or y.shape != (X.shape[0],) or users.shape != (X.shape[0],):
            raise ValueError(
                f"each block must be X (rows, features), y (rows,) and users (rows,), got {X.shape}, {y.shape} "
                f"and {users.shape}"
            )
        if users.size and (np.any(np.diff(users) < 0) or users[0] <= self._last_user):
            raise ValueError(
                "user codes must ascend through the stream, each user's rows in one block (user "
                f"{int(users[0])} follows user {self._last_user})"
            )
        self._last_user = int(users[-1]) if users.size else self._last_user
        self._block = (X, y, users)
        return True

    def take(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if (start, stop) == self._last_range:
            yield from self._last_views
            return
        if start < self._position:
            raise ValueError(f"users {start}..{stop} were already consumed: the stream is single-pass")
        self._position, views = start, []
        while self._position < stop:
            block = self._block
            if block is None or not block[2].size or self._position > block[2][-1]:
                if not self._next_block():
                    raise ValueError(
                        f"the data ended at user {self._position}, before user {stop} the plan needs"
                    )
                continue
            X, y, users = block
            lo, hi = np.searchsorted(users, [self._position, stop], side="left")
            if hi > lo:
                views.append((X[lo:hi], y[lo:hi], users[lo:hi]))
                yield views[-1]
            self._position = min(stop, int(users[-1]) + 1)
        self._last_range, self._last_views = (start, stop), views


class InMemoryExecutor:
    """Statistics of an iterator of (X, y) blocks, or of (X, y, users) blocks with ``by_user`` (the user
    unit: spans count users, and the model combines each user's rows, ``Model.block_stats(users=...)``)."""

    def __init__(self, model: Model, blocks: Iterable[tuple[Any, ...]], by_user: bool = False):
        self.model = model
        self.by_user = by_user
        self.stream = UserStream(blocks) if by_user else RowStream(blocks)

    def _pieces(self, span: tuple[int, int]) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        for piece in self.stream.take(*span):
            yield piece[0], piece[1], ({"users": piece[2]} if self.by_user else {})

    def compute(self, span: StepSpan, request: StatsRequest) -> BatchStats:
        stats = BatchStats.zeros(len(request.clip_norms), request.params.size)
        if span.stat_rows is not None and request.thresholds is not None:
            for X, y, users in self._pieces(span.stat_rows):
                stats = stats + self.model.block_stats(X, y, request, role="stat", **users)
        for X, y, users in self._pieces(span.gradient_rows):
            stats = stats + self.model.block_stats(X, y, request, role="gradient", **users)
        return stats
