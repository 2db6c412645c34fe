"""Every pod spec the project can produce passes the namespace's Pod Security ``restricted``
profile, runs as its intended service account with a token only where one is needed, and the
NetworkPolicies allow exactly the connections the design makes. No API server can run here, so the
specs are rendered by the code that renders them in production (the Dask operator's deployment
builders, dpstream's KubeCluster arguments, Prefect's Kubernetes worker) and the admission and network
rules are evaluated over them (tests/k8s_policy.py)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import tempfile
import tomllib
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from tests.k8s_policy import Endpoint, Network, restricted_violations
from tests.test_infra import documents, manifests, without_nulls

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
TEMPLATE = INFRA / "prefect" / "kubernetes-job-template.json"
IMAGE = "ghcr.io/you/dpstream:1.0"  # the flow pod's
WORKER_IMAGE = "ghcr.io/you/dpstream-worker:1.0"  # the scheduler's and workers'


def operator_pods(cluster: dict[str, Any], namespace: str = "dpstream") -> dict[str, dict[str, Any]]:
    """The scheduler's and a worker's pod templates ({metadata, spec}) as the Dask operator builds them
    from a DaskCluster resource, with its own builders."""
    from dask_kubernetes.operator.controller.controller import (
        build_scheduler_deployment_spec,
        build_worker_deployment_spec,
    )

    cluster = without_nulls(cluster)  # the API server drops them before the operator sees the resource
    name = cluster["metadata"]["name"]
    scheduler = build_scheduler_deployment_spec(name, cluster["spec"]["scheduler"]["spec"], {}, {})
    worker = build_worker_deployment_spec(
        f"{name}-default", namespace, name, "0a1b2c", cluster["spec"]["worker"]["spec"], {}, {}
    )
    return {"scheduler": scheduler["spec"]["template"], "worker": worker["spec"]["template"]}


def documented_kube_kwargs() -> list[dict[str, Any]]:
    """The KubeCluster arguments of every ``[cluster]`` example in the README and docs/ (the two of
    docs/prefect.md)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = [block for page in pages for block in re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)]
    found = [tomllib.loads(block)["cluster"] for block in blocks if "KubeCluster" in block]
    assert len(found) >= 2
    return [cluster["kwargs"] for cluster in found]


def kube_cluster_pods(kwargs: dict[str, Any], pod_namespace: str = "dpstream") -> dict[str, dict[str, Any]]:
    """The pods of the KubeCluster these arguments make, rendered in a flow pod of ``pod_namespace``
    (KubeCluster left without a namespace takes the pod's, from its service account's mount)."""
    from dpstream.pipelines.execution import kube

    with tempfile.TemporaryDirectory() as folder:
        mounted = Path(folder) / "namespace"
        mounted.write_text(pod_namespace)
        with mock.patch.object(kube, "_IN_CLUSTER_NAMESPACE", str(mounted)):
            return operator_pods(kube.kube_cluster_kwargs(kwargs)["custom_cluster_spec"])


def daskcluster_pods() -> dict[str, dict[str, Any]]:
    (cluster,) = [doc for _, doc in manifests() if doc["kind"] == "DaskCluster"]
    return operator_pods(cluster)


class NoPrefectServer:
    """A client for the job-template rendering that fails if the template needs the API (it does not)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"rendering the job template called the Prefect API ({name})")


def deployment(name: str) -> dict[str, Any]:
    prefect = yaml.safe_load((INFRA / "prefect" / "prefect.yaml").read_text())
    (found,) = [d for d in prefect["deployments"] if d["name"] == name]
    return found


def flow_job(template: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job manifest Prefect's Kubernetes worker submits for a run of the nightly Kubernetes
    deployment: the pool's base job template filled with the deployment's job variables."""
    from prefect.client.schemas.objects import FlowRun
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    template = template or json.loads(TEMPLATE.read_text())
    variables = deployment("nightly-train-kubernetes")["work_pool"]["job_variables"]
    values = {
        k: v.replace("{{ $DPSTREAM_IMAGE }}:{{ $DPSTREAM_TAG }}", IMAGE) if isinstance(v, str) else v
        for k, v in variables.items()
    }
    configuration = asyncio.run(
        KubernetesWorkerJobConfiguration.from_template_and_values(template, values, client=NoPrefectServer())
    )
    configuration.prepare_for_flow_run(FlowRun(flow_id=uuid.uuid4(), name="nightly-train"))
    return configuration.job_manifest


