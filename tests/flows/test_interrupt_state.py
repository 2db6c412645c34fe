"""A `dpstream train` stopped with Ctrl-C is not left RUNNING in the Prefect server it reports
to: the CLI marks its flow run Crashed (Prefect's state for a flow stopped by an interrupt signal) with
the resume hint, before it stops its process tree. Its line says what the ledger holds: a claim no step
has used is given back (nothing charged), a reservation a step used stays until the run is resumed with
its run id; that command finishes the run either way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.flows.test_release_safety import write_config
from tests.pipelines.conftest import local_put, write_lake
from tests.terminal import as_terminal_job

ROOT = Path(__file__).resolve().parents[2]


def flow_runs(api: str, run_id: str) -> list[dict]:
    response = httpx.post(f"{api}/flow_runs/filter", json={"limit": 50}, timeout=10)
    response.raise_for_status()
    return [run for run in response.json() if run["parameters"].get("run_id") == run_id]


@pytest.mark.slow
def test_ctrl_c_marks_the_flow_run_crashed_in_the_prefect_server(tmp_path, cli_prefect_api):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=4, rows=40_000)
    config = Path(write_config(tmp_path / "project", raw, lifetime=2.0))
    config.write_text(config.read_text().replace("batch_size = 500", "batch_size = 8"))  # ~15,000 small steps
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpstream.flows.cli.main",
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
        preexec_fn=as_terminal_job,
    )
    deadline = time.monotonic() + 300
    while not (runs := flow_runs(cli_prefect_api, "interrupted")) or runs[0]["state_type"] != "RUNNING":
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
        time.sleep(0.5)
    # At the step-0 checkpoint or just after: the run has reserved its charge in the ledger.
    while not (tmp_path / "ledger" / "_checkpoints" / "interrupted" / "checkpoint.npz").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    line = stderr.strip().splitlines()[-1]
    entries = list(tmp_path.glob("ledger/*/runs/interrupted.json"))
    if entries:  # a step had used the noise: the charge stays, and the run resumes from its checkpoint
        assert json.loads(entries[0].read_text())["status"] == "reserved"
        assert "stays reserved" in line and "given back" not in line, line
    else:  # no step had: the claim was given back before the exit, and the line says so
        (aborted,) = tmp_path.glob("ledger/*/aborted/interrupted-*.json")
        assert "stopped by a signal before its first release" in json.loads(aborted.read_text())["reason"]
        assert "nothing is charged for it" in line, line
        assert not (tmp_path / "ledger" / "_checkpoints" / "interrupted" / "checkpoint.npz").exists()
    resume = line.split("with: ", 1)[1]
    assert resume == f"dpstream train {config} --run-id interrupted", line
    (run,) = flow_runs(cli_prefect_api, "interrupted")
    assert run["state_type"] == "CRASHED", run["state"]
    message = run["state"]["message"]
    assert (
        message.startswith("interrupted (Ctrl-C): run interrupted stopped")
        and "--run-id interrupted" in message
    )
    resumed = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", *resume.split()[1:], "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    (entry,) = tmp_path.glob("ledger/*/runs/interrupted.json")
    assert json.loads(entry.read_text())["status"] == "committed"


def interrupted_line(tmp_path: Path, status: str | None, checkpoint: bool, ledger: str | None = None) -> str:
    """The line of run 'r' stopped with the ledger entry ``status`` (None: no entry) and a checkpoint or
    none, the ledger at ``ledger`` (default: a folder of ``tmp_path``)."""
    from types import SimpleNamespace

    from dpstream.flows.cli.run_state import stopped_run_message

    root = tmp_path / "ledger"
    if status is not None:
        (root / "lake-1" / "runs").mkdir(parents=True)
        (root / "lake-1" / "runs" / "r.json").write_text(json.dumps({"status": status}))
    if checkpoint:
        (root / "_checkpoints" / "r").mkdir(parents=True)
        (root / "_checkpoints" / "r" / "checkpoint.npz").write_bytes(b"")
    config = SimpleNamespace(budget=SimpleNamespace(ledger_url=ledger or str(root)), checkpoint=None)
    return stopped_run_message(config, "r", "train.log", "dpstream train p.toml --run-id r", timeout=2.0)()


def test_the_line_says_what_the_ledger_holds_when_the_run_stops(tmp_path):
    resume = "with: dpstream train p.toml --run-id r"
    reserved = interrupted_line(tmp_path / "a", "reserved", checkpoint=True)
    assert "its ledger charge stays reserved" in reserved and reserved.endswith(resume), reserved
    unclaimed = interrupted_line(tmp_path / "b", None, checkpoint=False)
    assert "before it charged the ledger: nothing is charged" in unclaimed and unclaimed.endswith(
        "start it again with: dpstream train p.toml --run-id r"
    )
    stuck = interrupted_line(tmp_path / "c", "reserved", checkpoint=False)
    assert "before its first checkpoint" in stuck and "cannot resume" in stuck and "new --run-id" in stuck
    finished = interrupted_line(tmp_path / "d", "committed", checkpoint=True)
    assert "(its ledger entry is committed)" in finished and finished.endswith(resume), finished
    for line in (reserved, unclaimed, stuck, finished):
        assert line.startswith("run r stopped (log: train.log)") and "given back" not in line, line


def test_a_ledger_that_cannot_be_read_gives_the_line_that_holds_either_way(tmp_path):
    unreadable = interrupted_line(tmp_path, None, checkpoint=False, ledger="s3://")
    assert "a ledger charge it reserved stays reserved" in unreadable, unreadable
    assert unreadable.endswith("with: dpstream train p.toml --run-id r"), unreadable
