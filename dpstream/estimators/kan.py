"""``DPKANClassifier``: a two-layer B-spline KAN trained in one pass by DP-SGD with correlated noise.

The DP-λCGD (Alg. 1) of Wang et al., "KANs Trained by DP-SGD with Correlated Noise", arXiv:2605.12648,
adapted to dpstream's single pass: step t uses the next ``batch_size``
rows, releases the clipped gradient sum plus λ-correlated noise (``noise="lambda"``; any other noise
process of ``dpstream.noise`` works too), and projects onto the ball B(W₀, ``projection_radius``).
Every row participates once, so the privacy is the exact single-participation matrix-mechanism
guarantee (the encoder's largest column, ``sqrt((1 − λ^{2T})/(1 − λ²))``), reported in
``privacy_report_`` with the paper's Theorem F.12 noise multiplier beside it for comparison.

A sibling of ``DPLinearRegression`` and ``DPLogisticRegression``: the same single-pass fit
(``dpstream.estimators.base.SinglePassEstimator``) and classifier labels (``ClassifierLabels``), so the
same conventions: NumPy, pandas or Dask inputs, any two labels (the larger is +1), a fresh noise key
from OS entropy on each fit, ``training_loss_`` non-private (operator only). Features are mapped with
the public bounds ``feature_low``/``feature_high``, or (left out) bounds estimated with DP within the
fit's budget; W₀ and the fixed second layer come from the public seed ``KANModel.seed``, or from
``random_state`` where it is set, which then reproduces the noise too (for tests only: a
``PrivacyLeakWarning`` says so, ``dpstream.estimators.leaks``).

Defaults are the KAN's, stated once: the model's settings in ``dpstream.models.KANModel`` (``input_map``
"cube"), the training's in the kind's ``TrainingDefaults`` (``dpstream.models.kinds.kan``: λ-correlated
noise, ``clip_norm`` 0.5, ``learning_rate`` 2.0, chosen on real data, BENCHMARKS.md "Defaults on real
data"); a pipeline with ``[model] kind = "kan"`` trains with the same.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from dpstream.algorithms.builder import AlgorithmSpec
from dpstream.estimators.base import BLOCK_ROWS, SinglePassEstimator
from dpstream.estimators.parameters import Interval, Options
from dpstream.estimators.support import ClassifierLabels
from dpstream.models import KANModel
from dpstream.models.kinds.kan import KAN
from dpstream.noise import NoiseKey
from dpstream.privacy.budget import PrivacyBudget
from dpstream.release_guard import GuardDecision, constant_params

__all__ = ["DPKANClassifier", "theorem_f12_noise_multiplier"]


def theorem_f12_noise_multiplier(
    epsilon: float, delta: float, num_steps: int, sampling_rate: float, correlation: float
) -> float:
    """Theorem F.12 of Wang et al. (arXiv:2605.12648; docs/design.md, note D3):
    κ² ≥ 8 ((1 − λ^T)/(1 − λ))² (rT + √(3 rT ln(2/δ))) ln(2.5/δ)/ε², for its Poisson-free fixed-size
    sampling with rate r = B/n and zero-out neighbours; shown for comparison only (dpstream's single
    pass is accounted exactly)."""
    geometric = (1.0 - correlation**num_steps) / (1.0 - correlation) if correlation > 0 else 1.0
    rate_steps = sampling_rate * num_steps
    return math.sqrt(
        8.0
        * geometric**2
        * (rate_steps + math.sqrt(3.0 * rate_steps * math.log(2.0 / delta)))
        * math.log(2.5 / delta)
        / epsilon**2
    )


class DPKANClassifier(ClassifierLabels, SinglePassEstimator):
    """Differentially private binary classifier: a two-layer B-spline KAN (``dpstream.models.KANModel``),
    trained by one-pass DP-SGD (``noise``, ``correlation``, ``nu``, ``clip_norm``, ``batch_size``,
    ``learning_rate`` and ``projection_radius`` as in ``DPLogisticRegression(algorithm="dpsgd")``; the
    model's ``num_hidden``, ``grid_size``, ``activation``, ``input_map`` as in ``KANModel``; ``random_state``: None
    seeds the model from ``KANModel.seed`` with fresh noise, an int seeds the model and, for tests only,
    the noise). ``feature_low`` / ``feature_high``: public bounds (one for all features or one
    per feature), or both None (the default) to estimate them with DP within (epsilon, delta).
    ``budget``: a ``dpstream.PrivacyBudget`` the fit charges, as in ``DPLogisticRegression``."""

    _kind = KAN  # binary only: the kind's class limit
    _parameter_constraints: dict = {
        **SinglePassEstimator._parameter_constraints,
        "num_hidden": [Interval(Integral, 1, None, closed="left")],
        "grid_size": [Interval(Integral, 1, None, closed="left")],
        "activation": [Options({"tanh", "sigmoid"})],
        "feature_low": [Real, "array-like", None],
        "feature_high": [Real, "array-like", None],
        "input_map": [Options({"ball", "cube"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],  # no stable step to default to
    }

    def __init__(
        self,
        *,
        epsilon: float = AlgorithmSpec.epsilon,
        delta: float = AlgorithmSpec.delta,
        num_hidden: int = KANModel.num_hidden,
        grid_size: int = KANModel.grid_size,
        activation: str = KANModel.activation,
        feature_low: float | Any | None = None,
        feature_high: float | Any | None = None,
        input_map: str = KANModel.input_map,
        noise: str = KAN.training.noise,
        correlation: float = AlgorithmSpec.correlation,
        nu: float = AlgorithmSpec.nu,
        clip_norm: float = KAN.training.clip_norm,
        batch_size: int | None = None,
        learning_rate: float = KAN.training.learning_rate,
        projection_radius: float | None = None,
        relation: str = AlgorithmSpec.relation,
        random_state: int | None = None,
        backend: str = "numpy",
        noise_key: NoiseKey | None = None,
        budget: PrivacyBudget | None = None,
        block_rows: int = BLOCK_ROWS,
        max_rows_per_user: int | None = None,
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
        self.budget = budget
        self.block_rows = block_rows
        self.max_rows_per_user = max_rows_per_user

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _algorithm_request(self, model: KANModel, dim: int) -> dict[str, Any]:
        """DP-SGD with the noise chosen here; no intercept (the spline basis is a partition of unity:
        constants are representable)."""
        return dict(
            name="dpsgd",
            clip_norm=self.clip_norm,
            learning_rate=self.learning_rate,
            batch_size=self.batch_size,
            noise=self.noise,
            correlation=self.correlation,
            nu=self.nu,
            projection_radius=self.projection_radius,
        )

    def _requested_bounds(self) -> tuple[Any, Any]:
        return None, None  # feature_low / feature_high are the KAN's own map; see _estimates_feature_bounds

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
            seed=KANModel.seed if self.random_state is None else int(self.random_state),
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
            "for comparison, Theorem F.12 of Wang et al. (arXiv:2605.12648; multi-participation sampling, "
            f"zero-out) would set the noise multiplier to {kappa:.4g}; this single pass is accounted exactly"
        )
        return dataclasses.replace(report, notes=report.notes + (note,))

    def _store(self, params: np.ndarray) -> None:
        self.weights_ = params.reshape(self.model_.num_hidden, -1)
        self.second_layer_ = self.model_.second_layer()

    def _store_constant(self, decision: GuardDecision) -> None:
        """The majority class: weights whose margin is the log-odds of the noisy class frequencies on every
        row (``KANModel.constant_margin_params``)."""
        self._store(constant_params(self.model_, self.n_features_in_, None, decision.constant))

    def _decision(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "weights_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        if self.feature_bounds_ is not None:  # the private bounds the fit estimated
            X = self.feature_bounds_.to_unit(X)
        return self.model_.predict_margin(X, self.weights_.ravel())
