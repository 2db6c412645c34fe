"""The release guard of a run on a lake (``dpstream.guarded_run.LakeGuard``), built from the config and
the plan: over the held-out file, at the run's μ (parallel composition: the held-out rows or people are
disjoint from the training ones), for the model kinds whose parameters hold a constant predictor (every
kind today: ``ModelKind.holds_constant``)."""

from __future__ import annotations

from dpstream.export import label_range
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.planning import PlannedRun, intercept_index
from dpstream.guarded_run import LakeGuard
from dpstream.pipelines import lake_blocks
from dpstream.privacy import NeighbouringRelation
from dpstream.release_guard import release_guard

__all__ = ["lake_guard"]


def lake_guard(inputs: RunInputs, planned: PlannedRun) -> LakeGuard | None:
    """The run's guard, or None for a model kind that cannot hold the constant, and for a
    regression whose label no public preprocessing bounded (a lake not written by ``dpstream convert``
    nor read with ``[preprocess]``): its labels are not within [−1, 1], which the guard's sensitivity
    needs."""
    config = inputs.config
    declaration = config.model.declaration
    if not declaration.holds_constant:
        return None
    if not declaration.classifies and label_range(planned.preprocessing, config.lake.label) is None:
        return None
    model, holdout = planned.plan.model, planned.holdout
    classes = (2 if model.outputs == 1 else model.outputs) if declaration.classifies else 0
    guard = release_guard(planned.plan.mu, NeighbouringRelation.parse(config.budget.relation), classes)
    return LakeGuard(
        guard,
        lambda: lake_blocks(holdout),  # as the held-out evaluation reads it
        holdout.num_units,
        holdout.num_features,
        intercept_index(planned.preprocessing, inputs.model_features),
        "person" if holdout.is_user_level else "row",
    )
