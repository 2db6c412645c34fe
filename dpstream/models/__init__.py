"""Models: per-example clipped statistics computed block by block, merged as a monoid."""

from dpstream.models.base import Model
from dpstream.models.glm import GLM, LinearRegressionModel, LogisticRegressionModel
from dpstream.models.kan import KANModel
from dpstream.models.stats import BatchStats, StatsRequest

__all__ = [
    "Model",
    "GLM",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "KANModel",
    "BatchStats",
    "StatsRequest",
]
