"""A signal that ends a command without unwinding gives back a claim no step has used: the run's entry
moves to aborted/ and its checkpoint (the key) is deleted, and the run's own thread, if it goes on,
stops before it uses the noise; a claim a step used stays charged."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dpstream import unreleased
from dpstream.checkpoint import CheckpointPolicy, CheckpointStore
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.privacy import Ledger, LifetimeBudget

from . import job


class GatedExecutor(InMemoryExecutor):
    """Holds step ``gate_step``'s statistics until released, signalling when it got there."""

    def __init__(self, gate_step: int, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate_step, self.arrived, self.proceed = gate_step, threading.Event(), threading.Event()

    def compute(self, span, request):
        stats = super().compute(span, request)
        if span.step == self.gate_step:
            self.arrived.set()
            self.proceed.wait(30)
        return stats


def _start(tmp_path, gate_step: int):
    X, y = job.data()
    executor = GatedExecutor(gate_step, LinearRegressionModel(), [(X, y)])
    lake = Ledger(str(tmp_path / "ledger")).lake("lake-1", LifetimeBudget(10.0, 1e-6))
    policy = CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=1)
    outcome: dict = {}

    def go() -> None:
        try:
            outcome["result"] = run(
                job.algorithm(),
                executor,
                num_rows=job.ROWS,
                num_params=job.DIM,
                initial_params=np.zeros(job.DIM),
                checkpoint=policy,
                run_id="r1",
                ledger=lake,
            )
        except BaseException as error:  # noqa: BLE001 - asserted on below
            outcome["error"] = error

    thread = threading.Thread(target=go)
    thread.start()
    assert executor.arrived.wait(60)
    return executor, lake, policy, thread, outcome


def test_a_claim_no_step_used_is_given_back_and_the_run_stops_before_the_noise(tmp_path):
    executor, lake, policy, thread, outcome = _start(tmp_path, gate_step=0)
    assert CheckpointStore(policy).exists("r1") and lake.entry("r1").status == "reserved"
    assert unreleased.give_back_all("stopped by a signal") == ["r1"]
    executor.proceed.set()
    thread.join(60)
    assert isinstance(outcome.get("error"), unreleased.StoppedBeforeRelease)
    assert lake.entries() == [] and [e.reason for e in lake.aborted()] == [
        "StoppedBeforeRelease: stopped by a signal"
    ]
    assert not CheckpointStore(policy).exists("r1")  # the key is gone with the charge


def test_a_claim_a_step_used_stays_charged(tmp_path):
    executor, lake, policy, thread, outcome = _start(tmp_path, gate_step=3)
    assert unreleased.give_back_all("stopped by a signal") == []
    executor.proceed.set()
    thread.join(120)
    assert "result" in outcome, outcome.get("error")
    assert [(e.run_id, e.status) for e in lake.entries()] == [("r1", "committed")]


def test_marking_a_given_back_claim_used_refuses():
    unreleased.hold("r9", lambda error: None)
    assert unreleased.give_back_all("signal") == ["r9"]
    with pytest.raises(unreleased.StoppedBeforeRelease, match="r9"):
        unreleased.mark_used("r9")
    unreleased.hold("r9", lambda error: None)  # a new claim of the id starts afresh
    unreleased.mark_used("r9")
