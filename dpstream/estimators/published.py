"""A published model (model.json, ``dpstream.export.ModelDocument``) as a fitted scikit-learn estimator.

The estimator gets the fitted attributes a fit would have set: ``coef_``/``intercept_`` in the label's
units for the GLMs (a K-class model's W of shape (features, K) becomes ``coef_`` of shape (K, features)),
the KAN's weights and second layer, ``classes_`` for a classifier, ``feature_names_in_`` so a DataFrame
with reordered columns is refused by name, and ``privacy_report_``. The lake's features are read as
stored: no feature bounds are applied again. Nothing here is a release: the parameters were released
when the model was published.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from dpstream.algorithms.base import PrivacyReport
from dpstream.estimators.base import SinglePassEstimator
from dpstream.estimators.glm import DPLinearRegression, DPLogisticRegression
from dpstream.estimators.kan import DPKANClassifier
from dpstream.models import KANModel
from dpstream.scaling import PublicBounds

__all__ = ["PublishedModel", "fitted_estimator"]


class PublishedModel(Protocol):
    """What a fitted estimator is built from (``dpstream.export.ModelDocument`` provides it)."""

    @property
    def features(self) -> Sequence[str]: ...

    @property
    def params(self) -> np.ndarray: ...

    @property
    def privacy(self) -> dict[str, Any]: ...

    @property
    def is_classifier(self) -> bool: ...

    @property
    def classes(self) -> list[str] | None: ...

    def build(self) -> Any: ...

    def label_map(self) -> tuple[float, float]: ...


def fitted_estimator(document: PublishedModel) -> SinglePassEstimator:
    """A fitted ``DPLinearRegression``, ``DPLogisticRegression`` or ``DPKANClassifier`` holding
    ``document``'s parameters."""
    names = np.asarray(document.features, dtype=object)
    model = document.build()
    if isinstance(model, KANModel):
        estimator: SinglePassEstimator = DPKANClassifier(
            num_hidden=model.num_hidden,
            grid_size=model.grid_size,
            activation=model.activation,
            feature_low=model.feature_low,
            feature_high=model.feature_high,
            input_map=model.input_map,
            random_state=None if model.seed == KANModel.seed else model.seed,
        )
        estimator.model_ = model
        estimator.feature_bounds_ = None  # the lake's features are read as stored: the KAN maps them
        estimator.weights_ = document.params.reshape(model.num_hidden, -1)
        estimator.second_layer_ = model.second_layer()
    else:
        estimator = (DPLogisticRegression if document.is_classifier else DPLinearRegression)(
            fit_intercept=False
        )
        scale, offset = (1.0, 0.0) if document.is_classifier else document.label_map()
        outputs = model.outputs
        if outputs > 1:  # K classes: W is (features, K), coef_ (K, features)
            estimator.coef_ = document.params.reshape(len(names), outputs).T.copy()
            estimator.intercept_ = np.zeros(outputs)
        else:
            estimator.coef_, estimator.intercept_ = document.params * scale, offset
        estimator.feature_bounds_, estimator.label_bounds_ = None, _label_bounds(document, scale, offset)
    if document.is_classifier:
        estimator.classes_ = np.array(document.classes if document.classes is not None else [0, 1])
    estimator.n_features_in_, estimator.feature_names_in_ = len(names), names
    if document.privacy:
        estimator.privacy_report_ = PrivacyReport(**document.privacy)
    return estimator


def _label_bounds(document: Any, scale: float, offset: float) -> PublicBounds | None:
    """A regression's label bounds in its units, where a conversion bounded it: ``predict`` keeps within
    them, as ``dpstream predict`` does (``ModelKind.clip_outputs``)."""
    scaled = None if document.is_classifier else document.label_range()
    if scaled is None:
        return None
    low, high = (value * scale + offset for value in scaled)
    return PublicBounds(np.array([low]), np.array([high]))
