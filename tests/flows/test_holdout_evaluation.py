"""The held-out evaluation (non-private, operator only) of a regression on a preprocessed lake: in the label's
units, against each row's label as it was before clipping, beside the constant predictor's RMSE, with the
share of labels clipped, not the share that merely equals a bound (``dpstream.flows.assembly.evaluation``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.assembly.planning import evaluate_holdout, lake_preprocessing
from dpstream.models.kinds.base import AT_BOUNDS_LABELS, CLIPPED_LABELS, summarise
from dpstream.pipelines import shuffle_once
from dpstream.pipelines.conversion.convert import csv_to_parquet
from dpstream.pipelines.preprocessing.spec import RAW_LABEL_COLUMN, ConvertSpec

RMSE, CONSTANT = "held-out RMSE (non-private, operator only)", "held-out RMSE of the label mean (baseline)"

TOML = """
[lake]
url = "{lake}"
features = ["x", "intercept"]
label = "{label}"
shuffled_url = "{folder}/shuffled"
rows_per_file = 1000

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 4.0
ledger_url = "{folder}/ledger"
"""


def flights(rows: int = 5000, seed: int = 1) -> pa.Table:
    """Delays in minutes: a heavy right tail past the public bound of 60 (about a tenth of the rows)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, rows)
    return pa.table({"x": x, "delay": np.round(-40 + 60 * x + rng.gamma(0.6, 40, rows), 0)})


def visits(rows: int = 5000, seed: int = 2) -> pa.Table:
    """Doctor visits, counts 0..9: about a third genuine zeros at the lower bound, none past either bound."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, rows)
    return pa.table({"x": x, "visits": np.minimum(rng.poisson(np.exp(-1.2 + 1.8 * x)), 9).astype(float)})


def convert(tmp_path: Path, table: pa.Table, label: str, bounds: tuple[float, float]) -> Path:
    """``dpstream convert``'s conversion of ``table`` as a CSV, and a pipeline config for its lake."""
    pcsv.write_csv(table, tmp_path / "source.csv")
    prepare = ConvertSpec(
        columns=("x",), label=label, bounds={"x": (0, 1), label: bounds}, scale_range=(-1, 1), intercept=True
    )
    csv_to_parquet(str(tmp_path / "source.csv"), str(tmp_path / "lake"), prepare)
    config = tmp_path / "pipeline.toml"
    config.write_text(TOML.format(lake=tmp_path / "lake", label=label, folder=tmp_path))
    return config


