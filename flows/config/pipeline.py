"""The pipeline config: one typed, validated TOML file per pipeline.

Unknown keys and bad values are rejected with the dotted path of the offending key
(``algorithm.clip_norm: Input should be greater than 0``), before anything runs. Types are strict (a
TOML boolean or string is never read as a number) and budgets are at most ε = 100.

This is the schema only: ``read_config`` reads and validates the file. What the config describes for the
data plane (its lake, preprocessing, privacy unit, cluster) is built and checked once by the assembly,
with the config's locations against each other: every entry point loads a config with
``dpstream.flows.assembly.loading.load_inputs``.

```toml
[lake]
url = "s3://bucket/raw"              # or a local path / file:// URL
features = ["x0", "x1", "x2"]        # or one fixed-size-list column name
label = "y"
shuffled_url = "s3://bucket/shuffled"

[model]
kind = "linear"                      # or "logistic" (classes = ["No", "Yes"], or K names), or "kan"

[algorithm]
name = "auto"                        # "auto" | "ssp" | "ambssgd" | "dpsgd" | "srgd"

[privacy]                            # optional: the unit is the row by default
unit = "user"                        # a person: every row of one customer_id
user_column = "customer_id"
max_rows_per_user = "auto"           # or a whole number
user_id_case_fold = true             # text ids: "HEAVY" and " heavy" are one person (false: case kept)

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 8.0
ledger_url = "s3://bucket/ledger"

[cluster]                            # optional: a LocalCluster of 2 workers by default
worker_timeout = 300                 # seconds without any worker before a run stops
```
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

from pydantic import ValidationError, model_validator

from dpstream.flows.config.cluster import ClusterConfig
from dpstream.flows.config.file import ConfigError, anchor_locations, config_folder, read_config_text
from dpstream.flows.config.preprocess import PreprocessConfig
from dpstream.flows.config.sections import (
    MAX_DELTA,
    AlgorithmConfig,
    BudgetConfig,
    CheckpointConfig,
    LakeConfig,
    ModelConfig,
    PrivacyConfig,
    ScheduleConfig,
    StorageConfig,
    _Section,
)
from dpstream.models.kinds.base import LabelContract
from dpstream.pipeline_constants import AUTO_MU
from dpstream.privacy import compose_mu, epsilon_for_delta, mu_for_epsilon_delta
from dpstream.validation import MAX_EPSILON

__all__ = ["PipelineConfig", "read_config", "delta_warning"]


class PipelineConfig(_Section):
    lake: LakeConfig
    budget: BudgetConfig
    model: ModelConfig = ModelConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    cluster: ClusterConfig = ClusterConfig()
    checkpoint: CheckpointConfig | None = None
    storage: StorageConfig = StorageConfig()
    schedule: ScheduleConfig | None = None
    # Public preprocessing of a lake in its own units, applied as rows are read (flows.assembly.inputs).
    preprocess: PreprocessConfig | None = None

    @model_validator(mode="after")
    def _algorithm_fits_kind(self) -> PipelineConfig:
        allowed = self.model.declaration.algorithms
        if allowed is not None and self.algorithm.name not in allowed:
            raise ValueError(
                f"model.kind = {self.model.kind!r} trains with algorithm.name = "
                f"{' or '.join(map(repr, allowed))} (any noise), not {self.algorithm.name!r}"
            )
        return self

    @model_validator(mode="after")
    def _user_column_is_not_trained_on(self) -> PipelineConfig:
        column = self.privacy.user_column
        features = [self.lake.features] if isinstance(self.lake.features, str) else self.lake.features
        if column is not None and (column in features or column == self.lake.label):
            raise ValueError(
                f"privacy.user_column {column!r} is also lake.{'label' if column == self.lake.label else 'features'}: "
                "a person's id is never trained on; remove it there"
            )
        return self

    @model_validator(mode="after")
    def _preprocess_fits_lake(self) -> PipelineConfig:
        if self.preprocess is not None:
            if isinstance(self.lake.features, str):
                raise ValueError(
                    "preprocess: the features are one vector column; [preprocess] prepares named columns, so list "
                    "them in lake.features (or remove [preprocess])"
                )
            # A ValueError naming the key and the fix; the data plane's own checks of the preprocessing
            # run when the assembly builds it (dpstream.flows.assembly.inputs.preprocessing_spec).
            self.preprocess.check_columns(
                list(self.lake.features), self.lake.label, self.model.declaration.classifies
            )
        return self

    @model_validator(mode="after")
    def _auto_bound_fits(self) -> PipelineConfig:
        """The "auto" bound's release (μ_k, charged when the lake is shuffled) and one run at budget.epsilon
        must fit the lifetime budget together, or the shuffle would spend μ_k for a run that is then refused."""
        if not self.is_user_level or self.privacy.max_rows_per_user != "auto":
            return self
        budget = self.budget
        run_mu = mu_for_epsilon_delta(budget.epsilon, budget.delta)
        if compose_mu(run_mu, AUTO_MU) > mu_for_epsilon_delta(budget.lifetime_epsilon, budget.delta):
            needed = epsilon_for_delta(budget.delta, compose_mu(run_mu, AUTO_MU))
            raise ValueError(
                f"privacy.max_rows_per_user = 'auto' is chosen with DP at mu={AUTO_MU:g}, charged to the lake's "
                f"budget beside each run, but budget.epsilon = {budget.epsilon:g} already fills "
                f"lifetime_epsilon = {budget.lifetime_epsilon:g}: give max_rows_per_user a whole number, or a "
                f"lifetime_epsilon of at least {needed:.4g}"
            )
        return self

    @property
    def is_user_level(self) -> bool:
        return self.privacy.unit == "user"

    @property
    def label_contract(self) -> LabelContract:
        """The label values the lake must hold for this model (``dpstream.models.kinds.base.LabelContract``)."""
        return self.model.declaration.label_contract(self.model.classes)


def delta_warning(delta: float, num_rows: int) -> str | None:
    """A warning when δ ≥ 1/N: such a δ allows a mechanism that publishes one whole record outright."""
    if num_rows > 0 and delta >= 1.0 / num_rows:
        return (
            f"budget.delta = {delta:g} is at least 1/N = {1.0 / num_rows:.3g} for this lake's {num_rows:,} rows: "
            f"a δ that large allows releasing a whole record; use budget.delta well below 1/N (e.g. {_suggest(num_rows):g})"
        )
    return None


def _suggest(num_rows: int) -> float:
    return 10.0 ** math.floor(math.log10(1.0 / (10 * num_rows)))


_KEYS_OF_SECTION_CHECKS = frozenset({"features", "version", "snapshot_id"})


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key; remove it or check its spelling"
        elif item["type"] == "missing":
            message = "required key is missing"
        elif item["type"] == "finite_number":
            message = "must be a finite number (inf and nan give no privacy guarantee)"
        elif item["type"] == "less_than_equal" and path.endswith("epsilon"):
            message = (
                f"must be at most {MAX_EPSILON:g}: a likelihood ratio of e^{MAX_EPSILON:g} protects no one "
                "(usual budgets are 0.1 to 10)"
            )
        elif item["type"] in ("float_type", "int_type", "string_type", "bool_type", "list_type", "dict_type"):
            message = (
                f"{message} (got {item['input']!r} of type {type(item['input']).__name__}); write it as one"
            )
        elif item["type"] == "less_than" and path.endswith("delta"):
            message = f"must be below {MAX_DELTA}: δ is the probability that the guarantee fails; use δ well below 1/N, e.g. 1e-6"
        elif item["type"] == "value_error":
            message = message.removeprefix("Value error, ")
            key = re.match(r"^(\w+): ", message)  # a section's check names the key it is about
            if key is not None and key.group(1) in _KEYS_OF_SECTION_CHECKS:
                path, message = f"{path}.{key.group(1)}", message[key.end() :]
            dotted = re.match(
                r"^(preprocess(\.\w+)?):? ", message
            )  # the whole config's check of [preprocess]
            if dotted is not None and not item["loc"]:
                path, message = dotted.group(1), message[dotted.end() :]
        problems.append(f"{path}: {message}")
    return "; ".join(problems)


def read_config(path: str | Path) -> PipelineConfig:
    """Read a pipeline config and validate it against the schema; ``ConfigError`` names the file and each
    offending key. Relative local paths in ``lake.url``, ``lake.shuffled_url``, ``budget.ledger_url`` and
    ``checkpoint.url`` are relative to the config file's folder (``config_folder``); ``path`` may be a
    URL such as s3://bucket/jobs/pipeline.toml."""
    try:
        document = tomllib.loads(read_config_text(path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file; pass the pipeline's TOML config") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error})") from None
    anchor_locations(document, config_folder(path))
    try:
        return PipelineConfig.model_validate(document)
    except ValidationError as error:
        raise ConfigError(f"{path}: {_describe(error)}") from None
