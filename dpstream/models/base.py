"""The ``Model`` protocol: what the coordinator, the executors, the flows and the estimators need of a
model. The GLMs (``glm``) and the B-spline KAN (``kan``) implement it; nothing else is assumed.

A model turns a block of rows into mergeable, clipped batch statistics (``block_stats``: the part the
privacy guarantee rests on, since each row's contribution to a released sum is clipped there) and
applies parameters to rows (``predict_margin``). Parameters are one flat float64 vector of
``num_params(num_features)`` entries: the plan's dimension is the parameter count, the lake's is the
feature count, and the model is what maps one to the other.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from dpstream.models.stats import BatchStats, StatsRequest

__all__ = ["Model"]


@runtime_checkable
class Model(Protocol):
    name: ClassVar[str]  # "linear", "logistic", "kan": recorded in reports and model.json
    outputs: ClassVar[int] | int  # margins per row: 1, or K for a K-class model (params = inputs × outputs)
    backend: str  # "numpy", "cupy" or "auto": where block_stats computes

    def num_params(self, num_features: int) -> int:
        """Length of the parameter vector for rows of ``num_features`` features."""

    def init_params(self, num_features: int) -> np.ndarray:
        """The public starting point (zeros for the GLMs, W₀ from the public seed for the KAN)."""

    def predict_margin(self, X: np.ndarray, params: np.ndarray) -> np.ndarray:
        """The model's output on rows ``X``: (rows,) regression predictions or classification margins, or
        (rows, K) margins of a K-class model."""

    def loss(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-row loss at the given margins (operator-only training curves and evaluation)."""

    def block_stats(
        self,
        X: np.ndarray,
        y: np.ndarray,
        request: StatsRequest,
        role: str = "gradient",
        users: np.ndarray | None = None,
    ) -> BatchStats:
        """The block's clipped statistics for ``request``; merged across blocks with ``BatchStats.merge``.
        ``users`` (the user unit: each row's user, whole users in the block) combines a user's rows into
        one contribution (``dpstream.models.users``); a model that cannot refuses it."""
