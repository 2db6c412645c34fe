"""Cluster helpers: a LocalCluster by default, or an existing scheduler by address."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["connect"]


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
