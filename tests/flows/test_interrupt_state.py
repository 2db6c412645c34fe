"""Issue 33: a `dpstream train` stopped with Ctrl-C is not left RUNNING in the Prefect server it reports
to: the CLI marks its flow run Crashed (Prefect's state for a flow stopped by an interrupt signal) with
the resume hint, before it stops its process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.flows.test_release_safety import write_config
from tests.pipelines.conftest import local_put, write_lake

ROOT = Path(__file__).resolve().parents[2]


def flow_runs(api: str, run_id: str) -> list[dict]:
    response = httpx.post(f"{api}/flow_runs/filter", json={"limit": 50}, timeout=10)
    response.raise_for_status()
    return [run for run in response.json() if run["parameters"].get("run_id") == run_id]


def test_ctrl_c_marks_the_flow_run_crashed_in_the_prefect_server(tmp_path, cli_prefect_api):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=4, rows=40_000)
    config = Path(write_config(tmp_path / "project", raw, lifetime=2.0))
    config.write_text(config.read_text().replace("batch_size = 500", "batch_size = 8"))  # ~15,000 small steps
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpstream.flows.cli",
            "train",
            str(config),
            "--run-id",
            "interrupted",
            "--quiet",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 300
    while not (runs := flow_runs(cli_prefect_api, "interrupted")) or runs[0]["state_type"] != "RUNNING":
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
        time.sleep(0.5)
    time.sleep(3)  # into validation, the shuffle or training
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    (run,) = flow_runs(cli_prefect_api, "interrupted")
    assert run["state_type"] == "CRASHED", run["state"]
    message = run["state"]["message"]
    assert (
        message.startswith("interrupted (Ctrl-C): run interrupted stopped")
        and "--run-id interrupted" in message
    )
