"""What the GLM estimators add around the algorithms: the public scale and the fit's warnings.

``PublicScale`` turns ``feature_bounds`` / ``label_bounds`` (public pairs, or ``"private"``) into the
clip-and-map of every block onto [−1, 1] (``dpstream.scaling``), estimating private bounds on a
disjoint prefix of the rows where asked (``dpstream.bounds``). ``FitWarnings`` says when a fit did not
learn: AdaSSP's private ridge above N (a DP output) and a diverging training loss (operator only).
Both are mixins of ``dpstream.estimators._DPGLMEstimator`` and read its parameters.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
from sklearn.base import is_regressor

from dpstream.bounds import PRIVATE_BOUNDS_FRACTION, PrivateBounds
from dpstream.noise import NoiseKey
from dpstream.scaling import PublicBounds, scale_warning

__all__ = ["PublicScale", "FitWarnings", "is_dask"]


def is_dask(obj: Any) -> bool:
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "to_delayed")


class PublicScale:
    def _to_public_scale(self, block: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Clip and map onto [−1, 1] with the declared bounds; warn (once per fit) far outside the scale."""
        if self.feature_bounds_ is not None:
            block = self.feature_bounds_.to_unit(block)
        elif not self._warned_scale and (message := scale_warning(block, "X", "feature_bounds")):
            self._warned_scale = True
            warnings.warn(message, UserWarning, stacklevel=4)
        if self.label_bounds_ is not None:
            labels = self.label_bounds_.to_unit(labels)
        elif (
            is_regressor(self)
            and not self._warned_label
            and (message := scale_warning(labels, "y", "label_bounds"))
        ):
            self._warned_label = True
            warnings.warn(message, UserWarning, stacklevel=4)
        return block, labels

    def _private_bounds(self, X: Any, y: Any, num_rows: int, key: NoiseKey) -> tuple[Any, Any, int, str]:
        """``"private"`` bounds from noisy histograms of the first rows, which are then not trained on
        (``dpstream.bounds``: disjoint rows, parallel composition, the run's (ε, δ) unchanged)."""
        wanted = [name for name in ("feature_bounds", "label_bounds") if isinstance(getattr(self, name), str)]
        if not wanted:
            return X, y, num_rows, ""
        if is_dask(X):
            raise ValueError(
                f"{wanted[0]}='private' needs in-memory inputs (NumPy or pandas); for a Dask collection, pass "
                "public bounds, or estimate them with dpstream.bounds.PrivateBounds on a disjoint part of the data"
            )
        prefix = max(1, int(PRIVATE_BOUNDS_FRACTION * num_rows))
        if num_rows - prefix < 2:
            raise ValueError(
                f"{wanted[0]}='private' needs at least 3 rows (10 % for the bounds), got n_samples={num_rows}"
            )
        columns = [np.asarray(X[:prefix], dtype=np.float64)] if "feature_bounds" in wanted else []
        if "label_bounds" in wanted:
            columns.append(np.asarray(y[:prefix], dtype=np.float64).reshape(-1, 1))
        mechanism = PrivateBounds(self.epsilon, self.delta, self.relation)
        table = np.hstack(columns)
        low, high = mechanism.release(mechanism.histogram(table), key)
        if "feature_bounds" in wanted:
            self.feature_bounds_ = PublicBounds(low[: self.n_features_in_], high[: self.n_features_in_])
        if "label_bounds" in wanted:
            self.label_bounds_ = PublicBounds(low[-1:], high[-1:])
        event = mechanism.event(table.shape[1])
        note = (
            f"private bounds ({', '.join(wanted)}): noisy per-column histograms of the first {prefix:,} rows, "
            f"{event.mu:.6g}-GDP ({event.describe()}); those rows are not trained on, so by parallel composition the "
            "guarantee above covers both releases"
        )
        return X[prefix:], y[prefix:], num_rows - prefix, note

    def _parse_bounds(self) -> None:
        """Validate ``feature_bounds`` / ``label_bounds``; public pairs are parsed here, "private" ones are
        estimated by ``_private_bounds`` once the rows are known."""
        if not self.fit_intercept and (self.feature_bounds is not None or isinstance(self.label_bounds, str)):
            raise ValueError(
                "feature_bounds needs fit_intercept=True: mapping features onto [-1, 1] shifts them, "
                "and the intercept absorbs the shift"
            )
        if self.label_bounds is not None and not is_regressor(self):
            raise ValueError(
                "label_bounds applies to regression; a classifier's labels are its classes (leave label_bounds=None)"
            )
        self.feature_bounds_ = (
            None
            if isinstance(self.feature_bounds, str)
            else PublicBounds.parse(self.feature_bounds, self.n_features_in_, "feature_bounds")
        )
        self.label_bounds_ = (
            None
            if isinstance(self.label_bounds, str)
            else PublicBounds.parse(self.label_bounds, 1, "label_bounds")
        )
        self._warned_scale = self._warned_label = False


class FitWarnings:
    def _warn_if_ridge_dominates(self, curvature: float | None) -> None:
        """AdaSSP's λ above the data's mean curvature tr(XᵀX)/d (both DP outputs of the run, so this costs
        no privacy): the noise forced a ridge that outweighs the data, and the model is close to the
        constant predictor (the noisy label mean, or the majority class)."""
        if self.ridge_ is None or curvature is None or self.ridge_ <= curvature:
            return
        note = (
            f"AdaSSP's private ridge λ = {self.ridge_:.4g} exceeds the data's mean curvature tr(XᵀX)/d = {curvature:.4g}: "
            "at this N, ε, number of features and feature spread the noise outweighs the data, and the model is "
            "close to the constant predictor (the label mean or the majority class)"
        )
        self.privacy_report_ = dataclasses.replace(
            self.privacy_report_, notes=self.privacy_report_.notes + (note,)
        )
        warnings.warn(
            f"{note}. Use more rows, a larger epsilon, fewer features, tighter feature_bounds, or algorithm='srgd'",
            UserWarning,
            stacklevel=3,
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
            warnings.warn(
                f"the training loss rose from {initial:.4g} (initial model) to {last:.4g} (median of the last quarter of "
                "the steps): the fit is diverging (operator-only signal, not DP). Put the data on the public scale "
                f"[-1, 1] with feature_bounds / label_bounds, {step}",
                UserWarning,
                stacklevel=3,
            )
