"""The README's newcomer path, run exactly as written: CSV → convert → validate → shuffle → train → report.

The commands and the pipeline.toml are read from the README section "From a CSV to a model" and run
with the installed ``dpstream`` entry point in subprocesses, in an empty work folder holding a copy of
the California CSV. Temporary files, logs, the Prefect home and Dask's scratch space get fresh
folders of their own, so anything left outside the documented places is seen.
"""

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from examples.data import CALIFORNIA_HOUSING as HOUSING  # the CSV the README's walk starts from

ROOT = Path(__file__).resolve().parents[1]
DPSTREAM = Path(sys.executable).parent / "dpstream"  # the console script `make install` puts in .venv/bin


def readme_path(root: Path = ROOT) -> tuple[list[list[str]], str]:
    """(the commands of the section's bash block, its pipeline.toml), from ``root``'s README."""
    section = (root / "README.md").read_text().split("## From a CSV to a model", 1)[1].split("\n## ", 1)[0]
    bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(line, comments=True) for line in bash.replace("\\\n", " ").splitlines()]
    return [command for command in commands if command], toml


@pytest.fixture()
def work(tmp_path):
    folders = {name: tmp_path / name for name in ("work", "tmp", "logs", "prefect", "dask")}
    for folder in folders.values():
        folder.mkdir()
    shutil.copy(HOUSING, folders["work"] / "housing.csv")
    return folders


def run(work, command: list[str]) -> subprocess.CompletedProcess:
    assert command[0] == "dpstream", command
    env = {
        **os.environ,
        "TMPDIR": str(work["tmp"]),
        "DPSTREAM_LOG_DIR": str(work["logs"]),
        "PREFECT_HOME": str(work["prefect"]),
        "DPSTREAM_PREFECT_HOME": str(work["prefect"] / "dpstream"),  # a first run: no database yet
        "DASK_TEMPORARY_DIRECTORY": str(work["dask"]),
    }
    env.pop("PREFECT_LOGGING_LEVEL", None)  # a newcomer's shell: Prefect's own INFO default
    return subprocess.run(
        [str(DPSTREAM), *command[1:]], cwd=work["work"], env=env, capture_output=True, text=True, timeout=600
    )


def holdout_and_mean_rmse(work) -> tuple[np.ndarray, np.ndarray, float]:
    from dpstream.pipelines import read_manifest

    current = read_manifest(str(work["work"] / "lake" / "shuffled"))
    shuffled = work["work"] / "lake" / "shuffled" / current.generation
    manifest = {"features": current.features, "label": current.label}
    names = [name for name, _ in current.files]
    label = manifest["label"]
    training = np.concatenate(
        [pq.read_table(shuffled / name, columns=[label]).column(0).to_numpy() for name in names[:-1]]
    )
    held_out = pq.read_table(shuffled / names[-1])
    X = np.column_stack([held_out.column(name).to_numpy() for name in manifest["features"]])
    y = held_out.column(label).to_numpy()
    return X, y, float(np.sqrt(np.mean((y - training.mean()) ** 2)))


