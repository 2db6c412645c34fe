"""What a run reads, built once from a validated config: the lake as the data plane reads it (its source
and version, the public preprocessing of ``[preprocess]``, the columns the model reads), the privacy unit,
and the shuffle's contribution bounding.

``RunInputs.of(config)`` builds them, running the data plane's checks of the settings they come from (a
bad ``lake.as_of``, a ``[preprocess]`` that leaves a column without a public scale): a ``ConfigError``
naming the key, as the schema's own checks do. Planning, validation, the shuffle, the flows and the
commands receive that one object; none rebuilds a part of it. Functions that read only the config's
sections take the ``PipelineConfig`` (``RunInputs.config``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime

from dpstream.flows.config.file import ConfigError
from dpstream.flows.config.pipeline import PipelineConfig
from dpstream.flows.config.preprocess import PreprocessConfig
from dpstream.flows.config.sections import LakeConfig
from dpstream.pipelines import LakeError, LakeSpec, SourceSpec, UserBounding
from dpstream.pipelines.preprocessing.spec import ConvertSpec
from dpstream.pipelines.shuffle.once import automatic_rows_per_file
from dpstream.pipelines.shuffle.reuse import layout
from dpstream.privacy import PrivacyUnit

__all__ = ["RunInputs", "source_spec", "preprocessing_spec"]


@dataclass(frozen=True)
class RunInputs:
    """A validated config and what it describes for the data plane and the DP core (module docstring).

    ``unit`` is the privacy unit as the config states it: the row under ``budget.relation``, or the person
    of ``privacy.user_column`` with no k yet (a user-level shuffle fixes k: ``bounded_unit``)."""

    config: PipelineConfig
    lake: LakeSpec
    unit: PrivacyUnit
    users: UserBounding | None  # the shuffle's contribution bounding; None for the row unit

    @classmethod
    def of(cls, config: PipelineConfig) -> RunInputs:
        """Build the inputs of ``config`` (``ConfigError`` naming the key for a setting the data plane refuses)."""
        lake, privacy, relation = config.lake, config.privacy, config.budget.relation
        preprocessing = preprocessing_spec(config)
        features = lake.features if isinstance(lake.features, str) else tuple(lake.features)
        spec = LakeSpec(
            lake.url,
            tuple(preprocessing.output_columns()) if preprocessing is not None else features,
            lake.label,
            dict(lake.storage_options),
            user_column=privacy.user_column,
            source=source_spec(lake),
            preprocess=preprocessing,
            user_id_case_fold=privacy.user_id_case_fold,
        )
        if not config.is_user_level:
            return cls(config, spec, PrivacyUnit.row(relation), None)
        users = UserBounding(privacy.user_column, privacy.max_rows_per_user, relation)
        return cls(config, spec, PrivacyUnit.user(privacy.user_column, None, relation), users)

    @property
    def model_features(self) -> tuple[str, ...] | str:
        """The columns the model reads: ``lake.features``, or the columns ``[preprocess]`` makes of them
        (one-hot groups, the intercept)."""
        return self.lake.features

    @property
    def preprocessing(self) -> ConvertSpec | None:
        """The ``ConvertSpec`` that ``[preprocess]`` applies as rows are read, or None without one."""
        return self.lake.preprocess

    def bounded_unit(self, max_rows_per_user: int | None) -> PrivacyUnit:
        """The run's privacy unit once the shuffle has bounded each person to ``max_rows_per_user`` rows
        (from its manifest); the row unit as it is."""
        return replace(self.unit, max_rows_per_user=max_rows_per_user) if self.unit.is_user else self.unit

    def rows_per_file(self, num_rows: int) -> int:
        """The shuffle's rows per file: ``lake.rows_per_file``, or the automatic layout for ``num_rows``."""
        given = self.config.lake.rows_per_file
        return given if given is not None else automatic_rows_per_file(num_rows)

    def training_split(self, num_rows: int) -> tuple[int, int, int]:
        """(files, training rows, held-out rows); ``ConfigError`` when no file can be held out."""
        rows_per_file = self.rows_per_file(num_rows)
        files, training, held_out = layout(num_rows, rows_per_file)
        if files < 2:
            fix = (
                f"set lake.rows_per_file to at most {num_rows // 2} (e.g. {max(1, math.ceil(num_rows / 5))} holds out 20 %)"
                if num_rows >= 2
                else "a lake needs at least 2 rows: one to train on and one to hold out"
            )
            raise ConfigError(
                f"lake.rows_per_file: {num_rows:,} rows at {rows_per_file:,} rows per file make one shuffled "
                f"file, but training holds out the last file for evaluation; {fix}"
            )
        return files, training, held_out


