"""`dpstream` with `[privacy] unit = "user"` end to end: a Zipf panel with one person of 10⁴ rows,
k chosen with DP and charged, a model per person, the unit in model.json, the ledger and `dpstream
report`, no id in clear in anything written; the careless configs refused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.flows.test_cli import dpstream
from tests.flows.test_single_pass_cli import one_line
from tests.pipelines.conftest import DIM, ID_PREFIX, local_put, write_user_lake

pytestmark = pytest.mark.usefixtures("cli_prefect_api")

CONFIG = """
[lake]
url = "raw"
features = [{features}]
label = "y"
shuffled_url = "shuffled"
rows_per_file = 3000

[privacy]
unit = "{unit}"
{user}

[budget]
epsilon = 2.0
delta = 1e-6
lifetime_epsilon = 4.0
ledger_url = "ledger"
"""


def write_config(folder: Path, unit: str = "user") -> Path:
    features = ", ".join(f'"x{j}"' for j in range(DIM))
    user = 'user_column = "customer"' if unit == "user" else ""
    path = folder / "pipeline.toml"
    path.write_text(CONFIG.format(features=features, unit=unit, user=user))
    return path


def written_files(folder: Path, skip: str = "raw"):
    for root, _, names in os.walk(folder):
        if Path(root).relative_to(folder).parts[:1] == (skip,):
            continue
        for name in names:
            yield Path(root, name)


@pytest.mark.slow
def test_a_user_level_run_from_the_cli(tmp_path):
    people = write_user_lake(local_put, str(tmp_path / "raw"))
    config = write_config(tmp_path)
    validated = dpstream("validate", config)
    assert validated.returncode == 0, validated.stderr
    assert "Privacy unit: a person (every row of one value of 'customer'" in validated.stdout

    trained = dpstream("train", config, "--run-id", "people-1")
    assert trained.returncode == 0, trained.stderr
    assert "one user: every row of one value of 'customer'" in trained.stdout
    assert "people per step" in trained.stdout
    assert re.search(r"train \d+ steps .* people", trained.stderr), trained.stderr  # the bar counts people

    document = json.loads((tmp_path / "runs" / "people-1" / "model.json").read_text())
    privacy = document["privacy"]
    assert privacy["ledger_unit"] == "user:customer" and privacy["epsilon"] == pytest.approx(2.0)
    assert any("chosen with DP when the lake was shuffled" in note for note in privacy["notes"])

    # One run, measured 0.618 against the label mean's 1.099 on the held-out people (non-private metric).
    metrics = json.loads((tmp_path / "operator" / "people-1" / "metrics.json").read_text())["metrics"]
    held_out = metrics["held-out RMSE (non-private, operator only)"]
    assert held_out < 0.75 * metrics["held-out RMSE of the label mean (baseline)"], metrics

    (budget_path,) = (tmp_path / "ledger").glob("*/budget.json")
    assert json.loads(budget_path.read_text())["unit"] == "user:customer"
    entries = {p.stem: json.loads(p.read_text()) for p in budget_path.parent.glob("runs/*.json")}
    bound = next(entry for name, entry in entries.items() if name.startswith("max-rows_g-"))
    assert bound["unit"] == entries["people-1"]["unit"] == "user:customer" and bound["status"] == "committed"
    assert len(entries) == 2

    shown = dpstream("report", tmp_path / "runs" / "people-1")
    assert shown.returncode == 0 and "| privacy unit | one user" in shown.stdout

    # No id in clear anywhere dpstream wrote: shuffled lake, ledger, runs, operator folder, the run's log.
    logs = [p for p in Path(os.environ["DPSTREAM_LOG_DIR"]).glob("*people-1*")]
    assert logs
    scanned = list(written_files(tmp_path)) + logs
    assert len(scanned) > 10
    for path in scanned:
        assert ID_PREFIX not in path.read_bytes(), path
    assert len(people) > 1000

    again = dpstream("train", config, "--run-id", "people-1")  # a repeated run id replays its one release
    assert (
        again.returncode == 0
        and "already complete" in again.stdout
        and "nothing was trained or charged" in again.stdout
    )
    replayed = json.loads((tmp_path / "runs" / "people-1" / "model.json").read_text())
    assert replayed["params"] == document["params"]
    assert len(list(budget_path.parent.glob("runs/*.json"))) == 2

    rows = write_config(tmp_path, unit="row")
    generations = sorted(os.listdir(tmp_path / "shuffled"))
    for command in (("validate", rows), ("train", rows, "--run-id", "rows-1")):  # refused before any shuffle
        refused = dpstream(*command)
        assert refused.returncode != 0 and "counts people (one per value of 'customer')" in refused.stderr
    assert sorted(os.listdir(tmp_path / "shuffled")) == generations
    assert len(list(budget_path.parent.glob("runs/*.json"))) == 2  # nothing more was charged


@pytest.mark.slow
def test_convert_per_person_then_train_per_person(tmp_path):
    """`dpstream convert --user`: private bounds from every 10th person, a config that protects people, and a
    run that accepts them; a lake converted per row is refused for a user-level run, with the fix."""
    from tests.pipelines.test_convert import person_csv

    person_csv(tmp_path / "panel.csv")
    converted = dpstream(
        "convert", tmp_path / "panel.csv", tmp_path / "lake", "--label", "spend", "--user", "person"
    )
    assert converted.returncode == 0, converted.stderr
    assert "sampled people (every row of one value of 'person'" in converted.stdout
    config = tmp_path / "pipeline.toml"
    assert '[privacy]\nunit = "user"' in config.read_text() and 'user_column = "person"' in config.read_text()
    trained = dpstream("train", config, "--run-id", "p1")
    assert trained.returncode == 0, trained.stderr
    assert "one user: every row of one value of 'person'" in trained.stdout

    rows = tmp_path / "rows"
    rows.mkdir()
    person_csv(rows / "panel.csv")
    converted = dpstream("convert", rows / "panel.csv", rows / "lake", "--label", "spend", "--id", "person")
    assert converted.returncode == 0, converted.stderr
    text = (rows / "pipeline.toml").read_text() + '\n[privacy]\nunit = "user"\nuser_column = "person"\n'
    (rows / "pipeline.toml").write_text(text)
    refused = dpstream("validate", rows / "pipeline.toml")
    assert refused.returncode != 0 and "Convert the CSV again with --user person" in refused.stderr
    assert not (rows / "lake-ledger").exists()  # nothing charged


def test_the_auto_bound_is_charged_only_where_the_run_fits_beside_it(tmp_path):
    from dpstream.flows.assembly.loading import load_config, load_inputs
    from dpstream.flows.assembly.planning import bound_charge, source_ledger
    from dpstream.flows.config.file import ConfigError
    from dpstream.pipeline_constants import AUTO_MU
    from dpstream.privacy import BudgetExceededError, mu_for_epsilon_delta

    config_path = write_config(tmp_path)
    config = load_inputs(config_path)
    ledger = source_ledger(config, "lake-1", ("md5:a",))
    # Spend all but room for one run at ε = 2 alone: μ_k beside it does not fit.
    lifetime, run = (mu_for_epsilon_delta(e, 1e-6) for e in (4.0, 2.0))
    ledger.claim(
        "earlier", (lifetime**2 - run**2) ** 0.5, mechanism="m", relation="replace-one", unit="user:customer"
    )
    with pytest.raises(BudgetExceededError):
        bound_charge(config, "lake-1", ("md5:a",), before_run=True)("max-rows_g-x", AUTO_MU)
    assert [e.run_id for e in ledger.entries()] == ["earlier"]  # nothing charged
    bound_charge(config, "lake-1", ("md5:a",))("max-rows_g-y", AUTO_MU)  # `dpstream shuffle`: μ_k alone fits
    assert {e.run_id for e in ledger.entries()} == {"earlier", "max-rows_g-y"}

    text = config_path.read_text().replace("epsilon = 2.0", "epsilon = 4.0")
    config_path.write_text(text)
    with pytest.raises(
        ConfigError, match="give max_rows_per_user a whole number, or a lifetime_epsilon of at least"
    ):
        load_config(config_path)


def test_a_carried_id_is_never_a_feature_and_a_row_config_on_people_warns(tmp_path):
    from dpstream.flows.assembly.loading import load_config, load_inputs
    from dpstream.flows.assembly.planning import check_bounds_unit
    from dpstream.flows.assembly.prepare import _row_level_note

    config = load_config(write_config(tmp_path, unit="row"))
    record = {"passthrough": ["x1"], "user_column": "x1"}
    with pytest.raises(
        ValueError, match="lake.features lists 'x1', which `dpstream convert` carried into the lake"
    ):
        check_bounds_unit(load_inputs(write_config(tmp_path, unit="row")), record)
    raw = write_config(tmp_path, unit="row")
    raw.write_text(raw.read_text().replace('"x1"', '"__dpstream_raw_label"'))
    with pytest.raises(ValueError, match="names '__dpstream_raw_label', the unclipped label dpstream keeps"):
        check_bounds_unit(load_inputs(raw), None)
    note = _row_level_note(config, {"passthrough": ["customer"], "user_column": "customer"})
    assert "converted with --user customer" in note and 'user_column = "customer"' in note
    assert _row_level_note(load_config(write_config(tmp_path)), {"user_column": "customer"}) is None
    assert _row_level_note(config, {"passthrough": ["customer"]}) is None


def test_convert_counts_every_row_and_drops_rows_without_a_person_only_when_asked(tmp_path):
    from tests.pipelines.test_convert import person_csv

    person_csv(tmp_path / "panel.csv")
    lines = (tmp_path / "panel.csv").read_text().splitlines()
    lines[5] = "," + lines[5].split(",", 1)[1]  # no person id
    lines[9] = "  ," + lines[9].split(",", 1)[1]  # only spaces
    cells = lines[12].split(",")
    lines[12] = ",".join([cells[0], "", *cells[2:]])  # a missing income: dropped by --missing drop
    (tmp_path / "panel.csv").write_text("\n".join(lines) + "\n")
    args = ("convert", tmp_path / "panel.csv", tmp_path / "lake", "--label", "spend", "--user", "person")
    refused = dpstream(*args)
    assert refused.returncode == 2 and "data row 4 (line 6 of the file) has no 'person'" in refused.stderr
    assert "--drop-missing-ids" in refused.stderr and not (tmp_path / "lake").exists()
    converted = dpstream(*args, "--drop-missing-ids")
    assert converted.returncode == 0, converted.stderr
    counts = re.search(
        r"read ([\d,]+) rows, wrote ([\d,]+); ([\d,]+) spent on the private bounds .*; 1 dropped by --missing "
        r"drop / --unknown-category error; 2 without a 'person' id \(--drop-missing-ids\)",
        converted.stdout,
    )
    assert counts, converted.stdout
    read, written, bounds = (int(group.replace(",", "")) for group in counts.groups())
    assert read == len(lines) - 1 and written == read - bounds - 3
    lake_rows = sum(pq.read_metadata(path).num_rows for path in (tmp_path / "lake").glob("*.parquet"))
    assert lake_rows == written
    one_line(
        dpstream(
            "convert", tmp_path / "panel.csv", tmp_path / "rows", "--label", "spend", "--drop-missing-ids"
        ),
        2,
        "name the person column with --user",
    )
