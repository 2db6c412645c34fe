"""Models: per-example clipped statistics computed block by block, merged as a monoid."""

from dpstream.models.base import Model
from dpstream.models.glm import GLM, LinearRegressionModel, LogisticRegressionModel
from dpstream.models.kan import KANModel
from dpstream.models.stats import BatchStats, StatsRequest

MODEL_KINDS = ("linear", "logistic", "kan")
_KAN_SETTINGS = ("num_hidden", "grid_size", "activation", "feature_low", "feature_high", "input_map", "seed")


def build_model(kind: str, backend: str = "numpy", **settings) -> Model:
    """The model of ``kind`` ("linear", "logistic" or "kan") with its public settings, as a pipeline
    config's [model] section or a published model.json states them (JSON lists become tuples). The
    GLMs take no settings; other keys (e.g. a KAN setting beside kind = "linear") are ignored, as the
    config has always done."""
    if kind == "linear":
        return LinearRegressionModel(backend=backend)
    if kind == "logistic":
        return LogisticRegressionModel(backend=backend)
    if kind != "kan":
        raise ValueError(f"unknown model kind {kind!r}; expected one of {', '.join(MODEL_KINDS)}")
    chosen = {name: settings[name] for name in _KAN_SETTINGS if name in settings}
    for name in ("feature_low", "feature_high"):
        if isinstance(chosen.get(name), list):
            chosen[name] = tuple(chosen[name])
    return KANModel(backend=backend, **chosen)


__all__ = [
    "build_model",
    "MODEL_KINDS",
    "Model",
    "GLM",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "KANModel",
    "BatchStats",
    "StatsRequest",
]
