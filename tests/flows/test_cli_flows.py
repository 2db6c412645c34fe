"""`dpstream demo` and `dpstream train` in a subprocess with the README's environment (ephemeral API)."""

import subprocess
import sys
from pathlib import Path

from tests.flows.test_flows import write_config
from tests.pipelines.conftest import local_put, write_lake

ROOT = Path(__file__).resolve().parents[2]


def dpstream(*args):
    return subprocess.run([sys.executable, "-m", "flows.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_demo_on_a_small_lake(tmp_path):
    result = dpstream("demo", "--rows", "40000", "--files", "4", "--dim", "6", "--directory", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(1, 1e-06)-DP" in result.stdout and "DP model RMSE" in result.stdout
    assert "non-private least squares" in result.stdout
    assert list(tmp_path.glob("*/run/privacy_report.md"))
    # Quiet by default: none of Dask's ~35 INFO lines (scheduler, nanny, workers) reach stderr.
    assert "distributed." not in result.stderr and "| INFO" not in result.stderr, result.stderr[-2000:]


def test_train_then_budget_refused_exit_3(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw, epsilon=1.5)
    first = dpstream("train", config, "--run-id", "one", "--output", tmp_path / "one")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "held-out RMSE" in first.stdout
    report = dpstream("report", tmp_path / "one")
    assert report.returncode == 0, report.stderr
    assert "run one" in report.stdout and "(1.5, 1e-06)-DP" in report.stdout and "held-out RMSE" in report.stdout
    assert "linear model trained with ambssgd: x0, x1" in report.stdout  # how to apply it, from model.json
    missing = dpstream("report", tmp_path / "nowhere")
    assert missing.returncode == 2 and "no published run" in missing.stderr
    second = dpstream("train", config, "--run-id", "two", "--output", tmp_path / "two")
    assert second.returncode == 3
    assert second.stderr.strip().splitlines()[-1].startswith("dpstream: budget refused:")
