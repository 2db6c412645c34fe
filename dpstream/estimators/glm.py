"""scikit-learn-style estimators: ``DPLinearRegression`` and ``DPLogisticRegression``, siblings of
``DPKANClassifier`` (``dpstream.estimators.kan``) on one single-pass fit (``dpstream.estimators.base``).

They accept NumPy arrays, pandas objects and Dask arrays or dataframes. Dask inputs are streamed one
block at a time through a single pass (duck-typed through ``to_delayed``: ``dpstream`` does not import
Dask). Every fit draws a fresh noise key from OS entropy unless ``noise_key`` is given, so two fits
differ; ``privacy_report_`` states the guarantee of the fitted parameters.

Scale. Clip norms, row-norm bounds and the default step sizes assume features on the scale [−1, 1].
``feature_bounds=(low, high)`` (public, per column or for all) clips every feature into its bounds and
maps it onto [−1, 1]; ``label_bounds`` does the same for the regression label; ``coef_`` and
``intercept_`` are stated in the original units (``dpstream.scaling``). Bounds left out (the default)
are estimated with DP inside the fit's (ε, δ) (``dpstream.bounds``, ``PublicScale``), at the cost of two
more passes over the rows and a share of the budget; public bounds, where known, save both.
``fit_intercept`` appends a public constant feature 1 to every row.

Algorithm. ``algorithm="auto"`` (default) runs AdaSSP (``"ssp"``: one release of noisy XᵀX and Xᵀy,
exact at any N) for models with at most ``dpstream.algorithms.choice.SSP_MAX_DIM`` inputs, and one-pass
DP-SGD above that; a linear regression with private bounds at the row level, N ≥ 20,000 and at least 20
inputs runs Accelerated-DP-SRGD instead at ε ≤ 1, and at any ε where the private preconditioner whitens
its rows (the linear kind's ``SmallBudgetChoice``: measured, BENCHMARKS.md). The iterative algorithms
default to the step size 1/(L·R²), R² = inputs (the row-norm bound on [−1, 1]), L = 1 (squared loss)
or 1/4 (logistic): stable for every dataset on that scale. A training loss that rises sharply warns
(operator only).

Preconditioner (``dpstream.estimators.preconditioning``): a regression trained by DP-AMBSSGD or
Accelerated-DP-SRGD first releases its rows' noisy second moment with 10 % of μ², where the rows are
many enough for it, and trains on the rows centred and whitened by it, with the step 1/(L·λ̃) from the
same release; ``preconditioner_`` holds it (None where none was made).

``backend="cupy"`` computes the batch statistics on a GPU, ``"auto"`` where one is usable.

Defaults. Each default is stated once: the algorithm's in ``dpstream.algorithms.builder.AlgorithmSpec``,
those a model kind tunes (clip norm, noise, learning rate) in its ``dpstream.models.kinds.base.TrainingDefaults``;
the signatures read them, and so does the pipeline config (``dpstream.flows.config.pipeline``).

Release guard (``dpstream.estimators.guarding``): the iterative algorithms and every person-level fit
start at a noisy constant and publish the model only where it beats that constant by the guard's
margin; ``released_`` says which ("model" or "constant") and ``guard_`` holds the DP figures.

Fitted attributes: ``coef_``, ``intercept_`` and ``privacy_report_`` are the DP release;
``training_loss_`` (mean loss of each step's rows) is **non-private, operator only** and must not be
shown outside the data owner's trust boundary.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import RegressorMixin, is_regressor
from sklearn.utils.validation import check_is_fitted, validate_data

from dpstream.algorithms.builder import AlgorithmSpec
from dpstream.algorithms.registry import AUTO, algorithm_names
from dpstream.estimators.base import BLOCK_ROWS, SinglePassEstimator
from dpstream.estimators.parameters import Interval, Options
from dpstream.estimators.support import (
    ClassifierLabels,
    check_finite,
)
from dpstream.models import Model, model_kind
from dpstream.noise import NoiseKey
from dpstream.privacy.budget import PrivacyBudget
from dpstream.release_guard import GuardConstant, GuardDecision, linear_prediction_range, with_intercepts
from dpstream.scaling import unmap_linear

__all__ = ["DPLinearRegression", "DPLogisticRegression"]

# One __init__ serves both GLM kinds, which share their training defaults (tests/test_defaults.py)
GLM_TRAINING = model_kind("linear").training


class _DPGLMEstimator(SinglePassEstimator):
    """A linear model on [−1, 1]-mapped features (and label), with the algorithm chosen by ``algorithm``:
    adds ``algorithm``, ``num_steps``, ``stat_bound``, ``fit_intercept``, ``feature_bounds`` and
    ``label_bounds`` to the shared parameters."""

    _parameter_constraints: dict = {
        **SinglePassEstimator._parameter_constraints,
        "algorithm": [Options({AUTO, *algorithm_names()})],
        "num_steps": [Interval(Integral, 1, None, closed="left"), None],
        "stat_bound": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "feature_bounds": [tuple, list, Options({"private"}), None],
        "label_bounds": [tuple, list, Options({"private"}), None],
    }

    def __init__(
        self,
        *,
        epsilon: float = AlgorithmSpec.epsilon,
        delta: float = AlgorithmSpec.delta,
        algorithm: str = AlgorithmSpec.name,
        noise: str = GLM_TRAINING.noise,
        correlation: float = AlgorithmSpec.correlation,
        nu: float = AlgorithmSpec.nu,
        clip_norm: float = GLM_TRAINING.clip_norm,
        batch_size: int | None = None,
        learning_rate: float | None = GLM_TRAINING.learning_rate,
        num_steps: int | None = None,
        stat_bound: float = AlgorithmSpec.stat_bound,
        projection_radius: float | None = None,
        relation: str = AlgorithmSpec.relation,
        fit_intercept: bool = True,
        noise_key: NoiseKey | None = None,
        random_state: int | None = None,
        budget: PrivacyBudget | None = None,
        block_rows: int = BLOCK_ROWS,
        max_rows_per_user: int | None = None,
        backend: str = "numpy",
        feature_bounds: tuple | None = None,
        label_bounds: tuple | None = None,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.algorithm = algorithm
        self.noise = noise
        self.correlation = correlation
        self.nu = nu
        self.clip_norm = clip_norm
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.num_steps = num_steps
        self.stat_bound = stat_bound
        self.projection_radius = projection_radius
        self.relation = relation
        self.fit_intercept = fit_intercept
        self.noise_key = noise_key
        self.random_state = random_state
        self.budget = budget
        self.block_rows = block_rows
        self.max_rows_per_user = max_rows_per_user
        self.backend = backend
        self.feature_bounds = feature_bounds
        self.label_bounds = label_bounds

    def _algorithm_request(self, model: Model, dim: int) -> dict[str, Any]:
        return dict(
            name=self.algorithm,
            clip_norm=self.clip_norm,
            learning_rate=self.learning_rate,
            batch_size=self.batch_size,
            num_steps=self.num_steps,
            stat_bound=self.stat_bound,
            noise=self.noise,
            correlation=self.correlation,
            nu=self.nu,
            projection_radius=self.projection_radius,
            intercept_index=dim // model.outputs - 1 if self.fit_intercept else None,
        )

    def _requested_bounds(self) -> tuple[Any, Any]:
        return self.feature_bounds, self.label_bounds

    def _symmetric_map(self) -> bool:
        return not self.fit_intercept  # without an intercept to absorb a shift, map by scale alone

    def _model_inputs(self) -> int:
        return self.n_features_in_ + int(self.fit_intercept)

    def _model_rows(self, block: np.ndarray) -> np.ndarray:
        """A block on [−1, 1] with the intercept column."""
        if self.fit_intercept:
            block = np.hstack([block, np.ones((block.shape[0], 1), dtype=block.dtype)])
        return block

    def _store(self, params: np.ndarray) -> None:
        intercept = float(params[-1]) if self.fit_intercept else 0.0
        self.coef_, self.intercept_ = unmap_linear(
            params[: self.n_features_in_], intercept, self.feature_bounds_, self.label_bounds_
        )

    def _preconditions(self) -> bool:
        """A regression with an intercept reads whitened rows (centring needs the intercept to absorb it;
        its parameters are the weights, then the intercept)."""
        return is_regressor(self) and self.fit_intercept

    def _has_intercept(self) -> bool:
        return self.fit_intercept

    def _intercept_index(self) -> int | None:
        return self._model_inputs() - 1 if self.fit_intercept else None  # the appended constant column

    def _prediction_range(self, params: np.ndarray) -> tuple[float, float]:
        """b ± ‖w‖₁ over the feature box [−1, 1]^d (a regression's one output)."""
        if not is_regressor(self):
            return (-1.0, 1.0)
        return linear_prediction_range(params, self._intercept_index())

    def _start_at(self, params: np.ndarray, constant: GuardConstant | None) -> np.ndarray:
        """A regression with an intercept starts at the guard's noisy label mean (weights 0), already
        released. A classifier starts at 0: from the classes' log-odds SRGD ended at the majority class
        on card payments, where from 0 it beats it (BENCHMARKS.md "Never worse than the mean")."""
        if constant is None or not is_regressor(self):
            return params
        return self._with_constant(params, constant)

    def _with_constant(self, params: np.ndarray, constant: GuardConstant) -> np.ndarray:
        return with_intercepts(params, self._model_inputs(), self._intercept_index(), constant)

    def _store_constant(self, decision: GuardDecision) -> None:
        """The constant as a linear model: weights 0 and the intercept(s) of ``GuardConstant.intercepts``
        (0 without an intercept)."""
        model, inputs = self._trained_model, self._model_inputs()
        self._store(self._with_constant(np.zeros(model.num_params(inputs)), decision.constant))

    def _decision(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        if self.feature_bounds_ is not None:
            X = self.feature_bounds_.clip(X)  # the model was trained on clipped features
        return X @ self.coef_.T.astype(X.dtype) + self.intercept_  # (rows,) or (rows, K) for K classes


_PARAMETERS = """
    Parameters
    ----------
    epsilon, delta : float, default 1.0, 1e-6
        The run's (ε, δ)-DP guarantee under ``relation``; noise is calibrated with exact Gaussian DP.
    algorithm : {"auto", "ssp", "ambssgd", "dpsgd", "srgd"}, default "auto"
        "auto": AdaSSP ("ssp") for at most 256 inputs, else "dpsgd"; a linear regression with private
        bounds, row-level DP, N ≥ 20,000 and at least 20 inputs runs "srgd" (at ε ≤ 1, or where the private
        preconditioner whitens its rows); naming ``num_steps``
        selects "ambssgd", ``batch_size`` or ``learning_rate`` selects "dpsgd" (``dpstream.algorithms.choice``).
    noise : {"independent", "lambda", "nu"}, default "independent"
        Used by "dpsgd": the increment noise process (DP-λCGD, ν-DP-FTRL).
    correlation : float, default 0.5
        Used by "dpsgd" with ``noise="lambda"``: λ in [0, 1).
    nu : float, default 0.01
        Used by "dpsgd" with ``noise="nu"``: ν in (0, 1].
    clip_norm : float, default 1.0
        Used by "dpsgd" and "srgd": per-example gradient clip norm.
    batch_size : int or None, default None
        Used by "dpsgd" (None: max(64, N/1000)) and "srgd" (None: sqrt(N)).
    learning_rate : float or None, default None
        Used by "dpsgd" and "ambssgd"; None: the stable step 1/(L·R²) on the public scale, or 1/(L·λ̃)
        on rows the private preconditioner whitened.
    num_steps : int or None, default None
        Used by "ambssgd"; None: about 4 ln N steps.
    stat_bound : float, default 1e4
        Used by "ambssgd": public upper bound of the per-example gradient norms (DP-STAT's range).
    projection_radius : float or None, default None
        Used by "dpsgd" and "srgd": project the iterate onto a ball of this radius.
    relation : {"replace-one", "zero-out"}, default "replace-one"
        The neighbouring relation the guarantee is stated under.
    fit_intercept : bool, default True
        Adds a public constant feature (unpenalised by AdaSSP's ridge).
    feature_bounds, label_bounds : (low, high), "private" or None, default None
        Public bounds (per column or one pair) to clip into and map onto [-1, 1]. None (or "private")
        estimates them with DP, charged within (epsilon, delta) and stated in ``privacy_report_``
        (``dpstream.bounds``); too few rows for that raise a ValueError naming the minimum.
        A classifier's labels need no bounds.
    noise_key : NoiseKey or None, default None
        None draws a fresh key from OS entropy at each fit; a key reproduces a fit bit for bit.
    random_state : int or None, default None
        For tests only: an int reproduces the noise (and the rows ``max_rows_per_user`` keeps) from
        it, with a ``PrivacyLeakWarning`` and a note in ``privacy_report_``, since whoever knows the
        seed can subtract the noise. ``noise_key``, where given, is used instead.
    budget : PrivacyBudget or None, default None
        A budget shared across fits (``dpstream.PrivacyBudget``): the fit charges its whole (ε, δ) to it
        before releasing anything and is refused with ``BudgetError`` past its total; None: the budget of
        an enclosing ``with budget:`` block, if any.
    block_rows : int, default 65536
        Rows per block streamed through the single pass.
    max_rows_per_user : int or None, default None
        With ``fit(X, y, groups=ids)`` (user-level DP): at most this many rows per id are kept, chosen
        uniformly at random (None: all). Each id's rows are combined into one contribution with one
        row's bounds, so the guarantee protects all of a person's rows at the stated epsilon
        (``dpstream.models.users``; AdaSSP only so far). The number of ids is treated as public, as N is
        for rows. The rows kept are drawn from OS entropy (from ``random_state`` where it is set): where
        the bound binds, ``noise_key`` alone does not reproduce a fit.
    backend : {"numpy", "cupy", "auto"}, default "numpy"
        Where the batch statistics are computed.

    A hyperparameter set to other than its default that the chosen algorithm does not use is refused.
"""


class DPLinearRegression(RegressorMixin, _DPGLMEstimator):
    """Differentially private linear regression (squared loss) trained in one pass.

    With the defaults, AdaSSP: one release of noisy XᵀX, Xᵀy and λ_min of rows on the public scale,
    then ridge regression with the privately chosen λ (Wang 2018); see ``algorithm`` for the others.
    """

    _kind = model_kind("linear")

    def _fit_model(self) -> Model:
        return self._kind.build(self.backend)

    def _check_targets(self, y: np.ndarray) -> None:
        check_finite(np.asarray(y, dtype=np.float64), "y", 0)

    def _prepare_targets(self, y: np.ndarray, offset: int) -> np.ndarray:
        """Numeric float64 targets for the model (y itself, checked finite)."""
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"y must be numeric for regression, got dtype {y.dtype}") from None
        check_finite(y, "y", offset)
        return y

    def predict(self, X: Any) -> np.ndarray:
        """The label, within ``label_bounds_`` (public or DP): the fit clipped every label into them, so
        no prediction beyond them lowers a squared error, and the release guard judged the model so."""
        predicted = self._decision(X)
        if self.label_bounds_ is None:
            return predicted
        return np.clip(predicted, self.label_bounds_.low[0], self.label_bounds_.high[0])


class DPLogisticRegression(ClassifierLabels, _DPGLMEstimator):
    """Differentially private logistic regression, binary or multinomial, trained in one pass.

    With the defaults, AdaSSP on the degree-2 approximation of the logistic loss (PASS-GLM); with K ≥ 3
    classes, of the softmax loss, from one release of XᵀX and of the classes' contrast moments XᵀT that
    serves all K classes at once (``dpstream.models.multinomial``: no ε/K split as in one-vs-rest). See
    ``algorithm`` for the iterative algorithms, which train the softmax model directly.

    Labels may be any values scikit-learn accepts as classes (strings, integers); ``classes_`` holds them
    sorted, and with two classes the larger is the positive class. ``classes_`` is read from ``y``: the set
    of classes present is not protected by the guarantee (a class held by one person reveals that it
    exists), so give ``y`` whose classes are public, as for a list of species or grades.
    ``decision_function`` returns one margin per row for two classes and (rows, K) margins otherwise;
    ``predict_proba`` rows sum to 1; ``coef_`` is (n_features,) for two classes and (K, n_features) for K.
    """

    _kind = model_kind("logistic")  # any number of classes ≥ 2

    def _fit_model(self) -> Model:
        return self._kind.build(self.backend, self.classes_.tolist())  # K ≥ 3: the softmax model

    def _store(self, params: np.ndarray) -> None:
        if len(self.classes_) == 2:
            super()._store(params)
            return
        weights = params.reshape(-1, len(self.classes_))
        unmapped = [
            unmap_linear(
                weights[: self.n_features_in_, k],
                float(weights[-1, k]) if self.fit_intercept else 0.0,
                self.feature_bounds_,
                None,
            )
            for k in range(len(self.classes_))
        ]
        self.coef_ = np.vstack([coef for coef, _ in unmapped])
        self.intercept_ = np.array([intercept for _, intercept in unmapped])


DPLinearRegression.__doc__ += _PARAMETERS
DPLogisticRegression.__doc__ += _PARAMETERS
