"""Streaming mode for small batches, and the choice between it and scatter-gather.

With small batches a Dask round trip per step (≈ 19 ms through futures on a 2-core machine) costs far more
than the step's arithmetic, so the sequential updates run in the coordinator process — which keeps
the model, the noise key and the accountant — while ``decode_threads`` reader threads of the same
process read and decode the upcoming blocks (row groups) of the shuffled lake ahead of it. At most
``prefetch_blocks`` decoded blocks are in flight (the memory budget). The blocks arrive in file order,
so the statistics are the same fold as in memory: the result is bit-for-bit identical to the
in-memory executor and to scatter-gather.

The blocks are decoded where they are used: decoded on the workers, each block crossed
worker → scheduler → client as pickled arrays (16.8 MB per 65,536 rows × 64 float32 features), and
streaming DP-λCGD ran at 0.19 of a plain decode on 2 cores; read by the coordinator's threads (pyarrow
releases the GIL while it decodes) it runs at 0.61 (``python -m benchmarks.data_plane``). The
coordinator reads only the compressed Parquet, less than the decoded blocks it would otherwise receive;
give the flow's process cores for its reader threads. The workers still run the scatter-gather mode and the shuffle.

``choose_mode`` compares the measured round trip of an empty call to a worker's step server (scatter-gather's
path, ``dpstream.pipelines.execution.step_servers``; a no-op task where none can start) with the measured cost of one
step's statistics on the coordinator; scatter-gather wins when a step's work is much larger than a
round trip (DP-AMBSSGD, SRGD with √N batches), streaming otherwise (DP-SGD with batches of ~1,000).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from dpstream.algorithms.base import Plan
from dpstream.models import Model, StatsRequest
from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT
from dpstream.pipelines.execution.executor import with_user_offset
from dpstream.pipelines.execution.step_servers import StepServers, servers_suit
from dpstream.pipelines.lake.blocks import PartCheck, read_block
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.manifest import Manifest
from dpstream.pipelines.waiting import gather_within, live_workers

__all__ = ["prefetched_blocks", "choose_mode", "load_block", "DECODE_THREADS"]

# Reader threads of the coordinator in streaming mode: two kept the sequential updates fed on 2 cores;
# more help only where the flow's process has more cores.
DECODE_THREADS = 2


def load_block(
    path: str, group: int, spec: LakeSpec, lake: str = "", check: PartCheck | None = None
) -> tuple[np.ndarray, ...]:
    fs, _ = spec.filesystem()
    return read_block(fs, path, spec, group, lake, check)


def prefetched_blocks(
    client: Any,
    manifest: Manifest,
    storage_options: dict[str, Any] | None = None,
    prefetch_blocks: int = 4,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    decode_threads: int = DECODE_THREADS,
) -> Iterator[tuple[np.ndarray, ...]]:
    """The shuffled lake's blocks (row groups) in order, decoded by ``decode_threads`` threads of this
    process, ``prefetch_blocks`` ahead (as ``lake_blocks``: with a user-level shuffle's lake-wide person
    codes); each part checked against its manifest entry when it is first opened. ``client`` and
    ``worker_timeout`` are kept for the executor's signature: streaming needs no worker."""
    del client, worker_timeout
    if prefetch_blocks < 1:
        raise ValueError(f"prefetch_blocks must be a positive integer, got {prefetch_blocks!r}")
    if decode_threads < 1:
        raise ValueError(f"decode_threads must be a positive integer, got {decode_threads!r}")
    spec = manifest.spec(storage_options)
    lake = manifest.row_order  # keys the footer cache
    checks = manifest.part_checks(storage_options)
    jobs = [(path, group, checks[path]) for _, path, group, _ in manifest.blocks(storage_options)]
    offsets = manifest.block_user_offsets()
    with ThreadPoolExecutor(decode_threads, thread_name_prefix="dpstream-decode") as pool:

        def submit(job: int) -> Future:
            path, group, check = jobs[job]
            return pool.submit(load_block, path, group, spec, lake, check)

        pending: deque[Future] = deque(submit(job) for job in range(min(prefetch_blocks, len(jobs))))
        try:
            for index in range(len(jobs)):
                block = pending.popleft().result()
                following = index + prefetch_blocks
                if following < len(jobs):
                    pending.append(submit(following))
                yield with_user_offset(block, offsets[index])
        finally:
            for future in pending:  # a stopped run (an error, Ctrl-C) does not wait for blocks it drops
                future.cancel()


def _noop() -> None:
    return None


def choose_mode(
    client: Any,
    plan: Plan,
    model: Model,
    request: StatsRequest,
    num_features: int,
    samples: int = 5,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
) -> str:
    """``"scatter"`` when a step's statistics cost at least 3 round trips, else ``"streaming"``.

    The probe block has the lake's ``num_features`` columns: ``plan.num_params`` counts the model's parameters,
    which differ from the features for the KAN (m·d·p) and for a model with an intercept."""
    round_trip = _server_round_trip(client, model, samples)
    if round_trip is None:  # no step server could start: scatter's steps would run as tasks
        latencies = []
        for _ in range(samples):
            start = time.perf_counter()
            gather_within(client, [client.submit(_noop, pure=False)], worker_timeout=worker_timeout)
            latencies.append(time.perf_counter() - start)
        round_trip = float(np.median(latencies))
    rows = min(plan.rows_per_step, 65_536)
    X = np.random.default_rng(0).standard_normal((rows, num_features))
    model.block_stats(X, np.zeros(rows), request)  # warm: a first call pays one-off imports and allocations
    start = time.perf_counter()
    model.block_stats(X, np.zeros(rows), request)
    step_seconds = (time.perf_counter() - start) * plan.rows_per_step / rows
    return "scatter" if step_seconds >= 3 * round_trip else "streaming"


def _server_round_trip(client: Any, model: Model, samples: int) -> float | None:
    """The round trip of a call to a worker's step server (scatter-gather's path), or None, also where no
    worker is up yet (the probe task then brings an adaptive cluster's first worker)."""
    workers = live_workers(client)
    if not workers or not servers_suit(client):
        return None
    servers = StepServers(client, None, model, "")
    try:
        return servers.round_trip_seconds(workers[0], samples)
    finally:
        servers.close()
