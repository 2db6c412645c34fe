"""train_flow under Prefect's test harness (ephemeral API): every step real, ledger charged once."""

import json
import logging
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.privacy import Ledger
from tests.pipelines.conftest import DIM, local_put, write_lake


def write_config(tmp_path, raw, epsilon=1.0, algorithm="ambssgd", learning_rate=0.5):
    features = ", ".join(f'"x{j}"' for j in range(DIM))
    path = tmp_path / "pipeline.toml"
    path.write_text(f"""
[lake]
url = "{raw}"
features = [{features}]
label = "y"
shuffled_url = "{tmp_path / "shuffled"}"
rows_per_file = 4000

[algorithm]
name = "{algorithm}"
{"clip_norm = 4.0" if algorithm in ("dpsgd", "srgd") else "# DP-AMBSSGD picks its clip norms by DP-STAT"}
learning_rate = {learning_rate}  # isotropic N(0, I) features: ‖H‖ = 1, so η = 0.5 is stable (the default 1/d is slow here)

[budget]
epsilon = {epsilon}
delta = 1e-6
lifetime_epsilon = 2.0
ledger_url = "{tmp_path / "ledger"}"

[cluster]
n_workers = 1
mode = "scatter"
""")
    return path


def test_train_flow_end_to_end(tmp_path, prefect_api):
    from dpstream.flows.flows import train_flow

    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw)
    result = train_flow(str(config), run_id="flow-run-1", output_dir=str(tmp_path / "out"))
    assert result["report"].epsilon == pytest.approx(1.0, rel=1e-9)
    assert result["metrics"]["held-out rows"] == 4000.0
    assert result["metrics"]["held-out RMSE (non-private, operator only)"] < 0.7  # label noise is 0.5
    # The publish folder holds the release only; the non-private evaluation and loss go to the operator folder.
    assert sorted(os.listdir(tmp_path / "out")) == [
        "_dpstream_release.json",  # the run's claim of its publish folder
        "clip_norm.png",
        "epsilon_delta.png",
        "model.json",
        "privacy_report.md",
    ]
    for name in ("model.json", "privacy_report.md", "clip_norm.png", "epsilon_delta.png"):
        assert os.path.getsize(tmp_path / "out" / name) > 0
    operator = tmp_path / "operator" / "flow-run-1"
    assert sorted(os.listdir(operator)) == ["_dpstream_operator.json", "loss.png", "metrics.json"]
    metrics = json.load(open(operator / "metrics.json"))
    assert metrics["metrics"] == result["metrics"] and "operator only" in metrics["note"]
    document = json.load(open(tmp_path / "out" / "model.json"))
    assert "metrics" not in document and "held-out" not in json.dumps(document)
    assert document["run_id"] == "flow-run-1" and document["format"] == "dpstream-model/1"
    # A lake not written by `dpstream convert` holds its label as stored, unbounded: no release guard
    # (its sensitivity needs labels within [−1, 1]); the model is released as trained.
    assert document["released"] == "model" and result["released"] == "model"
    assert "release guard" not in json.dumps(document["privacy"])
    # What a user needs to apply the model: the features in their order, the label, the kind, the algorithm.
    assert document["features"] == [f"x{j}" for j in range(DIM)] and document["label"] == "y"
    assert document["model"]["kind"] == "linear" and document["algorithm"] == "ambssgd"
    assert (
        document["preprocessing"] is None
    )  # a lake `dpstream convert` did not write: features read as stored
    assert not list((tmp_path / "out").glob("*.tmp-*"))  # written atomically, nothing left behind
    lakes = [name for name in os.listdir(tmp_path / "ledger") if name.startswith("lake-")]
    assert len(document["params"]) == DIM and lakes == [document["lake_fingerprint"]]
    (entry,) = Ledger(str(tmp_path / "ledger")).lake(lakes[0]).entries()
    assert entry.status == "committed" and entry.run_id == "flow-run-1"
    # A second run of the same config and id resumes a completed checkpoint: same model, one charge.
    again = train_flow(str(config), run_id="flow-run-1", output_dir=str(tmp_path / "out"))
    assert np.array_equal(again["params"], result["params"])
    assert len(Ledger(str(tmp_path / "ledger")).lake(lakes[0]).entries()) == 1
    checkpoints = tmp_path / "ledger" / "_checkpoints"  # the private default: never inside the publish folder
    assert_key_absent_from_prefect(checkpoints, "flow-run-1")
    assert_key_absent_from_folder(checkpoints, "flow-run-1", tmp_path / "out")


