"""Models: per-example clipped statistics computed block by block, merged as a monoid."""

from dpstream.models.base import Model
from dpstream.models.glm import GLM, LinearRegressionModel, LogisticRegressionModel
from dpstream.models.kan import KANModel
from dpstream.models.kinds.base import ModelKind, Task, kind_names, model_kind
from dpstream.models.multinomial import MultinomialLogisticModel
from dpstream.models.stats import BatchStats, StatsRequest

MODEL_KINDS = kind_names()


def build_model(kind: str, backend: str = "numpy", classes: list[str] | None = None, **settings) -> Model:
    """The model of the declared ``kind`` (``dpstream.models.kinds``) with its public settings, as a
    pipeline config's [model] section or a published model.json states them (JSON lists become tuples);
    ``classes``, a classifier's public class list (None: two classes coded {0, 1} or {−1, +1}). Settings
    of other kinds (e.g. a KAN setting beside kind = "linear") are ignored, as the config has always done."""
    return model_kind(kind).build(backend, classes, **settings)


__all__ = [
    "build_model",
    "model_kind",
    "ModelKind",
    "Task",
    "MODEL_KINDS",
    "Model",
    "GLM",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "KANModel",
    "MultinomialLogisticModel",
    "BatchStats",
    "StatsRequest",
]
