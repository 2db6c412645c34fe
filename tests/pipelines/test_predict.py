"""Published models back in Python (dpstream.export) and batch scoring of a lake (dpstream.pipelines.execution.predict)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.algorithms import AdaSSP
from dpstream.export import ModelDocument, read_model
from dpstream.models import KANModel
from dpstream.pipelines import LakeError
from dpstream.pipelines.execution.predict import predict_lake
from dpstream.pipelines.preprocessing.spec import ConvertSpec

from .conftest import DIM, local_put, make_table, write_lake

FEATURES = [f"x{j}" for j in range(DIM)]
PARAMS = np.linspace(-0.4, 0.5, DIM)


def document(kind: str = "linear", params=PARAMS, **extra) -> dict:
    """A model.json as the train flow writes it (dpstream.export.model_document), with a real AdaSSP report."""
    algorithm = AdaSSP(1.0, 1e-6)
    report = algorithm.report(algorithm.plan(10_000, DIM))
    return {
        "format": "dpstream-model/1",
        "run_id": "r1",
        "model": {"kind": kind, **extra},
        "features": FEATURES,
        "label": "y",
        "algorithm": "ssp",
        "lake_fingerprint": "f",
        "preprocessing": ConvertSpec(
            columns=tuple(FEATURES), label="y", bounds={"y": (0.0, 500.0)}, scale_range=(-1.0, 1.0)
        ).record(),
        "params": list(map(float, params)),
        "privacy": report.to_dict(),
    }


def lake_rows(root: str) -> pd.DataFrame:
    return pd.concat([pq.read_table(os.path.join(root, n)).to_pandas() for n in sorted(os.listdir(root))])


def test_predictions_in_label_units_row_for_row_on_the_cluster(tmp_path, lake, dask_client):
    model = ModelDocument.from_dict(document())
    out = str(tmp_path / "scored")
    summary = predict_lake(model, lake.url, out, client=dask_client, keep=("row_id",), batch_rows=1000)
    assert summary.rows == 20_000 and [os.path.basename(p) for p in summary.files] == [
        f"part-{i:05d}.parquet" for i in range(4)
    ]
    source = lake_rows(lake.url)
    scored = pd.concat([pq.read_table(p).to_pandas() for p in summary.files])
    assert scored["row_id"].tolist() == source["row_id"].tolist()  # one output file per input, same order
    margins = source[FEATURES].to_numpy(np.float64) @ PARAMS
    # Within the label's bounds [0, 500]: training clipped every label there (ModelKind.clip_outputs).
    expected = 250.0 + 250.0 * np.clip(margins, -1.0, 1.0)
    np.testing.assert_allclose(scored["prediction"].to_numpy(), expected, rtol=1e-12)
    assert (margins > 1).any() and (margins < -1).any()  # the clip is exercised
    record = json.loads((tmp_path / "scored" / "_predict.json").read_text())
    assert record["model_run_id"] == "r1" and record["rows"] == [5000] * 4
    assert sorted(os.listdir(out)) == ["_predict.json"] + [f"part-{i:05d}.parquet" for i in range(4)]


def test_reordered_columns_score_the_same_and_the_source_is_only_read(tmp_path):
    root = tmp_path / "lake"
    tables = [make_table(700, seed) for seed in range(2)]
    local_put(str(root / "a.parquet"), tables[0])
    shuffled = tables[1].select(list(reversed(tables[1].column_names)))  # same columns, another order
    local_put(str(root / "b.parquet"), shuffled)
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.iterdir()}
    model = ModelDocument.from_dict(document("logistic"))
    summary = predict_lake(model, str(root), str(tmp_path / "out"), batch_rows=128)
    scored = pd.concat([pq.read_table(p).to_pandas() for p in summary.files])
    X = np.vstack([t.select(FEATURES).to_pandas().to_numpy(np.float64) for t in tables])
    margins = X @ PARAMS
    assert scored["prediction"].tolist() == (margins > 0).astype(int).tolist()
    np.testing.assert_allclose(scored["probability"].to_numpy(), 1 / (1 + np.exp(-margins)), rtol=1e-12)
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.iterdir()} == digest


def test_refusals_name_the_fix_and_write_nothing(tmp_path, lake):
    model = ModelDocument.from_dict(document())
    with pytest.raises(LakeError, match="lies inside the lake being scored"):
        predict_lake(model, lake.url, f"{lake.url}/predictions")
    with pytest.raises(LakeError, match="is the lake being scored"):
        predict_lake(model, lake.url, lake.url)
    # Inside another lake (here: the training lake, a folder of Parquet files), or inside a lake that
    # `dpstream convert` wrote at any depth: the predictions would join its rows.
    other = tmp_path / "training-lake"
    local_put(str(other / "part-00000.parquet"), make_table(10, 1))
    with pytest.raises(LakeError, match=r"lies inside .*training-lake, which holds Parquet files \(a lake\)"):
        predict_lake(model, lake.url, str(other / "scored"))
    (other / "_convert.json").write_text("{}")
    with pytest.raises(LakeError, match=r"which holds a lake written by `dpstream convert`"):
        predict_lake(model, lake.url, str(other / "a" / "b" / "scored"))
    assert sorted(os.listdir(other)) == ["_convert.json", "part-00000.parquet"]
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(LakeError, match="is not empty"):
        predict_lake(model, lake.url, str(busy))
    assert os.listdir(busy) == ["keep.txt"]
    narrow = tmp_path / "narrow"
    local_put(str(narrow / "part.parquet"), make_table(10, 0).drop_columns(["x3"]))
    with pytest.raises(LakeError, match=r"part.parquet: column 'x3' is not in the file"):
        predict_lake(model, str(narrow), str(tmp_path / "out1"))
    with pytest.raises(LakeError, match="'prediction', which is an output column"):
        predict_lake(model, lake.url, str(tmp_path / "out2"), keep=("prediction",))
    holes = tmp_path / "holes"
    table = make_table(10, 0)
    x0 = table.column("x0").to_numpy().copy()
    x0[4] = np.nan
    local_put(
        str(holes / "part.parquet"), table.set_column(table.column_names.index("x0"), "x0", pa.array(x0))
    )
    with pytest.raises(LakeError, match="row 4 has a missing or infinite feature"):
        predict_lake(model, str(holes), str(tmp_path / "out3"))
    with pytest.raises(
        LakeError, match=r"--keep names 'customer', which is not in the file .* convert --id COLUMN"
    ):
        predict_lake(model, lake.url, str(tmp_path / "out4"), keep=("customer",))
    assert not any((tmp_path / name).exists() for name in ("out1", "out3", "out4"))  # no empty folder left


def test_bad_model_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a dpstream model .*expected 'dpstream-model/1'"):
        ModelDocument.from_dict({"format": "dpstream-convert/1"})
    infinite = document()
    infinite["privacy"]["epsilon"] = float("inf")
    nan_parameter = document(params=[float("nan")] + list(PARAMS[1:]))
    edited = document()
    edited["privacy"]["epsilon"] = 0.5  # its mu still says 1.0 at its delta
    extra, missing = {**document(), "notes": "x"}, document()
    del missing["privacy"]
    path_id = {**document(), "run_id": "../../../outside/pwn"}
    for bad, match in (
        (infinite, r"privacy.epsilon is inf, not a finite number"),
        (nan_parameter, r"expected 6 finite values"),
        (edited, r"privacy.epsilon is 0.5, but its mu=.* gives epsilon=1: the report was edited"),
        (extra, r"unknown key\(s\) notes"),
        (missing, r"missing privacy"),
        (path_id, r"run_id must be 1-64 characters"),
    ):
        with pytest.raises(ValueError, match=match):
            ModelDocument.from_dict(bad)
    with pytest.raises(ValueError, match="5 parameters for a linear model of 6 features"):
        ModelDocument.from_dict(document(params=PARAMS[:5]))
    with pytest.raises(ValueError, match="unknown model kind 'tree'"):
        ModelDocument.from_dict(document("tree"))
    (tmp_path / "model.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        read_model(str(tmp_path))
    with pytest.raises(ValueError, match="no model.json there"):
        read_model(str(tmp_path / "nowhere"))


def test_models_load_into_fitted_estimators(tmp_path):
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.uniform(-1, 1, (50, DIM)), columns=FEATURES)
    (tmp_path / "model.json").write_text(json.dumps(document()))
    linear = read_model(str(tmp_path)).to_estimator()
    # As `dpstream predict` writes them: within the label's bounds [0, 500].
    expected = 250 + 250 * np.clip(frame.to_numpy() @ PARAMS, -1.0, 1.0)
    np.testing.assert_allclose(linear.predict(frame), expected, rtol=1e-12)
    far = pd.DataFrame(np.full((1, DIM), 50.0), columns=FEATURES)  # margins far outside [−1, 1]
    assert 0.0 <= linear.predict(far)[0] <= 500.0
    assert linear.predict(far)[0] == read_model(str(tmp_path)).predict(far.to_numpy())["prediction"][0]
    assert linear.privacy_report_.epsilon == pytest.approx(1.0) and list(linear.feature_names_in_) == FEATURES
    with pytest.raises(ValueError, match="feature names"):
        linear.predict(frame[list(reversed(FEATURES))])  # reordered columns are refused by name
    logistic = ModelDocument.from_dict(document("logistic")).to_estimator()
    assert logistic.predict(frame).tolist() == (frame.to_numpy() @ PARAMS > 0).astype(int).tolist()
    np.testing.assert_allclose(
        logistic.predict_proba(frame)[:, 1], 1 / (1 + np.exp(-frame.to_numpy() @ PARAMS))
    )
    settings = {
        "num_hidden": 3,
        "grid_size": 4,
        "input_map": "cube",
        "feature_low": -1.0,
        "feature_high": 1.0,
    }
    kan_model = KANModel(**settings)
    kan_params = rng.standard_normal(kan_model.num_params(DIM))
    kan_doc = ModelDocument.from_dict(document("kan", params=kan_params, **settings))
    kan = kan_doc.to_estimator()
    margins = kan_model.predict_margin(frame.to_numpy(), kan_params)
    assert kan.predict(frame).tolist() == (margins > 0).astype(int).tolist()
    np.testing.assert_allclose(kan_doc.predict(frame.to_numpy())["probability"], 1 / (1 + np.exp(-margins)))


def test_a_k_class_model_predicts_its_class_names_and_one_probability_per_class(tmp_path):
    rng = np.random.default_rng(5)
    classes = ["low", "mid", "high"]
    params = rng.standard_normal(DIM * 3)
    doc = ModelDocument.from_dict(document("logistic", params=params, classes=classes))
    X = rng.uniform(-1, 1, (40, DIM))
    margins = X @ params.reshape(DIM, 3)
    scored = doc.predict(X)
    assert doc.output_columns() == list(scored) == ["prediction", *(f"probability_{c}" for c in classes)]
    assert scored["prediction"].tolist() == [classes[k] for k in np.argmax(margins, axis=1)]
    np.testing.assert_allclose(sum(scored[f"probability_{c}"] for c in classes), 1.0)
    estimator = doc.to_estimator()
    frame = pd.DataFrame(X, columns=FEATURES)
    assert estimator.predict(frame).tolist() == scored["prediction"].tolist()
    np.testing.assert_allclose(estimator.predict_proba(frame)[:, 2], scored["probability_high"])
    with pytest.raises(ValueError, match=r"18 parameters for a logistic model of 6 features \(expected 6 "):
        ModelDocument.from_dict(document("logistic", params=params, classes=["a", "b"]))


def test_scoring_from_and_to_s3(s3_bucket):
    import s3fs

    bucket, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)

    def put(path: str, table: pa.Table) -> None:
        with fs.open(path, "wb") as handle:
            pq.write_table(table, handle, row_group_size=1500)

    write_lake(put, f"{bucket}/raw", files=2, rows=3000)
    model = ModelDocument.from_dict(document())
    summary = predict_lake(
        model, f"{bucket}/raw", f"{bucket}/scored", keep=("row_id",), storage_options=options
    )
    assert summary.rows == 6000 and len(summary.files) == 2
    with fs.open(f"{bucket}/scored/part-00001.parquet", "rb") as handle:
        scored = pq.read_table(handle).to_pandas()
    assert scored["row_id"].tolist() == list(range(3000, 6000))
    assert fs.exists(f"{bucket}/scored/_predict.json") and not fs.glob(f"{bucket}/scored/_tmp-*")


def test_the_writer_and_the_reader_of_model_json_agree():
    from dpstream.export import model_document

    algorithm = AdaSSP(1.0, 1e-6, link="softmax", num_classes=3)
    report = algorithm.report(algorithm.plan(10_000, DIM * 3))
    params = np.arange(DIM * 3, dtype=float) / 10
    written = model_document(
        model={"kind": "logistic", "classes": ["a", "b", "c"]}, features=tuple(FEATURES), label="y", run_id="r9",
        lake_fingerprint="lake-1", algorithm="ssp", params=params, report=report,
    )  # fmt: skip
    read = ModelDocument.from_dict(json.loads(json.dumps(written)))
    assert read.classes == ["a", "b", "c"] and read.run_id == "r9" and read.features == tuple(FEATURES)
    np.testing.assert_array_equal(read.params, params)
    assert read.privacy == json.loads(json.dumps(report.to_dict()))


def test_rows_are_filled_as_whole_columns_would_fill_them():
    from dpstream.pipelines.execution.predict import _fill_rows

    rng = np.random.default_rng(0)
    for rows in (0, 1, 4095, 65_536 + 17):
        columns = [rng.standard_normal(rows).astype(np.float32) for _ in range(3)]
        columns += [rng.standard_normal(rows), rng.integers(-(2**60), 2**60, rows), rng.random(rows) < 0.5]
        X = np.empty((rows, len(columns)))
        _fill_rows(X, columns)
        expected = np.empty_like(X)
        for j, values in enumerate(columns):
            expected[:, j] = values  # an assignment's cast, int64 rounding included
        assert np.array_equal(X, expected) and X.shape == (rows, 6)


def test_rows_prepared_on_read_score_the_same_straight_into_the_matrix(tmp_path, lake, monkeypatch):
    """A model prepared on read from bounded and kept columns (and an intercept) scores a batch
    by mapping it straight into its matrix (``map_rows_into``); the predictions are those of the usual
    path (``convert_rows``, then the fill) bit for bit, and a batch with a missing value takes that path."""
    from dpstream.pipelines.execution import predict

    spec = ConvertSpec(
        columns=tuple(FEATURES),
        label="y",
        bounds={name: (-2.0, 2.5) for name in FEATURES[:3]},
        scale_range=(-1.0, 1.0),
        unscaled=tuple(FEATURES[3:]),
        missing="impute",
        impute_values=dict.fromkeys(FEATURES, 0.0),
        intercept=True,
        on_read=True,
    )
    params = np.linspace(-0.4, 0.5, DIM + 1)
    model = ModelDocument.from_dict(
        {**document(params=params), "features": [*FEATURES, "intercept"], "preprocessing": spec.record()}
    )
    direct_batches = []
    original = predict.map_rows_into

    def counted(*args):
        direct_batches.append(original(*args))
        return direct_batches[-1]

    monkeypatch.setattr(predict, "map_rows_into", counted)
    straight = predict_lake(model, lake.url, str(tmp_path / "straight"), batch_rows=1000)
    assert direct_batches and all(direct_batches)
    monkeypatch.setattr(predict, "_direct_bounds", lambda *args: None)
    usual = predict_lake(model, lake.url, str(tmp_path / "usual"), batch_rows=1000)
    for mine, theirs in zip(straight.files, usual.files, strict=True):
        assert pq.read_table(mine).equals(pq.read_table(theirs))
    # A batch with a missing value: the usual path imputes it.
    monkeypatch.undo()
    root = tmp_path / "holes"
    table = make_table(300, 4)
    values = table.column(FEATURES[0]).to_pylist()
    values[0] = None
    index = table.schema.get_field_index(FEATURES[0])
    local_put(
        str(root / "a.parquet"),
        table.set_column(index, pa.field(FEATURES[0], pa.float32()), pa.array(values, pa.float32())),
    )
    scored = pq.read_table(predict_lake(model, str(root), str(tmp_path / "holes-out")).files[0])
    assert scored.num_rows == 300 and np.isfinite(scored.column("prediction").to_numpy()).all()
