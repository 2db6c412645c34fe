"""Dask clusters on Kubernetes that the ``dpstream`` namespace admits.

The namespace enforces Pod Security Standards ``restricted``
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, infra/k8s/namespace.yaml).
``KubeCluster(**kwargs)`` renders its DaskCluster with dask-kubernetes' ``make_cluster_spec``, whose pods
set no securityContext and run as the namespace's ``default`` service account with an API token
mounted: the API server refuses to create them there, and the operator retries forever.
``kube_cluster_kwargs`` renders the same spec from the same arguments and defaults, hardens it
(``restricted_cluster_spec``) and hands it to KubeCluster as ``custom_cluster_spec``;
``dpstream.pipelines.execution.cluster.cluster_client`` applies it to every KubeCluster a ``[cluster] class``
names. The pods run the dpstream worker image (infra/docker/Dockerfile, target ``worker``) as its user,
under the ``dpstream-worker`` service account, which may only read the shuffled lake and gets no token
(infra/k8s/serviceaccounts.yaml). Left without an ``image``, KubeCluster would run Dask's own image,
which has no dpstream: ``check_worker_image`` refuses that when the config loads.
"""

from __future__ import annotations

import copy
import getpass
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

import dask.config
import yaml

__all__ = [
    "RUNTIME_UID",
    "WORKER_SERVICE_ACCOUNT",
    "restricted_pod_spec",
    "restricted_cluster_spec",
    "kube_cluster_kwargs",
    "is_kube_cluster",
    "check_worker_image",
]

RUNTIME_UID = 10001  # the images' user (infra/docker/Dockerfile: useradd --uid 10001)
NAMESPACE = "dpstream"  # infra/k8s's namespace, where the service account below exists
WORKER_SERVICE_ACCOUNT = "dpstream-worker"  # infra/k8s/serviceaccounts.yaml
_IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Dask's published images: dask-kubernetes' default ``kubernetes.image`` (ghcr.io/dask/dask:latest) and
# the older Docker Hub name. Neither has dpstream installed.
_DASK_IMAGES = ("ghcr.io/dask/dask", "docker.io/daskdev/dask", "daskdev/dask")

# make_cluster_spec's arguments and the dask config keys KubeCluster reads for those left out
# (dask_kubernetes/kubernetes.yaml). ``jupyter`` has none: KubeCluster's own default (False) always
# overrides its config key.
_SPEC_CONFIG_KEYS = {
    "name": "kubernetes.name",
    "image": "kubernetes.image",
    "n_workers": "kubernetes.count.start",
    "resources": "kubernetes.resources",
    "env": "kubernetes.env",
    "worker_command": "kubernetes.worker-command",
    "scheduler_service_type": "kubernetes.scheduler-service-type",
    "idle_timeout": "kubernetes.idle-timeout",
}


def _mapping(parent: dict, key: str) -> dict:
    """``parent[key]`` as a dict, created when missing or null (make_cluster_spec writes nulls)."""
    if not isinstance(parent.get(key), dict):
        parent[key] = {}
    return parent[key]


def restricted_pod_spec(
    pod_spec: Mapping[str, Any], *, service_account: str | None = WORKER_SERVICE_ACCOUNT
) -> dict[str, Any]:
    """A copy of ``pod_spec`` that passes Pod Security ``restricted``: the pod runs as non-root user
    ``RUNTIME_UID`` with the RuntimeDefault seccomp profile, and every container without privilege
    escalation and with all capabilities dropped. It runs as ``service_account`` (None: the
    namespace's default) with no API token mounted. Settings the spec already makes are kept (a spec
    that asks for more is refused by the namespace, not silently weakened here)."""
    spec = copy.deepcopy(dict(pod_spec))
    if service_account is not None:
        spec.setdefault("serviceAccountName", service_account)
    spec.setdefault("automountServiceAccountToken", False)
    pod_context = _mapping(spec, "securityContext")
    pod_context.setdefault("runAsNonRoot", True)
    pod_context.setdefault("runAsUser", RUNTIME_UID)
    pod_context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        context = _mapping(container, "securityContext")
        context.setdefault("allowPrivilegeEscalation", False)
        capabilities = _mapping(context, "capabilities")
        dropped = capabilities.setdefault("drop", [])
        if "ALL" not in dropped:
            dropped.append("ALL")
    return spec


def restricted_cluster_spec(
    cluster: Mapping[str, Any], *, service_account: str | None = WORKER_SERVICE_ACCOUNT
) -> dict[str, Any]:
    """A copy of a DaskCluster resource whose scheduler and worker pods pass ``restricted_pod_spec``."""
    cluster = copy.deepcopy(dict(cluster))
    for role in ("scheduler", "worker"):
        component = cluster["spec"][role]
        component["spec"] = restricted_pod_spec(component["spec"], service_account=service_account)
    return cluster


