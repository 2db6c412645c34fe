"""The pipeline config: one typed, validated TOML file per pipeline.

Unknown keys and bad values are rejected with the dotted path of the offending key
(``algorithm.clip_norm: Input should be greater than 0``), before anything runs. Types are strict (a
TOML boolean or string is never read as a number), budgets are at most ε = 100, and the config's
locations are checked against each other (``dpstream.flows.assembly.locations``).

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
from typing import Any

from pydantic import ValidationError, model_validator

from dpstream.flows.config.cluster import ClusterConfig
from dpstream.flows.config.preprocess import PreprocessConfig
from dpstream.flows.config.sections import (
    MAX_DELTA,
    AlgorithmConfig,
    BudgetConfig,
    CheckpointConfig,
    ConfigError,
    LakeConfig,
    ModelConfig,
    PrivacyConfig,
    ScheduleConfig,
    StorageConfig,
    _Section,
)
from dpstream.validation import MAX_EPSILON

__all__ = ["PipelineConfig", "ConfigError", "load_config", "delta_warning", "config_folder"]


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
    # Public preprocessing of a lake in its own units, applied as rows are read (flows.preprocess_config).
    preprocess: PreprocessConfig | None = None

    def read_preprocessing(self):
        """The ``ConvertSpec`` that ``[preprocess]`` applies as rows are read, or None without one."""
        if self.preprocess is None:
            return None
        declared = self.model.declaration
        return self.preprocess.spec(
            list(self.lake.features), self.lake.label, self.model.classes, declared.classifies
        )

    @property
    def model_features(self) -> tuple[str, ...] | str:
        """The columns the model reads: ``lake.features``, or the columns ``[preprocess]`` makes of them
        (one-hot groups, the intercept)."""
        spec = self.read_preprocessing()
        if spec is not None:
            return tuple(spec.output_columns())
        return self.lake.features if isinstance(self.lake.features, str) else tuple(self.lake.features)

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
            self.read_preprocessing()  # a ValueError naming the key and the fix
        return self

    @model_validator(mode="after")
    def _auto_bound_fits(self) -> PipelineConfig:
        """The "auto" bound's release (μ_k, charged when the lake is shuffled) and one run at budget.epsilon
        must fit the lifetime budget together, or the shuffle would spend μ_k for a run that is then refused."""
        if not self.is_user_level or self.privacy.max_rows_per_user != "auto":
            return self
        from dpstream.pipelines.shuffle.users import AUTO_MU
        from dpstream.privacy import compose_mu, epsilon_for_delta, mu_for_epsilon_delta

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

    def user_bounding(self):
        """The shuffle's contribution bounding (``dpstream.pipelines.UserBounding``), None for the row unit."""
        if not self.is_user_level:
            return None
        from dpstream.pipelines.shuffle.users import UserBounding

        return UserBounding(self.privacy.user_column, self.privacy.max_rows_per_user, self.budget.relation)

    def privacy_unit(self, max_rows_per_user: int | None = None):
        """The run's ``PrivacyUnit``: the row under budget.relation, or the person of ``privacy.user_column``
        with the k the shuffle applied (``max_rows_per_user``, from its manifest)."""
        from dpstream.privacy import PrivacyUnit

        if not self.is_user_level:
            return PrivacyUnit.row(self.budget.relation)
        return PrivacyUnit.user(self.privacy.user_column, max_rows_per_user, self.budget.relation)

    @property
    def label_contract(self):
        """The label values the lake must hold for this model (``dpstream.models.kinds.LabelContract``)."""
        return self.model.declaration.label_contract(self.model.classes)

    def rows_per_file(self, num_rows: int) -> int:
        """The shuffle's rows per file: ``lake.rows_per_file``, or the automatic layout for ``num_rows``."""
        from dpstream.pipelines.shuffle.once import automatic_rows_per_file

        return (
            self.lake.rows_per_file
            if self.lake.rows_per_file is not None
            else automatic_rows_per_file(num_rows)
        )

    def training_split(self, num_rows: int) -> tuple[int, int, int]:
        """(files, training rows, held-out rows); ``ConfigError`` when no file can be held out."""
        from dpstream.pipelines.shuffle.once import layout

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

    def lake_spec(self):
        """The lake this pipeline reads, as the data plane's ``LakeSpec``."""
        from dpstream.pipelines import LakeSpec

        lake = self.lake
        return LakeSpec(
            lake.url,
            self.model_features,
            lake.label,
            dict(lake.storage_options),
            user_column=self.privacy.user_column,
            source=lake.source_spec(),
            preprocess=self.read_preprocessing(),
            user_id_case_fold=self.privacy.user_id_case_fold,
        )


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


# Locations a config names; a relative local path is taken relative to the config file's folder, so a
# pipeline directory can be moved or checked in (as with prefect.yaml).
LOCATION_KEYS = (("lake", "url"), ("lake", "shuffled_url"), ("budget", "ledger_url"), ("checkpoint", "url"))


def is_remote(path: str | Path) -> bool:
    """True for a URL of another filesystem (s3://, gs://, ...); a plain path or file:// is local."""
    text = str(path)
    return "://" in text and not text.startswith("file://")


def config_folder(path: str | Path) -> str:
    """The folder a config's relative locations (and its default ``runs/``) are anchored to: the file's
    folder on disk, or its URL's parent (``s3://bucket/jobs/pipeline.toml`` → ``s3://bucket/jobs``)."""
    if is_remote(path):
        return str(path).rsplit("/", 1)[0]
    return str(Path(str(path).removeprefix("file://")).resolve().parent)


def _anchor_locations(document: dict[str, Any], folder: str) -> None:
    for section, key in LOCATION_KEYS:
        value = document.get(section, {}).get(key) if isinstance(document.get(section), dict) else None
        if isinstance(value, str) and value and "://" not in value and not Path(value).is_absolute():
            document[section][key] = f"{folder}/{value}" if is_remote(folder) else str(Path(folder) / value)


def _read_config_text(path: str | Path) -> str:
    """The config file's text, from disk or any fsspec URL (credentials and endpoint from the
    environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for S3)."""
    if not is_remote(path):
        return Path(str(path).removeprefix("file://")).read_text(encoding="utf-8")
    from dpstream.storage import open_url

    try:
        fs, location = open_url(str(path))
        with fs.open(location, "rb") as handle:
            return handle.read().decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ConfigError(
            f"{path}: cannot read the config ({type(error).__name__}: {error}); check the URL, the credentials "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the endpoint (AWS_ENDPOINT_URL)"
        ) from None


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline config; ``ConfigError`` names the file and each offending key.

    Relative local paths in ``lake.url``, ``lake.shuffled_url``, ``budget.ledger_url`` and
    ``checkpoint.url`` are relative to the config file's folder (``config_folder``); ``path`` may be a
    URL such as s3://bucket/jobs/pipeline.toml."""
    try:
        document = tomllib.loads(_read_config_text(path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file; pass the pipeline's TOML config") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error})") from None
    _anchor_locations(document, config_folder(path))
    try:
        config = PipelineConfig.model_validate(document)
    except ValidationError as error:
        raise ConfigError(f"{path}: {_describe(error)}") from None
    from dpstream.flows.assembly.locations import check_config_locations

    try:  # before anything runs: a shuffle there could overwrite or delete the lake or the project
        check_config_locations(config, config_folder(path))
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return config
