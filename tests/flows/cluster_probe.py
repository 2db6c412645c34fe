"""A LocalCluster subclass the cluster-config tests name by import path; it records its instances so a
test can see that the run closed the cluster it started."""

from __future__ import annotations

from distributed import LocalCluster

INSTANCES: list[ProbeCluster] = []


class ProbeCluster(LocalCluster):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.adapted: dict | None = None
        self.closed = False
        INSTANCES.append(self)

    def adapt(self, **kwargs):
        self.adapted = kwargs
        return super().adapt(**kwargs)

    def close(self, *args, **kwargs):
        self.closed = True
        return super().close(*args, **kwargs)
