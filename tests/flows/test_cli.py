"""The CLI end to end in a subprocess: real lakes, real ledger, exit codes and one-line reasons."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import dpstream as dpstream_package
from dpstream.privacy import Ledger, LifetimeBudget
from examples.california import SPEC
from examples.data import CALIFORNIA_HOUSING as HOUSING
from tests.flows.test_flows import write_config
from tests.flows.worker_speaks import WORKER_LINE
from tests.pipelines.conftest import local_put, write_lake
from tests.pipelines.test_validate import BAD_FILE_MUTATIONS

pytestmark = pytest.mark.usefixtures("cli_prefect_api")  # one Prefect API for the module's CLI runs

ROOT = Path(__file__).resolve().parents[2]
NUMERIC = list(SPEC.columns)  # the numeric columns of housing.csv (examples/california)


def dpstream(*args):
    return subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def config_text(tmp_path, raw, **overrides):
    values = {"url": raw, "shuffled": tmp_path / "shuffled", "ledger": tmp_path / "ledger", "epsilon": 1.0}
    values.update(overrides)
    features = ", ".join(f'"{c}"' for c in NUMERIC + ["ocean_proximity=INLAND"])
    return f"""
[lake]
url = "{values["url"]}"
features = [{features}]
label = "median_house_value"
shuffled_url = "{values["shuffled"]}"
rows_per_file = 5000