def test_a_retried_flow_run_is_the_same_run_resumed_and_charged_once(tmp_path, prefect_api, monkeypatch):
    """A deployment run started without a run id that fails after its release (here: publishing raises
    once, as a preempted node would) and is retried by Prefect: the retry is the same flow run, hence the
    same run id; it resumes the completed checkpoint, publishes the values attempt 1 computed and the
    ledger holds one entry. The flow run is named after the run id."""
    from prefect.client.orchestration import get_client

    from dpstream.flows import flows

    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw)
    attempts = []
    publish = flows.publish_task

    def preempted_once(locations, document, *args, **kwargs):
        attempts.append((document["run_id"], list(document["params"])))
        if len(attempts) == 1:
            raise OSError("the node running the flow was preempted")
        return publish(locations, document, *args, **kwargs)

    monkeypatch.setattr(flows, "publish_task", preempted_once)
    for name in ("prefect.flow_runs", "prefect.task_runs"):  # .ci/env.sh keeps the terminal at WARNING
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)  # restored after the test
        logger.setLevel(logging.INFO)  # setLevel, not the attribute: it clears logging's level cache
    result = flows.train_flow.with_options(retries=1)(str(config), output_dir=str(tmp_path / "out"))
    (first_id, first_params), (second_id, second_params) = attempts
    assert first_id == second_id == result["run_id"] and result["run_id"].startswith("run-")
    assert second_params == first_params and result["resumed_at"] == result["steps"]
    published = json.load(open(tmp_path / "out" / "model.json"))
    assert published["run_id"] == first_id and published["params"] == first_params
    lakes = [name for name in os.listdir(tmp_path / "ledger") if name.startswith("lake-")]
    (entry,) = Ledger(str(tmp_path / "ledger")).lake(lakes[0]).entries()
    assert entry.run_id == first_id and entry.status == "committed"
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    from dpstream.privacy import epsilon_for_delta, mu_for_epsilon_delta

    APILogWorker.drain_all(timeout=30)  # the log records still queued for the API
    with get_client(sync_client=True) as client:
        (flow_run,) = [run for run in client.read_flow_runs() if run.name == first_id]
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id])))
        artifacts = client.read_artifacts()
    links = [str(artifact.data) for artifact in artifacts]
    (files,) = [a for a in artifacts if a.description and a.description.startswith(f"where run {first_id}")]
    assert f"- model: `{tmp_path / 'out' / 'model.json'}`" in str(files.data)  # text: no dead file:// link
    assert not any("file://" in data for data in links)
    (report,) = [a for a in artifacts if a.description == f"privacy report of {first_id}"]
    assert report.key.startswith("privacy-report-lake-")  # one history per lake in the UI
    # DP-STAT's clip-norm trace and the privacy curve, drawn in the UI (a data URI renders there)
    assert str(report.data).count("](data:image/png;base64,iVBOR") == 2
    progress = [a for a in artifacts if a.type == "progress" and first_id in (a.description or "")]
    assert [float(artifact.data) for artifact in progress] == [100.0]  # attempt 1 trained every step
    assert progress[0].description == f"training steps of run {first_id}: 6 of 6"
    assert first_id == f"run-{flow_run.id.hex}" and flow_run.run_count == 2
    # The run's story in the flow run's logs: each step once per attempt, in the UI's own records.
    left = epsilon_for_delta(
        1e-6, math.sqrt(mu_for_epsilon_delta(2.0, 1e-6) ** 2 - mu_for_epsilon_delta(1.0, 1e-6) ** 2)
    )
    story = "\n".join(record.message for record in logs)
    for line in (
        "validated 20,000 rows of",
        "shuffle generation",
        f"plan of run {first_id}: ambssgd over 16,000 training rows",
        f"lifetime epsilon = 2, {left:.4g} left after this run (Gaussian DP adds up mu², not epsilon)",
        "trained in",
        "releasing the model",
        "held-out RMSE",
        "against",
        "published: model",
        "Dask dashboard of the training cluster (while the run lasts): http",
    ):
        assert line in story, (line, story)
    assert "resumed from its checkpoint at step" in story  # attempt 2
    assert any(data.startswith("[Dask dashboard") and data.endswith("/status)") for data in links), links


def assert_key_absent_from_folder(checkpoints, run_id, folder):
    """Every file of the publish folder is searched for the key (raw, hex, upper hex, base64)."""
    import base64

    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore

    secret = CheckpointStore(CheckpointPolicy(str(checkpoints))).load(run_id).noise_secret
    files = [path for path in folder.rglob("*") if path.is_file()]
    assert {path.name for path in files} >= {"model.json", "privacy_report.md"}
    for path in files:
        data = path.read_bytes()
        for needle in (
            secret,
            secret.hex().encode(),
            secret.hex().upper().encode(),
            base64.b64encode(secret),
        ):
            assert needle not in data, path


