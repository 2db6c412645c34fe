"""Prefect flows: thin orchestration of ``pipelines`` and ``dpstream`` calls; no maths here.

``train_flow(config)`` (its run id, when none is given, the flow run's: a retried flow run resumes):
1. validate the lake and claim the run's publish and operator folders (``claim_run_folders``: by run id
and lake, before anything is charged); 2. shuffle once (the current generation is reused when it serves; a resumed run
pins the generation it started on), both on the cluster's workers or in the flow's process
(``cluster.prepare_on``); 3. plan: N from the manifest (the last file held out for evaluation), the run plan built once
(``dpstream.run_plan.RunPlan``: algorithm, model, steps, noise, privacy event and report, checkpoint
policy) and the ledger check (the budget, and the run-id rule: a run id the ledger holds runs only from
its checkpoint); the plan, with the run's locations, is what every later task receives (``PlannedRun``)
and none rebuilds it; 4. train on the Dask executor, on a cluster of its own (a retried task
gets a fresh cluster and resumes from its checkpoint; a refusal is not retried); 5. evaluate on the
held-out file (non-private evaluation, operator only); 6. publish the release (model.json, the privacy
report, the clip-norm and ε(δ) plots) to the publish folder and the operator-only metrics and loss
plot to the operator folder; 7. the ledger entry is committed by the training run when it completes.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from base64 import b64encode
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote

from dpstream.checkpoint import CheckpointError, CheckpointPolicy, CheckpointStore
from dpstream.export import model_document
from dpstream.flows.assembly.cluster import preparation_client, run_client
from dpstream.flows.assembly.guard import lake_guard
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.assembly.locations import (
    RunLocations,
    claim_run_folders,
    claims_given_back_on_failure,
    record_release,
    run_locations,
)
from dpstream.flows.assembly.planning import (
    PlannedRun,
    evaluate_holdout,
    lake_ledger,
    overridden_lifetime,
    plan_run,
    with_bound_note,
    with_source_note,
)
from dpstream.flows.assembly.prepare import ValidatedLake, shuffle, validate
from dpstream.flows.cli.progress import RunProgress
from dpstream.flows.config.pipeline import PipelineConfig
from dpstream.flows.plots import render_plots
from dpstream.flows.run_story import (
    tell_dashboard,
    tell_evaluated,
    tell_generation,
    tell_plan,
    tell_published,
    tell_trained,
    tell_validated,
    training_progress,
)
from dpstream.outages import OutagePolicy, StoreUnavailableError
from dpstream.pipelines import Manifest, NoWorkersError, train_on_lake
from dpstream.pipelines.conversion.convert import read_convert_record
from dpstream.pipelines.shuffle.once import pinned_generation as generation_of
from dpstream.privacy import BudgetExceededError, RunIdReusedError
from dpstream.run_plan import PlanMismatchError
from dpstream.storage import open_url, url_of, write_bytes_atomic
from dpstream.validation import check_name

__all__ = ["train_flow", "shuffle_flow"]


def _retry_unless_refused(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: retry what may pass on a second try (a lost worker, a storage hiccup),
    never a refusal, which would only be refused again (a bad lake or config, the budget, a checkpoint of
    another configuration, a cluster without workers), nor a store that stayed unreachable for the whole
    outage window."""
    error = state.data if isinstance(state.data, BaseException) else None
    deterministic = (
        ValueError,
        BudgetExceededError,
        CheckpointError,
        NoWorkersError,
        PlanMismatchError,
        StoreUnavailableError,  # it already waited out the whole outage window
    )
    return not isinstance(error, deterministic)


# Tasks given the run's Dask client skip Prefect's input hashing: a client is not data to cache on.
@task(name="validate lake", cache_policy=NO_CACHE)
def validate_task(inputs: RunInputs, client: Any = None, generation: str | None = None) -> ValidatedLake:
    validated = validate(inputs, client, generation)
    tell_validated(validated)
    for warning in validated.warnings:
        get_run_logger().warning(warning)
    return validated


