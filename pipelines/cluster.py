"""Cluster helpers: a LocalCluster by default, or an existing scheduler by address."""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["connect", "WORKER_ENVIRON"]

# Set in each worker process before it starts (Dask's ``distributed.nanny.pre-spawn-environ``).
# Dask sets MALLOC_TRIM_THRESHOLD_=65536 there, and any malloc tunable in the environment switches
# off glibc's dynamic mmap threshold: every temporary over 128 KiB (the statistics kernel makes
# ~1 MiB ones per 4,096-row chunk) becomes a fresh mmap, or heap top that is trimmed and grown again,
# and its pages fault in again each chunk: the 31-norm kernel ran at 0.34–0.42 of a plain process.
# An 8 MiB mmap threshold serves those temporaries from the heap, and a 32 MiB trim threshold keeps
# them there (at most 32 MiB of free heap per worker; decoded blocks of tens of MiB are still mapped
# and returned to the OS when freed). Measured in benchmarks/allocator.py: same peak RSS, 1.0–1.4× plain.
WORKER_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": str(8 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(32 * 2**20)}


def worker_environ() -> dict[str, str]:
    """Dask's pre-spawn environment (BLAS thread counts) with ``WORKER_ENVIRON``'s malloc settings."""
    import dask

    return {**dask.config.get("distributed.nanny.pre-spawn-environ", default={}), **WORKER_ENVIRON}


def connect(
    address: str | None = None, *, n_workers: int = 2, memory_limit: str = "2GiB", **cluster_kwargs: Any
):
    """A ``distributed.Client``: attached to ``address`` (e.g. ``tcp://10.0.0.5:8786``) or to a new
    LocalCluster of ``n_workers`` single-threaded worker processes on loopback.

    Workers start with ``WORKER_ENVIRON`` (see there); for ``dask worker`` processes started by hand,
    export it in their environment, e.g. ``MALLOC_MMAP_THRESHOLD_=8388608 MALLOC_TRIM_THRESHOLD_=33554432 dask worker ...``.

    Scripts that start a LocalCluster must guard their top-level code with
    ``if __name__ == "__main__":`` — workers are spawned and re-import the main module.
    """
    from distributed import Client

    if address:
        return Client(address, timeout=60)
    # A client given no address starts its own LocalCluster and shuts it down on close().
    cluster_kwargs.setdefault("silence_logs", logging.WARNING)
    # A free port for the dashboard: the default 8787 warns on stderr whenever another cluster holds it.
    cluster_kwargs.setdefault("dashboard_address", "127.0.0.1:0")
    import dask

    # The nanny reads the pre-spawn environment when it is created (restarts reuse it), but a variable
    # already in this process's environment wins over the config, and every nanny copies its values
    # into this process (os.environ) before spawning: after any earlier LocalCluster here, Dask's
    # 64 KiB trim threshold would be back. So the values go into the environment too; malloc reads
    # them only at a process's start, so this process itself is unaffected.
    os.environ.update(WORKER_ENVIRON)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ()}):
        client = Client(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            host="127.0.0.1",
            **cluster_kwargs,
        )
    logging.getLogger(__name__).info(
        "LocalCluster of %d workers; Dask dashboard at %s", n_workers, client.dashboard_link
    )
    return client
