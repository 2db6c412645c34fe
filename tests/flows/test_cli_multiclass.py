"""A string-labelled, three-class CSV from `dpstream convert` to `dpstream predict` with the commands of
docs/lakes.md ("String and multi-class labels"): the label's public class list, an id carried through,
features picked without typing them, the generated pipeline.toml, accuracy beside the majority class,
predictions in the classes' spelling and the kept columns in the CSV's units. Plus each bad input
convert handles, refused with nothing written."""

import csv
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.flows.test_cli import dpstream

pytestmark = pytest.mark.usefixtures("cli_prefect_api")

CLASSES = ("low", "mid", "high")  # the public class list, in an order that is not alphabetical


def write_csv(path, rows=6000, seed=0):
    rng = np.random.default_rng(seed)
    grade = rng.integers(3, size=rows)
    income = 20_000 + 30_000 * grade + rng.normal(0, 8_000, rows)  # dollars
    age = 30 + 10 * grade + rng.normal(0, 6, rows)  # years
    region = np.where(rng.random(rows) < 0.5, "north", "south")
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["customer", "income", "age", "region", "grade"])
        for i in range(rows):
            writer.writerow([f"C{i:05d}", f"{income[i]:.0f}", f"{age[i]:.1f}", region[i], CLASSES[grade[i]]])


@pytest.mark.slow
def test_three_class_csv_from_convert_to_predict(tmp_path):
    source = tmp_path / "grades.csv"
    write_csv(source)
    before = source.read_bytes()
    lake = tmp_path / "lake"
    converted = dpstream(
        "convert", source, lake, "--label", "grade", "--label-classes", ",".join(CLASSES), "--id", "customer",
        "--categorical", "region=north,south",
    )  # fmt: skip
    assert converted.returncode == 0, converted.stderr
    config = tmp_path / "pipeline.toml"
    text = config.read_text()
    assert (
        'features = ["income", "age", "region=north", "region=south", "intercept"]' in text
    )  # nobody typed them
    assert 'kind = "logistic"' in text and 'classes = ["low", "mid", "high"]' in text
    record = json.loads((lake / "_convert.json").read_text())
    assert record["label_classes"] == list(CLASSES) and record["passthrough"] == ["customer"]
    table = pq.read_table(lake)
    # every 10th CSV row went to the private bounds' sample; the others keep their id, in order
    assert set(table.column("grade").to_pylist()) == {0, 1, 2}
    assert table.column("customer").to_pylist() == [f"C{i:05d}" for i in range(6000) if i % 10]

    validated = dpstream("validate", config)
    assert validated.returncode == 0, validated.stderr
    trained = dpstream("train", config, "--run-id", "grades-1", "--quiet")
    assert trained.returncode == 0, trained.stderr
    line = next(line for line in trained.stdout.splitlines() if line.startswith("held-out accuracy"))
    accuracy, majority = (float(v) for v in line.split()[2:5:2])  # "held-out accuracy A against B for ..."
    assert "for the majority class" in line and 0.30 < majority < 0.40 and accuracy > majority + 0.3, line
    model = json.loads((tmp_path / "runs" / "grades-1" / "model.json").read_text())
    assert model["model"]["classes"] == list(CLASSES) and len(model["params"]) == 5 * 3

    report = dpstream(
        "report", tmp_path / "runs" / "grades-1", "--operator", tmp_path / "operator" / "grades-1"
    )
    assert report.returncode == 0, report.stderr
    assert "classes of grade (public, in the order of its codes): low, mid, high" in report.stdout
    assert "for the majority class" in report.stdout

    out = tmp_path / "scored"
    scored = dpstream(
        "predict", tmp_path / "runs" / "grades-1", lake, out, "--keep", "customer", "income", "grade"
    )
    assert scored.returncode == 0, scored.stderr
    assert "prediction, probability_low, probability_mid, probability_high" in scored.stdout
    predictions = pq.read_table(out).to_pandas()
    assert predictions.columns.tolist() == ["customer", "income", "grade", "prediction", "probability_low",
                                            "probability_mid", "probability_high"]  # fmt: skip
    assert predictions["customer"].tolist() == table.column("customer").to_pylist()  # the id, untouched
    assert set(predictions["prediction"]) <= set(CLASSES) and set(predictions["grade"]) == set(CLASSES)
    np.testing.assert_allclose(predictions.filter(like="probability_").sum(axis=1), 1.0)
    assert (predictions["prediction"] == predictions["grade"]).mean() > 0.7
    assert predictions["income"].median() > 1_000  # dollars again, not the lake's [-1, 1]
    assert source.read_bytes() == before


def test_convert_refusals_name_the_fix_and_write_nothing(tmp_path):
    source = tmp_path / "grades.csv"
    write_csv(source, rows=400)
    lake = tmp_path / "lake"
    text_column = dpstream("convert", source, lake, "--label", "grade", "--label-classes", "low,mid,high")
    assert text_column.returncode == 2 and "column(s) 'customer', 'region' hold text" in text_column.stderr
    assert "--categorical COLUMN=A,B,C" in text_column.stderr and "--id COLUMN" in text_column.stderr
    unknown = dpstream(
        "convert", source, lake, "--label", "grade", "--label-classes", "low,mid", "--id", "customer",
        "--drop", "region", "--no-config",
    )  # fmt: skip
    assert (
        unknown.returncode == 2 and "'high', not one of the public classes ['low', 'mid']" in unknown.stderr
    )
    assert "--unknown-category drop" in unknown.stderr and not lake.exists()
    dropped = dpstream(
        "convert", source, lake, "--label", "grade", "--label-classes", "low,mid", "--id", "customer",
        "--drop", "region", "--unknown-category", "drop", "--bounds", "income=0,200000", "age=0,100",
    )  # fmt: skip
    assert dropped.returncode == 0, dropped.stderr
    assert set(pq.read_table(lake).column("grade").to_pylist()) == {0, 1}
    assert 'classes = ["low", "mid"]' in (tmp_path / "pipeline.toml").read_text()
    again = dpstream(
        "convert", source, tmp_path / "other", "--label", "grade", "--label-classes", "low,mid,high",
        "--id", "customer", "--drop", "region",
    )  # fmt: skip
    assert again.returncode == 2 and "pipeline.toml already exists and is never overwritten" in again.stderr
    assert not (tmp_path / "other").exists()