def check_worker_image(kwargs: Mapping[str, Any]) -> None:
    """Refuse (ValueError naming ``cluster.kwargs.image``) KubeCluster arguments whose pods would run one of
    Dask's own images: its tasks import dpstream, which those images lack, and its library versions
    differ from the flow pod's. The image comes from ``image``, else the dask config's
    ``kubernetes.image``, else dask-kubernetes' default (Dask's image). A ``custom_cluster_spec`` names
    its own images and is not checked."""
    # Resolved as kube_cluster_kwargs resolves them: an argument given wins over the dask config.
    if dask.config.get(
        "kubernetes.custom-cluster-spec", None, override_with=kwargs.get("custom_cluster_spec")
    ):
        return
    image = dask.config.get("kubernetes.image", None, override_with=kwargs.get("image"))
    if image is None or re.sub(r":[^/:]*$", "", image.split("@")[0]) in _DASK_IMAGES:  # without tag, digest
        shown = image or f"{_DASK_IMAGES[0]}:latest, dask-kubernetes' default"
        raise ValueError(
            f"cluster.kwargs.image: KubeCluster would run its scheduler and workers from {shown}, which has no "
            "dpstream (every task would fail to import it) and other library versions than this flow's; set "
            "image to the dpstream worker image, built with "
            "`docker build -f infra/docker/Dockerfile --target worker -t <registry>/dpstream-worker:<tag> .`"
        )


def _target_namespace(kwargs: Mapping[str, Any]) -> str | None:
    """The namespace KubeCluster will create the cluster in: its argument, the dask config, or (left
    out) the namespace of the pod this runs in; None where none of these says (e.g. a laptop's
    kubeconfig, whose current namespace KubeCluster asks the API for)."""
    namespace = dask.config.get("kubernetes.namespace", override_with=kwargs.get("namespace"))
    if namespace is None and os.path.exists(_IN_CLUSTER_NAMESPACE):
        with open(_IN_CLUSTER_NAMESPACE) as namespace_file:
            namespace = namespace_file.read().strip()
    return namespace


def kube_cluster_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``KubeCluster`` keyword arguments whose cluster passes ``restricted``.

    The DaskCluster KubeCluster would create (``make_cluster_spec`` of its arguments, with its
    defaults from the dask config for those left out; or a ``custom_cluster_spec`` given as an argument
    or in the dask config, a dict or a YAML file's path) is rendered, hardened and passed as
    ``custom_cluster_spec``; every argument given still passes through (KubeCluster keeps ``image``,
    ``env``, ... for ``add_worker_group`` and ``jupyter`` for its link). The pods run as the
    ``dpstream-worker`` account in the ``dpstream`` namespace, elsewhere as the namespace's default."""
    from dask_kubernetes.operator import make_cluster_spec

    passed = dict(kwargs)
    in_dpstream = _target_namespace(passed) == NAMESPACE
    account = WORKER_SERVICE_ACCOUNT if in_dpstream else None
    custom = dask.config.get(
        "kubernetes.custom-cluster-spec", override_with=passed.get("custom_cluster_spec")
    )
    if custom is not None:
        if isinstance(custom, str):
            with open(custom) as spec_file:
                custom = yaml.safe_load(spec_file)
        return {**passed, "custom_cluster_spec": restricted_cluster_spec(custom, service_account=account)}
    values = {
        key: dask.config.get(config_key, override_with=passed.get(key))
        for key, config_key in _SPEC_CONFIG_KEYS.items()
    }
    check_worker_image(values)
    values["jupyter"] = passed.get("jupyter", False)
    # As KubeCluster names a cluster it generates: "dask-{user}-{uuid}" by default.
    values["name"] = values["name"].format(user=getpass.getuser(), uuid=str(uuid.uuid4())[:10], **os.environ)
    if isinstance(values["worker_command"], str):
        values["worker_command"] = values["worker_command"].split(" ")
    spec = restricted_cluster_spec(make_cluster_spec(**values), service_account=account)
    return {**passed, "custom_cluster_spec": spec}


def is_kube_cluster(cluster_class: type) -> bool:
    """Whether ``cluster_class`` is dask-kubernetes' operator KubeCluster (or a subclass)."""
    if not any(base.__module__.startswith("dask_kubernetes.") for base in cluster_class.__mro__):
        return False  # without importing dask_kubernetes (slow) for other cluster managers
    from dask_kubernetes.operator import KubeCluster

    return issubclass(cluster_class, KubeCluster)
