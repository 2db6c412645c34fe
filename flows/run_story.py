"""The train flow's story in the Prefect UI: one log line per step of the run on the flow run's logger
(what was validated, which shuffle generation is read, the plan and the lake's budget, what training
released, the held-out metric beside its baseline, where the release went) and the Dask dashboard as a
link artifact. Only public settings, DP outputs and operator-only figures that the CLI prints too; never
the noise key."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_link_artifact, create_progress_artifact, update_progress_artifact

from dpstream.models.kinds.base import summarise
from dpstream.privacy import epsilon_for_delta

__all__ = [
    "tell_validated",
    "tell_generation",
    "tell_plan",
    "tell_dashboard",
    "tell_trained",
    "tell_evaluated",
    "tell_published",
    "training_progress",
]

PROGRESS_SECONDS = 2.0  # the progress artifact is updated at most this often (and at the last step)


def tell_validated(validated: Any) -> None:
    summary = validated.summary
    rows = validated.training_rows + validated.held_out_rows
    get_run_logger().info(
        f"validated {rows:,} rows of {summary.num_features} features in {len(summary.files)} files of lake "
        f"{summary.fingerprint}; the shuffle writes {validated.files} files, the last "
        f"({validated.held_out_rows:,} rows) held out for evaluation"
    )


def tell_generation(manifest: Any, resumed: bool) -> None:
    how = "pinned by the run's checkpoint" if resumed else "the current one"
    get_run_logger().info(
        f"shuffle generation {manifest.generation} ({how}): {manifest.source_rows:,} rows under {manifest.url}"
    )


def tell_plan(planned: Any, lake: Any) -> None:
    """The plan and the lake's lifetime budget: spent by other runs before this one, left after it."""
    plan, budget = planned.plan, lake.budget
    report = plan.report
    others = lake.remaining_mu(exclude=planned.run_id)
    left = math.sqrt(max(0.0, others**2 - plan.mu**2))
    left_epsilon = epsilon_for_delta(budget.delta, left) if left > 0 else 0.0
    units = "people" if report.ledger_unit.startswith("user") else "rows"
    get_run_logger().info(
        f"plan of run {planned.run_id}: {plan.algorithm.name} over {plan.num_rows:,} training {units} in "
        f"{plan.steps.num_steps} steps; the run spends epsilon = {report.epsilon:.4g} at delta = "
        f"{report.delta:g} ({report.unit}); lake {lake.fingerprint}: lifetime epsilon = "
        f"{budget.epsilon:g}, {left_epsilon:.4g} left after this run (Gaussian DP adds up mu², not epsilon)"
    )


def tell_dashboard(client: Any) -> None:
    """The training cluster's Dask dashboard, in the logs and as a link artifact (while the run lasts)."""
    link = getattr(client, "dashboard_link", None)
    if not link:
        return
    get_run_logger().info(f"Dask dashboard of the training cluster (while the run lasts): {link}")
    create_link_artifact(
        link=link,
        link_text="Dask dashboard (while the run lasts)",
        description="the training cluster's Dask dashboard",
    )


def tell_trained(released: str, resumed_at: int, steps: int) -> None:
    resumed = f", resumed from its checkpoint at step {resumed_at} of {steps}" if resumed_at else ""
    what = "the model" if released == "model" else "the constant predictor (the release guard's choice)"
    get_run_logger().info(f"trained in {steps} steps{resumed}: releasing {what}")


def tell_evaluated(metrics: dict[str, float]) -> None:
    get_run_logger().info(summarise(metrics))


def tell_published(paths: dict[str, str]) -> None:
    listed = ", ".join(f"{name.replace('_', ' ')} {url}" for name, url in paths.items())
    get_run_logger().info(f"published: {listed}")


def training_progress(
    run_id: str, num_steps: int, then: Callable[[int, Any], None]
) -> Callable[[int, Any], None]:
    """An ``on_step(step, state)`` callback that calls ``then`` (the terminal's bar) and keeps a progress
    artifact of the training steps done (a percentage of the plan's steps, a public count) up to date in
    the UI."""
    artifact: list[Any] = []
    last = [float("-inf")]

    def on_step(step: int, state: Any) -> None:
        then(step, state)
        done = step + 1
        now = time.monotonic()
        if artifact and done < num_steps and now - last[0] < PROGRESS_SECONDS:
            return
        percent = 100.0 * done / max(num_steps, 1)
        description = f"training steps of run {run_id}: {done} of {num_steps}"
        if not artifact:
            artifact.append(create_progress_artifact(percent, description=description))
        else:
            update_progress_artifact(artifact[0], percent, description=description)
        last[0] = now

    return on_step
