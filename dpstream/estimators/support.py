"""What the estimators share around the single-pass fit (``dpstream.estimators.base.SinglePassEstimator``):
reading the rows, the scale of the data, a classifier's labels and the fit's warnings.

``PublicScale`` clips every block into its bounds and maps it onto [−1, 1] (``dpstream.scaling``). The
bounds are public pairs where the user gives them (``feature_bounds``, ``label_bounds``); otherwise, by
default, they are estimated with DP inside the fit's own (ε, δ) (``dpstream.bounds``: two rounds of
noisy histograms over every row, a share s of μ² from ``bounds_share``, the rest for training; the two
compose to the requested guarantee). ``ClassifierLabels`` reads a classifier's ``classes_`` from ``y``
and gives the scikit-learn outputs from the model's margins. ``FitWarnings`` says when a fit did not
learn: AdaSSP's private ridge above N (a DP output) and a diverging training loss (operator only). All
are mixins of ``SinglePassEstimator`` and read its parameters.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.base import ClassifierMixin, is_regressor
from sklearn.utils.multiclass import check_classification_targets

from dpstream.bounds import SHARE_RANGE, PrivateBounds, TooFewRows, bounds_share, too_few_for_bounds
from dpstream.models.kinds.base import ModelKind, probabilities
from dpstream.models.users import histogram_weights
from dpstream.noise import NoiseKey
from dpstream.privacy import PrivacyEvent
from dpstream.scaling import PublicBounds

__all__ = [
    "PublicScale",
    "ClassifierLabels",
    "FitWarnings",
    "BoundsRelease",
    "is_dask",
    "dask_partitions",
    "as_2d_float",
    "check_finite",
    "is_number",
]


def is_dask(obj: Any) -> bool:
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "to_delayed")


def dask_partitions(collection: Any) -> Iterator[Any]:
    """A Dask collection's blocks in row order, each still lazy (duck-typed: ``to_delayed``)."""
    delayed = collection.to_delayed()
    return iter(np.asarray(delayed, dtype=object).ravel())


def as_2d_float(X: Any, name: str = "X") -> np.ndarray:
    """``X`` as a 2-d float32 or float64 array (float32 stays float32: no copy)."""
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


def check_finite(block: np.ndarray, name: str, offset: int) -> None:
    """A ValueError naming the first row (counted from ``offset``) that holds NaN or infinity."""
    bad = ~np.isfinite(block)
    if bad.any():
        row = int(np.argwhere(bad)[0][0]) + offset
        raise ValueError(
            f"{name} contains NaN or infinity (first at row {row}); remove or impute such rows before fit"
        )


def is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class BoundsRelease:
    """What a fit's private bounds spent: the share of μ², their event, and the note for the report."""

    share: float
    event: PrivacyEvent
    note: str

    def combine(self, report: Any, delta: float) -> Any:
        """The training run's report extended to the whole fit: the bounds and the training compose."""
        return report.composed_with(self.event, self.note, delta)