def prefect_worker_pod() -> dict[str, Any]:
    """The Prefect worker's pod as the chart builds it from infra/helm's values (helm is not installed
    here: the chart copies worker.podSecurityContext and worker.containerSecurityContext, and labels the pod
    with its name, app.kubernetes.io/name: prefect-worker)."""
    worker = documents(INFRA / "helm" / "prefect-worker.values.yaml")[0]["worker"]
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": "prefect-worker"}},
        "spec": {
            "securityContext": worker["podSecurityContext"],
            "containers": [{"name": "prefect-worker", "securityContext": worker["containerSecurityContext"]}],
        },
    }


def test_the_checker_refuses_the_pods_the_namespace_refused():
    """The pods the namespace rejected fail here too: make_cluster_spec's (the documented KubeCluster
    before dpstream hardened it) and Prefect's default job template. So do hand-made violations."""
    from dask_kubernetes.operator import make_cluster_spec
    from prefect_kubernetes.worker import KubernetesWorker

    raw = operator_pods(make_cluster_spec(name="dpstream", image=WORKER_IMAGE, n_workers=4))
    for role, pod in raw.items():
        failed = " ".join(restricted_violations(pod["spec"]))
        for control in ("allowPrivilegeEscalation", "capabilities.drop", "runAsNonRoot", "seccompProfile"):
            assert control in failed, (role, control, failed)
    default_job = flow_job(KubernetesWorker.get_default_base_job_template())
    assert restricted_violations(default_job["spec"]["template"]["spec"])
    good = kube_cluster_pods({"name": "dpstream", "image": WORKER_IMAGE})["worker"]["spec"]
    assert restricted_violations(good) == []
    breaks = {
        "hostNetwork": lambda pod: pod.update(hostNetwork=True),
        "privileged": lambda pod: pod["containers"][0]["securityContext"].update(privileged=True),
        "hostPath": lambda pod: pod.update(volumes=[{"name": "data", "hostPath": {"path": "/data"}}]),
        "hostPort": lambda pod: pod["containers"][0]["ports"][0].update(hostPort=8788),
        "runAsUser=0": lambda pod: pod["containers"][0]["securityContext"].update(runAsUser=0),
        "capabilities.add": lambda pod: pod["containers"][0]["securityContext"]["capabilities"].update(
            add=["SYS_ADMIN"]
        ),
        "Unconfined": lambda pod: pod["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "runAsNonRoot is not true": lambda pod: pod["containers"][0]["securityContext"].update(
            runAsNonRoot=False
        ),
        "sysctl": lambda pod: pod["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
        "pod: runAsNonRoot is false": lambda pod: [  # refused even with every container's true
            pod["securityContext"].update(runAsNonRoot=False),
            *(container["securityContext"].update(runAsNonRoot=True) for container in pod["containers"]),
        ],
        "['nfs']": lambda pod: pod.update(volumes=[{"name": "data", "nfs": {"server": "nas", "path": "/"}}]),
    }
    for control, breaking in breaks.items():
        pod = copy.deepcopy(good)
        breaking(pod)
        assert any(control in message for message in restricted_violations(pod)), control


def pods_the_project_produces() -> dict[str, dict[str, Any]]:
    pods = {f"DaskCluster {role}": pod for role, pod in daskcluster_pods().items()}
    for index, kwargs in enumerate(documented_kube_kwargs()):
        pods |= {
            f"documented KubeCluster #{index} {role}": pod for role, pod in kube_cluster_pods(kwargs).items()
        }
    pods["flow job"] = flow_job()["spec"]["template"]
    pods["Prefect worker"] = prefect_worker_pod()
    return pods


def test_every_pod_the_project_produces_passes_restricted():
    pods = pods_the_project_produces()
    assert len(pods) >= 8
    for name, pod in pods.items():
        assert restricted_violations(pod["spec"]) == [], name
    namespace = next(doc for _, doc in manifests() if doc["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_each_pod_runs_as_its_account_with_a_token_only_where_needed():
    """Scheduler and workers: dpstream-worker, no API token (they never call the API). The flow job:
    dpstream-flow with its token, which KubeCluster needs to create the run's DaskCluster, and which
    the Role bound to that account allows exactly."""
    accounts = {doc["metadata"]["name"]: doc for _, doc in manifests() if doc["kind"] == "ServiceAccount"}

    def token_mounted(spec: dict[str, Any]) -> bool:
        account = accounts[spec["serviceAccountName"]]
        return spec.get("automountServiceAccountToken", account.get("automountServiceAccountToken", True))

    for name, pod in pods_the_project_produces().items():
        spec = pod["spec"]
        if name == "Prefect worker":
            continue  # the chart's own account (helm serviceAccount), which creates the flow's jobs
        if name == "flow job":
            assert spec["serviceAccountName"] == "dpstream-flow" and token_mounted(spec)
        else:
            assert spec["serviceAccountName"] == "dpstream-worker" and not token_mounted(spec), name
    (binding,) = [doc for _, doc in manifests() if doc["kind"] == "RoleBinding"]
    assert [subject["name"] for subject in binding["subjects"]] == ["dpstream-flow"]
    template = json.loads(TEMPLATE.read_text())
    assert template["variables"]["properties"]["automount_service_account_token"]["default"] is False


def test_the_shipped_job_template_is_prefects_default_with_the_hardening_only():
    """So a prefect-kubernetes upgrade that changes its default template shows up here."""
    from prefect_kubernetes.worker import KubernetesWorker

    shipped = json.loads(TEMPLATE.read_text())
    pod = shipped["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert pod.pop("securityContext") == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod.pop("automountServiceAccountToken") == "{{ automount_service_account_token }}"
    (container,) = pod["containers"]
    assert container.pop("securityContext") == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    del shipped["variables"]["properties"]["automount_service_account_token"]
    assert shipped == KubernetesWorker.get_default_base_job_template()


def endpoints() -> dict[str, Endpoint]:
    """Every party to a connection, with the labels the rendered specs give them."""

    def pod(name: str, template: dict[str, Any], namespace: str = "dpstream") -> Endpoint:
        ports = {
            p["name"]: p["containerPort"]
            for c in template["spec"]["containers"]
            for p in c.get("ports") or []
            if "name" in p
        }
        return Endpoint(name, namespace, template["metadata"]["labels"], ports)

    dask = daskcluster_pods()
    kube = kube_cluster_pods(documented_kube_kwargs()[-1])
    worker_values = documents(INFRA / "helm" / "prefect-worker.values.yaml")[0]["worker"]
    server_host = re.match(r"https?://([^:/]+):(\d+)", worker_values["selfHostedServerApiConfig"]["apiUrl"])
    service, server_namespace = server_host.group(1).split(".")[:2]
    assert service == "prefect-server" and server_host.group(2) == "4200"
    return {
        "flow": pod("flow", flow_job()["spec"]["template"]),
        "scheduler": pod("scheduler", dask["scheduler"]),
        "worker": pod("worker", dask["worker"]),
        "kube scheduler": pod("kube scheduler", kube["scheduler"]),
        "kube worker": pod("kube worker", kube["worker"]),
        "prefect worker": pod("prefect worker", prefect_worker_pod()),
        "prefect server": Endpoint(
            "prefect server", server_namespace, {"app.kubernetes.io/name": "prefect-server"}
        ),
        "dask operator": Endpoint(
            "dask operator", "dask-operator", {"app.kubernetes.io/name": "dask-kubernetes-operator"}
        ),
        "kube-dns": Endpoint("kube-dns", "kube-system", {"k8s-app": "kube-dns"}),
        "other namespace": Endpoint("other namespace", "default", {"app": "web"}),
        "kubernetes api": Endpoint("kubernetes api", address="172.20.0.10"),
        "object store": Endpoint("object store", address="52.216.8.1"),
        "internet": Endpoint("internet", address="203.0.113.7"),
    }


# (source, destination, port[, protocol]): what the design needs, then what it must not allow.
REQUIRED = [
    ("flow", "scheduler", 8786), ("flow", "scheduler", 8787),
    ("flow", "kube scheduler", 8786), ("worker", "scheduler", 8786), ("worker", "worker", 41234),
    ("scheduler", "worker", 41234), ("kube worker", "kube scheduler", 8786), ("kube scheduler", "kube worker", 41234),
    ("dask operator", "scheduler", 8786), ("dask operator", "kube scheduler", 8787),
    ("flow", "prefect server", 4200), ("prefect worker", "prefect server", 4200),
    ("flow", "kubernetes api", 6443), ("flow", "kubernetes api", 443), ("prefect worker", "kubernetes api", 6443),
    ("flow", "object store", 443), ("worker", "object store", 443), ("kube worker", "object store", 443),
    ("flow", "kube-dns", 53, "UDP"), ("worker", "kube-dns", 53, "UDP"), ("scheduler", "kube-dns", 53, "TCP"),
    ("prefect worker", "kube-dns", 53, "UDP"),
]  # fmt: skip
FORBIDDEN = [
    ("worker", "kubernetes api", 6443), ("scheduler", "kubernetes api", 6443), ("scheduler", "object store", 443),
    ("worker", "prefect server", 4200), ("worker", "flow", 8080), ("scheduler", "flow", 8080),
    ("other namespace", "scheduler", 8786), ("other namespace", "worker", 41234), ("other namespace", "flow", 8080),
    ("internet", "scheduler", 8786), ("internet", "flow", 8080), ("dask operator", "worker", 41234),
    ("prefect worker", "scheduler", 8786), ("prefect worker", "object store", 80), ("flow", "other namespace", 80),
    ("flow", "prefect server", 4201), ("worker", "internet", 80), ("flow", "worker", 41234),
    ("worker", "kubernetes api", 443), ("kube worker", "kubernetes api", 443), ("flow", "other namespace", 443),
    ("worker", "internet", 53, "UDP"), ("flow", "scheduler", 9999),
]  # fmt: skip


def test_the_network_policies_allow_exactly_the_connections_the_design_makes():
    policies = [
        {**doc, "metadata": {**doc["metadata"], "namespace": "dpstream"}}
        for _, doc in manifests()
        if doc["kind"] == "NetworkPolicy"
    ]
    network, parties = Network(policies), endpoints()
    for source, destination, port, *protocol in REQUIRED:
        assert network.allows(parties[source], parties[destination], port, *protocol), (
            source,
            destination,
            port,
        )
    for source, destination, port, *protocol in FORBIDDEN:
        assert not network.allows(parties[source], parties[destination], port, *protocol), (
            source,
            destination,
            port,
        )
    assert Network([]).allows(parties["internet"], parties["flow"], 8080)  # without the policies, all is open


def test_cluster_client_gives_kubecluster_the_hardened_spec(monkeypatch):
    import dask.config
    from dask_kubernetes.operator import KubeCluster

    from dpstream.pipelines.execution import cluster as cluster_module
    from dpstream.pipelines.execution.kube import kube_cluster_kwargs

    received: list[dict[str, Any]] = []

    class Refused(Exception):
        pass

    class Recording(KubeCluster):
        def __init__(self, **kwargs: Any) -> None:  # never reaches an API server
            received.append(kwargs)
            raise Refused

    monkeypatch.setattr(cluster_module, "import_cluster_class", lambda path: Recording)
    kwargs = documented_kube_kwargs()[-1]
    with (
        pytest.raises(Refused),
        cluster_module.cluster_client(
            cluster_class="dask_kubernetes.operator.KubeCluster",
            cluster_kwargs={**kwargs, "namespace": "dpstream"},
        ),
    ):
        pass
    (passed,) = received
    assert passed == {**kwargs, "namespace": "dpstream", "custom_cluster_spec": passed["custom_cluster_spec"]}
    spec = passed["custom_cluster_spec"]
    assert re.fullmatch(r"dpstream-run-[0-9a-f-]{10}", spec["metadata"]["name"])  # a name per run: "{uuid}"
    assert spec["spec"]["worker"]["replicas"] == kwargs["n_workers"]
    for role in ("scheduler", "worker"):
        pod = spec["spec"][role]["spec"]
        assert restricted_violations(pod) == [] and pod["containers"][0]["image"] == kwargs["image"]
        assert pod["serviceAccountName"] == "dpstream-worker" and pod["automountServiceAccountToken"] is False
    # Outside infra/k8s's namespace the account does not exist: the namespace's default, still without a token.
    elsewhere = kube_cluster_kwargs({**kwargs, "namespace": "analytics"})["custom_cluster_spec"]
    worker = elsewhere["spec"]["worker"]["spec"]
    assert "serviceAccountName" not in worker and worker["automountServiceAccountToken"] is False
    assert restricted_violations(worker) == []
    # A custom spec, given or in the dask config, is hardened rather than replaced.
    with dask.config.set({"kubernetes.custom-cluster-spec": spec | {"metadata": {"name": "mine"}}}):
        hardened = kube_cluster_kwargs({"namespace": "dpstream"})["custom_cluster_spec"]
    assert hardened["metadata"]["name"] == "mine"


def test_a_kube_cluster_left_on_dasks_own_image_is_refused_when_the_config_loads():
    """Without an image, KubeCluster runs ghcr.io/dask/dask:latest: no dpstream to import, other versions.
    Refused from the arguments (and the dask config), before any pod exists; the worker image passes."""
    from dpstream.flows.assembly.cluster import check_cluster
    from dpstream.flows.config.cluster import ClusterConfig
    from dpstream.flows.config.file import ConfigError
    from dpstream.pipelines.execution.kube import kube_cluster_kwargs

    dask_images = [{}, {"image": "ghcr.io/dask/dask:2026.8.0"}, {"image": "daskdev/dask@sha256:0a1b"}]
    for kwargs in dask_images:
        with pytest.raises(
            ValueError, match=r"^cluster.kwargs.image: KubeCluster would run .* no dpstream .*--target worker"
        ):
            kube_cluster_kwargs({"name": "dpstream", **kwargs})
        section = ClusterConfig(**{"class": "dask_kubernetes.operator.KubeCluster", "kwargs": kwargs})
        with pytest.raises(ConfigError, match=r"cluster: cluster.kwargs.image: "):
            check_cluster(section)
    passed = kube_cluster_kwargs({"name": "dpstream", "image": WORKER_IMAGE})
    assert passed["custom_cluster_spec"]["spec"]["worker"]["spec"]["containers"][0]["image"] == WORKER_IMAGE
    check_cluster(
        ClusterConfig(**{"class": "dask_kubernetes.operator.KubeCluster", "kwargs": {"image": WORKER_IMAGE}})
    )
    import dask.config

    with dask.config.set({"kubernetes.image": "registry.example:5000/dpstream-worker"}):
        check_cluster(ClusterConfig(**{"class": "dask_kubernetes.operator.KubeCluster"}))
