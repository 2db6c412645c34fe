"""Train a run plan (``dpstream.run_plan.RunPlan``) on a shuffled lake through a Dask cluster.

The plan is built once by the caller (``plan_on_lake`` from the manifest, or the flow's plan task) and
checked here against the lake it is run on; nothing below rebuilds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dpstream.checkpoint import CheckpointPolicy
from dpstream.coordinator import FitResult, InMemoryExecutor, RunGuard, execute
from dpstream.models import Model
from dpstream.noise import NoiseKey
from dpstream.pipeline_constants import DEFAULT_WORKER_TIMEOUT
from dpstream.pipelines.execution.executor import DaskExecutor
from dpstream.pipelines.execution.streaming import choose_mode, prefetched_blocks
from dpstream.pipelines.shuffle.manifest import Manifest, verify_parts
from dpstream.privacy import LakeLedger
from dpstream.run_plan import RunPlan

__all__ = ["train_on_lake", "plan_on_lake", "MODES"]

MODES = ("auto", "scatter", "streaming")


def plan_on_lake(
    manifest: Manifest, algorithm: Any, model: Model, checkpoint: CheckpointPolicy | None = None
) -> RunPlan:
    """The run plan of ``algorithm`` training ``model`` on the manifest's rows, or its people for a
    user-level shuffle (``Manifest.num_units``; refused when over budget)."""
    return RunPlan.build(
        algorithm, model, manifest.num_units, model.num_params(manifest.num_features), checkpoint
    )


def train_on_lake(
    manifest: Manifest,
    run_plan: RunPlan,
    client: Any,
    key: NoiseKey | None = None,
    *,
    mode: str = "auto",
    storage_options: dict[str, Any] | None = None,
    prefetch_blocks: int = 4,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    initial_params: np.ndarray | None = None,
    on_step: Callable[[int, Any], None] | None = None,
    run_id: str | None = None,
    ledger: LakeLedger | None = None,
    guard: RunGuard | None = None,
) -> tuple[FitResult, str]:
    """Run the plan over the lake in one pass; returns the fit and the execution mode used. The plan
    must have been built for this lake's rows and features (``RunPlan.check_data``).

    Every part of the manifest's generation is checked against its size and content identity before
    anything is charged (``verify_parts``; ``LakeError`` names a missing, changed or foreign part), and
    again as it is read (by the workers in scatter mode, by the coordinator's reader threads in streaming).

    The plan's checkpoint policy and ``run_id`` make the run resumable (the shuffle generation,
    ``Manifest.row_order``, is part of the checkpoint's identity, so a checkpoint is never applied to
    another lake or another shuffle of it); ``ledger`` charges the run once; ``guard`` (over the
    held-out file, ``dpstream.guarded_run.LakeGuard``) decides what it releases. In scatter mode (and for
    ``auto``'s probe) a cluster without workers for ``worker_timeout`` seconds stops the run
    (``NoWorkersError``) instead of hanging it; streaming needs no worker.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    run_plan.check_data(manifest.num_units, manifest.num_features, f"the shuffled lake {manifest.url}")
    verify_parts(manifest, storage_options)
    algorithm, model, steps = run_plan.algorithm, run_plan.model, run_plan.steps
    params = model.init_params(manifest.num_features) if initial_params is None else initial_params
    if mode == "auto":
        state = algorithm.init(steps, params)
        mode = choose_mode(
            client,
            steps,
            model,
            algorithm.request(state, steps.spans[0], steps),
            manifest.num_features,
            worker_timeout=worker_timeout,
        )
    if mode == "scatter":
        executor = DaskExecutor(client, manifest, model, storage_options, worker_timeout=worker_timeout)
    else:
        executor = InMemoryExecutor(
            model,
            prefetched_blocks(client, manifest, storage_options, prefetch_blocks, worker_timeout),
            by_user=manifest.is_user_level,
        )
    try:
        result = execute(
            run_plan,
            executor,
            initial_params=params,
            key=key,
            on_step=on_step,
            run_id=run_id,
            ledger=ledger,
            lake=manifest.row_order,
            guard=guard,
        )
    finally:
        if isinstance(executor, DaskExecutor):
            executor.close()
    return result, mode
