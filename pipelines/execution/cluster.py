"""Cluster helpers: a LocalCluster by default, an existing scheduler by address, or any Dask cluster
manager by its import path (the prefect-dask convention: ``cluster_class`` + ``cluster_kwargs`` +
``adapt_kwargs``), e.g. ``dask_kubernetes.operator.KubeCluster``, ``coiled.Cluster``,
``dask_cloudprovider.aws.FargateCluster`` or ``dask_gateway.GatewayCluster``."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
from collections.abc import Iterator
from typing import Any

from distributed import Client

from dpstream.pipelines.execution.kube import is_kube_cluster, kube_cluster_kwargs

__all__ = ["connect", "cluster_client", "import_cluster_class", "check_cluster_class"]

# Dask's worker allocator setting is left as it is, measured in benchmarks/allocator.py: its
# MALLOC_TRIM_THRESHOLD_=65536 switches off glibc's dynamic mmap threshold, which made the NumPy GLM
# kernel's per-chunk temporaries ~3x slower; the Numba kernels (dpstream.models.glm_cpu) allocate once
# per call and run at the same speed either way. Raising the mmap threshold instead had moved the KAN's
# temporaries to 16-byte-aligned heap memory, and OpenBLAS's last bit depends on alignment: a worker's
# KAN stopped matching the in-memory fit bit-for-bit (tests/pipelines), which a retried step must.


def connect(
    address: str | None = None, *, n_workers: int = 2, memory_limit: str = "2GiB", **cluster_kwargs: Any
):
    """A ``distributed.Client``: attached to ``address`` (e.g. ``tcp://10.0.0.5:8786``) or to a new
    LocalCluster of ``n_workers`` single-threaded worker processes on loopback.

    Scripts that start a LocalCluster must guard their top-level code with
    ``if __name__ == "__main__":`` — workers are spawned and re-import the main module.
    """
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


def check_cluster_class(path: str) -> None:
    """Refuse a cluster class path that cannot be imported, without importing it (config validation)."""
    module, _, name = path.rpartition(".")
    if not module or not name:
        raise ValueError(
            f"cluster.class must be a dotted import path such as 'dask_kubernetes.operator.KubeCluster', got {path!r}"
        )
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        package = module.split(".")[0]
        raise ValueError(
            f"cluster.class {path!r}: module {module!r} is not installed in this environment; install the "
            f"package that provides it (e.g. `pip install {package.replace('_', '-')}`) or remove cluster.class "
            "to use a LocalCluster"
        )


def import_cluster_class(path: str) -> type:
    check_cluster_class(path)
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name, None)
    if not isinstance(cls, type):
        raise ValueError(f"cluster.class {path!r}: {module} has no class {name!r}")
    return cls


@contextlib.contextmanager
def cluster_client(
    address: str | None = None,
    *,
    cluster_class: str | None = None,
    cluster_kwargs: dict[str, Any] | None = None,
    adapt: dict[str, int] | None = None,
    n_workers: int = 2,
    memory_limit: str = "2GiB",
) -> Iterator[Any]:
    """A ``distributed.Client`` for one run; the cluster this started is closed when the block ends,
    however it ends (success, an exception, a cancelled or interrupted run), so no worker outlives the
    run. ``address`` attaches to a running scheduler (left running); ``cluster_class`` builds that
    cluster manager with ``cluster_kwargs`` and, with ``adapt`` ({minimum, maximum}), lets it scale;
    otherwise a LocalCluster of ``n_workers`` (``connect``). The work submitted to it waits at most
    ``cluster.worker_timeout`` seconds while it has no worker (``dpstream.pipelines.waiting``). A
    KubeCluster's pods are made to pass Pod Security ``restricted`` (``dpstream.pipelines.execution.kube``)."""
    if cluster_class is None:
        client = connect(address, n_workers=n_workers, memory_limit=memory_limit)
        try:
            yield client
        finally:
            client.close()
        return
    manager = import_cluster_class(cluster_class)
    kwargs = dict(cluster_kwargs or {})
    if is_kube_cluster(manager):
        # Pods the namespace's Pod Security "restricted" admits, as the dpstream-worker account (pipelines/execution/kube.py).
        kwargs = kube_cluster_kwargs(kwargs)
    cluster = manager(**kwargs)
    try:
        if adapt:
            cluster.adapt(**adapt)
        client = Client(cluster)
        try:
            logging.getLogger(__name__).info(
                "%s cluster; Dask dashboard at %s", cluster_class, client.dashboard_link
            )
            yield client
        finally:
            client.close()
    finally:
        cluster.close()
