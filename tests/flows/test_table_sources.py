"""A pipeline on a Delta Lake table: the version is pinned when the lake is validated, recorded in
the manifest, the ledger entry, model.json and the report, validated again on resume, and a published model
scores the table's live rows into a new Delta table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from dpstream.flows.assembly.loading import load_config, load_inputs
from dpstream.privacy import Ledger
from tests.flows.test_flows import write_config
from tests.pipelines.conftest import make_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def table(tmp_path) -> str:
    """A Delta table of 20,000 rows in four appends (versions 0-3), 30 % of them deleted (version 4)."""
    url = str(tmp_path / "events")
    for day in range(4):
        write_deltalake(url, make_table(5000, day, start_id=day * 5000), mode="append")
    DeltaTable(url).delete("row_id % 10 < 3")
    return url


def test_a_run_on_a_delta_table_records_its_version_and_a_resume_reads_it_again(tmp_path, table, prefect_api):
    from dpstream.flows.assembly.prepare import validate
    from dpstream.flows.flows import train_flow

    config_path = write_config(tmp_path, table)
    units = [
        w
        for w in validate(load_inputs(str(config_path))).warnings
        if "not written by `dpstream convert`" in w
    ]
    assert units and "add [preprocess] to the config" in units[0]  # raw units: warned
    result = train_flow(str(config_path), run_id="delta-1", output_dir=str(tmp_path / "out"))
    model = json.loads((tmp_path / "out" / "model.json").read_text())
    identity = DeltaTable(table).metadata().id
    assert model["source"]["format"] == "delta" and model["source"]["version"] == 4
    assert model["source"]["table_id"] == identity
    report = (tmp_path / "out" / "privacy_report.md").read_text()
    assert "data: Delta Lake table version 4" in report and "14,000 live rows" in report
    inputs = load_inputs(str(config_path))
    config = inputs.config
    entry = Ledger(config.budget.ledger_url).lake(model["lake_fingerprint"]).entry("delta-1")
    assert entry.data_version == f"{model['lake_fingerprint']}@delta-4/{result['generation']}"

    write_deltalake(table, make_table(3000, 9, start_id=90_000), mode="append")  # version 5 lands meanwhile
    assert validate(inputs).summary.version.version == 5
    resumed = validate(inputs, generation=result["generation"])  # what a resume of delta-1 validates
    assert resumed.summary.version.version == 4 and resumed.summary.num_rows == 14_000
    assert resumed.summary.fingerprint == model["lake_fingerprint"]


def test_table_settings_are_checked_when_the_config_loads(tmp_path, table):
    path = write_config(tmp_path, table)
    base = path.read_text()
    cases = {
        "version = 2\nsnapshot_id = 7": r"lake.version: give lake.version \(a Delta table\) or lake.snapshot_id",
        'as_of = "last tuesday"': "lake.as_of must be an ISO-8601 time",
        'format = "delta"\ntable = "db.events"': "lake.table and lake.catalog name an Iceberg table",
        'format = "orc"': "format",
    }
    for setting, message in cases.items():
        path.write_text(base.replace("[lake]\n", f"[lake]\n{setting}\n", 1))
        with pytest.raises(ValueError, match=message):
            load_config(str(path))
    path.write_text(
        base.replace("[lake]\n", "[lake]\nas_of = 2026-01-01\n", 1)
    )  # a TOML date: its midnight, UTC
    assert load_inputs(str(path)).lake.source.as_of == "2026-01-01T00:00:00+00:00"
    path.write_text(base.replace("[lake]\n", "[lake]\nversion = 1\n", 1))
    from dpstream.pipelines import validate_lake

    assert validate_lake(load_inputs(str(path)).lake).num_rows == 10_000  # two appends, no deletes yet


def test_predict_scores_the_live_rows_into_a_new_delta_table(tmp_path, table):
    from tests.pipelines.test_predict import document

    model = tmp_path / "model.json"
    model.write_text(json.dumps(document()))
    out = tmp_path / "scored"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpstream.flows.cli.main",
            "predict",
            str(model),
            table,
            str(out),
            "--format",
            "delta",
        ]
        + ["--keep", "row_id", "--workers", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "scored 14,000 rows of Delta Lake table version 4" in done.stdout
    scored = DeltaTable(str(out))
    assert scored.version() == 0  # one commit made the table
    rows = scored.to_pyarrow_table()
    live = DeltaTable(table).to_pyarrow_table(columns=["row_id"])
    assert sorted(rows["row_id"].to_pylist()) == sorted(live["row_id"].to_pylist())
    assert all(row_id % 10 >= 3 for row_id in rows["row_id"].to_pylist())