def assert_key_absent_from_prefect(checkpoints, run_id):
    """Everything the Prefect API stored (artifacts, logs, flow and task runs) is searched for the key."""
    import base64

    from prefect.client.orchestration import get_client

    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore

    secret = CheckpointStore(CheckpointPolicy(str(checkpoints))).load(run_id).noise_secret
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts()
        records = [*artifacts, *client.read_logs(), *client.read_flow_runs(), *client.read_task_runs()]
    stored = "\n".join(record.model_dump_json() for record in records)
    # The search sees the real records: the published report, the metrics table, the run's parameters.
    keys = {artifact.key for artifact in artifacts}
    assert {"privacy-report", "metrics"} <= {key.split("-lake-")[0] for key in keys if key}, keys
    assert "guarantee" in stored and "held-out RMSE" in stored and "config_path" in stored
    for needle in (secret.hex(), secret.hex().upper(), base64.b64encode(secret).decode()):
        assert needle not in stored


def test_train_flow_refuses_past_the_lifetime_budget(tmp_path, prefect_api):
    from dpstream.flows.flows import train_flow
    from dpstream.privacy import BudgetExceededError

    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw, epsilon=1.5)
    train_flow(str(config), run_id="first", output_dir=str(tmp_path / "a"))
    with pytest.raises(BudgetExceededError, match="lifetime epsilon=2"):
        train_flow(str(config), run_id="second", output_dir=str(tmp_path / "b"))


def test_train_flow_with_a_kan(tmp_path, prefect_api):
    """model.kind = "kan": the same flow, the held-out evaluation becomes classification accuracy."""
    from dpstream.flows.flows import train_flow

    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))  # y = Xw* + noise; the class is y > 0, coded {0, 1} (the label contract)
    for path in raw.iterdir():
        table = pq.read_table(path)
        labels = pa.array((table.column("y").to_numpy() > 0).astype(np.float64))
        pq.write_table(
            table.set_column(table.schema.get_field_index("y"), "y", labels), path, row_group_size=1500
        )
    config = write_config(tmp_path, raw, algorithm="dpsgd", learning_rate=2.0)
    config.write_text(
        config.read_text().replace(
            "clip_norm = 4.0", 'clip_norm = 1.0\nbatch_size = 200\nnoise = "lambda"\ncorrelation = 0.9'
        )
        + '\n[model]\nkind = "kan"\nnum_hidden = 16\nfeature_low = -4.0\nfeature_high = 4.0\ninput_map = "cube"\n'
    )
    result = train_flow(str(config), run_id="kan-1", output_dir=str(tmp_path / "out"))
    assert result["report"].epsilon == pytest.approx(1.0, rel=1e-9)
    assert result["params"].size == 16 * DIM * 8
    accuracy = result["metrics"]["held-out accuracy (non-private, operator only)"]
    # The classes are 50/50 (a linear rule reaches 0.91). This setting, measured with the estimator on the
    # same rows: mean 0.818, std 0.0034, min 0.812 over 20 fits; λ = 0 gave mean 0.800, std 0.0135.
    assert accuracy > 0.79, accuracy
    # The KAN's run is guarded too, over the held-out file (parallel composition: no share of μ)
    assert result["released"] == "model"
    assert any(note.startswith("release guard") for note in result["report"].notes)


def test_refusals_are_not_retried_and_passing_faults_are():
    """Prefect's retry condition of the shuffle and train tasks: a refusal would only be refused again."""
    from prefect.states import Failed

    from dpstream.checkpoint import CheckpointError
    from dpstream.flows.flows import _retry_unless_refused
    from dpstream.pipelines import LakeError, NoWorkersError
    from dpstream.privacy import BudgetExceededError, RunIdReusedError

    for refusal in (
        BudgetExceededError("budget"),
        RunIdReusedError("id"),
        LakeError("part-00003.parquet changed"),
        CheckpointError("other configuration"),
        NoWorkersError("no worker"),
        ValueError("bad"),
    ):
        assert _retry_unless_refused(None, None, Failed(data=refusal)) is False, refusal
    for fault in (OSError("connection reset"), RuntimeError("KilledWorker")):
        assert _retry_unless_refused(None, None, Failed(data=fault)) is True, fault
