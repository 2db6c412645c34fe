"""Durability under real faults: SIGKILLed coordinator, killed Dask worker, full disk, unwritable path,
S3 outage, and the noise key never leaving the checkpoint."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout

import numpy as np
import pytest

from dpstream.checkpoint import Checkpoint, CheckpointError, CheckpointPolicy, CheckpointStore, new_checkpoint
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey
from dpstream.outages import OutagePolicy, StoreUnavailableError
from dpstream.privacy import Ledger, LifetimeBudget

from . import job

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_job(tmp_path, run_id, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.durability.job",
            str(tmp_path / "ckpt"),
            str(tmp_path / "ledger"),
            run_id,
            str(tmp_path / f"{run_id}.npy"),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def reference_params(key: NoiseKey) -> np.ndarray:
    X, y = job.data()
    return run(
        job.algorithm(),
        InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
        num_rows=job.ROWS,
        num_params=job.DIM,
        initial_params=np.zeros(job.DIM),
        key=key,
    ).params


def test_sigkilled_coordinator_resumes_to_the_same_model_and_is_charged_once(tmp_path):
    process = start_job(tmp_path, "nightly", "--sleep", "0.01")
    store = CheckpointStore(CheckpointPolicy(str(tmp_path / "ckpt")))
    deadline = time.time() + 120
    while time.time() < deadline:
        saved = store.load("nightly")
        if saved is not None and saved.step >= 40:
            break
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    interrupted = store.load("nightly")
    assert 40 <= interrupted.step < 300
    lake = Ledger(str(tmp_path / "ledger")).lake("job-lake")
    assert [e.status for e in lake.entries()] == ["reserved"]  # spent even though it crashed
    resumed = start_job(tmp_path, "nightly")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err.decode()
    final = np.load(tmp_path / "nightly.npy")
    assert final.tobytes() == reference_params(interrupted.key).tobytes()
    (entry,) = lake.entries()
    assert entry.status == "committed" and entry.run_id == "nightly"
    assert store.load("nightly").step == 300


def test_full_disk_gives_a_clear_error_and_keeps_the_last_checkpoint(tmp_path):
    process = start_job(tmp_path, "full", "--fsize-limit-after", "25")
    out, err = process.communicate(timeout=120)
    assert process.returncode != 0
    message = err.decode()
    assert (
        "CheckpointError" in message and "could not write the checkpoint of run 'full' (step 26)" in message
    )
    assert "the last good checkpoint is intact" in message
    saved = CheckpointStore(CheckpointPolicy(str(tmp_path / "ckpt"))).load("full")
    assert saved.step == 25
    assert saved.noise_secret.hex() not in message + out.decode()  # the error never carries the key
    assert not [n for n in os.listdir(tmp_path / "ckpt" / "full") if n.startswith(".tmp")]


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the checkpoint folder should be")
    X, y = job.data()
    with pytest.raises(
        CheckpointError, match="could not write the checkpoint of run 'r1' \\(step 0\\).*after 2 attempts"
    ):
        run(
            job.algorithm(),
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            num_rows=job.ROWS,
            num_params=job.DIM,
            initial_params=np.zeros(job.DIM),
            checkpoint=CheckpointPolicy(str(blocker), retries=1, backoff_seconds=0.01),
            run_id="r1",
        )


def test_resume_refuses_other_configuration_or_key(tmp_path):
    X, y = job.data()
    policy = CheckpointPolicy(str(tmp_path / "c"))
    common = dict(
        num_rows=job.ROWS, num_params=job.DIM, initial_params=np.zeros(job.DIM), checkpoint=policy, run_id="r"
    )
    run(job.algorithm(), InMemoryExecutor(LinearRegressionModel(), [(X, y)]), **common)
    from dpstream.algorithms import DPSGD

    other = DPSGD(2.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=200)
    with pytest.raises(
        CheckpointError, match="another configuration, lake, shuffle of the lake or code version"
    ):
        run(other, InMemoryExecutor(LinearRegressionModel(), [(X, y)]), **common)
    with pytest.raises(ValueError, match="resumes with the noise key of its checkpoint"):
        run(
            job.algorithm(),
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            key=NoiseKey.generate(),
            **common,
        )
    with pytest.raises(ValueError, match="needs a run_id"):
        run(
            job.algorithm(),
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            num_rows=job.ROWS,
            num_params=job.DIM,
            initial_params=np.zeros(job.DIM),
            checkpoint=policy,
        )


@pytest.mark.slow
def test_s3_outage_is_retried_then_reported(s3_bucket):
    """The moto endpoint goes away during a checkpoint: a short outage is waited out; one longer than the
    outage window ends in one clear error naming the location, and the last good checkpoint is intact."""
    from moto.server import ThreadedMotoServer

    url, options = s3_bucket
    endpoint = options["client_kwargs"]["endpoint_url"]
    port = int(endpoint.rsplit(":", 1)[1])
    key = NoiseKey.generate()
    checkpoint = new_checkpoint("s3run", "fp", 3, {"w": np.ones(3)}, key, [0.5])
    store = CheckpointStore(
        CheckpointPolicy(f"{url}/ckpt", storage_options=options, retries=6, backoff_seconds=0.2)
    )
    store.save(checkpoint)
    import tests.conftest as shared

    server = shared.RUNNING_SERVERS[endpoint]
    server.stop()
    replacement = {}

    def restart():
        time.sleep(1.5)
        replacement["server"] = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        replacement["server"].start()

    thread = threading.Thread(target=restart)
    thread.start()
    started = time.time()
    store.save(new_checkpoint("s3run", "fp", 4, {"w": np.ones(3)}, key, [0.5, 0.4]))
    assert time.time() - started >= 1.0  # it had to wait for the endpoint
    thread.join()
    assert store.load("s3run").step == 4
    replacement["server"].stop()
    brief = CheckpointStore(
        CheckpointPolicy(
            f"{url}/ckpt",
            storage_options=options,
            outage=OutagePolicy(window_seconds=2.0, first_wait_seconds=0.2, longest_wait_seconds=0.5),
        )
    )
    started = time.time()
    with pytest.raises(StoreUnavailableError, match=r"checkpoint location s3://.* was unreachable for 2 s"):
        brief.save(new_checkpoint("s3run", "fp", 5, {"w": np.ones(3)}, key, []))
    assert time.time() - started >= 2.0  # the whole window was waited out
    restarted = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    restarted.start()
    shared.RUNNING_SERVERS[endpoint] = restarted
    assert store.load("s3run").step == 4  # the last good checkpoint survived the failed write


def test_noise_key_appears_only_in_the_checkpoint(tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    X, y = job.data()
    lake = Ledger(str(tmp_path / "ledger")).lake("job-lake", LifetimeBudget(10.0, 1e-6))
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        result = run(
            job.algorithm(),
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            num_rows=job.ROWS,
            num_params=job.DIM,
            initial_params=np.zeros(job.DIM),
            checkpoint=CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=50),
            run_id="audit",
            ledger=lake,
        )
        print(result.report.to_markdown(), result.report.to_dict(), result, repr(result.state))
    secret = CheckpointStore(CheckpointPolicy(str(tmp_path / "ckpt"))).load("audit").noise_secret
    needles = [
        secret,
        secret.hex().encode(),
        secret.hex().upper().encode(),
        __import__("base64").b64encode(secret),
    ]
    captured = capfd.readouterr()
    texts = [buffer.getvalue(), caplog.text, captured.out, captured.err]
    for text in texts:
        assert not any(n.decode("latin-1") in text for n in needles[1:])
    files = {}
    for folder, _, names in os.walk(tmp_path):
        for name in names:
            files[os.path.join(folder, name)] = open(os.path.join(folder, name), "rb").read()
    holders = sorted(path for path, content in files.items() if any(n in content for n in needles))
    assert holders == [str(tmp_path / "ckpt" / "audit" / "checkpoint.npz")]  # and nowhere else
    saved = CheckpointStore(CheckpointPolicy(str(tmp_path / "ckpt"))).load("audit")
    assert "redacted" in repr(NoiseKey.from_secret(secret)) and secret.hex() not in repr(saved)
    assert isinstance(saved, Checkpoint)


def test_checkpoint_from_incompatible_version_refused(tmp_path):
    policy = CheckpointPolicy(str(tmp_path))
    old = new_checkpoint("legacy", "fp", 1, {}, NoiseKey.generate(), [])
    old.format_version = 0
    CheckpointStore(policy).save(old)
    with pytest.raises(
        CheckpointError,
        match=r"incompatible dpstream version \(format 0, this version reads 2\); start a new run id",
    ):
        CheckpointStore(policy).load("legacy")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "checkpoint.npz").write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match="cannot read the checkpoint"):
        CheckpointStore(policy).load("broken")
