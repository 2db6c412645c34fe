"""The sections of a pipeline config (``dpstream.flows.config.pipeline.PipelineConfig``): typed, validated
pydantic models, one per TOML table."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dpstream.algorithms.builder import AlgorithmSpec
from dpstream.algorithms.registry import AUTO, declared
from dpstream.checkpoint import DEFAULT_EVERY_STEPS
from dpstream.models import KANModel, Model, build_model, model_kind
from dpstream.models.kinds.base import ModelKind
from dpstream.noise import dpsgd_noise_names
from dpstream.outages import DEFAULT_OUTAGE_SECONDS, OutagePolicy
from dpstream.validation import MAX_EPSILON


class _Section(BaseModel):
    # strict: a TOML value of the wrong type is refused, not coerced (`epsilon = true` is not 1.0, and
    # `rows_per_file = "5"` is not 5); an integer is still accepted where a float is expected.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LakeConfig(_Section):
    url: str = Field(min_length=1)
    features: list[str] | str
    label: str = Field(min_length=1)
    shuffled_url: str = Field(min_length=1)
    # None: 250,000, but at most N/5 so the held-out last file exists for every lake (dpstream.pipelines.shuffle.once)
    rows_per_file: int | None = Field(default=None, gt=0)
    storage_options: dict[str, Any] = Field(default_factory=dict)
    # A Delta Lake or Iceberg table at url, pinned to one version (dpstream.pipelines.sources.protocol): "auto"
    # detects _delta_log/ or metadata/*.metadata.json at url. version (Delta) or snapshot_id (Iceberg), or
    # as_of (ISO-8601: the version current then); none of them: the latest, pinned when validated.
    format: str = "auto"  # "parquet" or a declared table format (dpstream.pipelines.sources.formats)
    version: int | None = Field(default=None, ge=0)
    snapshot_id: int | None = None
    as_of: str | datetime | date | None = None  # a TOML date-time or date, or a string in ISO-8601
    table: str | None = Field(default=None, min_length=1)  # an Iceberg table in lake.catalog: "db.events"
    catalog: dict[str, str | int | bool] = Field(
        default_factory=dict
    )  # pyiceberg catalog properties, and name

    @model_validator(mode="after")
    def _one_source(self) -> LakeConfig:
        if self.version is not None and self.snapshot_id is not None:
            raise ValueError(
                "version: give lake.version (a Delta table) or lake.snapshot_id (Iceberg), not both"
            )
        if self.version is not None and self.format == "iceberg":
            raise ValueError("version: an Iceberg table is pinned with lake.snapshot_id, not lake.version")
        if self.snapshot_id is not None and self.format in ("delta", "parquet"):
            raise ValueError(f"snapshot_id pins an Iceberg snapshot; a {self.format} source has none")
        # The data plane's own checks (one version pin, an ISO-8601 as_of, Iceberg-only settings) run when
        # the assembly builds the source (dpstream.flows.assembly.inputs.source_spec).
        return self

    @field_validator("features")
    @classmethod
    def _distinct_features(cls, features: list[str] | str) -> list[str] | str:
        if isinstance(features, list):
            if not features:
                raise ValueError("name at least one feature column, or one fixed-size-list column")
            repeated = sorted({name for name in features if features.count(name) > 1})
            if repeated:
                raise ValueError(
                    f"{', '.join(map(repr, repeated))} listed more than once; list each feature column once"
                )
        return features

    @model_validator(mode="after")
    def _label_is_not_a_feature(self) -> LakeConfig:
        features = [self.features] if isinstance(self.features, str) else self.features
        if self.label in features:
            # Reported under the key's path by _describe (the error's loc is the section).
            raise ValueError(
                f"features: the label {self.label!r} is also listed as a feature, which would let the "
                "model read its own target; remove it from lake.features"
            )
        return self


class ModelConfig(_Section):
    kind: str = "linear"  # a declared kind (dpstream.models.kinds): "linear", "logistic" or "kan"
    # A classifier's public class list, in the order of the lake's label codes 0..K−1 (`dpstream convert
    # --label-classes` writes it); None: two classes coded {0, 1} or {−1, +1}.
    classes: list[str] | None = None
    backend: Literal["numpy", "cupy", "auto"] = "numpy"  # "auto": CuPy on workers that have a GPU
    # KAN only (Wang et al., arXiv:2605.12648): hidden width m, grid size G, activation, public feature
    # bounds, input map, public seed; the defaults are the model's (dpstream.models.KANModel).
    num_hidden: int = Field(default=KANModel.num_hidden, gt=0)
    grid_size: int = Field(default=KANModel.grid_size, gt=0)
    activation: Literal["tanh", "sigmoid"] = KANModel.activation
    feature_low: float | list[float] = KANModel.feature_low
    feature_high: float | list[float] = KANModel.feature_high
    input_map: Literal["ball", "cube"] = KANModel.input_map
    seed: int = Field(default=KANModel.seed, ge=0)

    @field_validator("kind")
    @classmethod
    def _declared_kind(cls, kind: str) -> str:
        model_kind(kind)  # a ValueError naming the declared kinds
        return kind

    @field_validator("classes")
    @classmethod
    def _public_class_list(cls, classes: list[str] | None) -> list[str] | None:
        if classes is not None and (len(classes) < 2 or len(set(classes)) != len(classes)):
            raise ValueError(f"classes must list at least 2 distinct class names, got {classes!r}")
        return classes

    @model_validator(mode="after")
    def _classes_fit_kind(self) -> ModelConfig:
        declared = self.declaration
        declared.check_classes(
            len(self.classes) if self.classes is not None else (2 if declared.classifies else None)
        )
        return self

    @property
    def declaration(self) -> ModelKind:
        """The kind's declaration (``dpstream.models.kinds``): task, label contract, metric, output."""
        return model_kind(self.kind)

    def build(self) -> Model:
        """The ``dpstream.models`` model this section describes (``dpstream.models.build_model``)."""
        return build_model(**self.model_dump())