@task(
    name="shuffle once",
    retries=2,
    retry_delay_seconds=5,
    retry_condition_fn=_retry_unless_refused,
    cache_policy=NO_CACHE,
)
def shuffle_task(
    inputs: RunInputs,
    config_path: str,
    validated: ValidatedLake,
    client: Any = None,
    show_progress: bool = False,
    generation: str | None = None,
) -> Manifest:
    """The shuffle generation the run reads: ``generation`` (a resumed run's) or the current one."""
    with RunProgress(enabled=show_progress and generation is None) as progress:
        manifest = shuffle(
            inputs,
            config_path,
            validated,
            client=client,
            on_progress=progress.shuffle(validated.summary.num_rows),
            generation=generation,
            before_run=True,
        )
    tell_generation(manifest, resumed=generation is not None)
    return manifest


def pinned_generation(checkpoints: str, run_id: str) -> str | None:
    """The shuffle generation a checkpointed run started on (None for a new run): a resume reads it again."""
    data_version = CheckpointStore(CheckpointPolicy(checkpoints)).data_version(run_id)
    return generation_of(data_version) if data_version else None


@task(name="plan", cache_policy=NO_CACHE)
def plan_task(inputs: RunInputs, manifest: Manifest, run_id: str, locations: RunLocations) -> PlannedRun:
    """Build the run plan once, and refuse before any release: a plan over its budget, a run past the
    lifetime budget (the run's own earlier reservation is not counted twice when it resumes), or a run id
    the ledger holds whose checkpoint is gone."""
    training, holdout = manifest.split_last_file()  # the last file is held out for evaluation
    # What the shuffled rows went through: [preprocess] as the shuffle read them, or `dpstream convert`.
    lake_section = inputs.config.lake
    preprocessing = manifest.preprocessing or read_convert_record(
        lake_section.url, lake_section.storage_options
    )
    checkpoint_url = locations.checkpoints
    plan = plan_run(inputs, training, checkpoint_url, preprocessing)
    lake = lake_ledger(inputs, manifest)
    notices = tuple(filter(None, [overridden_lifetime(lake)]))
    for notice in notices:
        get_run_logger().warning(notice)
    entry = lake.entry(run_id)
    if entry is not None and not CheckpointStore(plan.checkpoint).exists(run_id):
        raise RunIdReusedError(
            f"run {run_id!r} is already {entry.status} in lake {manifest.fingerprint}'s ledger and its checkpoint is not "
            f"at {checkpoint_url}: a second model under this id would be released for one charge. Pass a new --run-id, "
            "or set checkpoint.url to where the run was checkpointed"
        )
    lake.check(run_id, plan.mu)
    planned = PlannedRun(run_id, locations, plan, manifest, training, holdout, preprocessing, notices)
    tell_plan(planned, lake)
    return planned


@task(
    name="train",
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=_retry_unless_refused,
    cache_policy=NO_CACHE,
)
def train_task(inputs: RunInputs, planned: PlannedRun, show_progress: bool = False):
    plan, config = planned.plan, inputs.config
    # A cluster of its own: each retry of a failed training gets a fresh one.
    with run_client(config.cluster) as client, RunProgress(enabled=show_progress) as progress:
        tell_dashboard(client)
        result, mode = train_on_lake(
            planned.training,
            plan,
            client,
            mode=config.cluster.mode,
            worker_timeout=config.cluster.worker_timeout,
            run_id=planned.run_id,
            ledger=lake_ledger(inputs, planned.lake),
            on_step=training_progress(
                planned.run_id, plan.steps.num_steps, then=progress.training(plan.algorithm, plan.steps)
            ),
            guard=lake_guard(inputs, planned),  # over the held-out file: the model, or the constant
        )
    tell_trained(released(result), result.resumed_at, plan.steps.num_steps)
    return result, mode


@task(name="evaluate (non-private)", cache_policy=NO_CACHE)
def evaluate_task(config: PipelineConfig, planned: PlannedRun, params: np.ndarray) -> dict[str, float]:
    metrics = evaluate_holdout(config, planned, params)
    tell_evaluated(metrics)
    return metrics