def evaluated(config_path: Path) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(evaluate_holdout's metrics for a least-squares fit on the training files, the held-out rows as the
    shuffle wrote them: prediction, label and raw label in the label's units), the lake shuffled and its
    preprocessing read as the train flow does (``RunInputs``, ``lake_preprocessing``)."""
    inputs = load_inputs(str(config_path))
    lake = inputs.lake
    manifest = shuffle_once(lake, inputs.config.lake.shuffled_url, rows_per_file=1000)
    training, holdout = manifest.split_last_file()
    root = Path(inputs.config.lake.shuffled_url) / manifest.generation

    def rows(parts) -> pa.Table:
        return pa.concat_tables([pq.read_table(root / part.name) for part in parts])

    train, held = rows(training.parts), rows(holdout.parts)
    design = lambda table: np.column_stack([table.column(name).to_numpy() for name in lake.features])  # noqa: E731
    params = np.linalg.lstsq(design(train), train.column(lake.label).to_numpy(), rcond=None)[0]
    record = lake_preprocessing(inputs)
    model = inputs.config.model.build()
    planned = SimpleNamespace(holdout=holdout, plan=SimpleNamespace(model=model), preprocessing=record)
    metrics = evaluate_holdout(inputs.config, planned, params)
    spec = ConvertSpec.from_record(record)
    units = {
        "prediction": spec.original_units(lake.label, design(held) @ params),
        "label": spec.original_units(lake.label, held.column(lake.label).to_numpy()),
        "raw": held.column(RAW_LABEL_COLUMN).to_numpy() if RAW_LABEL_COLUMN in held.column_names else None,
    }
    return metrics, units


def rmse(error: np.ndarray) -> float:
    return float(np.sqrt(np.mean(error**2)))


def test_clipped_labels_are_scored_by_their_raw_values_in_the_labels_units(tmp_path):
    metrics, held = evaluated(convert(tmp_path, flights(), "delay", (-30, 60)))
    raw = held["raw"]
    clipped = (raw < -30) | (raw > 60)
    assert metrics[CLIPPED_LABELS] == pytest.approx(clipped.mean()) and clipped.mean() > 0.05
    assert AT_BOUNDS_LABELS not in metrics
    # In minutes, against the raw delays: the model's RMSE and the constant's beside it.
    assert metrics[RMSE] == pytest.approx(rmse(held["prediction"] - raw), rel=1e-9)
    assert metrics[CONSTANT] == pytest.approx(rmse(raw - raw.mean()), rel=1e-9)
    # Against the clipped labels both figures were smaller: that score flattered the model.
    assert rmse(held["prediction"] - held["label"]) < 0.8 * metrics[RMSE]
    line = summarise(metrics)
    assert f"held-out RMSE {metrics[RMSE]:.6g} against {metrics[CONSTANT]:.6g} for the label mean" in line
    assert f"{clipped.mean():.1%} of the held-out labels lie beyond the preprocessing's label bounds" in line


def test_a_table_read_with_preprocess_is_scored_by_its_stored_labels(tmp_path):
    """No conversion: the table holds the delays in minutes, [preprocess] clips them as the shuffle reads
    them, and the shuffle keeps each one as stored."""
    source = flights()
    (tmp_path / "table").mkdir()
    pq.write_table(source, tmp_path / "table" / "part-0.parquet")
    config = tmp_path / "pipeline.toml"
    text = TOML.format(lake=tmp_path / "table", label="delay", folder=tmp_path).replace(', "intercept"', "")
    config.write_text(text + "\n[preprocess.bounds]\nx = [0, 1]\ndelay = [-30, 60]\n")
    metrics, held = evaluated(config)
    raw = held["raw"]
    assert np.isin(raw, source.column("delay").to_numpy()).all()
    clipped = np.mean((raw < -30) | (raw > 60))
    assert metrics[CLIPPED_LABELS] == pytest.approx(clipped) and clipped > 0.05
    assert metrics[RMSE] == pytest.approx(rmse(held["prediction"] - raw), rel=1e-9)
    assert metrics[CONSTANT] == pytest.approx(rmse(raw - raw.mean()), rel=1e-9)


def test_counts_at_their_natural_lower_bound_are_not_called_clipped(tmp_path):
    metrics, held = evaluated(convert(tmp_path, visits(), "visits", (0, 9)))
    assert np.mean(held["raw"] == 0) > 0.25  # a third of the labels equal the lower bound ...
    assert metrics[CLIPPED_LABELS] == 0.0  # ... and none was clipped
    assert metrics[RMSE] == pytest.approx(rmse(held["prediction"] - held["raw"]), rel=1e-9)
    line = summarise(metrics)
    assert "bounds" not in line and f"against {metrics[CONSTANT]:.6g} for the label mean" in line


def test_a_lake_without_raw_labels_says_it_cannot_tell_clipped_from_equal(tmp_path):
    config = convert(tmp_path, visits(), "visits", (0, 9))
    for part in (tmp_path / "lake").glob(
        "part-*.parquet"
    ):  # as `dpstream convert` wrote it before raw labels
        pq.write_table(pq.read_table(part).drop_columns([RAW_LABEL_COLUMN]), part)
    metrics, held = evaluated(config)
    assert held["raw"] is None and CLIPPED_LABELS not in metrics
    assert metrics[AT_BOUNDS_LABELS] == pytest.approx(np.mean(np.isin(held["label"].round(6), [0, 9])))
    assert metrics[RMSE] == pytest.approx(rmse(held["prediction"] - held["label"]), rel=1e-9)
    line = summarise(metrics)
    assert "clipped there or equal to a bound" in line and "keeps no raw labels" in line


@pytest.mark.slow
def test_the_train_flow_writes_the_raw_unit_metrics_for_the_operator(tmp_path, prefect_api):
    from dpstream.flows.flows import train_flow
    from dpstream.pipelines import read_manifest

    config = convert(tmp_path, flights(), "delay", (-30, 60))
    result = train_flow(str(config), run_id="raw-1", output_dir=str(tmp_path / "out"))
    document = json.loads((tmp_path / "out" / "model.json").read_text())
    assert "held-out" not in json.dumps(document)  # operator-only figures never enter the release
    manifest = read_manifest(str(tmp_path / "shuffled"))
    held = pq.read_table(tmp_path / "shuffled" / manifest.generation / manifest.parts[-1].name)
    spec = ConvertSpec.from_record(document["preprocessing"])
    X = np.column_stack([held.column(name).to_numpy() for name in document["features"]])
    prediction = spec.original_units("delay", X @ np.asarray(document["params"]))
    raw = held.column(RAW_LABEL_COLUMN).to_numpy()
    metrics = json.loads((tmp_path / "operator" / "raw-1" / "metrics.json").read_text())["metrics"]
    assert metrics == result["metrics"]
    assert metrics[RMSE] == pytest.approx(rmse(prediction - raw), rel=1e-9)
    assert metrics[CONSTANT] == pytest.approx(rmse(raw - raw.mean()), rel=1e-9)
    assert metrics[CLIPPED_LABELS] == pytest.approx(np.mean((raw < -30) | (raw > 60)))