def source_spec(lake: LakeConfig) -> SourceSpec:
    """The source ``[lake]`` names and the version to read (a TOML date is its midnight, UTC);
    ``ConfigError`` under the key ``lake`` for what the data plane refuses (two version pins, an as_of
    that is not ISO-8601, Iceberg settings on another format)."""
    pinned = lake.version if lake.version is not None else lake.snapshot_id
    as_of = lake.as_of
    if isinstance(as_of, date) and not isinstance(as_of, datetime):
        as_of = datetime(as_of.year, as_of.month, as_of.day, tzinfo=UTC)
    as_of = as_of.isoformat() if isinstance(as_of, datetime) else as_of
    pinned_by = "snapshot_id" if lake.snapshot_id is not None else "version"
    try:
        return SourceSpec(lake.format, pinned, as_of, lake.table, tuple(lake.catalog.items()), pinned_by)
    except ValueError as error:
        raise ConfigError(f"lake: {error}") from None


def preprocessing_spec(config: PipelineConfig) -> ConvertSpec | None:
    """The ``ConvertSpec`` (``on_read``) for the lake whose ``lake.features`` and ``lake.label`` columns
    ``[preprocess]`` prepares, None without one; ``ConfigError`` naming the key and the fix for a column
    without a public scale, or one-hot columns whose names repeat. The schema checked the section's keys
    against the columns (``PreprocessConfig.check_columns``)."""
    section = config.preprocess
    if section is None:
        return None
    label, classes, classifies = config.lake.label, config.model.classes, config.model.declaration.classifies
    spec = _convert_spec(section, list(config.lake.features), label, classes, classifies)
    names = [*spec.output_columns(), label]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(
            f"preprocess.categories: the model's columns would repeat {', '.join(map(repr, repeated))} (a one-hot "
            "column is named COLUMN=VALUE): list each category once, as one type, and rename a clashing column"
        )
    missing = spec.unbounded_columns()
    if missing:
        template = ", ".join(f"{column} = [LOW, HIGH]" for column in missing)
        raise ConfigError(
            f"preprocess.bounds: no public range for {', '.join(map(repr, missing))}: the algorithms' clip norms and "
            f"steps assume every column on about [-1, 1], and one column in its own units (dollars, years) gives a "
            f"model worse than the mean. Add {template} under [preprocess.bounds] (public ranges: documentation, "
            "domain knowledge, never measured on the data), or list a column already on that scale (an "
            "indicator) in preprocess.unscaled"
        )
    return spec


def _convert_spec(
    section: PreprocessConfig, features: list[str], label: str, classes: list[str] | None, classifies: bool
) -> ConvertSpec:
    # A classifier's label without public classes is read as 0/1 or −1/+1 (the label contract checks it).
    unscaled = [*section.unscaled, *([label] if classifies and classes is None else [])]
    try:
        return ConvertSpec(
            columns=tuple(column for column in features if column not in section.categories),
            label=label,
            missing="impute",
            impute_values={  # a category column's constant is one of its categories (text)
                column: value if isinstance(value, str) else float(value)
                for column, value in section.impute.items()
            },
            categorical={column: tuple(values) for column, values in section.categories.items()},
            bounds={column: (float(low), float(high)) for column, (low, high) in section.bounds.items()},
            scale_range=(-1.0, 1.0),
            unscaled=tuple(dict.fromkeys(unscaled)),
            label_classes=tuple(classes) if classifies and classes is not None else (),
            intercept=section.intercept,
            on_read=True,
        )
    except LakeError as error:
        raise ConfigError(f"preprocess: {error}") from None
