"""Step servers: a Dask actor per worker that answers a step's statistics in one direct call.

A scatter-gather step is one short computation per worker, repeated for every step of the plan. As a
Dask task it crosses the scheduler's state machine four times (the client submits, the scheduler
assigns, the worker reports, the client fetches), each hop behind a batched stream: an empty step on 2
workers took 12.7 ms with a task each, against 1.7 ms with a call to an actor each, on 2 cores
(``python -m benchmarks.step_timeline``). Over a plan's steps that was a third of the run.

A ``StepServer`` lives on one worker and holds what every step shares (the lake's spec, the model, the
shuffle's identity); a step sends it only its pieces and the request, and the call runs
``worker_stats.pieces_stats`` in the worker's process (same caches, same background prefetch).

Actors have no fault tolerance of their own, so ``StepServers`` never lets one decide a step's outcome:
a call whose worker has left, whose connection failed, or which raised for any reason is dropped, and
the executor runs that worker's share again as an ordinary task (``dpstream.pipelines.waiting``: re-pinned when
its worker is gone, a bounded wait when there is none). The statistics are a pure function of the
blocks and the request, so the step's result is identical bit for bit whichever path served it, and a
data error (a changed part, a corrupt block) is raised by that task as before. The servers are invisible
to Dask's task stream: the run's progress is the coordinator's (``flows.progress``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
from distributed import Actor

from dpstream.models import BatchStats, Model, StatsRequest
from dpstream.pipelines.execution.worker_stats import pieces_stats, prefetch_in_background
from dpstream.pipelines.lake.blocks import PartCheck
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.waiting import POLL_SECONDS, live_workers

__all__ = ["StepServer", "StepServers", "servers_suit"]

LOGGER = logging.getLogger(__name__)
CREATE_SECONDS = 30.0  # a server not running after this is given up for this worker; tasks serve it
FAILURES_ALLOWED = 3  # calls failed on one worker before its shares run as tasks for the rest of the run
_FAILED = object()


def servers_suit(client: Any) -> bool:
    """Whether step servers should serve this client's steps: not on a cluster this process scales
    adaptively (``cluster.adapt``), whose scheduler counts only tasks as load and cannot retire a worker
    holding an actor gracefully; its steps run as tasks. (An adaptive cluster managed elsewhere cannot be
    seen from here: there a retired worker's server fails its call, and tasks take over.)"""
    return getattr(getattr(client, "cluster", None), "_adaptive", None) is None


class StepServer:
    """The actor: a worker's server of step statistics for one run (runs on the worker)."""

    def __init__(self, spec: LakeSpec | None, model: Model, lake: str):
        self.spec, self.model, self.lake = spec, model, lake

    def stats(
        self,
        pieces: list[tuple[str, int, int, int, str, PartCheck | None]],
        request: StatsRequest,
        prefetch: list[tuple[str, int, PartCheck | None]] | None,
    ) -> list[BatchStats]:
        """``worker_stats.pieces_stats`` of this worker's pieces of a step, then its prefetch of ``prefetch``."""
        return pieces_stats(pieces, self.spec, self.model, request, self.lake, prefetch)

    def warm(self, blocks: list[tuple[str, int, PartCheck | None]]) -> None:
        """Decode ``blocks`` into this worker's cache on its background prefetch thread (the actor's own
        thread stays free for the next step's call); a failure is left to the step that reads them."""
        prefetch_in_background(blocks, self.spec, self.lake)

    def ping(self) -> None:
        """Nothing: a call's round trip alone (``StepServers.round_trip_seconds``)."""


class StepServers:
    """The client's side: a ``StepServer`` per worker, started when a step first needs that worker and
    forgotten when a call to it fails (the caller then runs the share as a task)."""

    def __init__(self, client: Any, spec: LakeSpec | None, model: Model, lake: str):
        self.client, self.spec, self.model, self.lake = client, spec, model, lake
        self._futures: dict[str, Any] = {}  # worker address -> the actor's future (keeps it alive)
        self._servers: dict[str, Any] = {}  # worker address -> the actor
        self._refused: set[str] = set()  # workers served by tasks only: no server could start, or
        # FAILURES_ALLOWED calls to theirs failed (a server started again at every step would cost more)
        self._failures: dict[str, int] = {}

    def server(self, worker: str | None) -> Any | None:
        """The server on ``worker``, started if needed; None where none can run (tasks serve it)."""
        if worker is None or worker in self._refused:
            return None
        if worker not in self._servers:
            if worker not in live_workers(self.client):  # gone since the executor looked: no 30 s wait
                return None
            future = self.client.submit(
                StepServer, self.spec, self.model, self.lake, actor=True, workers=[worker], pure=False
            )
            try:
                future.result(timeout=CREATE_SECONDS)  # started; the proxy it returns binds to the
                # process's default client, which may be another cluster's: one bound to ours instead
                with self.client.as_current():
                    self._servers[worker] = Actor(StepServer, worker, future.key)
                self._futures[worker] = future
            except Exception as error:  # noqa: BLE001 - any failure: this worker is served by tasks
                future.cancel()
                self._refused.add(worker)
                LOGGER.debug("no step server on %s (%r): its shares run as tasks", worker, error)
                return None
        return self._servers[worker]

    def stats(
        self,
        worker: str | None,
        pieces: list[tuple[str, int, int, int, str, PartCheck | None]],
        request: StatsRequest,
        prefetch: list[tuple[str, int, PartCheck | None]] | None,
    ) -> Any | None:
        """The pending call for ``worker``'s pieces of a step (``result`` collects it), or None."""
        server = self.server(worker)
        if server is None:
            return None
        try:
            return server.stats(pieces, request, prefetch)
        except Exception as error:  # noqa: BLE001 - a proxy that cannot even send: tasks serve it
            self._failed(worker, error)
            return None

    def warm(self, worker: str, blocks: list[tuple[str, int, PartCheck | None]]) -> bool:
        """Ask ``worker``'s server to decode ``blocks`` without waiting; False if it has none."""
        server = self._servers.get(worker)
        if server is None:
            return False
        try:
            server.warm(blocks)  # its result is never collected: a warm-up that fails costs nothing
        except Exception as error:  # noqa: BLE001 - e.g. "Worker holding Actor was lost": a task warms
            self._failed(worker, error)
            return False
        return True

    def result(self, worker: str, call: Any) -> Any:
        """The value of ``call`` on ``worker``, or ``StepServers.FAILED`` when the worker left, the
        connection failed, or the call raised (the server is forgotten; the caller runs a task, which
        raises a genuine error itself)."""
        while True:
            try:
                return call.result(timeout=POLL_SECONDS)
            except TimeoutError as raised:
                if call.done():  # the call's own TimeoutError (an object store's read timeout, say)
                    error: BaseException = raised
                elif self._alive(worker):
                    continue
                else:
                    error = TimeoutError(f"{worker} left the cluster, or its server did")
            except Exception as raised:  # noqa: BLE001 - decided by the task that runs the share again
                error = raised
            self._failed(worker, error)
            return _FAILED

    FAILED = _FAILED

    def round_trip_seconds(self, worker: str | None, samples: int) -> float | None:
        """The median seconds of ``samples`` empty calls to ``worker``'s server (what a step pays on top of
        its work), or None where it has none."""
        server = self.server(worker)
        if server is None:
            return None
        seconds = []
        try:
            for _ in range(samples):
                start = time.perf_counter()
                server.ping().result(timeout=CREATE_SECONDS)
                seconds.append(time.perf_counter() - start)
        except Exception as error:  # noqa: BLE001 - the caller measures a task instead
            self._failed(worker, error)
            return None
        return float(np.median(seconds))

    def _alive(self, worker: str) -> bool:
        """Whether ``worker`` and its server are still there: a server whose key the scheduler lost (its
        worker restarted) would never answer a call, whose proxy only reports a closed connection."""
        future = self._futures.get(worker)
        return worker in live_workers(self.client) and (future is None or future.status == "finished")

    def _failed(self, worker: str, error: BaseException) -> None:
        """A call to ``worker``'s server failed: forget the server; after ``FAILURES_ALLOWED``, the worker's."""
        LOGGER.debug("step server on %s failed (%r): its share runs as a task", worker, error)
        self.forget(worker)
        self._failures[worker] = self._failures.get(worker, 0) + 1
        if self._failures[worker] >= FAILURES_ALLOWED:
            self._refused.add(worker)

    def forget(self, worker: str) -> None:
        """Drop ``worker``'s server: its actor goes once no future holds its key. The proxy holds one of its
        own (``distributed.Actor``), which it would release only when garbage-collected (it sits in a
        reference cycle), and a worker holding an actor cannot be retired gracefully: both are released."""
        server = self._servers.pop(worker, None)
        for future in (self._futures.pop(worker, None), getattr(server, "_future", None)):
            if future is not None:
                try:
                    future.release()  # twice is harmless: the second does nothing
                except Exception:  # noqa: BLE001 - a closed client: nothing is left to release
                    pass

    def close(self) -> None:
        """Release every server (never raises: it runs after a run's own error, too)."""
        for worker in list(self._servers):
            self.forget(worker)
