"""`dpstream demo` and `dpstream train` in a subprocess, reporting to one Prefect API server for the module
(the temporary server a command starts itself: test_single_pass_cli.py and test_newcomer.py)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dpstream.flows.cli.demo import DEMO_MARKER
from tests.flows.test_flows import write_config
from tests.pipelines.conftest import local_put, write_lake

pytestmark = pytest.mark.usefixtures("cli_prefect_api")  # one Prefect API for the module's CLI runs

ROOT = Path(__file__).resolve().parents[2]


def dpstream(*args):
    return subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_demo_on_a_small_lake(tmp_path):
    earlier = tmp_path / "20200101-000000"  # an earlier demo run: removed once the new one completes
    (earlier / "raw").mkdir(parents=True)
    (earlier / DEMO_MARKER).touch()
    foreign = tmp_path / "20200101-000001"  # a timestamp-named folder the demo did not write: kept
    foreign.mkdir()
    result = dpstream("demo", "--rows", "40000", "--files", "4", "--dim", "6", "--directory", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(1, 1e-06)-DP" in result.stdout and "DP model RMSE" in result.stdout
    assert "non-private least squares" in result.stdout
    assert list(tmp_path.glob("*/run/privacy_report.md"))
    # Quiet by default: progress bars only (shuffle scatter, gather, training) and no log records; the
    # Prefect and Dask logs are in the file the last line names.
    assert len(result.stderr.strip().splitlines()) <= 3, result.stderr[-2000:]
    assert "distributed." not in result.stderr and "| INFO" not in result.stderr, result.stderr[-2000:]
    log = Path(result.stdout.strip().splitlines()[-1].removeprefix("log "))
    assert log.exists() and "Finished in state Completed()" in log.read_text()
    assert not earlier.exists() and foreign.exists() and "Removed 1 earlier demo run(s)" in result.stdout


@pytest.mark.slow
def test_train_then_budget_refused_exit_3(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw, epsilon=1.5)
    first = dpstream("train", config, "--run-id", "one", "--output", tmp_path / "one")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "held-out RMSE" in first.stdout
    report = dpstream("report", tmp_path / "one")
    assert report.returncode == 0, report.stderr
    assert (
        "run one" in report.stdout
        and "(1.5, 1e-06)-DP" in report.stdout
        and "held-out RMSE" not in report.stdout
    )
    assert "linear model trained with ambssgd: x0, x1" in report.stdout  # how to apply it, from model.json
    missing = dpstream("report", tmp_path / "nowhere")
    assert missing.returncode == 2 and "no published run" in missing.stderr
    second = dpstream("train", config, "--run-id", "two", "--output", tmp_path / "two")
    assert second.returncode == 3
    # One line, no Prefect traceback; the full story is in the log file it names.
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpstream: budget refused:"), second.stderr[-3000:]
    log = Path(re.search(r"\(full log: (.+\.log)\)$", lines[0]).group(1))
    assert "BudgetExceededError" in log.read_text() and "Traceback" in log.read_text()
