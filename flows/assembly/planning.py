"""The train flow's planning and evaluation, as library calls (no Prefect): the run's inputs become one run
plan, and the trained parameters one held-out score.

``plan_run`` turns the run's inputs (``dpstream.flows.assembly.inputs.RunInputs``) and the training rows
into the run's ``RunPlan`` (``dpstream.run_plan``: algorithm, model, steps, privacy event and report,
checkpoint policy), through ``build_algorithm``, the same builder the estimators use
(``dpstream.algorithms.builder``); ``plan_for`` is that plan on a row count alone, which ``dpstream
validate`` checks before anything is shuffled. ``PlannedRun`` is what the flow's plan task hands to every
later task. ``evaluate_holdout`` scores the released parameters on the held-out file
(non-private, operator only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpstream.algorithms.base import PrivacyReport
from dpstream.algorithms.builder import HYPERPARAMETERS, AlgorithmSpec
from dpstream.algorithms.builder import build_algorithm as build_spec
from dpstream.checkpoint import CheckpointPolicy
from dpstream.flows.assembly.evaluation import score_holdout
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.locations import RunLocations
from dpstream.flows.config.pipeline import PipelineConfig
from dpstream.models import Model
from dpstream.pipelines import Manifest
from dpstream.pipelines.conversion.convert import read_convert_record
from dpstream.pipelines.preprocessing.spec import INTERCEPT_COLUMN, RAW_LABEL_COLUMN, ConvertSpec
from dpstream.privacy import LakeLedger, Ledger, LifetimeBudget, PrivacyUnit, compose_mu, mu_for_epsilon_delta
from dpstream.run_plan import RunPlan

__all__ = [
    "build_algorithm",
    "plan_for",
    "plan_run",
    "check_bounds_unit",
    "lake_preprocessing",
    "PlannedRun",
    "checkpoint_policy",
    "lake_ledger",
    "source_ledger",
    "overridden_lifetime",
    "bound_charge",
    "with_bound_note",
    "evaluate_holdout",
    "schema_row_norm_bound",
    "intercept_index",
]


def build_algorithm(
    inputs: RunInputs,
    num_rows: int,
    dim: int,
    record: dict[str, Any] | None = None,
    model: Model | None = None,
    unit: PrivacyUnit | None = None,
) -> Any:
    """The algorithm the config's [algorithm] section names, built as the estimators build theirs. AdaSSP's
    row-norm bound, when the config leaves it out, comes from the lake's public schema where
    ``dpstream convert`` wrote the lake (its conversion ``record``, ``schema_row_norm_bound``), else sqrt(d).
    ``model``: the config's model when the caller built it already; ``unit``: the run's privacy unit
    (default the config's, ``RunInputs.unit``)."""
    config = inputs.config
    a, b = config.algorithm, config.budget
    features = inputs.model_features
    spec = AlgorithmSpec(
        name=a.name,
        epsilon=b.epsilon,
        delta=b.delta,
        relation=b.relation,
        unit=unit if unit is not None else inputs.unit,
        clip_norm=a.clip_norm,
        learning_rate=a.learning_rate,
        batch_size=a.batch_size,
        num_steps=a.num_steps,
        stat_bound=a.stat_bound,
        noise=a.noise,
        correlation=a.correlation,
        nu=a.nu,
        row_norm_bound=a.row_norm_bound
        if a.row_norm_bound is not None
        else schema_row_norm_bound(record, features),
        label_bound=a.label_bound,
        intercept_index=intercept_index(record, features),
        given=frozenset(a.model_fields_set) & HYPERPARAMETERS,  # the keys the config file sets
    )
    return build_spec(spec, model if model is not None else config.model.build(), num_rows, dim)[1]


def lake_preprocessing(inputs: RunInputs) -> dict[str, Any] | None:
    """The public preprocessing of the lake's rows, as recorded: ``[preprocess]``, applied as the rows are
    read (``ConvertSpec.on_read``), else what ``dpstream convert`` recorded beside the lake it wrote, else
    None (the model reads the columns as stored). Public: the config and the record, never the rows."""
    config, spec = inputs.config, inputs.preprocessing
    converted = read_convert_record(config.lake.url, config.lake.storage_options)
    if spec is not None and converted is not None:
        raise ValueError(
            f"preprocess: {config.lake.url} was written by `dpstream convert` (its _convert.json), so its columns are "
            "prepared already (and its checks of ids and private bounds read that record): remove [preprocess]"
        )
    return spec.record() if spec is not None else converted


def schema_row_norm_bound(record: dict[str, Any] | None, features: Any) -> float | None:
    """The public bound on ‖x‖ that the lake's conversion record implies for the selected ``features``
    (``ConvertSpec.row_norm_bound``: a one-hot group counts 1, not its size), or None for a lake ``dpstream
    convert`` did not write. Public: it reads the recorded preprocessing, never the rows."""
    if record is None or isinstance(features, str):
        return None
    return ConvertSpec.from_record(record).row_norm_bound(features)


def intercept_index(record: dict[str, Any] | None, features: Any) -> int | None:
    """The position among ``features`` of the public constant column ``dpstream convert`` writes
    (``INTERCEPT_COLUMN``), or None: AdaSSP then leaves it unpenalised in a regression and a K-class fit
    can read class counts from it (``dpstream.algorithms.ssp``)."""
    if (
        not record
        or not record.get("intercept")
        or isinstance(features, str)
        or INTERCEPT_COLUMN not in features
    ):
        return None
    return list(features).index(INTERCEPT_COLUMN)


def plan_for(
    inputs: RunInputs,
    num_units: int,
    num_features: int,
    record: dict[str, Any] | None,
    unit: PrivacyUnit | None = None,
    checkpoint: CheckpointPolicy | None = None,
) -> RunPlan:
    """The run plan of the config's model and algorithm on ``num_units`` rows (or people) of
    ``num_features`` features, under ``unit`` (default the config's) and the ``checkpoint`` policy (None:
    not durable); ``record`` is the lake's conversion record (``read_convert_record``). Refused
    (``ValueError``) for a carried id among the features or bounds of the wrong unit
    (``check_bounds_unit``), a hyperparameter the algorithm ignores, or a plan over its budget."""
    model = inputs.config.model.build()
    dim = model.num_params(num_features)
    check_bounds_unit(inputs, record)
    algorithm = build_algorithm(inputs, num_units, dim, record, model, unit)
    return RunPlan.build(algorithm, model, num_units, dim, checkpoint)


def plan_run(
    inputs: RunInputs, training: Manifest, checkpoint_url: str | None, record: dict[str, Any] | None
) -> RunPlan:
    """The run plan on the ``training`` rows (``plan_for``: their people for a user-level shuffle, with
    the k it applied), with the config's checkpoint policy at ``checkpoint_url`` (None: not durable)."""
    config = inputs.config
    if config.is_user_level != training.is_user_level:  # the shuffle refuses this first; a plan never mixes
        raise ValueError(
            f"the config's privacy unit is the {config.privacy.unit}, but the shuffled lake {training.url} holds "
            f"{'people' if training.is_user_level else 'rows'}; shuffle it again for this config (--reshuffle)"
        )
    unit = inputs.bounded_unit(training.unit.max_rows_per_user if training.unit is not None else None)
    policy = checkpoint_policy(config, checkpoint_url) if checkpoint_url is not None else None
    return plan_for(inputs, training.num_units, training.num_features, record, unit, policy)


def check_bounds_unit(inputs: RunInputs, record: dict[str, Any] | None) -> None:
    """Refuse the raw label column (``RAW_LABEL_COLUMN``) as a feature or the label, an id column that
    ``dpstream convert`` carried into the lake (``--id``/``--user``) as a feature,
    and a user-level run on a lake whose conversion estimated bounds privately per row: the sample of every
    10th row holds some rows of most people, whose other rows are in the lake, so the bounds' release and
    the run would compose for a person (the row argument's parallel composition fails)."""
    config, features = inputs.config, inputs.model_features
    features = [features] if isinstance(features, str) else features
    if RAW_LABEL_COLUMN in features or inputs.config.lake.label == RAW_LABEL_COLUMN:
        raise ValueError(
            f"lake.features or lake.label names {RAW_LABEL_COLUMN!r}, the unclipped label dpstream keeps for the "
            "held-out evaluation only: training on it would read the label beyond its bounds; remove it"
        )
    carried = [column for column in (record or {}).get("passthrough", ()) if column in features]
    if carried:
        raise ValueError(
            f"lake.features lists {', '.join(map(repr, carried))}, which `dpstream convert` carried into the lake "
            "as an id (--id/--user): an id is never a feature (a model would learn people by their number); "
            "remove it from lake.features"
        )
    private = (record or {}).get("private_bounds")
    if not config.is_user_level or not private or private.get("unit") == inputs.unit.ledger_unit:
        return  # rows, or bounds estimated from a sample of this pipeline's people (`convert --user`)
    raise ValueError(
        f"{config.lake.url} was converted with bounds estimated privately from every "
        f"{private.get('sample_every', 10)}th row ({', '.join(private.get('columns', []))}): a guarantee per row, "
        "while this pipeline protects people, whose rows are in that sample and in the lake alike. Convert "
        f"the CSV again with --user {config.privacy.user_column} (the sample is then every 10th person), or with "
        "public ranges for those columns (--bounds COLUMN=LOW,HIGH)"
    )


@dataclass(frozen=True)
class PlannedRun:
    """What the plan task fixes before any release, handed to every later task: the run id, where the run
    writes, the run plan (the privacy argument), the lake it was planned on (training rows, held-out file
    and the whole manifest the ledger is keyed by) and the lake's conversion record (read once)."""

    run_id: str
    locations: RunLocations
    plan: RunPlan
    lake: Manifest
    training: Manifest
    holdout: Manifest
    preprocessing: dict[str, Any] | None
    warnings: tuple[str, ...] = ()  # for the user's terminal as well as the run's log


def checkpoint_policy(config: PipelineConfig, checkpoint_url: str) -> CheckpointPolicy:
    """The run's checkpoint policy: the whole [checkpoint] section (every_steps and every_seconds), or the
    library's defaults without one."""
    section, outage = config.checkpoint, config.storage.outage_policy()
    if section is None:
        return CheckpointPolicy(checkpoint_url, outage=outage)
    return CheckpointPolicy(
        checkpoint_url, every_steps=section.every_steps, every_seconds=section.every_seconds, outage=outage
    )


def lake_ledger(inputs: RunInputs, manifest: Manifest) -> LakeLedger:
    """The ledger of the lake ``manifest`` was shuffled from (keyed by its fingerprint, its files recorded)."""
    return source_ledger(inputs, manifest.fingerprint, manifest.source_files)


def source_ledger(inputs: RunInputs, fingerprint: str, files: tuple[str, ...]) -> LakeLedger:
    """The ledger of the source lake with this fingerprint and these files, counting the config's privacy
    unit (a lake's first run fixes it: ``dpstream.privacy.UnitMismatchError`` for another)."""
    config = inputs.config
    budget = config.budget
    return Ledger(budget.ledger_url, outage=config.storage.outage_policy()).lake(
        fingerprint,
        LifetimeBudget(budget.lifetime_epsilon, budget.delta, budget.relation, unit=inputs.unit.ledger_unit),
        files=files or None,
        proposed=True,  # the config proposes a first run's budget; the ledger's record is the lake's one
    )


def overridden_lifetime(lake: LakeLedger) -> str | None:
    """What to tell the user where the config's ``budget.lifetime_epsilon`` / ``delta`` is not the lake's
    recorded lifetime budget (which wins: ``Ledger.lake(proposed=True)``)."""
    if lake.proposed is None:
        return None
    return (
        f"the config's lifetime budget (budget.lifetime_epsilon = {lake.proposed.epsilon:g}, delta = "
        f"{lake.proposed.delta:g}) is not lake {lake.fingerprint}'s: its ledger records epsilon = "
        f"{lake.budget.epsilon:g}, delta = {lake.budget.delta:g}, and the ledger's record is the lake's one lifetime "
        "budget (the config only proposes a lake's first; `dpstream budget set-lifetime` changes the record). "
        "Runs are charged against the recorded one; set the config's to match to silence this"
    )


AUTO_BOUND_MECHANISM = "max_rows_per_user = 'auto': Gaussian histogram of rows per person (powers of two)"


def bound_charge(
    inputs: RunInputs, fingerprint: str, files: tuple[str, ...], before_run: bool = False
) -> Callable[[str, float], None]:
    """``charge(charge_id, mu)`` for a user-level shuffle's ``"auto"`` k: charged to the source lake's ledger
    and committed at once (the value is released as soon as it is computed; a shuffle that fails after it
    stays charged). ``before_run``: the shuffle of a run, which must fit beside it: refused, before
    anything is charged, unless μ_k and a run at budget.epsilon (its μ, an upper bound of the plan's) fit
    the lake's remaining budget together."""
    config, unit = inputs.config, inputs.unit.ledger_unit
    run_mu = mu_for_epsilon_delta(config.budget.epsilon, config.budget.delta) if before_run else 0.0

    def charge(charge_id: str, mu: float) -> None:
        ledger = source_ledger(inputs, fingerprint, files)
        if before_run:
            ledger.check(charge_id, compose_mu(mu, run_mu))
        ledger.claim(
            charge_id, mu, mechanism=AUTO_BOUND_MECHANISM, relation=config.budget.relation, unit=unit
        )
        ledger.commit(charge_id)

    return charge


def evaluate_holdout(config: PipelineConfig, planned: PlannedRun, params: np.ndarray) -> dict[str, float]:
    """The kind's held-out metric beside its baseline (``ModelKind.evaluate``), non-private and operator
    only: a regression on a preprocessed lake in the label's units, against each held-out row's label as
    it was before the preprocessing clipped it (``dpstream.flows.assembly.evaluation``)."""
    return score_holdout(
        config.model.declaration,
        config.lake.label,
        planned.holdout,
        planned.plan.model,
        planned.preprocessing,
        params,
    )


def with_bound_note(report: PrivacyReport, lake: Manifest) -> PrivacyReport:
    """The run's report with a note on how a user-level shuffle chose k (a separate release, charged to
    the lake's ledger once per shuffle, not part of this run's ε)."""
    unit = lake.unit
    if unit is None or unit.requested != "auto":
        return report
    note = (
        f"max_rows_per_user = {unit.max_rows_per_user} was chosen with DP when the lake was shuffled: a Gaussian "
        f"histogram of rows per person at mu={unit.auto_mu:g} ({unit.relation}), charged to the lake's ledger as "
        f"{unit.charge_id} and not part of this run's guarantee"
    )
    return replace(report, notes=(*report.notes, note))


def with_source_note(report: PrivacyReport, lake: Manifest) -> PrivacyReport:
    """The run's report with the table version it trained on (a Parquet folder has none: no note)."""
    version = lake.source_version
    if version.version is None:
        return report
    note = (
        f"data: {version.describe()} of {lake.source_url} (table id {version.table_id}), "
        f"{lake.source_rows:,} live rows, lake fingerprint {lake.fingerprint}"
    )
    return replace(report, notes=(*report.notes, note))