class AlgorithmConfig(_Section):
    # "auto": AdaSSP for linear / logistic models up to 256 parameters, DP-SGD otherwise
    # (dpstream.algorithms.choice); "ssp" clips rows to row_norm_bound and labels to label_bound.
    # row_norm_bound's default: from the lake's public schema where `dpstream convert` wrote it (a one-hot
    # group counts 1, a mapped column max(a², b²) of scale_range: dpstream.flows.assembly.planning.schema_row_norm_bound), else
    # sqrt(#features), the bound for features on the public scale [-1, 1].
    # The defaults are the builder's (dpstream.algorithms.builder.AlgorithmSpec); noise, clip_norm and
    # learning_rate left out are the model kind's (dpstream.models.kinds.base.TrainingDefaults: independent
    # noise, 1.0 and the stable step for linear / logistic, the KAN's tuned ones), as in the estimators.
    name: str = AlgorithmSpec.name  # "auto" or a declared algorithm (dpstream.algorithms.registry)
    noise: str | None = AlgorithmSpec.noise  # a DP-SGD noise process (dpstream.noise.registry)
    correlation: float = Field(default=AlgorithmSpec.correlation, ge=0.0, lt=1.0)
    nu: float = Field(default=AlgorithmSpec.nu, gt=0.0, le=1.0)
    clip_norm: float | None = Field(default=AlgorithmSpec.clip_norm, gt=0.0)
    batch_size: int | None = Field(default=AlgorithmSpec.batch_size, gt=0)
    learning_rate: float | None = Field(default=AlgorithmSpec.learning_rate, gt=0.0)
    num_steps: int | None = Field(default=AlgorithmSpec.num_steps, gt=0)
    stat_bound: float = Field(default=AlgorithmSpec.stat_bound, gt=0.0)
    row_norm_bound: float | None = Field(default=AlgorithmSpec.row_norm_bound, gt=0.0, allow_inf_nan=False)
    label_bound: float = Field(default=AlgorithmSpec.label_bound, gt=0.0, allow_inf_nan=False)

    @field_validator("name")
    @classmethod
    def _declared_algorithm(cls, name: str) -> str:
        if name != AUTO:
            declared(name)  # a ValueError naming the declared algorithms
        return name

    @field_validator("noise")
    @classmethod
    def _declared_noise(cls, noise: str | None) -> str | None:
        if noise is not None and noise not in dpsgd_noise_names():
            raise ValueError(
                f"noise must be one of {', '.join(map(repr, dpsgd_noise_names()))}, got {noise!r}"
            )
        return noise


