"""``DPKANClassifier``: a two-layer B-spline KAN trained in one pass by DP-SGD with correlated noise.

Seed 004's DP-λCGD (Alg. 1) adapted to dpstream's single pass: step t uses the next ``batch_size``
rows, releases the clipped gradient sum plus λ-correlated noise (``noise="lambda"``; any other noise
process of ``dpstream.noise`` works too), and projects onto the ball B(W₀, ``projection_radius``).
Every row participates once, so the privacy is the exact single-participation matrix-mechanism
guarantee (the encoder's largest column, ``sqrt((1 − λ^{2T})/(1 − λ²))``), reported in
``privacy_report_`` with seed 004's Theorem F.12 noise multiplier beside it for comparison.

Same conventions as ``DPLogisticRegression``: NumPy, pandas or Dask inputs, any two labels (the larger
is +1), a fresh noise key from OS entropy on each fit, ``training_loss_`` non-private (operator only).
Features are mapped with the public bounds ``feature_low``/``feature_high``; W₀ and the fixed second
layer come from the public ``random_state``.

Defaults (``input_map="cube"``, ``clip_norm=0.5``, ``learning_rate=2.0``) were chosen on two real
datasets together, California-as-classification and scikit-learn's breast cancer, at ε ∈ {1, 4}
(BENCHMARKS.md, "Defaults on real data"): the cube map beat the ball map on both, and the smaller
clip norm (a nearly normalised step) beat 1.0 on both at the same η·C.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from dpstream.estimators.glm import DPLogisticRegression
from dpstream.models import KANModel
from dpstream.noise import NoiseKey

__all__ = ["DPKANClassifier", "theorem_f12_noise_multiplier"]


def theorem_f12_noise_multiplier(
    epsilon: float, delta: float, num_steps: int, sampling_rate: float, correlation: float
) -> float:
    """Seed 004 Theorem F.12 (spec §4.4): κ² ≥ 8 ((1 − λ^T)/(1 − λ))² (rT + √(3 rT ln(2/δ))) ln(2.5/δ)/ε²,
    for its Poisson-free fixed-size sampling with rate r = B/n and zero-out neighbours; shown for
    comparison only (dpstream's single pass is accounted exactly)."""
    geometric = (1.0 - correlation**num_steps) / (1.0 - correlation) if correlation > 0 else 1.0
    rate_steps = sampling_rate * num_steps
    return math.sqrt(
        8.0
        * geometric**2
        * (rate_steps + math.sqrt(3.0 * rate_steps * math.log(2.0 / delta)))
        * math.log(2.5 / delta)
        / epsilon**2
    )


class DPKANClassifier(DPLogisticRegression):
    """Differentially private binary classifier: a two-layer B-spline KAN (``dpstream.models.KANModel``)."""

    _parameter_constraints: dict = {
        **{
            name: DPLogisticRegression._parameter_constraints[name]
            for name in (
                "epsilon",
                "delta",
                "noise",
                "correlation",
                "nu",
                "clip_norm",
                "batch_size",
                "projection_radius",
                "relation",
                "noise_key",
                "block_rows",
                "backend",
            )
        },
        "num_hidden": [Interval(Integral, 1, None, closed="left")],
        "grid_size": [Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions({"tanh", "sigmoid"})],
        "feature_low": [Real, "array-like", None],
        "feature_high": [Real, "array-like", None],
        "input_map": [StrOptions({"ball", "cube"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "random_state": [Interval(Integral, 0, None, closed="left")],
    }
    _max_classes = 2  # binary only (a multi-class KAN is not built)
    algorithm = "dpsgd"  # the shared DP-SGD construction of the GLM estimators, with the noise chosen here
    fit_intercept = False  # the spline basis is a partition of unity: constants are representable
    feature_bounds = (
        None  # feature_low / feature_high, or (left out) private bounds: see _estimates_feature_bounds
    )
    label_bounds = None

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        num_hidden: int = 64,
        grid_size: int = 5,
        activation: str = "tanh",
        feature_low: float | Any | None = None,
        feature_high: float | Any | None = None,
        input_map: str = "cube",
        noise: str = "lambda",
        correlation: float = 0.5,
        nu: float = 0.01,
        clip_norm: float = 0.5,
        batch_size: int | None = None,
        learning_rate: float = 2.0,
        projection_radius: float | None = None,
        relation: str = "replace-one",
        random_state: int = 0,
        backend: str = "numpy",
        noise_key: NoiseKey | None = None,
        block_rows: int = 65536,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.num_hidden = num_hidden
        self.grid_size = grid_size
        self.activation = activation
        self.feature_low = feature_low
        self.feature_high = feature_high
        self.input_map = input_map
        self.noise = noise
        self.correlation = correlation
        self.nu = nu
        self.clip_norm = clip_norm
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.projection_radius = projection_radius
        self.relation = relation
        self.random_state = random_state
        self.backend = backend
        self.noise_key = noise_key
        self.block_rows = block_rows

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _estimates_feature_bounds(self) -> bool:
        """Without ``feature_low`` / ``feature_high`` the features' bounds are estimated with DP within the
        fit's budget and the features mapped onto [−1, 1] before the KAN (whose grid then spans [−1, 1]);
        with them, the KAN maps its inputs itself."""
        if (self.feature_low is None) != (self.feature_high is None):
            raise ValueError(
                "give both feature_low and feature_high (public bounds), or neither (private bounds)"
            )
        return self.feature_low is None

    def _symmetric_map(self) -> bool:
        return False  # the spline basis is a partition of unity: a shift is representable

    def _fit_model(self) -> KANModel:
        given = (self.feature_low, self.feature_high) if self.feature_low is not None else (-1.0, 1.0)
        low, high = (np.atleast_1d(np.asarray(b, dtype=float)) for b in given)
        for name, bound in (("feature_low", low), ("feature_high", high)):
            if bound.size not in (1, self.n_features_in_):
                raise ValueError(
                    f"{name} has {bound.size} entries; give one per feature ({self.n_features_in_}) or one for all"
                )
        bounds = [float(b[0]) if b.size == 1 else tuple(float(v) for v in b) for b in (low, high)]
        self.model_ = KANModel(
            num_hidden=int(self.num_hidden),
            grid_size=int(self.grid_size),
            activation=self.activation,
            feature_low=bounds[0],
            feature_high=bounds[1],
            input_map=self.input_map,
            seed=int(self.random_state),
            backend=self.backend,
        )
        return self.model_

    def _describe(self, report: Any, num_rows: int) -> Any:
        kappa = theorem_f12_noise_multiplier(
            self._training_epsilon,  # training's share: private bounds took the rest
            self.delta,
            report.steps,
            report.rows_per_step / num_rows,
            self.correlation if self.noise == "lambda" else 0.0,
        )
        note = (
            f"for comparison, seed 004 Theorem F.12 (multi-participation sampling, zero-out) would set the noise "
            f"multiplier to {kappa:.4g}; this single pass is accounted exactly"
        )
        return dataclasses.replace(report, notes=report.notes + (note,))

    def _store(self, params: np.ndarray) -> None:
        self.weights_ = params.reshape(self.model_.num_hidden, -1)
        self.second_layer_ = self.model_.second_layer()

    def _decision(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "weights_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        if getattr(self, "feature_bounds_", None) is not None:  # the private bounds the fit estimated
            X = self.feature_bounds_.to_unit(X)
        return self.model_.predict_margin(X, self.weights_.ravel())