class PublicScale:
    """The estimator states ``_requested_bounds`` (the user's public bounds, or None to estimate) and
    ``_symmetric_map``; ``_estimates_feature_bounds`` says whether missing feature bounds are estimated."""

    def _requested_bounds(self) -> tuple[Any, Any]:
        """(feature bounds, label bounds) as the user gave them: public (low, high) pairs, or None or
        "private" for bounds estimated with DP."""
        raise NotImplementedError(f"{type(self).__name__} must state the bounds it was given")

    def _symmetric_map(self) -> bool:
        """Map by scale alone, not shift: for a linear model without an intercept to absorb the shift."""
        raise NotImplementedError(f"{type(self).__name__} must state whether its map may shift")

    def _to_public_scale(self, block: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Clip and map onto [−1, 1] with the fit's bounds (public, or released by ``_private_bounds``)."""
        outside = self._outside_public
        if self.feature_bounds_ is not None:
            if not self._estimate_features:
                outside[0] += np.sum(
                    (block < self.feature_bounds_.low) | (block > self.feature_bounds_.high), axis=0
                )
            block = self.feature_bounds_.to_unit(block)
        if self.label_bounds_ is not None:
            if not self._estimate_label:
                outside[1] += int(
                    np.sum((labels < self.label_bounds_.low[0]) | (labels > self.label_bounds_.high[0]))
                )
            labels = self.label_bounds_.to_unit(labels)
        outside[2] += len(labels)
        return block, labels

    def _parse_bounds(self) -> None:
        """Public pairs are parsed here; ``None`` (the default) and ``"private"`` are estimated by
        ``_private_bounds`` once the rows are known."""
        feature_bounds, label_bounds = self._requested_bounds()
        if label_bounds is not None and not is_regressor(self):
            raise ValueError(
                "label_bounds applies to regression; a classifier's labels are its classes (leave label_bounds=None)"
            )
        symmetric = self._symmetric_map()
        self.feature_bounds_ = (
            None
            if _estimated(feature_bounds)
            else PublicBounds.parse(feature_bounds, self.n_features_in_, "feature_bounds", symmetric)
        )
        self.label_bounds_ = (
            None
            if _estimated(label_bounds) or not is_regressor(self)
            else PublicBounds.parse(label_bounds, 1, "label_bounds", symmetric)
        )
        self._estimate_features = self.feature_bounds_ is None and self._estimates_feature_bounds()
        self._estimate_label = self.label_bounds_ is None and is_regressor(self)
        # Values outside the public bounds per feature, in the label, and rows seen (operator only).
        self._outside_public = [np.zeros(self.n_features_in_, dtype=np.int64), 0, 0]

    def _private_scale(self) -> bool:
        """Whether private bounds map the features (and a regression's label) onto the public scale: the
        scale where "auto"'s small-budget choice was measured (``TrainingDefaults.small_budget``)."""
        features = getattr(self, "_estimate_features", False)  # False before fit parses the bounds
        return features and (self._estimate_label or not is_regressor(self))

    def _estimates_feature_bounds(self) -> bool:
        """Whether missing feature bounds are estimated (an estimator whose model maps features itself: no)."""
        return True

    def _private_bounds(
        self,
        raw_blocks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
        num_rows: int,
        key: NoiseKey,
        mu: float,
        people: bool = False,
    ) -> BoundsRelease | None:
        """Estimate the bounds the user did not give, with a share of the fit's μ² (module docstring); sets
        ``feature_bounds_`` / ``label_bounds_``. ``raw_blocks()`` iterates the rows (X, y) before scaling;
        it is called once per round. ``people``: ``num_rows`` counts people (user-level DP)."""
        if not (self._estimate_features or self._estimate_label):
            return None
        features = getattr(self, "feature_names_in_", None)
        features = (
            [str(name) for name in features]
            if features is not None
            else [f"x{j}" for j in range(self.n_features_in_)]
        )
        names = features if self._estimate_features else []
        names += ["y"] if self._estimate_label else []
        share = bounds_share(num_rows, len(names), mu, self.relation)
        mechanism = PrivateBounds(math.sqrt(share) * mu, self.relation)

        def columns(X: np.ndarray, y: np.ndarray) -> np.ndarray:
            parts = [np.asarray(X, dtype=np.float64)] if self._estimate_features else []
            if self._estimate_label:
                parts.append(np.asarray(y, dtype=np.float64).reshape(-1, 1))
            return np.hstack(parts)

        try:
            low, high = mechanism.coarse_release(
                sum(
                    mechanism.coarse_histogram(columns(X, y), histogram_weights(u))
                    for X, y, u in raw_blocks()
                ),
                key,
                tuple(names),
            )
        except TooFewRows as error:
            # The fewest rows with which any column could be bounded: one bin holding τ + 2σ at the largest share.
            least = PrivateBounds(math.sqrt(max(SHARE_RANGE)) * mu, self.relation).minimum_rows(len(names))
            label = self._estimate_label
            raise too_few_for_bounds(
                error, num_rows, len(names), least, self.epsilon, label, people
            ) from None
        fine = sum(
            mechanism.fine_histogram(columns(X, y), low, high, histogram_weights(u))
            for X, y, u in raw_blocks()
        )
        tail = mechanism.tails(num_rows, len(names), len(names) - 1 if self._estimate_label else None)
        low, high = mechanism.fine_release(fine, key, low, high, num_rows, tail)
        symmetric = self._symmetric_map()
        d = self.n_features_in_ if self._estimate_features else 0
        if self._estimate_features:
            self.feature_bounds_ = PublicBounds(low[:d], high[:d], symmetric)
        if self._estimate_label:
            self.label_bounds_ = PublicBounds(low[d:], high[d:], symmetric)
        event = mechanism.event(len(names))
        which = ", ".join(
            name
            for name, on in (
                ("feature_bounds", self._estimate_features),
                ("label_bounds", self._estimate_label),
            )
            if on
        )
        note = (
            f"private bounds ({which}: none were given): two rounds of noisy per-column histograms of all {num_rows:,} rows "
            f"({len(names)} columns), {share:.0%} of the fit's μ² ({event.events[0].mu:.4g}- and {event.events[1].mu:.4g}-GDP); "
            "the guarantee above composes them with training. Public bounds, where known, save that share"
        )
        return BoundsRelease(share, event, note)


class ClassifierLabels(ClassifierMixin):
    """A classifier's labels: ``classes_`` read from ``y`` (sorted; with two classes the larger is the
    positive class, trained as +1), the targets the model trains on (±1, or class indices for K ≥ 3) and
    the scikit-learn outputs from the estimator's margins (``_decision``). The most classes it takes is its
    model kind's (``_kind.max_classes``, ``dpstream.models.kinds``): the one statement of that limit."""

    _kind: ClassVar[ModelKind]

    def _check_targets(self, y: np.ndarray) -> None:
        check_classification_targets(y)

    def _prepare_classes(self, y: Any) -> None:
        values = np.unique(np.asarray(y.compute() if hasattr(y, "compute") else y))
        limit = self._kind.max_classes
        if values.size < 2 or (limit is not None and values.size > limit):
            expected = "at least 2 classes" if limit is None else f"exactly {limit} classes"
            raise ValueError(
                ("Only binary classification is supported: " if limit == 2 else "")
                + f"{type(self).__name__} needs y with {expected}, got {values.size} "
                f"class{'es' if values.size != 1 else ''} ({values[:5].tolist()})"
                + ("; DPLogisticRegression takes any number of classes" if limit is not None else "")
            )
        self.classes_ = values

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

    def decision_function(self, X: Any) -> np.ndarray:
        return self._decision(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        return probabilities(self._decision(X).astype(np.float64))

    def predict(self, X: Any) -> np.ndarray:
        margins = self._decision(X)  # checks fitted before classes_ is read
        if margins.ndim == 2:
            return self.classes_[np.argmax(margins, axis=1)]
        return self.classes_[(margins > 0).astype(int)]


def _estimated(bounds: Any) -> bool:
    return bounds is None or (isinstance(bounds, str) and bounds == "private")


def _warn(message: str) -> None:
    """A fit's warning, attributed to the user's ``fit`` call (fit → _warn_if_… → here)."""
    warnings.warn(message, UserWarning, stacklevel=4)


class FitWarnings:
    CLIPPED_WARNING_FRACTION = 0.05

    def _warn_if_clipped(self) -> None:
        """Warn when public bounds clip more than 5 % of a column's values: bounds in the wrong units turn
        a column into a constant without an error (operator only: counted on the rows, never released)."""
        features, label, rows = getattr(self, "_outside_public", (None, 0, 0))
        if not rows:
            return
        names = getattr(self, "feature_names_in_", None)
        worst = [
            f"{names[j] if names is not None else f'X column {j}'!s} ({count / rows:.0%})"
            for j, count in enumerate(features)
            if count > self.CLIPPED_WARNING_FRACTION * rows
        ]
        if label > self.CLIPPED_WARNING_FRACTION * rows:
            worst.append(f"y ({label / rows:.0%})")
        if worst:
            _warn(
                f"the public bounds clip many values of {', '.join(worst[:5])}{' and more' if len(worst) > 5 else ''}: "
                "check that feature_bounds / label_bounds are in the data's units (operator-only check, not DP), "
                "or leave them out to estimate them privately"
            )

    def _warn_if_one_class(self, X: Any) -> None:
        """Warn when a classifier predicts one class for every training row held in memory (operator only:
        computed from the rows, never released): the model is the majority-class rule, or worse."""
        if is_regressor(self) or is_dask(X) or getattr(self, "released_", "model") == "constant":
            return  # the guard's release of the majority class says so itself
        with warnings.catch_warnings():  # X is fit's validated array: a DataFrame's names are already stored
            warnings.filterwarnings("ignore", message="X does not have valid feature names")
            predicted = np.unique(self.predict(X))
        if predicted.size == 1:
            _warn(
                f"the fitted model predicts {predicted.tolist()[0]!r} for every training row (operator-only check, not DP): "
                "it is no better than always answering one class. A rare class is beyond AdaSSP's least-squares "
                "surrogate; otherwise the noise outweighs the data: use more rows or a larger epsilon"
            )

    def _warn_if_label_mean_only(self, state: Any) -> None:
        """AdaSSP's plan had too few rows for the regression (public quantities) and released the label mean."""
        if getattr(state, "label_mean_only", False):
            _warn(
                f"{next(note for note in self.privacy_report_.notes if note.startswith('too few '))}. "
                "Use more rows, a larger epsilon or fewer features (more people, under the user unit), or "
                "algorithm='srgd', whose noise is one vector per step, not a matrix of d² entries"
            )

    def _warn_if_ridge_dominates(self, curvature: float | None) -> None:
        """AdaSSP's λ above the data's mean curvature tr(XᵀX)/d (both DP outputs of the run, so this costs
        no privacy): the noise forced a ridge that outweighs the data, and the model is close to the
        constant predictor (the noisy label mean, or the majority class)."""
        if self.ridge_ is None or curvature is None or self.ridge_ <= curvature:
            return
        note = (
            f"AdaSSP's private ridge λ = {self.ridge_:.4g} exceeds the data's mean curvature tr(XᵀX)/d = {curvature:.4g}: "
            "at this N, ε, number of features and feature spread the noise shrinks the weights towards 0, the "
            "constant predictor (the label mean or the majority class), by more than the data pulls them away"
        )
        self.privacy_report_ = dataclasses.replace(
            self.privacy_report_, notes=self.privacy_report_.notes + (note,)
        )
        _warn(
            f"{note}. Use more rows, a larger epsilon, fewer features or tighter feature_bounds; with many features "
            "algorithm='srgd' may do better (BENCHMARKS.md, \"Where auto runs Accelerated-DP-SRGD\")"
        )

    def _warn_if_diverging(self) -> None:
        """Warn when the median loss of the last quarter of the steps is over twice the first step's, the
        loss of the initial model (operator only: computed from the rows, never released)."""
        losses = self.training_loss_
        if losses.size < 4:
            return
        initial, last = float(losses[0]), float(np.median(losses[-(losses.size // 4) :]))
        if not np.isfinite(last) or last > 2.0 * initial:
            rate = self.learning_rate if self.learning_rate is not None else self._stable_learning_rate()
            step = (
                "the step sizes of Accelerated-DP-SRGD assume that scale"
                if self.algorithm_ == "srgd"
                else f"or lower learning_rate (now {rate:.4g})"
            )
            _warn(
                f"the training loss rose from {initial:.4g} (initial model) to {last:.4g} (median of the last quarter of "
                "the steps): the fit is diverging (operator-only signal, not DP). Give public feature_bounds / "
                f"label_bounds (tighter than the private estimates), {step}"
            )
