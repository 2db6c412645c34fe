"""A whole `dpstream train` with every location on S3 (a moto server on 127.0.0.1): the config, the lake,
the shuffled lake, the ledger, the checkpoints and the published run; `dpstream report` reads it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.pipelines.conftest import DIM, write_lake

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def s3_env(s3_server, monkeypatch):
    """Credentials and endpoint from the environment, as a pod or a laptop with a profile has them: no
    storage_options anywhere in the config. Set before the LocalCluster starts, so workers inherit them."""
    values = {
        "AWS_ENDPOINT_URL": s3_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    bucket = f"run-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    yield fs, bucket, values
    s3fs.S3FileSystem.clear_instance_cache()


CONFIG = """
[lake]
url = "raw"
features = [{features}]
label = "y"
shuffled_url = "shuffled"
rows_per_file = 4000

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 2.0
ledger_url = "ledger"

[cluster]
n_workers = 1
mode = "scatter"
"""


@pytest.mark.usefixtures("prefect_api")
@pytest.mark.slow
def test_a_whole_run_on_s3(s3_env, tmp_path, monkeypatch):
    from dpstream.flows.flows import train_flow

    fs, bucket, env = s3_env
    jobs = f"{bucket}/jobs"

    def put(path, table):
        with fs.open(path, "wb") as handle:
            pq.write_table(table, handle, row_group_size=1500)

    write_lake(put, f"{jobs}/raw")
    features = ", ".join(f'"x{j}"' for j in range(DIM))
    fs.pipe_file(f"{jobs}/pipeline.toml", CONFIG.format(features=features).encode())
    monkeypatch.chdir(tmp_path)  # anything written to the working folder by mistake would show here
    result = train_flow(f"s3://{jobs}/pipeline.toml", run_id="nightly-1")

    run = f"s3://{jobs}/runs/nightly-1"
    assert result["paths"]["model"] == f"{run}/model.json"
    # AdaSSP: one step, so no loss curve and no clip-norm trace; the privacy curve is always published
    assert set(result["paths"]) == {"model", "report", "epsilon_plot", "metrics"}
    operator = f"s3://{jobs}/operator/nightly-1"
    assert (
        result["paths"]["metrics"] == f"{operator}/metrics.json"
        and result["paths"]["epsilon_plot"] == f"{run}/epsilon_delta.png"
    )
    for url in result["paths"].values():
        assert fs.exists(url) and fs.info(url)["size"] > 0, url
    document = json.loads(fs.cat_file(f"{run}/model.json"))
    assert document["run_id"] == "nightly-1" and len(document["params"]) == DIM
    assert fs.exists(f"{jobs}/shuffled/_generations/000001.json")
    ledger = [p for p in fs.find(f"{jobs}/ledger") if "nightly-1" in p or p.endswith(".json")]
    assert ledger, fs.find(f"{jobs}/ledger")
    assert fs.glob(f"{jobs}/ledger/_checkpoints/nightly-1/checkpoint.npz")
    assert list(tmp_path.iterdir()) == []  # nothing landed on local disk

    shown = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", "report", run],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    assert "run nightly-1" in shown.stdout and "(1, 1e-06)-DP" in shown.stdout