@task(name="publish")
def publish_task(
    locations: RunLocations,
    document: dict[str, Any],
    report,
    losses,
    metrics,
    storage_options: dict | None = None,
    outage: OutagePolicy | None = None,
) -> dict[str, str]:
    """Write the release (model.json, privacy_report.md, the ε(δ) plot and DP-STAT's clip-norm trace)
    under the publish folder and the operator-only metrics and loss plot under the operator folder
    (folders or any fsspec URLs), each in one atomic write; the Prefect artifacts (keyed per lake,
    ``artifact_key``) hold the report with its plots, the metrics and the files' locations. Returns
    {name: URL}."""
    run_id = document["run_id"]
    plots = render_plots(report, losses)
    operator_only = {"loss_plot"}
    files = {
        "model": (locations.output, "model.json", json.dumps(document, indent=2).encode()),
        "report": (locations.output, "privacy_report.md", (report.to_markdown() + "\n").encode()),
        **{
            name: (locations.operator if name in operator_only else locations.output, file_name, data)
            for name, (file_name, data) in plots.items()
        },
        "metrics": (
            locations.operator,
            "metrics.json",
            json.dumps({"run_id": run_id, "note": OPERATOR_NOTE, "metrics": metrics}, indent=2).encode(),
        ),
    }
    paths = {}
    for name, (folder, file_name, data) in files.items():
        fs, root = open_url(folder, storage_options)
        (outage or OutagePolicy()).call(
            functools.partial(write_bytes_atomic, fs, f"{root}/{file_name}", data),
            store=folder,
            what=f"publish {file_name} of run {run_id!r}",
        )
        paths[name] = url_of(fs, f"{root}/{file_name}")
    released = [file_name for folder, file_name, _ in files.values() if folder == locations.output]
    record_release(locations.output, released, outage, storage_options)  # last: the release is whole
    lake = document["lake_fingerprint"]
    released_plots = [data for name, (_, data) in plots.items() if name not in operator_only]
    create_markdown_artifact(  # the release's plots drawn in the UI itself, not linked to a file
        markdown=report.to_markdown()
        + "".join(
            f"\n\n![plot](data:image/png;base64,{b64encode(data).decode()})" for data in released_plots
        ),
        key=artifact_key("privacy-report", lake),
        description=f"privacy report of {run_id}",
    )
    create_table_artifact(
        table=[{"metric": k, "value": v} for k, v in metrics.items()],
        key=artifact_key("metrics", lake),
        description=f"non-private evaluation of {run_id}, operator only",
    )
    create_markdown_artifact(  # locations as text: a browser opens no file:// or s3:// link
        markdown="\n".join(f"- {name.replace('_', ' ')}: `{path}`" for name, path in paths.items()),
        key=artifact_key("release-files", lake),
        description=f"where run {run_id} published (read them with dpstream report / predict)",
    )
    tell_published(paths)
    return paths


