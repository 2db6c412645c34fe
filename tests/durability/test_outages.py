"""An object store that goes away is waited out: a run whose ledger and checkpoints are on S3 (the moto
server on 127.0.0.1) keeps going through an outage of 150 s mid-run, and ends committed once with the
model an uninterrupted run gives; what is unreachable is told apart from what is refused."""

from __future__ import annotations

import errno
import threading
import time

import numpy as np
import pytest

from dpstream.checkpoint import CheckpointPolicy
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey
from dpstream.outages import OutagePolicy, StoreUnavailableError, is_unreachable
from dpstream.privacy import Ledger, LifetimeBudget

from . import job
from .test_faults import reference_params

OUTAGE_SECONDS = 150.0
OUTAGE_AFTER_STEP = 20  # of job.algorithm()'s 300 steps


def _stop_for(endpoint: str, seconds: float) -> threading.Thread:
    """Stop the session's moto server now and start one on the same port after ``seconds`` (moto keeps
    its buckets in the process, so the restarted server serves the same objects)."""
    from moto.server import ThreadedMotoServer

    import tests.conftest as shared

    port = int(endpoint.rsplit(":", 1)[1])
    shared.RUNNING_SERVERS[endpoint].stop()

    def restart() -> None:
        time.sleep(seconds)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        shared.RUNNING_SERVERS[endpoint] = server

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_an_outage_of_150_s_mid_run_is_ridden_out_and_charged_once(s3_bucket):
    url, options = s3_bucket
    endpoint = options["client_kwargs"]["endpoint_url"]
    lake = Ledger(f"{url}/ledger", options).lake("outage-lake", LifetimeBudget(10.0, 1e-6))
    key = NoiseKey.generate()
    restarted: list[threading.Thread] = []
    stopped_at: list[float] = []

    def on_step(step: int, state) -> None:
        if step == OUTAGE_AFTER_STEP:
            stopped_at.append(time.monotonic())
            restarted.append(_stop_for(endpoint, OUTAGE_SECONDS))

    X, y = job.data()
    result = run(
        job.algorithm(),
        InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
        num_rows=job.ROWS,
        num_params=job.DIM,
        initial_params=np.zeros(job.DIM),
        key=key,
        checkpoint=CheckpointPolicy(f"{url}/ckpt", storage_options=options, every_steps=1),
        run_id="nightly",
        ledger=lake,
        on_step=on_step,
    )
    restarted[0].join()
    assert time.monotonic() - stopped_at[0] >= OUTAGE_SECONDS  # it did wait for the store
    entries = lake.entries()
    assert [(e.run_id, e.status) for e in entries] == [("nightly", "committed")]
    assert entries[0].mu == pytest.approx(result.report.mu)
    np.testing.assert_array_equal(result.params, reference_params(key))  # as if uninterrupted


@pytest.mark.slow
def test_a_ledger_past_its_outage_window_says_so_in_one_line(s3_bucket):
    url, options = s3_bucket
    endpoint = options["client_kwargs"]["endpoint_url"]
    brief = OutagePolicy(window_seconds=1.5, first_wait_seconds=0.2, longest_wait_seconds=0.5)
    lake = Ledger(f"{url}/ledger", options, outage=brief).lake("brief-lake", LifetimeBudget(4.0, 1e-6))
    entry = lake.reserve("nightly", 0.5, mechanism="test", relation="replace-one")
    restart = _stop_for(endpoint, 15.0)  # past the window and s3fs's own retries within one attempt
    with pytest.raises(StoreUnavailableError) as refused:
        lake.commit("nightly", entry.claim)
    message = str(refused.value)
    assert "the privacy ledger of lake brief-lake" in message and url in message
    assert "unreachable for 1.5 s while trying to commit run 'nightly'" in message
    assert "run the same command again" in message and "\n" not in message
    restart.join()
    assert lake.entry("nightly").status == "reserved"  # kept for the resume
    assert lake.commit("nightly", entry.claim).status == "committed"


def test_what_is_unreachable_is_told_apart_from_what_is_refused():
    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

    assert is_unreachable(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert is_unreachable(ReadTimeoutError(endpoint_url="http://127.0.0.1:1"))
    assert is_unreachable(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert is_unreachable(OSError(errno.ETIMEDOUT, "timed out"))
    wrapped = OSError("s3fs gave up")
    wrapped.__cause__ = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    assert is_unreachable(wrapped)
    from botocore.exceptions import ClientError

    def answered(status: int, code: str) -> OSError:
        error = OSError(errno.EIO, "s3fs: the store answered")  # as s3fs translates a ClientError
        error.__cause__ = ClientError(
            {"Error": {"Code": code, "Message": "..."}, "ResponseMetadata": {"HTTPStatusCode": status}},
            "PutObject",
        )
        return error

    assert is_unreachable(answered(503, "SlowDown")) and is_unreachable(answered(502, "502"))
    assert not is_unreachable(answered(403, "AccessDenied"))
    for refusal in (
        RuntimeError("lifetime epsilon=500 at delta=1e-6: InternalError RequestTimeout 503 "),  # words only
        answered(412, "PreconditionFailed"),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EROFS, "Read-only file system"),
        PermissionError(errno.EACCES, "denied"),
        FileExistsError("taken"),
        FileNotFoundError("gone"),
        ValueError("not JSON"),
    ):
        assert not is_unreachable(refusal), refusal


def test_retries_wait_out_a_short_outage_and_give_up_after_the_window():
    attempts: list[float] = []

    def flaky() -> str:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
        return "written"

    policy = OutagePolicy(window_seconds=30.0, first_wait_seconds=0.05, longest_wait_seconds=0.1)
    assert policy.call(flaky, store="the store s3://b", what="write x") == "written"
    assert len(attempts) == 3

    def down() -> None:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")

    brief = OutagePolicy(window_seconds=0.5, first_wait_seconds=0.05, longest_wait_seconds=0.1)
    started = time.monotonic()
    with pytest.raises(
        StoreUnavailableError, match=r"the store s3://b was unreachable for 0.5 s while trying to"
    ):
        brief.call(down, store="the store s3://b", what="write x")
    assert 0.5 <= time.monotonic() - started < 5.0

    refusals = []

    def full() -> None:
        refusals.append(1)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        policy.call(full, store="the store", what="write x")
    assert len(refusals) == 1  # a refusal is not retried

    # A retried operation that calls another retried one waits one window, not one per level.
    nested_attempts: list[int] = []

    def inner() -> None:
        nested_attempts.append(1)
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")

    with pytest.raises(StoreUnavailableError):
        brief.call(lambda: brief.call(inner, store="inner", what="x"), store="outer", what="y")
    assert len(nested_attempts) < 20  # nested windows would retry the inner call per outer attempt
