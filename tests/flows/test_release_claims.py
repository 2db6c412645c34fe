"""A release is never replaced by another run's, and nothing but releases lands in a publish folder.

Two pipeline configs in one folder (two lakes, a ledger each) both trained with ``--run-id nightly``
default to the same ``runs/nightly``: the second run is refused before anything is charged, naming the
folder and ``--output``, on local disk and on the moto S3 server; the first run's release is unchanged
and its own run id still republishes into it. Claims race safely (exactly one of two simultaneous
claimers wins, local and S3); ``predict`` cannot write inside a publish folder and ``report`` refuses one
holding anything else.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

from dpstream.flows.assembly.locations import RELEASE_CLAIM, RunLocations, claim_run_folders
from dpstream.flows.config.file import ConfigError
from tests.flows.test_release_safety import dpstream
from tests.pipelines.conftest import DIM, local_put, make_table

pytestmark = pytest.mark.usefixtures("cli_prefect_api")

ROOT = Path(__file__).resolve().parents[2]
FEATURES = ", ".join(f'"x{j}"' for j in range(DIM))


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """Two lakes of different rows, and their two configs side by side in one folder."""
    project = tmp_path / "project"
    project.mkdir()
    configs = []
    for name, seed in (("a", 0), ("b", 50)):
        for index in range(2):
            local_put(
                str(tmp_path / f"raw_{name}" / f"part-{index}.parquet"),
                make_table(2000, seed + index, start_id=index * 2000),
            )
        path = project / f"{name}.toml"
        path.write_text(f"""
[lake]
url = "{tmp_path / f"raw_{name}"}"
features = [{FEATURES}]
label = "y"
shuffled_url = "{tmp_path / f"shuffled_{name}"}"
rows_per_file = 1000

[algorithm]
name = "dpsgd"
batch_size = 250
clip_norm = 4.0

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 4.0
ledger_url = "{tmp_path / f"ledger_{name}"}"

[cluster]
n_workers = 1
mode = "streaming"
""")
        configs.append(path)
    return configs[0], configs[1]


def _charged(ledger: Path) -> list[str]:
    return sorted(p.stem for p in ledger.glob("*/runs/*.json"))


@pytest.mark.slow
def test_two_configs_in_one_folder_never_replace_each_others_release(tmp_path):
    config_a, config_b = _project(tmp_path)
    first = dpstream("train", config_a, "--run-id", "nightly", "--quiet")
    assert first.returncode == 0, first.stderr[-2000:]
    published = config_a.parent / "runs" / "nightly"
    release = (published / "model.json").read_bytes()
    lake_a = json.loads(release)["lake_fingerprint"]
    assert json.loads((published / RELEASE_CLAIM).read_text())["lake_fingerprint"] == lake_a

    second = dpstream("train", config_b, "--run-id", "nightly", "--quiet")
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"{published} holds the release of run 'nightly' of lake {lake_a}" in second.stderr
    assert "--output" in second.stderr and "nothing was charged" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    assert (published / "model.json").read_bytes() == release
    assert _charged(tmp_path / "ledger_b") == []  # refused before any charge

    # Lake B publishes elsewhere when told to; lake A's own run id still republishes its own release.
    elsewhere = dpstream(
        "train",
        config_b,
        "--run-id",
        "nightly",
        "--output",
        tmp_path / "b-nightly",
        "--operator-output",
        tmp_path / "b-operator",
        "--quiet",
    )
    assert elsewhere.returncode == 0, elsewhere.stderr[-2000:]
    assert json.loads((tmp_path / "b-nightly" / "model.json").read_text())["lake_fingerprint"] != lake_a
    again = dpstream("train", config_a, "--run-id", "nightly", "--quiet")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((published / "model.json").read_bytes())["params"] == json.loads(release)["params"]
    assert _charged(tmp_path / "ledger_a") == ["nightly"] and _charged(tmp_path / "ledger_b") == ["nightly"]

    # Predictions never go inside a publish folder; report refuses one holding anything but a release.
    scored = dpstream("predict", published, tmp_path / "raw_a", published / "scored", "--keep", "row_id")
    assert scored.returncode == 2, scored.stderr[-2000:]
    assert "a run's publish folder" in scored.stderr and not (published / "scored").exists()
    assert dpstream("report", published).returncode == 0
    (published / "notes.txt").write_text("mine")
    refused = dpstream("report", published)
    assert refused.returncode == 2 and "not part of a release (notes.txt)" in refused.stderr


@pytest.mark.slow
def test_two_configs_publishing_to_one_s3_folder(tmp_path, s3_server):
    import os

    import s3fs

    config_a, config_b = _project(tmp_path)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": s3_server})
    bucket = f"claims-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    folders = ("--output", f"s3://{bucket}/runs/nightly", "--operator-output", f"s3://{bucket}/ops/nightly")
    first = dpstream("train", config_a, "--run-id", "nightly", *folders, "--quiet", env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    release = fs.cat_file(f"{bucket}/runs/nightly/model.json")
    second = dpstream("train", config_b, "--run-id", "nightly", *folders, "--quiet", env=env)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"s3://{bucket}/runs/nightly holds the release of run 'nightly'" in second.stderr
    fs.invalidate_cache()
    assert fs.cat_file(f"{bucket}/runs/nightly/model.json") == release
    assert _charged(tmp_path / "ledger_b") == []


@pytest.mark.parametrize("store", ["local", "s3"])
def test_simultaneous_claims_of_one_folder_have_one_winner(tmp_path, store, request):
    if store == "s3":
        url, options = request.getfixturevalue("s3_bucket")
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        base = url
        request.getfixturevalue("monkeypatch").setenv(
            "AWS_ENDPOINT_URL", options["client_kwargs"]["endpoint_url"]
        )
    else:
        base = str(tmp_path)
    for attempt in range(8):
        locations = RunLocations(
            output=f"{base}/race-{attempt}/out",
            operator=f"{base}/race-{attempt}/operator",
            checkpoints=f"{base}/ckpt",
        )
        outcomes: list[str] = []
        barrier = threading.Barrier(2)

        def claim(lake: str, where=locations, seen=outcomes, start=barrier) -> None:
            start.wait()
            try:
                claim_run_folders(where, "nightly", lake)
                seen.append(lake)
            except ConfigError:
                seen.append("refused")

        threads = [threading.Thread(target=claim, args=(lake,)) for lake in ("lake-a", "lake-b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes)[1] == "refused" and sorted(outcomes)[0] in ("lake-a", "lake-b"), outcomes


def test_a_refused_claim_holds_no_folder_and_a_legacy_operator_folder_is_its_runs(tmp_path):
    locations = RunLocations(
        output=str(tmp_path / "out"), operator=str(tmp_path / "operator"), checkpoints=str(tmp_path / "ckpt")
    )
    (tmp_path / "operator").mkdir()
    (tmp_path / "operator" / "metrics.json").write_text(json.dumps({"run_id": "other", "metrics": {}}))
    with pytest.raises(ConfigError, match=r"--operator-output .* holds the release of run 'other'"):
        claim_run_folders(locations, "nightly", "lake-a")
    assert not (tmp_path / "out" / RELEASE_CLAIM).exists()  # the publish claim made first was taken back
    # An operator folder written before folders were claimed names its run, not its lake: its own run
    # claims it.
    (tmp_path / "operator" / "metrics.json").write_text(json.dumps({"run_id": "nightly", "metrics": {}}))
    claim_run_folders(locations, "nightly", "lake-a")
    assert json.loads((tmp_path / "out" / RELEASE_CLAIM).read_text())["lake_fingerprint"] == "lake-a"
