"""The Dask cluster a config's ``[cluster]`` section describes: its class checked when the config loads,
and the client a run trains on or prepares its lake with (``ClusterConfig.prepare_on``)."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from dpstream.flows.config.cluster import ClusterConfig
from dpstream.flows.config.file import ConfigError
from dpstream.pipelines.execution.cluster import check_cluster_class, cluster_client
from dpstream.pipelines.execution.kube import check_worker_image

__all__ = ["check_cluster", "run_client", "preparation_client"]


def check_cluster(section: ClusterConfig) -> None:
    """Refuse (``ConfigError``, under the key ``cluster``) a cluster class that cannot be imported, without
    importing it, and a dask-kubernetes cluster left to run Dask's own image (``check_worker_image``)."""
    if section.cluster_class is None:
        return
    try:
        check_cluster_class(section.cluster_class)
        if section.cluster_class.startswith("dask_kubernetes."):
            check_worker_image(section.kwargs or {})
    except ValueError as error:
        raise ConfigError(f"cluster: {error}") from None


def run_client(section: ClusterConfig) -> AbstractContextManager[Any]:
    """The run's client and cluster, as a context manager (``dpstream.pipelines.execution.cluster.cluster_client``):
    a cluster it starts is closed when the block ends."""
    return cluster_client(
        section.address,
        cluster_class=section.cluster_class,
        cluster_kwargs=section.kwargs,
        adapt=section.adapt.model_dump() if section.adapt else None,
        n_workers=section.n_workers,
        memory_limit=section.memory_limit,
    )


def preparation_client(section: ClusterConfig) -> AbstractContextManager[Any]:
    """A context manager giving the client validation and the shuffle run on: the cluster's
    (``run_client``) when they run on the workers, else None (they run in this process)."""
    return run_client(section) if section.prepares_on_workers else contextlib.nullcontext(None)
