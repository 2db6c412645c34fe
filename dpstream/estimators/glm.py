"""scikit-learn-style estimators: ``DPLinearRegression``, ``DPLogisticRegression`` and ``DPKANClassifier``
(the last in ``dpstream.estimators.kan``).

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
exact at any N) for models with at most ``dpstream.algorithms.choice.SSP_MAX_DIM`` inputs, and one-pass DP-SGD above that. The
iterative algorithms default to the step size 1/(L·R²), R² = inputs (the row-norm bound on [−1, 1]),
L = 1 (squared loss) or 1/4 (logistic): stable for every dataset on that scale. A training loss that
rises sharply warns (operator only).

``backend="cupy"`` computes the batch statistics on a GPU, ``"auto"`` where one is usable.

Fitted attributes: ``coef_``, ``intercept_`` and ``privacy_report_`` are the DP release;
``training_loss_`` (mean loss of each step's rows) is **non-private, operator only** and must not be
shown outside the data owner's trust boundary.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Iterator
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dpstream.algorithms.builder import HYPERPARAMETERS, AlgorithmSpec, build_algorithm, default_learning_rate
from dpstream.algorithms.choice import ALGORITHMS
from dpstream.backend import BACKENDS
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.estimators.support import FitWarnings, PublicScale, is_dask
from dpstream.models import LinearRegressionModel, LogisticRegressionModel, Model, MultinomialLogisticModel
from dpstream.noise import NoiseKey
from dpstream.privacy import epsilon_for_delta, mu_for_epsilon_delta
from dpstream.scaling import unmap_linear
from dpstream.validation import check_budget

__all__ = ["DPLinearRegression", "DPLogisticRegression"]


def _as_2d_float(X: Any, name: str = "X") -> np.ndarray:
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
    try:
        array = np.asarray(X)
    except Exception as error:  # pragma: no cover - exotic containers
        raise ValueError(f"{name} could not be read as a numeric array: {error}") from None
    if array.ndim == 1:
        raise ValueError(
            f"{name} must be 2-d (rows, features), got a 1-d array; reshape with X.reshape(-1, 1)"
        )
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-d (rows, features), got shape {array.shape}")
    if array.dtype.kind not in "fiub":
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be numeric, got dtype {array.dtype}") from None
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    return array


def _check_finite(block: np.ndarray, name: str, offset: int) -> None:
    bad = ~np.isfinite(block)
    if bad.any():
        row = int(np.argwhere(bad)[0][0]) + offset
        raise ValueError(
            f"{name} contains NaN or infinity (first at row {row}); remove or impute such rows before fit"
        )


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


class _DPGLMEstimator(PublicScale, FitWarnings, BaseEstimator):
    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "algorithm": [StrOptions(set(ALGORITHMS))],
        "noise": [StrOptions({"independent", "lambda", "nu"})],
        "correlation": [Interval(Real, 0, 1, closed="left")],
        "nu": [Interval(Real, 0, 1, closed="right")],
        "clip_norm": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "num_steps": [Interval(Integral, 1, None, closed="left"), None],
        "stat_bound": [Interval(Real, 0, None, closed="neither")],
        "projection_radius": [Interval(Real, 0, None, closed="neither"), None],
        "relation": [StrOptions({"replace-one", "zero-out"})],
        "fit_intercept": ["boolean"],
        "noise_key": [NoiseKey, None],
        "block_rows": [Interval(Integral, 1, None, closed="left")],
        "backend": [StrOptions(set(BACKENDS))],
        "feature_bounds": [tuple, list, StrOptions({"private"}), None],
        "label_bounds": [tuple, list, StrOptions({"private"}), None],
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        algorithm: str = "auto",
        noise: str = "independent",
        correlation: float = 0.5,
        nu: float = 0.01,
        clip_norm: float = 1.0,
        batch_size: int | None = None,
        learning_rate: float | None = None,
        num_steps: int | None = None,
        stat_bound: float = 1e4,
        projection_radius: float | None = None,
        relation: str = "replace-one",
        fit_intercept: bool = True,
        noise_key: NoiseKey | None = None,
        block_rows: int = 65536,
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
        self.block_rows = block_rows
        self.backend = backend
        self.feature_bounds = feature_bounds
        self.label_bounds = label_bounds

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True  # fresh DP noise on every fit
        return tags

    _model: Model  # a GLM here; the KAN classifier trains a KANModel

    def _stable_learning_rate(self) -> float:
        model = getattr(self, "_trained_model", self._model)
        return default_learning_rate(model, model.num_params(self.n_features_in_ + int(self.fit_intercept)))

    def _given_hyperparameters(self) -> frozenset[str]:
        """The hyperparameters set to other than their default: the builder refuses those the chosen
        algorithm ignores."""
        defaults = {
            name: parameter.default
            for name, parameter in inspect.signature(type(self).__init__).parameters.items()
        }
        return frozenset(
            name for name in HYPERPARAMETERS if name in defaults and getattr(self, name) != defaults[name]
        )

    def _known_hyperparameters(self) -> frozenset[str]:
        return frozenset(self.get_params()) & HYPERPARAMETERS

    def _build_algorithm(self, model: Any, num_rows: int, dim: int, epsilon: float):
        spec = AlgorithmSpec(
            name=self.algorithm,
            epsilon=epsilon,
            delta=self.delta,
            relation=self.relation,
            clip_norm=self.clip_norm,
            learning_rate=self.learning_rate,
            batch_size=self.batch_size,
            num_steps=getattr(self, "num_steps", None),
            stat_bound=getattr(self, "stat_bound", AlgorithmSpec.stat_bound),
            noise=self.noise,
            correlation=self.correlation,
            nu=self.nu,
            projection_radius=self.projection_radius,
            intercept_index=dim // model.outputs - 1 if self.fit_intercept else None,
            given=self._given_hyperparameters(),
            known=self._known_hyperparameters(),
        )
        self.algorithm_, algorithm = build_algorithm(spec, model, num_rows, dim)
        return algorithm

    def _prepare_targets(self, y: np.ndarray, offset: int) -> np.ndarray:
        """Numeric float64 targets for the model (regression: y itself, checked finite)."""
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"y must be numeric for regression, got dtype {y.dtype}") from None
        _check_finite(y, "y", offset)
        return y

    def _raw_blocks(self, X: Any, y: Any) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The rows in blocks of ``block_rows`` (a Dask collection's partitions), checked, before scaling."""
        offset = 0
        if is_dask(X):
            X_parts, y_parts = _dask_partitions(X), _dask_partitions(y)
        else:
            X_all, y_all = X, y
            X_parts = (X_all[i : i + self.block_rows] for i in range(0, X_all.shape[0], self.block_rows))
            y_parts = (y_all[i : i + self.block_rows] for i in range(0, y_all.shape[0], self.block_rows))
        for X_part, y_part in zip(X_parts, y_parts, strict=True):
            block = _as_2d_float(X_part.compute() if hasattr(X_part, "compute") else X_part)
            labels = np.asarray(y_part.compute() if hasattr(y_part, "compute") else y_part).ravel()
            _check_finite(block, "X", offset)
            labels = self._prepare_targets(labels, offset)
            if block.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {block.shape[1]} features in a block starting at row {offset}, expected {self.n_features_in_}"
                )
            offset += block.shape[0]
            yield block, labels

    def _blocks(self, X: Any, y: Any) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The training pass: each block clipped and mapped onto [−1, 1], with the intercept column."""
        for block, labels in self._raw_blocks(X, y):
            block, labels = self._to_public_scale(block, labels)
            if self.fit_intercept:
                block = np.hstack([block, np.ones((block.shape[0], 1), dtype=block.dtype)])
            yield block, labels

    def _validate_input(self, X: Any, y: Any) -> tuple[Any, Any, int]:
        if is_dask(X):
            if len(getattr(X, "shape", ())) == 2 and hasattr(X, "rechunk"):
                X = X.rechunk({1: -1})
                y = y.rechunk((X.chunks[0],)) if hasattr(y, "rechunk") else y
                num_rows = int(X.compute_chunk_sizes().shape[0]) if np.isnan(X.shape[0]) else int(X.shape[0])
            else:
                num_rows = int(len(X))
            self.n_features_in_ = int(X.shape[1])
            return X, y, num_rows
        early = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y) if y is not None else None
        if isinstance(self, RegressorMixin) and early is not None and early.dtype.kind in "fiu":
            _check_finite(early.astype(np.float64).reshape(early.shape[0], -1), "y", 0)  # names the row
        if isinstance(self, RegressorMixin) and early is not None and early.dtype.kind in "OUS":
            try:
                early.astype(np.float64)
            except (TypeError, ValueError):
                sample = next(value for value in early.ravel() if not _is_number(value))
                raise ValueError(
                    f"y must be numeric for a regressor; it holds {str(sample)!r}. For class labels use "
                    "DPLogisticRegression; for numbers stored as text convert y with pandas.to_numeric"
                ) from None
        X, y = validate_data(
            self,
            X,
            y,
            dtype=[np.float64, np.float32],  # float32 stays float32: no copy
            ensure_all_finite=False,  # checked below, with the offending row named
            y_numeric=isinstance(self, RegressorMixin),
        )
        _check_finite(X, "X", 0)
        self._check_targets(y)
        return X, y, X.shape[0]

    def _check_targets(self, y: np.ndarray) -> None:
        _check_finite(np.asarray(y, dtype=np.float64), "y", 0)

    def fit(self, X: Any, y: Any) -> _DPGLMEstimator:
        self._validate_params()
        check_budget(self.epsilon, self.delta)  # the whole fit's ε, before private bounds take a share
        X, y, num_rows = self._validate_input(X, y)
        key = self.noise_key if self.noise_key is not None else NoiseKey.generate()
        self._parse_bounds()
        self._prepare_classes(y)
        mu = mu_for_epsilon_delta(self.epsilon, self.delta)
        bounds = self._private_bounds(lambda: self._raw_blocks(X, y), num_rows, key, mu)
        # Private bounds take a share of μ²; training gets the rest, so the two compose to (ε, δ).
        epsilon = (
            self.epsilon
            if bounds is None
            else epsilon_for_delta(self.delta, math.sqrt(1 - bounds.share) * mu)
        )
        inputs = self.n_features_in_ + int(self.fit_intercept)
        model = self._trained_model = self._fit_model()
        dim = model.num_params(inputs)
        self._training_epsilon = epsilon  # the ε training was calibrated to, after any private bounds
        algorithm = self._build_algorithm(model, num_rows, dim, epsilon)
        result = run(
            algorithm,
            InMemoryExecutor(model, self._blocks(X, y)),
            num_rows=num_rows,
            num_params=dim,
            initial_params=model.init_params(inputs),
            key=key,
        )
        report = result.report if bounds is None else bounds.combine(result.report, self.delta)
        self.privacy_report_ = self._describe(report, num_rows)
        self.training_loss_ = np.asarray(result.training_loss)  # non-private: operator only
        self.n_steps_ = len(result.training_loss)
        self.ridge_ = getattr(result.state, "ridge", None)  # AdaSSP's λ, a DP output
        self._warn_if_clipped()
        self._warn_if_label_mean_only(result.state)
        self._warn_if_ridge_dominates(getattr(result.state, "curvature", None))
        self._warn_if_diverging()
        self._store(result.params)
        self._warn_if_one_class(X)
        return self

    def _fit_model(self) -> Any:
        """The model this fit trains (a GLM here; subclasses may validate against the data first)."""
        return dataclasses.replace(self._model, backend=self.backend)

    def _describe(self, report: Any, num_rows: int) -> Any:
        """The fitted ``privacy_report_`` (subclasses may add notes)."""
        return report

    def _store(self, params: np.ndarray) -> None:
        intercept = float(params[-1]) if self.fit_intercept else 0.0
        self.coef_, self.intercept_ = unmap_linear(
            params[: self.n_features_in_], intercept, self.feature_bounds_, self.label_bounds_
        )

    def _prepare_classes(self, y: Any) -> None:
        pass

    def _decision(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        if self.feature_bounds_ is not None:
            X = self.feature_bounds_.clip(X)  # the model was trained on clipped features
        return X @ self.coef_.T.astype(X.dtype) + self.intercept_  # (rows,) or (rows, K) for K classes


def _dask_partitions(collection: Any) -> Iterator[Any]:
    delayed = collection.to_delayed()
    return iter(np.asarray(delayed, dtype=object).ravel())


_PARAMETERS = """
    Parameters
    ----------
    epsilon, delta : float, default 1.0, 1e-6
        The run's (ε, δ)-DP guarantee under ``relation``; noise is calibrated with exact Gaussian DP.
    algorithm : {"auto", "ssp", "ambssgd", "dpsgd", "srgd"}, default "auto"
        "auto": AdaSSP ("ssp") for at most 256 inputs, else "dpsgd"; naming ``num_steps`` selects
        "ambssgd", ``batch_size`` or ``learning_rate`` selects "dpsgd" (``dpstream.algorithms.choice``).
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
        Used by "dpsgd" and "ambssgd"; None: the stable step 1/(L·R²) on the public scale.
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
    block_rows : int, default 65536
        Rows per block streamed through the single pass.
    backend : {"numpy", "cupy", "auto"}, default "numpy"
        Where the batch statistics are computed.

    A hyperparameter set to other than its default that the chosen algorithm does not use is refused.
