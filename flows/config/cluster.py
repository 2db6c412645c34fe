"""The ``[cluster]`` section of a pipeline config: where the run's Dask workers come from, and whether
validation and the shuffle run on them (``ClusterConfig.prepare_on``). The assembly checks the cluster
class and builds the cluster (``dpstream.flows.assembly.cluster``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT

__all__ = ["ClusterConfig", "AdaptConfig"]


class AdaptConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    minimum: int = Field(default=0, ge=0)
    maximum: int = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> AdaptConfig:
        if self.minimum > self.maximum:
            raise ValueError(f"adapt.minimum={self.minimum} exceeds adapt.maximum={self.maximum}")
        return self


class ClusterConfig(BaseModel):
    """Where the run's Dask workers come from, in the prefect-dask convention: a LocalCluster of
    ``n_workers`` (default), a running scheduler at ``address``, or the cluster manager ``class`` (an
    import path, e.g. "dask_kubernetes.operator.KubeCluster") built with ``kwargs`` and scaled by
    ``adapt``; a cluster the run starts is closed when it ends (``dpstream.flows.assembly.cluster.run_client``).

    ``prepare_on`` says where validation and the shuffle run: ``"workers"`` (one Dask task per file;
    the workers then read the source lake, every column of it, and write the shuffled lake) or
    ``"flow"`` (in the flow's process, one file after another: the workers read only the shuffled lake,
    which holds only the selected columns, as the two roles of ``infra/k8s`` intend). Left out, it is
    ``"workers"`` for the default LocalCluster (its workers are this user's processes on this machine)
    and ``"flow"`` for a scheduler ``address`` or a cluster ``class``.

    ``worker_timeout`` (seconds): how long a run waits while the cluster has no worker (at its start, or
    after its workers died) before it stops with an error naming the scheduler; a task whose worker died
    is run on another one meanwhile."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)
    address: str | None = None
    cluster_class: str | None = Field(default=None, alias="class")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    adapt: AdaptConfig | None = None
    n_workers: int = Field(default=2, gt=0)
    memory_limit: str = "2GiB"
    mode: Literal["auto", "scatter", "streaming"] = "auto"
    prepare_on: Literal["flow", "workers"] | None = None
    worker_timeout: float = Field(default=DEFAULT_WORKER_TIMEOUT, gt=0.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_source(self) -> ClusterConfig:
        given = self.model_fields_set
        if self.cluster_class is None:
            stray = sorted({"kwargs", "adapt"} & given)
            if stray:
                raise ValueError(
                    f"cluster.{stray[0]} needs cluster.class (the cluster manager it configures)"
                )
            return self
        if self.address is not None:
            raise ValueError("cluster.address and cluster.class both name the cluster; keep one")
        local = sorted({"n_workers", "memory_limit"} & given)
        if local:
            raise ValueError(
                f"cluster.{local[0]} sets up the default LocalCluster and is ignored with cluster.class; put the "
                "cluster manager's own settings in cluster.kwargs"
            )
        return self

    @property
    def prepares_on_workers(self) -> bool:
        """Whether validation and the shuffle run as Dask tasks (``prepare_on``, or its default)."""
        if self.prepare_on is not None:
            return self.prepare_on == "workers"
        return self.address is None and self.cluster_class is None
