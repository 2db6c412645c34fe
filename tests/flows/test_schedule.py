"""Cron deployments fire and complete against a real `prefect server` on 127.0.0.1, fully offline.

Two paths, both on a per-minute cron so the test waits at most a minute for the schedule:
``dpstream serve CONFIG --cron`` (a served deployment) and ``infra/prefect/prefect.yaml`` deployed with
``prefect deploy`` on a process work pool and run by ``prefect worker start``. Servers and workers are
started with ``subprocess.Popen`` and stopped with SIGTERM: started with ``nohup … &`` from a
non-interactive bash they would ignore SIGINT, bash's rule for background jobs.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from dpstream.pipelines import read_manifest
from dpstream.privacy import Ledger
from tests.flows.test_flows import write_config
from tests.pipelines.conftest import local_put, write_lake

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
YAML = ROOT / "infra" / "prefect" / "prefect.yaml"
RUN_DEADLINE_SECONDS = 420  # ≤ 60 s to the next minute, then a flow run in a fresh process on 2 busy cores


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """`prefect server start` on a loopback port with its own home; yields the client environment."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_UI_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_LOGGING_LEVEL="INFO",
    )
    log = open(home / "server.log", "w")
    server = subprocess.Popen(
        [
            str(BIN / "prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--analytics-off",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield {**env, "PREFECT_API_URL": url}
    finally:
        stop(server)
        log.close()


def api(env, method: str, path: str, body=None):
    response = httpx.request(method, env["PREFECT_API_URL"] + path, json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def run_logged(args, env, cwd, log: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(arg) for arg in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    log.write_text(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


def pipeline(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir()
    write_lake(local_put, str(root / "raw"))
    return write_config(root, root / "raw")


def wait_for_completed_runs(env, deployment_names, processes) -> dict[str, dict]:
    """The first completed flow run of each deployment; fails at once on a failed or crashed run, except a
    later firing of a deployment that already completed once being refused by the lake's lifetime budget
    (2 = three runs at ε = 1): on a slow machine the per-minute schedule fires again while the other
    deployment is still running, and refusing that run is the ledger doing its job."""
    deadline = time.monotonic() + RUN_DEADLINE_SECONDS
    completed: dict[str, dict] = {}
    # Finished runs only: the scheduler creates future per-minute runs by the dozen, and an unfiltered
    # query (one page) may not reach a completed one.
    finished = {"flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}}, "limit": 200}
    while len(completed) < len(deployment_names):
        if time.monotonic() > deadline:
            pytest.fail(
                f"no completed scheduled run within {RUN_DEADLINE_SECONDS} s; completed: {sorted(completed)}"
            )
        try:
            deployments = {d["id"]: d["name"] for d in api(env, "POST", "/deployments/filter", {})}
            found = api(env, "POST", "/flow_runs/filter", finished)
        except httpx.TimeoutException:
            # The SQLite-backed test server stalls while the runs train on the same 2 cores; a slow
            # answer is not a failed run, and the deadline above still bounds the wait.
            continue
        runs = [(deployments.get(run["deployment_id"]), run) for run in found]
        for name, run in runs:
            if name in deployment_names and run["state_type"] == "COMPLETED":
                completed.setdefault(name, run)
        for name, run in runs:
            message = (run.get("state") or {}).get("message") or ""
            refused_later = name in completed and "BudgetExceededError" in message
            if name in deployment_names and run["state_type"] in ("FAILED", "CRASHED") and not refused_later:
                pytest.fail(f"scheduled run of {name} ended {run['state_type']}: {message}")
        for label, process in processes.items():
            if process.poll() is not None:
                pytest.fail(f"{label} exited early with code {process.returncode}")
        time.sleep(2)
    return completed


def test_the_shipped_deployments_are_nightly_on_process_docker_and_kubernetes_pools():
    document = yaml.safe_load(YAML.read_text())
    deployments = {d["name"]: d for d in document["deployments"]}
    assert set(deployments) == {"nightly-train", "nightly-train-docker", "nightly-train-kubernetes"}
    kubernetes = deployments["nightly-train-kubernetes"]
    variables = kubernetes["work_pool"]["job_variables"]
    assert variables["service_account_name"] == "dpstream-flow" and variables["namespace"] == "dpstream"
    for name in ("nightly-train-docker", "nightly-train-kubernetes"):
        build, worker_build = (
            step["prefect_docker.deployments.steps.build_docker_image"] for step in deployments[name]["build"]
        )
        assert (ROOT / build["dockerfile"]).exists()
        pushed, worker_pushed = (
            step["prefect_docker.deployments.steps.push_docker_image"] for step in deployments[name]["push"]
        )
        # What is built is what is pushed is what the job runs: repository and tag, never a tag twice.
        image = f"{build['image_name']}:{build['tag']}"
        assert (
            image
            == f"{pushed['image_name']}:{pushed['tag']}"
            == deployments[name]["work_pool"]["job_variables"]["image"]
        )
        assert ":" not in build["image_name"].replace("{{ $DPSTREAM_IMAGE }}", "")
        # The workers' image at the same tag, built and pushed with it.
        assert worker_build["target"] == "worker" and worker_build["tag"] == build["tag"]
        assert (
            f"{worker_build['image_name']}:{worker_build['tag']}"
            == f"{worker_pushed['image_name']}:{worker_pushed['tag']}"
        )
        assert worker_build["image_name"] == build["image_name"] + "-worker"
        assert (
            deployments[name]["pull"][0]["prefect.deployments.steps.set_working_directory"]["directory"]
            == "/app"
        )
        assert [s["cron"] for s in deployments[name]["schedules"]] == ["0 2 * * *"]
    deployment = deployments["nightly-train"]
    assert deployment["entrypoint"] == "flows/flows.py:train_flow"
    assert (ROOT / deployment["entrypoint"].split(":")[0]).exists()
    assert [s["cron"] for s in deployment["schedules"]] == ["0 2 * * *"]
    assert deployment["work_pool"]["name"] == "dpstream-process"
    assert deployment["parameters"] == {"config_path": "{{ $DPSTREAM_CONFIG }}"}


@pytest.mark.slow
def test_cron_deployments_fire_and_complete(prefect_server, tmp_path):
    env = prefect_server
    served_config, deployed_config = pipeline(tmp_path, "served"), pipeline(tmp_path, "deployed")
    logs = tmp_path / "logs"
    logs.mkdir()
    # The shipped prefect.yaml with its nightly cron made per-minute, so the test need not wait until 02:00.
    every_minute = tmp_path / "prefect.yaml"
    text = YAML.read_text()
    assert '"0 2 * * *"' in text
    # The Docker and Kubernetes deployments' build and push steps need Docker and prefect-docker, which
    # this offline test has not: they are dropped from the copy; everything else deploys as shipped.
    document = yaml.safe_load(text.replace('"0 2 * * *"', '"* * * * *"'))
    for deployment in document["deployments"]:
        deployment.pop("build", None)
        deployment.pop("push", None)
    every_minute.write_text(yaml.safe_dump(document, sort_keys=False))
    for pool, kind in (
        ("dpstream-process", "process"),
        ("dpstream-docker", "docker"),
        ("dpstream-kubernetes", "kubernetes"),
    ):
        run_logged(
            [BIN / "prefect", "work-pool", "create", pool, "--type", kind], env, ROOT, logs / f"{pool}.log"
        )
    run_logged(
        [BIN / "prefect", "--no-prompt", "deploy", "--prefect-file", every_minute, "--all"],
        {
            **env,
            "DPSTREAM_CONFIG": str(deployed_config),
            "DPSTREAM_IMAGE": "registry.example/dpstream",
            "DPSTREAM_TAG": "test",
        },
        ROOT,
        logs / "deploy.log",
    )
    deployed = {d["name"]: d for d in api(env, "POST", "/deployments/filter", {})}
    kubernetes = deployed["nightly-train-kubernetes"]
    assert kubernetes["work_pool_name"] == "dpstream-kubernetes"
    assert kubernetes["job_variables"]["image"] == "registry.example/dpstream:test"
    assert kubernetes["job_variables"]["service_account_name"] == "dpstream-flow"
    assert deployed["nightly-train-docker"]["work_pool_name"] == "dpstream-docker"
    processes = {}
    try:
        with open(logs / "serve.log", "w") as serve_log, open(logs / "worker.log", "w") as worker_log:
            processes["dpstream serve"] = subprocess.Popen(
                [
                    str(BIN / "dpstream"),
                    "serve",
                    str(served_config),
                    "--cron",
                    "* * * * *",
                    "--name",
                    "every-minute",
                ],
                env=env,
                cwd=tmp_path,
                stdout=serve_log,
                stderr=subprocess.STDOUT,
            )
            processes["prefect worker"] = subprocess.Popen(
                [str(BIN / "prefect"), "worker", "start", "--pool", "dpstream-process"],
                env=env,
                cwd=ROOT,
                stdout=worker_log,
                stderr=subprocess.STDOUT,
            )
            completed = wait_for_completed_runs(env, {"every-minute", "nightly-train"}, processes)
    except BaseException:
        for name in ("serve.log", "worker.log"):
            print(f"--- {name}\n{(logs / name).read_text()[-4000:]}")
        raise
    finally:
        for process in processes.values():
            stop(process)
    for name, config in (("every-minute", served_config), ("nightly-train", deployed_config)):
        run = completed[name]
        assert run["parameters"] == {"config_path": str(config)}
        fired = datetime.datetime.fromisoformat(run["expected_start_time"])
        assert (fired.second, fired.microsecond) == (0, 0)  # scheduled on a minute boundary by the cron
        published = list((config.parent / "runs").glob("run-*/model.json"))
        assert published, f"{name}: the scheduled run published nothing under {config.parent / 'runs'}"
        document = json.loads(published[0].read_text())
        assert document["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-6)
        fingerprint = read_manifest(str(config.parent / "shuffled")).fingerprint
        statuses = {
            entry.run_id: entry.status
            for entry in Ledger(str(config.parent / "ledger")).lake(fingerprint).entries()
        }
        assert statuses.get(document["run_id"]) == "committed"
    deployment = next(d for d in api(env, "POST", "/deployments/filter", {}) if d["name"] == "nightly-train")
    assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["* * * * *"]
    assert deployment["work_pool_name"] == "dpstream-process"
