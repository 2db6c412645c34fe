"""Waiting on a Dask cluster without hanging: tasks re-pinned when their worker is gone, a bounded wait
when no worker is there at all.

The executors pin a task to a worker (``workers=[address], allow_other_workers=True``) so that block
caches stay warm. When that worker dies and its nanny restarts it under a new address, the scheduler
leaves such a task in the ``no-worker`` state even after a new worker joins (distributed 2026.8
re-schedules ``no-worker`` tasks only onto workers that meet their restrictions, loose or not): with one
worker the run would wait forever. ``gather_within`` therefore polls: a pending task whose pinned
worker has left is resubmitted without restriction (the same pure function of the same inputs, so the
statistics are identical), and when the cluster has had no worker at all for ``worker_timeout``
seconds it raises ``NoWorkersError`` naming the scheduler and the fix.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from distributed import wait

from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT

__all__ = [
    "NoWorkersError",
    "gather_within",
    "completed_within",
    "live_workers",
    "wait_for_workers",
    "report_each",
]

POLL_SECONDS = 1.0


class NoWorkersError(RuntimeError):
    """The cluster had no worker for longer than the configured timeout."""


def report_each(futures: list[Any], on_done: Callable[[], None] | None) -> list[Any]:
    """``futures``, each calling ``on_done()`` (a progress bar's step) once it has finished without error,
    from the client's thread; nothing with ``on_done`` None."""
    if on_done is not None:
        for future in futures:
            future.add_done_callback(lambda done: done.status == "finished" and on_done())
    return futures


def live_workers(client: Any) -> list[str]:
    """The addresses of the workers connected to the scheduler now, sorted. Asked of the scheduler itself:
    ``client.scheduler_info()`` returns the client's shared copy, which its periodic refresh (workers
    left out) can overwrite between the fetch and the read."""
    return sorted(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def _no_workers(client: Any, seconds: float) -> NoWorkersError:
    address = getattr(client.scheduler, "address", None) or "the scheduler"
    return NoWorkersError(
        f"no Dask worker was connected to {address} for {seconds:g} s: start workers for it (`dask worker "
        f"{address}`), check that they can reach it, or raise cluster.worker_timeout"
    )


def wait_for_workers(client: Any, worker_timeout: float = DEFAULT_WORKER_TIMEOUT) -> list[str]:
    """The live workers, waiting up to ``worker_timeout`` seconds for a first one (``NoWorkersError``)."""
    deadline = time.monotonic() + worker_timeout
    while not (workers := live_workers(client)):
        if time.monotonic() >= deadline:
            raise _no_workers(client, worker_timeout)
        time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    return workers


def gather_within(
    client: Any,
    futures: list[Any],
    pinned: list[str | None] | None = None,
    resubmit: Callable[[int], Any] | None = None,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
) -> list[Any]:
    """The results of ``futures`` in order (a task's exception is raised as it is). ``pinned[i]`` is the
    worker future i was pinned to (or None); while it waits, a pending future whose pinned worker has left
    is replaced by ``resubmit(i)`` (unpinned), and ``NoWorkersError`` is raised once the cluster has had no
    worker for ``worker_timeout`` seconds."""
    futures = list(futures)
    pinned = list(pinned) if pinned is not None else [None] * len(futures)
    results: list[Any] = [_MISSING] * len(futures)
    watch = _Watch(client, worker_timeout)
    while _MISSING in results:
        waiting = [i for i, result in enumerate(results) if result is _MISSING]
        if watch.wait([futures[i] for i in waiting], "ALL_COMPLETED"):
            for index in waiting:
                try:
                    results[index] = futures[index].result(timeout=POLL_SECONDS)
                except TimeoutError:
                    if futures[index].status == "error":  # the task's own (an object store's timeout)
                        raise
                    # else its result was lost with its worker as it was fetched: it runs again
            continue
        alive = watch.alive
        for index in waiting:
            future = futures[index]
            if not future.done() and pinned[index] is not None and pinned[index] not in alive:
                future.cancel()
                futures[index], pinned[index] = resubmit(index), None
    return results


_MISSING = object()


def completed_within(
    client: Any, futures: list[Any], worker_timeout: float = DEFAULT_WORKER_TIMEOUT
) -> Iterator[tuple[int, Any]]:
    """(index, result) of each future as it finishes (a task's exception is raised as it is);
    ``NoWorkersError`` once the cluster has had no worker for ``worker_timeout`` seconds."""
    pending = dict(enumerate(futures))
    watch = _Watch(client, worker_timeout)
    while pending:
        if not watch.wait(list(pending.values()), "FIRST_COMPLETED"):
            continue
        for index in [i for i, future in pending.items() if future.done()]:
            try:
                result = pending[index].result(timeout=POLL_SECONDS)
            except TimeoutError:
                if pending[index].status == "error":  # the task's own (an object store's timeout)
                    raise
                continue  # lost with its worker as it was fetched: it runs again
            del pending[index]
            yield index, result


class _Watch:
    """Polls ``distributed.wait`` and the scheduler's workers; raises ``NoWorkersError`` after
    ``worker_timeout`` seconds without any worker."""

    def __init__(self, client: Any, worker_timeout: float):
        self.client, self.worker_timeout = client, worker_timeout
        self.alive: set[str] = set()
        self._without_since: float | None = None

    def wait(self, futures: list[Any], return_when: str) -> bool:
        """True once ``return_when`` holds; False after one poll interval (``alive`` refreshed)."""
        try:
            wait(futures, timeout=POLL_SECONDS, return_when=return_when)
            return True
        except TimeoutError:
            pass
        self.alive = set(live_workers(self.client))
        if self.alive:
            self._without_since = None
        else:
            self._without_since = self._without_since or time.monotonic()
            if time.monotonic() - self._without_since >= self.worker_timeout:
                raise _no_workers(self.client, self.worker_timeout) from None
        return False
