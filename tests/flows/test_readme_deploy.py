"""The process-pool deployment commands of docs/prefect.md ("Schedules and deployments") run as
written, against a real `prefect server` on 127.0.0.1: the block is read from docs/prefect.md and run by
bash from the repository root, with only the two exported values (the server's URL, the config's path)
replaced by this test's. The deployment run it starts completes and publishes model.json beside the
config; the Kubernetes pool's command from the page's "Run on Kubernetes" creates its pool with the
shipped job template."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flows.test_schedule import api, pipeline, prefect_server  # noqa: F401 - prefect_server is a fixture

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "prefect.md"  # the page that holds the deployment commands
BIN = Path(sys.executable).parent
MARKER = "<!-- checked verbatim by tests/flows/test_readme_deploy.py"


def deployment_block() -> str:
    text = PAGE.read_text()
    after = text[text.index(MARKER) :]
    return re.search(r"```bash\n(.*?)```", after, re.S).group(1)


def stop_group(group: int, grace: float = 10.0) -> None:
    """SIGTERM to a process group, then SIGKILL to whatever of it is left after ``grace`` seconds: a
    Prefect worker can outlive SIGTERM, and nothing a test starts may outlive the test."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(group, signal.SIGKILL)


@pytest.mark.slow
def test_the_documented_deployment_commands_run_verbatim(prefect_server, tmp_path):  # noqa: F811
    env = {**prefect_server, "PATH": f"{BIN}{os.pathsep}{prefect_server['PATH']}"}
    config = pipeline(tmp_path, "deployed")
    block = deployment_block()
    exports = re.findall(r"^export (PREFECT_API_URL|DPSTREAM_CONFIG)=(\S+)", block, re.M)
    assert [name for name, _ in exports] == ["PREFECT_API_URL", "DPSTREAM_CONFIG"]
    script = block
    for name, value in exports:
        script = script.replace(
            f"export {name}={value}",
            f"export {name}={ {'PREFECT_API_URL': env['PREFECT_API_URL'], 'DPSTREAM_CONFIG': str(config)}[name] }",
        )
    assert script.count("\n") == block.count("\n") and script != block
    log = tmp_path / "readme-block.log"
    with open(log, "w") as sink:  # a file, not a pipe: the block's background worker keeps its stdout open
        runner = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env={k: v for k, v in env.items() if k != "PREFECT_API_URL"},  # the block's export sets it
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the block's background worker is in this group, stopped below
        )
        try:
            runner.wait(timeout=420)
        finally:
            stop_group(runner.pid)  # the `prefect worker start ... &` the block left running
    output = log.read_text()
    assert runner.returncode == 0, output[-4000:]
    (deployment,) = api(env, "POST", "/deployments/filter", {})
    assert deployment["name"] == "nightly-train" and deployment["parameters"] == {"config_path": str(config)}
    runs = api(
        env, "POST", "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}}
    )
    (run,) = [run for run in runs if run["state_type"] != "SCHEDULED"]  # the others: the nightly cron's
    assert run["state_type"] == "COMPLETED", run["state"]
    (model,) = (config.parent / "runs").glob("run-*/model.json")
    assert json.loads(model.read_text())["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-6)


def test_the_documented_kubernetes_pool_command_creates_the_pool_with_the_shipped_template(prefect_server):  # noqa: F811
    text = PAGE.read_text()
    command = re.search(
        r"(prefect work-pool create dpstream-kubernetes [^`]*?)\s+# offline", text, re.S
    ).group(1)
    command = command.replace("\\\n", " ")
    result = subprocess.run(
        ["bash", "-e", "-c", command],
        cwd=ROOT,
        env={**prefect_server, "PATH": f"{BIN}{os.pathsep}{prefect_server['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    pool = api(prefect_server, "GET", "/work_pools/dpstream-kubernetes")
    shipped = json.loads((ROOT / "infra" / "prefect" / "kubernetes-job-template.json").read_text())
    assert pool["type"] == "kubernetes" and pool["base_job_template"] == shipped