# δ is the probability that the guarantee fails outright; at δ ≥ 0.5 a mechanism that publishes one
# whole record with probability δ is "private", so such configs are refused (δ ≥ 1/N warns: see
# delta_warning). Infinite or NaN budgets are refused by allow_inf_nan=False.
MAX_DELTA = 0.5


class BudgetConfig(_Section):
    epsilon: float = Field(gt=0.0, le=MAX_EPSILON, allow_inf_nan=False)
    delta: float = Field(gt=0.0, lt=MAX_DELTA, allow_inf_nan=False)
    relation: Literal["replace-one", "zero-out"] = "replace-one"
    lifetime_epsilon: float = Field(gt=0.0, le=MAX_EPSILON, allow_inf_nan=False)
    ledger_url: str = Field(min_length=1)

    @model_validator(mode="after")
    def _run_fits_lifetime(self) -> BudgetConfig:
        if self.epsilon > self.lifetime_epsilon:
            raise ValueError(
                f"epsilon={self.epsilon} exceeds lifetime_epsilon={self.lifetime_epsilon}: "
                "one run cannot spend more than the lake's lifetime budget"
            )
        return self


class PrivacyConfig(_Section):
    """Whose data one guarantee protects (``dpstream.privacy.PrivacyUnit``): ``unit = "row"`` (a record), or
    ``"user"``: every row of one value of ``user_column`` (a customer, patient or device). The shuffle then
    keeps at most ``max_rows_per_user`` rows per person (``"auto"``: chosen with DP, charged to the lake's
    ledger once per shuffle) and the lake's ledger counts people (fixed by its first run). A text id is
    normalised before people are formed (NFKC, surrounding whitespace and invisible format characters
    removed: ``dpstream.person_ids``); ``user_id_case_fold`` also folds case, so ``HEAVY`` and
    ``heavy`` are one person (false: two). Integer ids are used as stored."""

    unit: Literal["row", "user"] = "row"
    user_column: str | None = Field(default=None, min_length=1)
    max_rows_per_user: int | Literal["auto"] = "auto"
    user_id_case_fold: bool = True

    @field_validator("max_rows_per_user")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if value != "auto" and value < 1:
            raise ValueError(f"give a whole number of rows ≥ 1, or 'auto'; got {value!r}")
        return value

    @model_validator(mode="after")
    def _column_for_users(self) -> PrivacyConfig:
        if self.unit == "user" and self.user_column is None:
            raise ValueError(
                "unit = 'user' needs user_column: the column whose value names a person (e.g. 'customer_id')"
            )
        if self.unit == "row" and self.model_fields_set & {
            "user_column",
            "max_rows_per_user",
            "user_id_case_fold",
        }:
            raise ValueError(
                "user_column and max_rows_per_user apply to unit = 'user' (user_id_case_fold too); set unit = 'user' "
                "(a person's rows are then protected together), or leave them out"
            )
        return self


class CheckpointConfig(_Section):
    url: str = Field(min_length=1)
    every_steps: int = Field(default=DEFAULT_EVERY_STEPS, gt=0)
    every_seconds: float | None = Field(default=None, gt=0.0)


class StorageConfig(_Section):
    """How long a run waits for an unreachable ledger, checkpoint or publish location before it stops with
    its reservation kept for a resume (``dpstream.outages``). The window decides when no new attempt
    starts; one request to a store that never answers is bounded by its client's own timeouts."""

    outage_seconds: float = Field(default=DEFAULT_OUTAGE_SECONDS, ge=0.0, allow_inf_nan=False)

    def outage_policy(self) -> OutagePolicy:
        return OutagePolicy(window_seconds=self.outage_seconds)


class ScheduleConfig(_Section):
    cron: str = Field(
        description='five cron fields, e.g. "0 2 * * *" (Prefect checks the values when serving)'
    )

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, cron: str) -> str:
        if len(cron.split()) != 5:
            raise ValueError(f"a cron string has 5 fields (minute hour day month weekday), got {cron!r}")
        return cron
