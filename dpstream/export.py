"""Published models back into Python: model.json → a scoring function or a fitted estimator.

The train flow publishes ``model.json`` (format ``dpstream-model/1``, written by ``model_document`` here):
plain JSON, no pickle, so reading one runs no code. It holds the model kind and settings, the feature
names in lake order, the label, the parameters, the privacy report and, for a lake written by
``dpstream convert``, the public preprocessing (``dpstream.pipelines.conversion.convert`` record).

The model reads features **as stored in the lake** (already clipped and mapped by the conversion);
``ModelDocument.predict`` returns

the output its kind declares (``dpstream.models.kinds.base.ModelKind.predictions``):

* linear: the prediction in the label's units (the conversion's label bounds undo its mapping onto
  ``scale_range``; without them, on the lake's label scale);
* a classifier with a public class list (``model.classes``): the class in its original spelling and one
  ``probability_<class>`` column per class (rows sum to 1);
* a classifier of a lake coded {0, 1} or {−1, +1} without names: 1 where the margin is positive (the
  training rule "label > 0" is the positive class), else 0, and the probability of class 1 (σ(margin)).

``to_estimator()`` returns the scikit-learn estimator class (``dpstream.estimators.published``) with the fitted attributes set
(``coef_``/``intercept_`` in label units, ``feature_names_in_`` so a DataFrame with reordered columns
is refused by name, ``privacy_report_``), for ``predict``/``score`` like any fitted estimator. Nothing
here is a release: the parameters were released when the model was published.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream.algorithms.base import PrivacyReport
from dpstream.models import build_model, model_kind
from dpstream.privacy import epsilon_for_delta
from dpstream.storage import open_url
from dpstream.validation import check_name

__all__ = ["ModelDocument", "model_document", "read_model", "check_privacy", "MODEL_FORMAT"]

MODEL_FORMAT = "dpstream-model/1"
REQUIRED_KEYS = frozenset(
    {
        "format",
        "run_id",
        "model",
        "features",
        "label",
        "algorithm",
        "lake_fingerprint",
        "preprocessing",
        "params",
        "privacy",
    }
)
# "metrics": written by earlier versions (the non-private evaluation), ignored; "source": the table
# version trained on (a Delta version or an Iceberg snapshot), absent for a Parquet folder.
OPTIONAL_KEYS = frozenset({"metrics", "source", "released"})


def check_privacy(privacy: Any, source: str) -> dict[str, Any]:
    """A model.json's privacy report, checked: the report's fields, finite numbers, and ε equal to the exact
    ε(δ) of its μ (``dpstream.privacy.gdp``), so a report edited by hand is refused."""
    fields = set(PrivacyReport.__dataclass_fields__)
    # Written by earlier versions without them: the row, the only unit then.
    defaults = {"unit": PrivacyReport.unit, "ledger_unit": PrivacyReport.ledger_unit}
    if isinstance(privacy, dict):
        privacy = {**{k: v for k, v in defaults.items() if k not in privacy}, **privacy}
    if not isinstance(privacy, dict) or set(privacy) != fields:
        shown = sorted(set(privacy) ^ fields) if isinstance(privacy, dict) else type(privacy).__name__
        raise ValueError(
            f"{source}: its privacy report is damaged ({shown}); restore the file the run published"
        )
    numbers = {name: privacy[name] for name in ("epsilon", "delta", "mu", "noise_multiplier", "sensitivity")}
    for name, value in numbers.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(
                f"{source}: privacy.{name} is {value!r}, not a finite number; the file is damaged"
            )
    if not 0.0 < numbers["delta"] < 1.0 or numbers["mu"] <= 0:
        raise ValueError(f"{source}: privacy.delta or privacy.mu is out of range; the file is damaged")
    exact = epsilon_for_delta(numbers["delta"], numbers["mu"])
    if not math.isclose(numbers["epsilon"], exact, rel_tol=1e-6, abs_tol=1e-9):
        raise ValueError(
            f"{source}: privacy.epsilon is {numbers['epsilon']:.6g}, but its mu={numbers['mu']:.6g} at "
            f"delta={numbers['delta']:g} gives epsilon={exact:.6g}: the report was edited; restore the file the run "
            "published"
        )
    return dict(privacy)


@dataclass(frozen=True)
class ModelDocument:
    kind: str  # a declared kind (dpstream.models.kinds): "linear", "logistic" or "kan"
    settings: dict[str, Any]  # the model section's other keys (the KAN's shape, a classifier's classes)
    features: tuple[str, ...]
    label: str
    params: np.ndarray
    preprocessing: dict[str, Any] | None
    privacy: dict[str, Any]
    run_id: str
    algorithm: str = ""  # the algorithm that ran (its name, as model.json records it)

    @classmethod
    def from_dict(cls, document: dict[str, Any], source: str = "model.json") -> ModelDocument:
        """The model a model.json holds, checked whole (``ValueError`` naming ``source`` and what is wrong):
        the format, exactly the keys the train flow writes, a valid run id, finite parameters of the right
        count for the model, and a privacy report whose ε is the exact conversion of its μ at its δ (an
        edited ε is refused, not printed)."""
        if not isinstance(document, dict) or document.get("format") != MODEL_FORMAT:
            found = document.get("format") if isinstance(document, dict) else type(document).__name__
            raise ValueError(
                f"{source} is not a dpstream model (format {found!r}, expected {MODEL_FORMAT!r}); pass the "
                "model.json a `dpstream train` run published"
            )
        missing = sorted(REQUIRED_KEYS - set(document))
        unknown = sorted(set(document) - REQUIRED_KEYS - OPTIONAL_KEYS)
        if missing or unknown:
            what = f"missing {', '.join(missing)}" if missing else f"unknown key(s) {', '.join(unknown)}"
            raise ValueError(
                f"{source} is incomplete or damaged ({what}); restore the file the run published"
            )
        try:
            model = dict(document["model"])
            kind = model.pop("kind")
            features = document["features"]
            params = np.asarray(document["params"], dtype=np.float64)
            run_id = check_name("run_id", document["run_id"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{source} is incomplete or damaged ({type(error).__name__}: {error})") from None
        try:
            model_kind(kind)
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None
        if isinstance(features, str):
            raise ValueError(
                f"{source}: the model was trained on the fixed-size-list column {features!r}; scoring reads "
                "named feature columns only"
            )
        document_ = cls(
            kind=kind,
            settings=model,
            features=tuple(features),
            label=str(document.get("label", "")),
            params=params,
            preprocessing=document.get("preprocessing"),
            privacy=check_privacy(document.get("privacy"), source),
            run_id=run_id,
            algorithm=str(document.get("algorithm", "")),
        )
        try:
            expected = document_.build().num_params(len(document_.features))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: its model section is damaged ({error})") from None
        if params.ndim != 1 or params.size != expected or not np.all(np.isfinite(params)):
            raise ValueError(
                f"{source}: {params.size} parameters for a {kind} model of {len(document_.features)} features "
                f"(expected {expected} finite values); the file is damaged"
            )
        return document_

    def build(self) -> Any:
        """The ``dpstream.models`` model the parameters belong to."""
        return build_model(self.kind, **self.settings)

    @property
    def declaration(self) -> Any:
        return model_kind(self.kind)

    @property
    def is_classifier(self) -> bool:
        return self.declaration.classifies

    @property
    def classes(self) -> list[str] | None:
        """A classifier's public class list, in the order of the lake's label codes (None: {0, 1} codes)."""
        return self.settings.get("classes")

    def output_columns(self) -> list[str]:
        return self.declaration.prediction_columns(self.classes)

    def label_range(self) -> tuple[float, float] | None:
        return label_range(self.preprocessing, self.label)

    def label_map(self) -> tuple[float, float]:
        """(scale, offset) taking the lake's label scale to the label's units: identity without a
        conversion record or label bounds."""
        scaled = self.label_range()
        if scaled is None:
            return 1.0, 0.0
        (low, high), (scale_low, scale_high) = self.preprocessing["bounds"][self.label], scaled
        scale = (high - low) / (scale_high - scale_low)
        return scale, low - scale_low * scale

    def margins(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.features):
            raise ValueError(
                f"expected rows of the model's {len(self.features)} features ({', '.join(self.features)}), got "
                f"shape {X.shape}"
            )
        return self.build().predict_margin(X, self.params)

    def predict(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """The kind's prediction columns (``output_columns``) for rows of the lake's features."""
        return self.declaration.predictions(
            self.margins(X), self.classes, self.label_map(), self.label_range()
        )

    def to_estimator(self) -> Any:
        """A fitted ``DPLinearRegression``, ``DPLogisticRegression`` or ``DPKANClassifier``
        (``dpstream.estimators.published``)."""
        from dpstream.estimators.published import fitted_estimator  # scikit-learn loads for this call only

        return fitted_estimator(self)


def label_range(record: dict[str, Any] | None, label: str) -> tuple[float, float] | None:
    """The label's range on the lake's scale where public preprocessing (a conversion record, or
    ``[preprocess]``) clipped it into bounds (its ``scale_range``), else None (a label kept as stored)."""
    record = record or {}
    if not (record.get("bounds") or {}).get(label) or label in (record.get("unscaled") or ()):
        return None
    low, high = record["scale_range"]
    return float(low), float(high)


def model_document(
    *,
    model: dict[str, Any],
    features: Sequence[str] | str,
    label: str,
    run_id: str,
    lake_fingerprint: str,
    algorithm: str,
    params: np.ndarray,
    report: Any,
    preprocessing: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    released: str = "model",
) -> dict[str, Any]:
    """model.json, the document ``ModelDocument.from_dict`` reads back: the parameters with what is needed
    to apply them (the [model] section: kind, settings, a classifier's classes; feature names in order;
    the label; the algorithm that ran; the public preprocessing) and the privacy report. It is the release:
    the non-private evaluation goes to the operator folder, never here.

    The model reads features as stored in the lake. ``preprocessing`` is what ``dpstream convert``
    recorded for a lake it wrote (public bounds, the scale range, imputation constants, category lists,
    the class list): new rows go through the same steps, and a bounded label maps back to its units; None
    for a lake written otherwise. ``source`` is the table version trained on (``SourceVersion.to_json``).
    ``released`` is "model", or "constant" where the release guard published the constant predictor
    (weights 0 and the intercept; ``dpstream.guarded_run``)."""
    return {
        "format": MODEL_FORMAT,
        "run_id": run_id,
        "model": dict(model),
        "features": list(features) if isinstance(features, (list, tuple)) else features,
        "label": label,
        "algorithm": algorithm,
        "lake_fingerprint": lake_fingerprint,
        "preprocessing": preprocessing,
        "params": np.asarray(params).tolist(),
        "privacy": report.to_dict(),
        "released": released,
        **({"source": dict(source)} if source else {}),
    }


def read_model(url: str, storage_options: dict[str, Any] | None = None) -> ModelDocument:
    """The model.json at ``url`` (a file, or a run folder holding one; any fsspec URL)."""
    fs, path = open_url(url, storage_options)
    if fs.isdir(path):
        path = f"{path.rstrip('/')}/model.json"
    if not fs.exists(path):
        raise ValueError(
            f"{url}: no model.json there; pass the file or the run folder `dpstream train` wrote"
        )
    try:
        with fs.open(path, "rb") as handle:
            document = json.loads(handle.read().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{url} is not JSON ({error}); pass the model.json a run published") from None
    return ModelDocument.from_dict(document, source=url)
