"""The coordinator loop.

``execute`` drives a ``RunPlan`` (``dpstream.run_plan``: the privacy argument, built once by the caller
and only checked here); ``run`` builds the plan from an algorithm and the data's size and executes it,
for callers holding the rows in-process (the estimators, the audit). Either drives any algorithm
(DP-AMBSSGD, DP-SGD with any noise process, Accelerated-DP-SRGD, AdaSSP) over an executor: for each
planned step it sends the algorithm's request, receives the merged ``BatchStats``
and applies the DP update. The executor decides where rows live: ``InMemoryExecutor``
(``dpstream.in_memory``) reads blocks a process holds; the Dask executor of ``pipelines`` implements
the same ``compute``. A ``RunGuard`` (``dpstream.guarded_run``) may move the start and decide the
release, with the run's key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from dpstream import unreleased
from dpstream.algorithms.base import Algorithm, Plan, PrivacyReport, StepSpan
from dpstream.checkpoint import (
    Checkpoint,
    CheckpointPolicy,
    CheckpointStore,
    new_checkpoint,
)
from dpstream.in_memory import InMemoryExecutor, RowStream, UserStream
from dpstream.models import BatchStats, Model, StatsRequest
from dpstream.noise import NoiseKey
from dpstream.privacy import LakeLedger
from dpstream.run_claims import claim_run, give_back
from dpstream.run_plan import RunPlan
from dpstream.validation import check_name

__all__ = [
    "Executor",
    "InMemoryExecutor",
    "RowStream",
    "UserStream",
    "FitResult",
    "RunGuard",
    "run",
    "execute",
]


class Executor(Protocol):
    """Computes a step's batch statistics over the rows of ``span``; ``model`` is the model whose
    ``block_stats`` it runs (part of a checkpoint's identity). The DP-STAT rows of a span are read only
    for a request with thresholds, and the step's span may be asked for twice in a row (an algorithm's
    ``followup``)."""

    model: Model

    def compute(self, span: StepSpan, request: StatsRequest) -> BatchStats: ...


@dataclass
class FitResult:
    params: np.ndarray
    report: PrivacyReport
    state: Any
    training_loss: list[float] = field(default_factory=list)  # per step, non-private: operator only
    resumed_at: int = (
        0  # the step a checkpoint resumed the run at (0: a fresh run; the plan's steps: complete)
    )
    guard: Any = None  # the release guard's decision (``dpstream.release_guard.GuardDecision``), if any


class RunGuard(Protocol):
    """A release guard around a run (``dpstream.guarded_run.LakeGuard``), drawing from the run's key:
    ``start`` gives the initial parameters before the first step, ``finish`` what the run releases
    (parameters, report, decision) after the last."""

    def start(self, key: NoiseKey, params: np.ndarray) -> np.ndarray: ...

    def finish(
        self, key: NoiseKey, model: Model, params: np.ndarray, report: PrivacyReport
    ) -> tuple[np.ndarray, PrivacyReport, Any]: ...


def run(
    algorithm: Algorithm,
    executor: Executor,
    *,
    num_rows: int,
    num_params: int,
    initial_params: np.ndarray,
    key: NoiseKey | None = None,
    on_step: Callable[[int, Any], None] | None = None,
    checkpoint: CheckpointPolicy | None = None,
    run_id: str | None = None,
    ledger: LakeLedger | None = None,
    lake: str = "",
) -> FitResult:
    """Plan ``algorithm`` for ``num_rows`` rows and ``num_params`` parameters of the executor's model
    (``RunPlan.build``: refused here when over budget) and ``execute`` the plan."""
    plan = RunPlan.build(algorithm, executor.model, num_rows, num_params, checkpoint)
    return execute(
        plan,
        executor,
        initial_params=initial_params,
        key=key,
        on_step=on_step,
        run_id=run_id,
        ledger=ledger,
        lake=lake,
    )


def execute(
    run_plan: RunPlan,
    executor: Executor,
    *,
    initial_params: np.ndarray,
    key: NoiseKey | None = None,
    on_step: Callable[[int, Any], None] | None = None,
    run_id: str | None = None,
    ledger: LakeLedger | None = None,
    lake: str = "",
    guard: RunGuard | None = None,
) -> FitResult:
    """Run every step of ``run_plan``; ``on_step(step, state)`` is called after each update. The
    executor must compute the plan's model (``RunPlan.check_executor``). A ``guard`` moves the start and
    decides the release, with the run's key (``RunGuard``).

    With the plan's ``checkpoint`` policy and ``run_id`` the run is durable: an existing checkpoint of ``run_id`` is
    resumed (same key, same state, same remaining steps), otherwise one is written before the first
    release and then as the policy says. ``lake`` names the data the run reads (the pinned shuffle
    generation, ``Manifest.row_order``): it is part of the checkpoint's identity and recorded in the
    ledger entry.

    With ``ledger`` a fresh run first *claims* its run id (``LakeLedger.claim``: the entry is created
    exclusively and charged before the noise key is drawn), so two processes starting one run id at
    once cannot both release a model; a run id the ledger already holds runs again only from its
    checkpoint, which replays the same key and so releases bit-identical values (a finished run returns
    its final model), and is otherwise refused with ``RunIdReusedError`` before anything is computed.

    A run that fails before its first release (the first noisy update) gives its reservation back
    (``LakeLedger.abort``, with the reason) and deletes the checkpoint it wrote; once a step has used
    the noise, the charge stays whatever happens.
    """
    run_plan.check_executor(executor)
    _check_run_id(run_plan, ledger, run_id)
    algorithm, plan = run_plan.algorithm, run_plan.steps
    store = None if run_plan.checkpoint is None else CheckpointStore(run_plan.checkpoint)
    fingerprint = "" if store is None else run_plan.fingerprint(lake)
    saved = None if store is None else store.load_to_resume(run_id, fingerprint, lake, key)
    record = _claim(run_plan, run_id, key, ledger, store, fingerprint, saved, lake)
    state, start, losses = (
        (None, 0, []) if saved is None else (saved.state, saved.step, list(saved.training_loss))
    )
    try:
        if state is None:
            start_params = initial_params if guard is None else guard.start(record.key, initial_params)
            state = _first_state(record, algorithm, plan, start_params, losses)
        for span in plan.spans[start:]:
            state, stats = _noisy_step(record, algorithm, executor, plan, span, state)
            losses.append(stats.loss_sum / max(stats.row_count, 1))
            record.save_if_due(span.step + 1, plan.num_steps, state, losses)
            if on_step is not None:
                on_step(span.step, state)
    except BaseException as error:
        if not record.released and not isinstance(error, unreleased.StoppedBeforeRelease):
            record.give_back(error)
        raise
    finally:
        if run_id is not None:
            unreleased.forget(run_id)
    params, report, decision = algorithm.result(state), algorithm.report(plan, state), None
    if guard is not None:
        params, report, decision = guard.finish(
            record.key,
            executor.model,
            params,
            report,
            label_mean_only=getattr(state, "label_mean_only", False),
        )
    if ledger is not None:
        ledger.commit(run_id, record.claim)
    return FitResult(params, report, state, losses, resumed_at=start, guard=decision)


@dataclass
class _RunRecord:
    """What makes one run durable and charged once: its noise key, its ledger claim, its checkpoint
    store (None: not durable) and whether a step has used the noise yet. Until then (``released``
    False) a failure gives the claim back; from then on the charge stays whatever happens."""

    run_id: str | None
    key: NoiseKey
    claim: str | None
    released: bool
    ledger: LakeLedger | None
    store: CheckpointStore | None
    fingerprint: str
    lake: str
    own_checkpoint: bool = False  # this run wrote the run's first checkpoint (the key), so may delete it
    last_save: float = field(default_factory=time.monotonic)

    def save(self, step: int, state: Any, losses: list[float], *, exclusive: bool = False) -> None:
        checkpoint = new_checkpoint(
            self.run_id,
            self.fingerprint,
            step,
            state,
            self.key,
            losses,
            claim=self.claim,
            data_version=self.lake,
        )
        self.store.save(checkpoint, exclusive=exclusive)

    def save_if_due(self, done: int, num_steps: int, state: Any, losses: list[float]) -> None:
        """Checkpoint after ``done`` steps where the policy says so (``CheckpointPolicy.due``)."""
        if self.store is not None and self.store.policy.due(done, num_steps, self.last_save):
            self.save(done, state, losses)
            self.last_save = time.monotonic()

    def mark_released(self) -> None:
        if not self.released and self.run_id is not None:
            unreleased.mark_used(self.run_id)  # raises if a signal gave the claim back meanwhile
        self.released = True

    def give_back(self, error: BaseException) -> None:
        give_back(self.ledger, self.store if self.own_checkpoint else None, self.run_id, self.claim, error)


def _check_run_id(run_plan: RunPlan, ledger: LakeLedger | None, run_id: str | None) -> None:
    if (run_plan.checkpoint is not None or ledger is not None) and not run_id:
        raise ValueError("a durable or ledger-charged run needs a run_id; pass run_id='...'")
    if run_id is not None:
        check_name("run_id", run_id)


def _claim(
    run_plan: RunPlan,
    run_id: str | None,
    key: NoiseKey | None,
    ledger: LakeLedger | None,
    store: CheckpointStore | None,
    fingerprint: str,
    saved: Checkpoint | None,
    lake: str,
) -> _RunRecord:
    """Claim the run id in the ledger (or continue the claim of its checkpoint, ``claim_run``), then take
    the checkpoint's key or draw a fresh one: only once the run id is ours. Until the first release a
    signal that ends the process gives the claim back (``unreleased.hold``)."""
    claim, claimed_here = claim_run(ledger, run_id, run_plan.report, saved, run_plan.checkpoint, lake)
    if saved is not None:
        key = saved.key
    # Only a run that claimed the run id in this process may give the claim back: a resumed run (even from
    # step 0) cannot know whether the process that wrote its checkpoint went on to use the noise.
    released = (saved is not None and saved.step > 0) or not claimed_here
    record = _RunRecord(
        run_id=run_id,
        key=key if key is not None else NoiseKey.generate(),
        claim=claim,
        released=released,
        ledger=ledger,
        store=store,
        fingerprint=fingerprint,
        lake=lake,
    )
    if not record.released and run_id is not None:
        unreleased.hold(run_id, record.give_back)
    return record


def _first_state(
    record: _RunRecord, algorithm: Algorithm, plan: Plan, initial_params: np.ndarray, losses: list[float]
) -> Any:
    """The algorithm's initial state; a durable run saves it with its key before the first release, as an
    exclusive create (of two processes starting one run id, one writes)."""
    state = algorithm.init(plan, initial_params)
    if record.store is not None:
        record.save(0, state, losses, exclusive=True)
        record.own_checkpoint = True
    return state


def _noisy_step(
    record: _RunRecord, algorithm: Algorithm, executor: Executor, plan: Plan, span: StepSpan, state: Any
) -> tuple[Any, BatchStats]:
    """One planned step: the statistics the algorithm requests over the step's rows, then its noisy update
    (with the statistics of a follow-up request over the same rows where the algorithm asks for one). Once
    the statistics are in, the step's noise counts as used."""
    stats = executor.compute(span, algorithm.request(state, span, plan))
    record.mark_released()
    followup = algorithm.followup(state, span, stats, record.key, plan)
    if followup is None:
        return algorithm.apply(state, span, stats, record.key, plan), stats
    followup_stats = executor.compute(span, followup)
    return algorithm.apply(state, span, stats, record.key, plan, followup_stats=followup_stats), stats
