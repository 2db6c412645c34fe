"""What the GLM estimators add around the algorithms: the scale of the data and the fit's warnings.

``PublicScale`` clips every block into its bounds and maps it onto [−1, 1] (``dpstream.scaling``). The
bounds are public pairs where the user gives them (``feature_bounds``, ``label_bounds``); otherwise, by
default, they are estimated with DP inside the fit's own (ε, δ) (``dpstream.bounds``: two rounds of
noisy histograms over every row, a share s of μ² from ``bounds_share``, the rest for training; the two
compose to the requested guarantee). ``FitWarnings`` says when a fit did not learn: AdaSSP's private
ridge above N (a DP output) and a diverging training loss (operator only). Both are mixins of
``dpstream.estimators._DPGLMEstimator`` and read its parameters.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import is_regressor

from dpstream.bounds import SHARE_RANGE, PrivateBounds, TooFewRows, bounds_share
from dpstream.noise import NoiseKey
from dpstream.privacy import PrivacyEvent, compose_mu, epsilon_for_delta, event_mu
from dpstream.scaling import PublicBounds

__all__ = ["PublicScale", "FitWarnings", "BoundsRelease", "is_dask"]


def is_dask(obj: Any) -> bool:
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "to_delayed")


@dataclass(frozen=True)
class BoundsRelease:
    """What a fit's private bounds spent: the share of μ², their event, and the note for the report."""

    share: float
    event: PrivacyEvent
    note: str

    def combine(self, report: Any, delta: float) -> Any:
        """The training run's report extended to the whole fit: the bounds and the training compose."""
        mu = compose_mu(event_mu(self.event), report.mu)
        return dataclasses.replace(
            report,
            epsilon=epsilon_for_delta(delta, mu),
            mu=mu,
            events=f"composition of [{self.event.describe()}; {report.events}]",
            notes=report.notes + (self.note,),
        )


class PublicScale:
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
        if self.label_bounds is not None and not is_regressor(self):
            raise ValueError(
                "label_bounds applies to regression; a classifier's labels are its classes (leave label_bounds=None)"
            )
        symmetric = self._symmetric_map()
        self.feature_bounds_ = (
            None
            if _estimated(self.feature_bounds)
            else PublicBounds.parse(self.feature_bounds, self.n_features_in_, "feature_bounds", symmetric)
        )
        self.label_bounds_ = (
            None
            if _estimated(self.label_bounds) or not is_regressor(self)
            else PublicBounds.parse(self.label_bounds, 1, "label_bounds", symmetric)
        )
        self._estimate_features = self.feature_bounds_ is None and self._estimates_feature_bounds()
        self._estimate_label = self.label_bounds_ is None and is_regressor(self)
        # Values outside the public bounds per feature, in the label, and rows seen (operator only).
        self._outside_public = [np.zeros(self.n_features_in_, dtype=np.int64), 0, 0]

    def _estimates_feature_bounds(self) -> bool:
        """Whether missing feature bounds are estimated (subclasses that map features themselves: no)."""
        return True

    def _symmetric_map(self) -> bool:
        """Map by scale alone, not shift: for a linear model without an intercept to absorb the shift."""
        return not self.fit_intercept

    def _private_bounds(
        self,
        raw_blocks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
        num_rows: int,
        key: NoiseKey,
        mu: float,
    ) -> BoundsRelease | None:
        """Estimate the bounds the user did not give, with a share of the fit's μ² (module docstring); sets
        ``feature_bounds_`` / ``label_bounds_``. ``raw_blocks()`` iterates the rows (X, y) before scaling;
        it is called once per round."""
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
                sum(mechanism.coarse_histogram(columns(X, y)) for X, y in raw_blocks()), key, tuple(names)
            )
        except TooFewRows as error:
            # The fewest rows with which any column could be bounded: one bin holding τ + 2σ at the largest share.
            least = PrivateBounds(math.sqrt(max(SHARE_RANGE)) * mu, self.relation).minimum_rows(len(names))
            given = "feature_bounds=(low, high)" + (
                " and label_bounds=(low, high)" if self._estimate_label else ""
            )
            raise ValueError(
                f"too few rows for private bounds: n_samples={num_rows:,} with {len(names)} column(s) without public "
                f"bounds at epsilon={self.epsilon:g}, and no half-decade bin of column {error.column!r} (nor 2 or 3 "
                f"adjacent ones) holds the {error.threshold:.0f} noisy rows the histograms need. A column needs at "
                f"least {least:,} rows inside one half-decade such as (100, 316], more where its values spread over "
                f"several (as {error.column!r} does here). This attempt spent its share of epsilon like any release: "
                f"a retry on the same rows spends it again. Pass {given} from "
                "public knowledge, such as the data's documentation, or use a larger epsilon"
            ) from None
        fine = sum(mechanism.fine_histogram(columns(X, y), low, high) for X, y in raw_blocks())
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
        if is_regressor(self) or is_dask(X):
            return
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
                f"{next(note for note in self.privacy_report_.notes if note.startswith('too few rows'))}. "
                "Use more rows, a larger epsilon or fewer features"
            )

    def _warn_if_ridge_dominates(self, curvature: float | None) -> None:
        """AdaSSP's λ above the data's mean curvature tr(XᵀX)/d (both DP outputs of the run, so this costs
        no privacy): the noise forced a ridge that outweighs the data, and the model is close to the
        constant predictor (the noisy label mean, or the majority class)."""
        if self.ridge_ is None or curvature is None or self.ridge_ <= curvature:
            return
        note = (
            f"AdaSSP's private ridge λ = {self.ridge_:.4g} exceeds the data's mean curvature tr(XᵀX)/d = {curvature:.4g}: "
            "at this N, ε, number of features and feature spread the noise outweighs the data, and the model may be "
            "little better than the constant predictor (the label mean or the majority class)"
        )
        self.privacy_report_ = dataclasses.replace(
            self.privacy_report_, notes=self.privacy_report_.notes + (note,)
        )
        _warn(
            f"{note}. Use more rows, a larger epsilon, fewer features, tighter feature_bounds, or algorithm='srgd'"
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