def artifact_key(kind: str, lake_fingerprint: str) -> str:
    """A Prefect artifact key per lake (lowercase letters, digits and dashes), so each lake's runs form
    one history in the UI: ``privacy-report-<lake>``, ``metrics-<lake>``."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{kind}-{lake_fingerprint}".lower()).strip("-")


def released(fit: Any) -> str:
    """What the run published: "constant" where the release guard chose the constant or AdaSSP's λ₀ > N
    rule released only the noisy label mean, else "model"."""
    if getattr(fit.state, "label_mean_only", False) or (fit.guard is not None and not fit.guard.model):
        return "constant"
    return "model"


OPERATOR_NOTE = (
    "non-private evaluation on the held-out file: operator only, never published beside the model (it is "
    "computed from the rows without noise)"
)


def run_id_of_flow_run(flow_run_id: Any) -> str:
    """The run id of a flow run started without one: "run-" and the hex of the Prefect flow run's id. A retry
    of that flow run (``retries=``, or Retry in the UI: the same flow run in AwaitingRetry) then is the same
    run: it resumes from its checkpoint, releases the same values and is charged once. Without a flow run
    (the function called directly): a random id."""
    if flow_run_id is None:
        return f"run-{uuid.uuid4().hex[:12]}"
    return f"run-{uuid.UUID(str(flow_run_id)).hex}"


def _flow_run_name() -> str:
    """A train flow run is named after its run id, so the Prefect UI and the ledger say the same."""
    from prefect.runtime import flow_run

    given = flow_run.parameters.get("run_id")
    return given if given is not None else run_id_of_flow_run(flow_run.id)


@flow(name="train", flow_run_name=_flow_run_name)
def train_flow(
    config_path: str,
    run_id: str | None = None,
    output_dir: str | None = None,
    show_progress: bool = False,
    operator_dir: str | None = None,
) -> dict[str, Any]:
    """``show_progress`` draws rich progress bars on stderr (the CLI sets it; scheduled runs log instead).
    Without ``run_id`` the run id is the flow run's (``run_id_of_flow_run``): a retried flow run resumes."""
    from prefect.runtime import flow_run

    inputs = load_inputs(config_path)
    config = inputs.config
    run_id = check_name("run_id", run_id) if run_id is not None else run_id_of_flow_run(flow_run.id)
    locations = run_locations(config, config_path, run_id, output_dir, operator_dir)
    generation = pinned_generation(locations.checkpoints, run_id)  # a resume reads what it started on
    # On the cluster's workers (one task per file) or in this process: cluster.prepare_on.
    with preparation_client(config.cluster) as client:
        validated = validate_task(inputs, client, generation)  # a resume: the table version it started on
        # The run's folders are its own before anything is charged (a shuffle's "auto" bound included);
        # a run that fails before it published anything gives them back.
        claims = claim_run_folders(
            locations, run_id, validated.summary.fingerprint, config.storage.outage_policy()
        )
        with claims_given_back_on_failure(claims):
            manifest = shuffle_task(inputs, config_path, validated, client, show_progress, generation)
    with claims_given_back_on_failure(claims):
        planned = plan_task(inputs, manifest, run_id, locations)
        # quote: Prefect would otherwise walk every step span of the plan at each task call
        fit, mode = train_task(inputs, quote(planned), show_progress)
        params, report = fit.params, with_source_note(with_bound_note(fit.report, manifest), manifest)
        metrics = evaluate_task(config, quote(planned), params)
        section = config.model.model_dump()
        document = model_document(
            model={  # the kind and the settings it reads (a linear model.json carries no KAN settings)
                "kind": config.model.kind,
                **{name: section[name] for name in config.model.declaration.settings},
                **({"classes": list(config.model.classes)} if config.model.classes is not None else {}),
            },
            features=inputs.model_features,
            label=config.lake.label,
            run_id=run_id,
            lake_fingerprint=manifest.fingerprint,
            algorithm=planned.plan.algorithm.name,
            params=params,
            report=report,
            preprocessing=planned.preprocessing,
            source=manifest.source_version.to_json() if manifest.source_version.version is not None else None,
            released=released(fit),
        )
        paths = publish_task(
            locations, document, report, fit.training_loss, metrics, outage=config.storage.outage_policy()
        )
    return {
        "run_id": run_id,
        "report": report,
        "metrics": metrics,
        "paths": paths,
        "mode": mode,
        "params": params,
        "generation": manifest.generation,
        "resumed_at": fit.resumed_at,  # the step its checkpoint resumed it at (0: a fresh run)
        "steps": planned.plan.steps.num_steps,
        "released": released(fit),
        "flow_run_id": flow_run.id,  # Prefect's, for the UI's link (None outside a flow run)
        "warnings": planned.warnings,
    }


@flow(name="shuffle")
def shuffle_flow(config_path: str, show_progress: bool = False) -> Manifest:
    inputs = load_inputs(config_path)
    with preparation_client(inputs.config.cluster) as client:
        validated = validate_task(inputs, client)
        return shuffle_task(inputs, config_path, validated, client, show_progress)