@pytest.mark.slow
def test_the_readme_path_from_a_csv_to_a_model(work):
    commands, toml = readme_path()
    assert [command[1] for command in commands] == [
        "convert",
        "validate",
        "shuffle",
        "train",
        "report",
        "predict",
    ]
    (work["work"] / "pipeline.toml").write_text(toml)
    source_digest = hashlib.sha256(HOUSING.read_bytes()).hexdigest()
    outputs = {}
    for command in commands:
        result = run(work, command)
        assert result.returncode == 0, (command, result.stderr[-3000:])
        # On success: progress bars at most (scatter, gather, training), no log records, no tracebacks.
        assert len(result.stderr.strip().splitlines()) <= 3 and "INFO" not in result.stderr, (
            command,
            result.stderr,
        )
        outputs[command[1]] = result.stdout
        if command[1] == "predict":  # a bar of the files scored, and the time it took
            assert re.search(r"score \S+ 1/1 files .* \d:\d\d:\d\d", result.stderr), result.stderr
    assert "Training will use 16,512 rows and hold out 4,128" in outputs["validate"]

    # A model clearly better than predicting the mean (ε = 1; AdaSSP's median held-out RMSE is about
    # 0.70 of the mean predictor's over 60 fits, its 90th percentile 0.72: BENCHMARKS.md).
    document = json.loads((work["work"] / "runs" / "first" / "model.json").read_text())
    assert document["format"] == "dpstream-model/1" and document["algorithm"] == "ssp"
    # The release guard read the held-out file at the run's μ (parallel composition: ε stays 1) and kept
    # the model, which beats the label mean by far (measured 0.70 of its RMSE).
    assert document["released"] == "model"
    assert any("the fitted model was released" in note for note in document["privacy"]["notes"])
    assert "in parallel, on disjoint contributions" in document["privacy"]["events"]
    X, y, mean_rmse = holdout_and_mean_rmse(work)
    assert X.shape[1] == len(document["features"])
    from dpstream.flows.config.pipeline import ModelConfig

    model = ModelConfig(**{"kind": document["model"]["kind"]}).build()
    rmse = float(
        np.sqrt(
            np.mean((np.clip(model.predict_margin(X, np.asarray(document["params"])), -1.0, 1.0) - y) ** 2)
        )
    )
    printed = float(
        re.search(r"held-out RMSE ([0-9.e+]+) against [0-9.e+]+ for the label mean", outputs["train"]).group(
            1
        )
    )
    # model.json applied as documented gives the reported figure, which train prints in dollars
    assert rmse * 500_001 / 2 == pytest.approx(printed, rel=1e-4)
    # California's labels are capped at $500,001 in the data, the label's public bound: equal to it, none
    # beyond, so train says nothing of clipping (a value at a bound is not a clipped one).
    assert "label bounds" not in outputs["train"]
    assert rmse < 0.85 * mean_rmse, (rmse, mean_rmse)
    assert (
        "(1, 1e-06)-DP" in outputs["report"]
        and "linear model trained with ssp: longitude, latitude" in outputs["report"]
    )
    assert "predictions map back to median_house_value by [-1, 1] → [0, 500001]" in outputs["report"]
    # predict: every lake row scored in order, in dollars, the kept column beside it.
    assert "scored 20,640 rows into 1 Parquet file(s) under predictions" in outputs["predict"]
    scored = pq.read_table(work["work"] / "predictions")
    raw = pq.read_table(work["work"] / "lake" / "raw")
    assert scored.column_names == ["median_income", "prediction"]
    # the kept column in the CSV's units (dollars ×10⁴ as in housing.csv), mapped back from the lake's [-1, 1]
    income = (raw.column("median_income").to_numpy() + 1) / 2 * 15
    np.testing.assert_allclose(scored.column("median_income").to_numpy(), income, rtol=1e-12)
    lake_X = np.column_stack([raw.column(name).to_numpy() for name in document["features"]])
    # Within the label's bounds: training clipped every label to [0, $500,001] (ModelKind.clip_outputs).
    margins = np.clip(model.predict_margin(lake_X, np.asarray(document["params"])), -1.0, 1.0)
    dollars = (margins + 1) / 2 * 500_001
    np.testing.assert_allclose(scored.column("prediction").to_numpy(), dollars, rtol=1e-12)
    assert scored.column("prediction").to_numpy().max() <= 500_001
    # model.json carries the whole public preprocessing: converting the CSV with it alone rebuilds the
    # training lake exactly, so new rows can be prepared the same way.
    from dpstream.pipelines.conversion.convert import csv_to_parquet
    from dpstream.pipelines.preprocessing.spec import ConvertSpec

    again = work["work"].parent / "again"
    csv_to_parquet(str(HOUSING), str(again), ConvertSpec.from_record(document["preprocessing"]))
    assert pq.read_table(again).equals(pq.read_table(work["work"] / "lake" / "raw"))

    # Refusals: one line each, naming the problem; nothing lost.
    again = run(work, commands[0])  # converting into the lake again
    greedy = work["work"] / "greedy.toml"
    greedy.write_text(
        toml.replace("epsilon = 1.0 ", "epsilon = 3.9 ")
    )  # past the lifetime budget with the first run
    over = run(work, ["dpstream", "train", "greedy.toml"])
    careless = work["work"] / "careless.toml"
    careless.write_text(toml.replace('shuffled_url = "lake/shuffled"', 'shuffled_url = "lake/raw"'))
    onto_source = run(work, ["dpstream", "shuffle", "careless.toml"])
    for result, code, says in (
        (again, 2, "is not empty"),
        (over, 3, "budget refused"),
        (onto_source, 2, "source"),
    ):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == code and len(lines) == 1 and says in lines[0], result.stderr[-3000:]
    assert (
        "full log: " in over.stderr
        and "Traceback" in Path(over.stderr.split("full log: ")[1].rstrip(")\n")).read_text()
    )

    # The source is unchanged, and nothing is left outside the documented places: the work folder holds
    # the CSV, the configs, the lake folders, the published runs and the operator's metrics; logs are in
    # DPSTREAM_LOG_DIR.
    assert hashlib.sha256((work["work"] / "housing.csv").read_bytes()).hexdigest() == source_digest
    assert sorted(p.name for p in work["work"].iterdir()) == [
        "careless.toml",
        "greedy.toml",
        "housing.csv",
        "lake",
        "operator",
        "pipeline.toml",
        "predictions",
        "runs",
    ]
    assert sorted(p.name for p in (work["work"] / "runs" / "first").iterdir()) == [
        "_dpstream_release.json",  # the run's claim of its publish folder
        "epsilon_delta.png",  # AdaSSP: one step, no clip-norm trace to plot
        "model.json",
        "privacy_report.md",
    ]
    # convert's ready config beside the lake (the README's own pipeline.toml is the one used here)
    assert sorted(p.name for p in (work["work"] / "lake").iterdir()) == [
        "ledger",
        "pipeline.toml",
        "raw",
        "shuffled",
    ]
    assert sorted(p.name for p in (work["work"] / "runs").iterdir()) == ["first"]
    assert list(work["tmp"].iterdir()) == [], list(work["tmp"].iterdir())
    assert all(path.suffix == ".log" for path in work["logs"].iterdir())