[budget]
epsilon = {values["epsilon"]}
delta = 1e-6
lifetime_epsilon = 8.0
ledger_url = "{values["ledger"]}"
"""


@pytest.mark.slow
def test_convert_validate_shuffle_on_real_data(tmp_path):
    raw = tmp_path / "raw"
    common = [
        "--label",
        "median_house_value",
        "--missing",
        "impute",
        "--impute",
        "total_bedrooms=400",
        "--categorical",
        "ocean_proximity=<1H OCEAN,INLAND,ISLAND,NEAR BAY,NEAR OCEAN",
    ]
    # With --public-bounds-only, a numeric column without public bounds (here all but median_income and the
    # label) is refused, naming each.
    unbounded = dpstream(
        "convert",
        HOUSING,
        raw,
        "--columns",
        *NUMERIC,
        *common,
        "--bounds",
        "median_income=0,10",
        "median_house_value=0,500001",
        "--public-bounds-only",
    )
    assert unbounded.returncode == 2 and len(unbounded.stderr.strip().splitlines()) == 1
    assert "no public bounds for 'longitude', 'latitude', 'housing_median_age'" in unbounded.stderr
    assert "--bounds longitude=LOW,HIGH latitude=LOW,HIGH" in unbounded.stderr and not raw.exists()
    bounds = [
        f"{column}={low:g},{high:g}"
        for column, (low, high) in SPEC.bounds.items()
        if column != "median_income"
    ]
    converted = dpstream(
        "convert", HOUSING, raw, "--columns", *NUMERIC, *common, "--bounds", "median_income=0,10", *bounds
    )
    assert converted.returncode == 0, converted.stderr
    assert pq.read_table(raw).num_rows == 20_640
    income = pq.read_table(raw, columns=["median_income"]).column(0).to_numpy()
    assert (
        income.min() >= -1.0 and income.max() == 1.0 and income.min() < -0.9
    )  # [0, 10] onto the default [-1, 1]
    unit = dpstream(
        "convert",
        HOUSING,
        tmp_path / "unit",
        "--columns",
        "median_income",
        "--label",
        "median_house_value",
        "--bounds",
        "median_income=0,10",
        "--unscaled",
        "median_house_value",
        "--scale-range",
        "0",
        "1",
        "--no-config",  # the first conversion wrote pipeline.toml here
    )
    assert unit.returncode == 0, unit.stderr
    table = pq.read_table(tmp_path / "unit")
    assert table.column("median_income").to_numpy().min() >= 0.0  # [0, 10] onto [0, 1]
    assert (
        table.column("median_house_value").to_numpy().max() == 500_001.0
    )  # declared unscaled: kept as it is
    bad = dpstream(
        "convert",
        HOUSING,
        tmp_path / "bad",
        "--columns",
        "median_income",
        "--label",
        "median_house_value",
        "--unscaled",
        "median_income",
        "median_house_value",
        "--scale-range",
        "1",
        "-1",
        "--no-config",
    )
    assert bad.returncode == 2 and "scale_range must be finite with low < high" in bad.stderr
    config = tmp_path / "housing.toml"
    config.write_text(config_text(tmp_path, raw))
    validated = dpstream("validate", config)
    assert validated.returncode == 0, validated.stderr
    assert "20,640 rows" in validated.stdout and "fingerprint lake-" in validated.stdout
    # A progress bar on stderr: files checked, and the time taken (while it runs: the time left).
    assert re.fullmatch(r"validate \S+ 1/1 files .* \d:\d\d:\d\d\s*", validated.stderr), validated.stderr
    assert dpstream("validate", config, "--quiet").stderr == ""
    # What training will use, before anything is shuffled: the layout the shuffle then writes.
    assert (
        "Training will use 16,512 rows and hold out 4,128 (the last of 5 shuffled files)" in validated.stdout
    )
    shuffled = dpstream("shuffle", config)
    assert shuffled.returncode == 0, shuffled.stderr
    assert "20,640 rows in 5 files" in shuffled.stdout
    again = dpstream("shuffle", config)  # a complete manifest: nothing to do
    assert again.returncode == 0 and again.stdout == shuffled.stdout and again.stderr == ""  # and no bar at 0
    config.write_text(config_text(tmp_path, raw).replace("rows_per_file = 5000", "rows_per_file = 2000"))
    changed = dpstream("shuffle", config, "--quiet")  # another layout: reported, never silently reused
    assert (
        changed.returncode == 2 and "--reshuffle" in changed.stderr and len(changed.stderr.splitlines()) == 1
    )
    reshuffled = dpstream("shuffle", config, "--quiet", "--reshuffle")
    assert reshuffled.returncode == 0 and "20,640 rows in 11 files" in reshuffled.stdout, reshuffled.stderr


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    raw = tmp_path / "raw"
    config = tmp_path / "bad.toml"
    config.write_text(config_text(tmp_path, raw, epsilon=-1))
    cases = [
        dpstream("validate", config),  # bad config value
        dpstream("validate", tmp_path / "missing.toml"),  # no config
        dpstream(
            "convert", tmp_path / "none.csv", raw, "--columns", "a", "--label", "b", "--unscaled", "a", "b"
        ),  # no CSV
        dpstream(
            "convert",
            HOUSING,
            raw,
            "--columns",
            "ocean_proximity",
            "--label",
            "median_house_value",
            "--unscaled",
            "ocean_proximity",
            "median_house_value",
        ),  # not numeric
        dpstream("budget", "reset", "lake-x", "--ledger", tmp_path / "ledger"),  # no such ledger
        dpstream(
            "convert",
            HOUSING,
            raw,
            "--columns",
            "median_income",
            "--label",
            "median_house_value",
            "--bounds",
            "median_income=0",
        ),  # malformed bounds
    ]
    for result in cases:
        assert result.returncode == 2, (result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dpstream: ")
    assert "budget.epsilon: Input should be greater than 0" in cases[0].stderr
    assert "is not numeric" in cases[3].stderr
    assert "--bounds must look like COLUMN=LOW,HIGH" in cases[5].stderr
    # CLI errors point at commands and config keys, not at Python classes alone.
    assert (
        "`dpstream validate CONFIG` prints it" in cases[4].stderr and "budget.ledger_url" in cases[4].stderr
    )
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
    assert "restores no privacy" in reset.stdout and "budget show lake-abc" in reset.stdout
    assert Ledger(ledger_url).lake("lake-abc").spent_mu() == 0.0
    assert any(name.startswith("archived-") for name in os.listdir(tmp_path / "ledger" / "lake-abc"))
    after = dpstream("budget", "show", "lake-abc", "--ledger", ledger_url)
    lines = after.stdout.splitlines()
    assert after.returncode == 0 and "0 run(s), spent epsilon=0" in lines[0]
    # The archive stays visible, with its spend and the plain statement that a reset gives nothing back.
    assert re.match(r"reset \d{8}T\d{6}Z: 1 earlier run\(s\) archived, mu=0.3 ", lines[1])
    assert "not restored to the individuals" in lines[1] and lines[2].strip().startswith("run-1: mu=0.3")


def test_help_everywhere():
    for args in (
        [],
        ["validate"],
        ["convert"],
        ["shuffle"],
        ["budget"],
        ["train"],
        ["serve"],
        ["demo"],
        ["report"],
    ):
        result = dpstream(*args, "--help")
        assert result.returncode == 0 and "usage: dpstream" in result.stdout


def test_version_prints_the_package_version():
    result = dpstream("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"dpstream {dpstream_package.__version__}"


def test_console_script_installed():
    script = Path(sys.executable).parent / "dpstream"
    assert script.exists(), "reinstall with `make test` (the console script comes from pyproject.toml)"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "validate" in result.stdout


@pytest.mark.slow
def test_bad_lakes_exit_2_naming_the_file(tmp_path, s3_server):
    """The data plane's bad inputs reach the user as exit code 2 and the validator's one-line reason."""
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw)
    path = raw / "day=02.parquet"
    original, original_bytes = pq.read_table(path), path.read_bytes()
    damages = [
        (lambda mutate=mutate: pq.write_table(mutate(original), path), match)
        for mutate, match in BAD_FILE_MUTATIONS
    ]
    damages.append(
        (
            lambda: path.write_bytes(original_bytes[: len(original_bytes) // 2]),
            r"day=02.parquet is corrupt or truncated",
        )
    )
    for damage, match in damages:
        damage()
        result = dpstream("validate", config)
        path.write_bytes(original_bytes)
        assert result.returncode == 2, (match, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and re.search(match, lines[0]), (match, lines)
    # Through the whole train flow: refused before anything is shuffled or charged.
    pq.write_table(BAD_FILE_MUTATIONS[0][0](original), path)
    trained = dpstream("train", config, "--quiet")
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert re.search(BAD_FILE_MUTATIONS[0][1], trained.stderr.strip().splitlines()[-1])
    assert not (tmp_path / "shuffled").exists() and not (tmp_path / "ledger").exists()
    # An S3 location that cannot be read (no such bucket on the moto server).
    remote = tmp_path / "remote.toml"
    remote.write_text(
        config.read_text()
        .replace(f'url = "{raw}"', 'url = "s3://no-such-bucket/lake"')
        .replace(
            "rows_per_file = 4000",
            f'rows_per_file = 4000\nstorage_options = {{ key = "testing", secret = "testing", '
            f'client_kwargs = {{ endpoint_url = "{s3_server}" }} }}',
        )
    )
    result = dpstream("validate", remote)
    assert (
        result.returncode == 2 and "cannot read the lake location s3://no-such-bucket/lake" in result.stderr
    )


def test_serve_refuses_a_missing_or_bad_schedule(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=2, rows=100)
    config = write_config(tmp_path, raw)
    missing = dpstream("serve", config)
    assert missing.returncode == 2 and "no schedule; pass --cron" in missing.stderr
    bad = dpstream("serve", config, "--cron", "61 * * * *")
    assert bad.returncode == 2 and "--cron '61 * * * *'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_train_output_inside_the_lake_is_refused_before_anything_starts(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw)
    before = sorted(p.name for p in raw.iterdir())
    refused = dpstream("train", config, "--run-id", "r", "--output", raw / "out", "--quiet")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "lies inside the source lake" in lines[0], (
        refused.stderr[-2000:]
    )
    assert "full log" not in lines[0]  # refused before the flow (and its log) started
    assert sorted(p.name for p in raw.iterdir()) == before and not (tmp_path / "ledger").exists()


def test_convert_with_private_bounds(tmp_path):
    """By default every numeric column without --bounds or --unscaled gets private bounds: the lake holds
    the other rows, the output states the released bounds and their guarantee; naming a column that is
    not selected with --private-bounds exits 2 with one line."""
    common = ["--label", "median_house_value", "--columns", "median_income", "housing_median_age"]
    result = dpstream("convert", HOUSING, tmp_path / "raw", *common, "--bounds", "housing_median_age=0,60")
    assert result.returncode == 0, result.stderr
    assert "private bounds median_income=[" in result.stdout and "(1, 1e-06)-DP" in result.stdout
    assert "not in the lake" in result.stdout and "housing_median_age=[" not in result.stdout
    record = json.loads((tmp_path / "raw" / "_convert.json").read_text())
    assert record["private_bounds"]["columns"] == ["median_income", "median_house_value"]
    assert record["bounds"]["housing_median_age"] == [0.0, 60.0]
    assert pq.read_table(tmp_path / "raw").num_rows == 20_640 - 2_064
    bad = dpstream(
        "convert", HOUSING, tmp_path / "other", *common, "--private-bounds", "latitude", "--no-config"
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "private bounds name column 'latitude'" in bad.stderr and not (tmp_path / "other").exists()


def test_predict_refuses_a_missing_model_before_starting_a_cluster(tmp_path):
    result = dpstream("predict", tmp_path / "runs" / "nothing", tmp_path / "lake", tmp_path / "out")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "no model.json there" in result.stderr and not (tmp_path / "out").exists()


def test_convert_names_a_misspelt_label_before_asking_for_its_bounds(tmp_path):
    result = dpstream(
        "convert", HOUSING, tmp_path / "raw", "--columns", "median_income", "--label", "house_value",
        "--bounds", "median_income=0,15",
    )  # fmt: skip
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "column 'house_value' is not in the CSV (columns: longitude" in result.stderr
    assert "no public bounds" not in result.stderr and not (tmp_path / "raw").exists()


def test_the_nannys_warnings_and_closed_comms_go_to_the_log_file_not_the_terminal(tmp_path):
    """What the command's own process logs while its LocalCluster closes: a nanny killing a worker still
    busy after 4 s, a comm closed under a heartbeat. Both reached the terminal on a large lake; after
    ``capture_logs`` they are in the log file only."""
    log = tmp_path / "command.log"
    script = (
        "import logging, sys\n"
        "from dpstream.flows.cli.log_file import capture_logs\n"
        "capture_logs(sys.argv[1], prefect=False)\n"
        "logging.getLogger('distributed.nanny').warning('Worker process still alive after 4.0 seconds, killing')\n"
        "logging.getLogger('distributed.core').error('CommClosedError: in <TCP (closed)>')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(log)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result.stderr
    text = log.read_text()
    assert "WARNING | distributed.nanny - Worker process still alive" in text and "CommClosedError" in text


def test_validate_and_shuffle_send_dask_output_to_their_log_file(tmp_path):
    """The LocalCluster's scheduler, nanny and worker processes write to the command's log file, never to
    the terminal: a worker's heartbeat that fails while the cluster closes printed a traceback there.
    A preload of the user's own prints from every worker process, so a stray stream shows, and is kept."""
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=3, rows=3000)
    config = write_config(tmp_path, raw)
    logs = tmp_path / "logs"
    environment = {
        **os.environ,
        "DASK_DISTRIBUTED__WORKER__PRELOAD": '["tests.flows.worker_speaks"]',
        "DPSTREAM_LOG_DIR": str(logs),
    }
    for command, *options in (["validate"], ["shuffle", "--quiet"]):
        result = subprocess.run(
            [sys.executable, "-m", "dpstream.flows.cli.main", command, str(config), *options],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=environment,
        )
        assert result.returncode == 0, result.stderr
        assert WORKER_LINE not in result.stderr and "Traceback" not in result.stderr, result.stderr
        (log,) = logs.glob(f"*-{command}-pipeline.log")
        assert WORKER_LINE in log.read_text(), log.read_text()[-2000:]