"""


class DPLinearRegression(RegressorMixin, _DPGLMEstimator):
    """Differentially private linear regression (squared loss) trained in one pass.

    With the defaults, AdaSSP: one release of noisy XᵀX, Xᵀy and λ_min of rows on the public scale,
    then ridge regression with the privately chosen λ (Wang 2018); see ``algorithm`` for the others.
    """

    _model = LinearRegressionModel()

    def predict(self, X: Any) -> np.ndarray:
        return self._decision(X)


class DPLogisticRegression(ClassifierMixin, _DPGLMEstimator):
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

    _model = LogisticRegressionModel()
    _max_classes: int | None = None  # None: any number ≥ 2

    def _check_targets(self, y: np.ndarray) -> None:
        check_classification_targets(y)

    def _prepare_classes(self, y: Any) -> None:
        values = np.unique(np.asarray(y.compute() if hasattr(y, "compute") else y))
        limit = self._max_classes
        if values.size < 2 or (limit is not None and values.size > limit):
            expected = "at least 2 classes" if limit is None else f"exactly {limit} classes"
            raise ValueError(
                ("Only binary classification is supported: " if limit == 2 else "")
                + f"{type(self).__name__} needs y with {expected}, got {values.size} "
                f"class{'es' if values.size != 1 else ''} ({values[:5].tolist()})"
                + ("; DPLogisticRegression takes any number of classes" if limit is not None else "")
            )
        self.classes_ = values

    def _fit_model(self) -> Any:
        if len(self.classes_) > 2:
            return MultinomialLogisticModel(num_classes=len(self.classes_), backend=self.backend)
        return super()._fit_model()

    def _prepare_targets(self, y: np.ndarray, offset: int) -> np.ndarray:
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            row = int(np.argmax(unknown)) + offset
            raise ValueError(
                f"y has a label {y[row - offset]!r} at row {row} outside the classes {self.classes_.tolist()}"
            )
        if len(self.classes_) > 2:
            return np.searchsorted(self.classes_, y).astype(np.float64)  # class indices (the model's targets)
        return np.where(y == self.classes_[1], 1.0, -1.0)

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

    def decision_function(self, X: Any) -> np.ndarray:
        return self._decision(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        from dpstream.models.kinds import probabilities

        return probabilities(self._decision(X).astype(np.float64))

    def predict(self, X: Any) -> np.ndarray:
        margins = self._decision(X)  # checks fitted before classes_ is read
        if margins.ndim == 2:
            return self.classes_[np.argmax(margins, axis=1)]
        return self.classes_[(margins > 0).astype(int)]


DPLinearRegression.__doc__ += _PARAMETERS
DPLogisticRegression.__doc__ += _PARAMETERS
