"""Cluster helpers: a LocalCluster by default, or an existing scheduler by address."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["connect"]

# Not set here, measured in benchmarks/allocator.py: Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536,
# which switches off glibc's dynamic mmap threshold and makes the 31-norm NumPy kernel ~3x slower.
# Raising the mmap threshold (8 MiB) restores the speed, but then the kernels' temporaries come from the
# heap at 16-byte rather than page alignment, and OpenBLAS's results depend on alignment in the last
# bit: the KAN on a worker stopped matching the in-memory fit bit-for-bit (tests/pipelines), which a
# retried step must. Preallocated, aligned temporaries in the kernels would allow both.


def connect(
    address: str | None = None, *, n_workers: int = 2, memory_limit: str = "2GiB", **cluster_kwargs: Any
):
    """A ``distributed.Client``: attached to ``address`` (e.g. ``tcp://10.0.0.5:8786``) or to a new
    LocalCluster of ``n_workers`` single-threaded worker processes on loopback.

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
