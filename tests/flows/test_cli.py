"""The CLI end to end in a subprocess: real lakes, real ledger, exit codes and one-line reasons."""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from dpstream.privacy import Ledger, LifetimeBudget

ROOT = Path(__file__).resolve().parents[2]
HOUSING = ROOT.parent / "shared" / "data" / "california_housing" / "housing.csv"
NUMERIC = ["longitude", "latitude", "housing_median_age", "total_rooms", "total_bedrooms", "population", "households", "median_income"]


def dpstream(*args):
    return subprocess.run([sys.executable, "-m", "flows.cli", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300)


def config_text(tmp_path, raw, **overrides):
    values = {"url": raw, "shuffled": tmp_path / "shuffled", "ledger": tmp_path / "ledger", "epsilon": 1.0}
    values.update(overrides)
    features = ", ".join(f'"{c}"' for c in NUMERIC + ["ocean_proximity=INLAND"])
    return f"""
[lake]
url = "{values['url']}"
features = [{features}]
label = "median_house_value"
shuffled_url = "{values['shuffled']}"
rows_per_file = 5000

[budget]
epsilon = {values['epsilon']}
delta = 1e-6
lifetime_epsilon = 8.0
ledger_url = "{values['ledger']}"
"""


def test_convert_validate_shuffle_on_real_data(tmp_path):
    raw = tmp_path / "raw"
    converted = dpstream("convert", HOUSING, raw, "--columns", *NUMERIC, "--label", "median_house_value",
                         "--missing", "impute", "--impute", "total_bedrooms=400", "--categorical",
                         "ocean_proximity=<1H OCEAN,INLAND,ISLAND,NEAR BAY,NEAR OCEAN")
    assert converted.returncode == 0, converted.stderr
    assert pq.read_table(raw).num_rows == 20_640
    config = tmp_path / "housing.toml"
    config.write_text(config_text(tmp_path, raw))
    validated = dpstream("validate", config)
    assert validated.returncode == 0, validated.stderr
    assert "20,640 rows" in validated.stdout and "fingerprint lake-" in validated.stdout
    shuffled = dpstream("shuffle", config)
    assert shuffled.returncode == 0, shuffled.stderr
    assert "20,640 rows in 5 files" in shuffled.stdout
    again = dpstream("shuffle", config)  # a complete manifest: nothing to do
    assert again.returncode == 0 and again.stdout == shuffled.stdout


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    raw = tmp_path / "raw"
    config = tmp_path / "bad.toml"
    config.write_text(config_text(tmp_path, raw, epsilon=-1))
    cases = [
        dpstream("validate", config),  # bad config value
        dpstream("validate", tmp_path / "missing.toml"),  # no config
        dpstream("convert", tmp_path / "none.csv", raw, "--columns", "a", "--label", "b"),  # no CSV
        dpstream("convert", HOUSING, raw, "--columns", "ocean_proximity", "--label", "median_house_value"),  # not numeric
        dpstream("budget", "reset", "lake-x", "--ledger", tmp_path / "ledger"),  # no such ledger
    ]
    for result in cases:
        assert result.returncode == 2, (result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dpstream: ")
    assert "budget.epsilon: Input should be greater than 0" in cases[0].stderr
    assert "is not numeric" in cases[3].stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    config.write_text(config_text(tmp_path, empty))
    result = dpstream("validate", config)
    assert result.returncode == 2 and "is empty: no .parquet files" in result.stderr


def test_budget_show_and_reset(tmp_path):
    ledger_url = str(tmp_path / "ledger")
    lake = Ledger(ledger_url).lake("lake-abc", LifetimeBudget(4.0, 1e-6))
    lake.reserve("run-1", 0.3, mechanism="dp-sgd", relation="replace-one")
    shown = dpstream("budget", "show", "lake-abc", "--ledger", ledger_url)
    assert shown.returncode == 0 and "1 run(s)" in shown.stdout and "run-1" in shown.stdout
    refused = dpstream("budget", "reset", "lake-abc", "--ledger", ledger_url)
    assert refused.returncode == 2 and "--confirm" in refused.stderr
    reset = dpstream("budget", "reset", "lake-abc", "--ledger", ledger_url, "--confirm")
    assert reset.returncode == 0 and "archived 1 run(s)" in reset.stdout
    assert Ledger(ledger_url).lake("lake-abc").spent_mu() == 0.0
    assert any(name.startswith("archived-") for name in os.listdir(tmp_path / "ledger" / "lake-abc"))


def test_help_everywhere():
    for args in ([], ["validate"], ["convert"], ["shuffle"], ["budget"], ["train"], ["demo"], ["report"]):
        result = dpstream(*args, "--help")
        assert result.returncode == 0 and "usage: dpstream" in result.stdout


def test_console_script_installed():
    script = Path(sys.executable).parent / "dpstream"
    assert script.exists(), "reinstall with `make test` (the console script comes from pyproject.toml)"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "validate" in result.stdout
