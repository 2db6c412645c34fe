"""Validate and shuffle a config's lake, as every entry point runs them.

The train and shuffle flows' tasks and the ``dpstream validate`` / ``dpstream shuffle`` commands call
these two functions, so they refuse the same lakes and layouts, warn alike and protect the same
locations (``shuffle_protected``: one rule). No Prefect here: the commands that only prepare a lake do
not load it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.planning import bound_charge, lake_preprocessing
from dpstream.flows.config.file import config_folder
from dpstream.flows.config.pipeline import PipelineConfig, delta_warning
from dpstream.person_ids import id_rule
from dpstream.pipelines import LakeSummary, Manifest, read_manifest, shuffle_once, validate_lake
from dpstream.pipelines.shuffle.location import validation_cache
from dpstream.pipelines.sources.protocol import pinned_spec
from dpstream.privacy import Ledger

__all__ = ["ValidatedLake", "validate", "shuffle", "shuffle_protected", "merged_ids_note"]


@dataclass(frozen=True)
class ValidatedLake:
    """A validated lake and the layout its shuffle will have: ``files`` shuffled files, the last held out."""

    summary: LakeSummary
    files: int
    training_rows: int
    held_out_rows: int
    warnings: tuple[str, ...]  # stray files beside the lake, δ ≥ 1/N, person ids spelled several ways


def validate(
    inputs: RunInputs,
    client: Any = None,
    generation: str | None = None,
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> ValidatedLake:
    """Validate the lake for the config's model (labels included; one Dask task per file with ``client``)
    and refuse a layout that leaves no file to hold out, before anything is shuffled. ``generation``: a
    resumed run's shuffle generation, whose table version is validated again (not the table's latest).
    ``progress``: ``validate_lake``'s per-file progress hook."""
    config, spec = inputs.config, inputs.lake
    if generation is not None:
        shuffled = read_manifest(config.lake.shuffled_url, config.lake.storage_options, generation)
        spec = pinned_spec(spec, shuffled.source_version)
    summary = validate_lake(
        spec,
        labels=config.label_contract,
        client=client,
        worker_timeout=config.cluster.worker_timeout,
        progress=progress,
        cache=(
            cache := validation_cache(
                config.lake.shuffled_url,
                spec,
                config.label_contract,
                config.lake.storage_options,
                deferred=True,
            )
        ),
    )
    # A lake's ledger unit is fixed by its first run: refuse another before anything is shuffled.
    Ledger(config.budget.ledger_url).check_unit(summary.fingerprint, inputs.unit.ledger_unit)
    files, training_rows, held_out_rows = inputs.training_split(summary.num_rows)
    notes = (
        summary.stray_note(),
        delta_warning(config.budget.delta, summary.num_rows),
        _row_level_note(config, record := lake_preprocessing(inputs)),
        _units_note(config, record, summary.version.version is not None),
        merged_ids_note(config, summary),
    )
    if cache is not None:  # recorded once nothing above refused the lake
        cache.commit()
    return ValidatedLake(summary, files, training_rows, held_out_rows, tuple(note for note in notes if note))


def merged_ids_note(config: PipelineConfig, summary: LakeSummary) -> str | None:
    """A warning naming how many people the id rule merged (``LakeSummary.merged_ids``): ids spelled
    several ways (case, spaces, invisible characters) are one person each, bounded together, which the
    operator should know of (and may turn off for case: ``privacy.user_id_case_fold = false``)."""
    merged = summary.merged_ids
    if merged.people == 0:
        return None
    column = config.privacy.user_column
    rule = id_rule(config.privacy.user_id_case_fold, summary.schema.field(column).type)
    return (
        f"{merged.people:,} person id(s) of {column!r} are stored in more than one spelling ({merged.spellings:,} "
        f"spelling(s) merged into them by the rule {rule}: Unicode NFKC, surrounding spaces and invisible "
        "characters removed"
        + (", case folded" if config.privacy.user_id_case_fold else "")
        + "); each is one person, its rows bounded together"
        + (
            " (privacy.user_id_case_fold = false keeps ids that differ in case apart)"
            if config.privacy.user_id_case_fold
            else ""
        )
    )


def _units_note(config: PipelineConfig, record: dict[str, Any] | None, table: bool) -> str | None:
    """A warning when the model will read a lake in its own units with the bounds meant for columns on
    about [−1, 1]: a lake ``dpstream convert`` did not write, and no public bounds in the config. Public:
    it reads the config and the conversion record, never the rows."""
    given = config.algorithm.model_fields_set & {"row_norm_bound", "label_bound"}
    if record is not None or given or config.model.kind == "kan":
        return None
    way = (
        "add [preprocess] to the config with the columns' public ranges ([preprocess.bounds], the label's too) "
        "and category lists ([preprocess.categories]): the rows are then mapped onto [−1, 1], one-hot encoded and "
        'given an intercept as the shuffle reads them (docs/lakes.md, "A lake in its own units")'
        + ("" if table else "; or write the lake with `dpstream convert`")
    )
    return (
        f"{config.lake.url} was not written by `dpstream convert`: the model reads its columns as they are, clipping "
        f"rows to the defaults meant for columns on about [−1, 1] (labels to |y| ≤ {config.algorithm.label_bound:g}). "
        f"If the columns are in other units (dollars, years) the model is poor and can lose to predicting the mean: "
        f"{way}"
    )


def _row_level_note(config: PipelineConfig, record: dict[str, Any] | None) -> str | None:
    """A warning when ``dpstream convert --user`` marked a person column but the config protects rows."""
    person = (record or {}).get("user_column")
    if person is None or config.is_user_level:
        return None
    return (
        f"the lake was converted with --user {person}: its people hold several rows each, but this config "
        f'protects single rows (a person of k rows gets k times the ε); add [privacy] unit = "user", '
        f'user_column = "{person}" to protect people'
    )


def shuffle_protected(config_path: str | Path) -> tuple[str, ...]:
    """What a shuffle may not write into besides what its config names (checked at load): the config's
    own folder, which holds the config and the default ``runs/``."""
    return (config_folder(config_path),)


def shuffle(
    inputs: RunInputs,
    config_path: str | Path,
    validated: ValidatedLake,
    *,
    client: Any = None,
    on_progress: Callable[[str, int], None] | None = None,
    reshuffle: bool = False,
    generation: str | None = None,
    before_run: bool = False,
) -> Manifest:
    """``dpstream.pipelines.shuffle_once`` of the validated lake into ``lake.shuffled_url`` with the
    config's layout and privacy unit (a user-level shuffle bounds each person's rows; its ``"auto"`` k is
    charged to the lake's ledger): the ``Manifest`` of the generation a run reads (``generation``: a
    resumed run's). ``before_run``: the shuffle a run waits on (the "auto" charge must leave room for it)."""
    config, summary = inputs.config, validated.summary
    return shuffle_once(
        summary.spec,  # the lake as validated: a table at the version validation pinned
        config.lake.shuffled_url,
        rows_per_file=config.lake.rows_per_file,
        client=client,
        summary=validated.summary,
        on_progress=on_progress,
        protected=shuffle_protected(config_path),
        reshuffle=reshuffle,
        worker_timeout=config.cluster.worker_timeout,
        generation=generation,
        users=inputs.users,
        charge=bound_charge(inputs, summary.fingerprint, summary.file_identities, before_run)
        if config.is_user_level
        else None,
    )
