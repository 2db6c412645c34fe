"""The declaration of a model kind (``ModelKind``) and the registry of the declared kinds, with what every
kind shares: its label contract, the held-out metric beside its baseline, the prediction output and the
training defaults it may tune. The concrete kinds (this package's other modules) import this module and
``register`` themselves; ``dpstream.models.kinds`` imports each of them, so every declared kind is
registered once the package is imported."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Task",
    "LabelContract",
    "TrainingDefaults",
    "SmallBudgetChoice",
    "ModelKind",
    "register",
    "model_kind",
    "kind_names",
    "training_defaults",
    "summarise",
]


class Task(enum.Enum):
    REGRESSION = "regression"
    CLASSIFICATION = "classification"


@dataclass(frozen=True)
class LabelContract:
    """The label values a lake may hold for a model: any finite number (regression, ``classes`` None), or
    the positions 0..K−1 of the public class list ``classes`` (two classes may also be coded −1/+1, the
    positive class second). ``dpstream convert --label-classes`` writes positions."""

    classes: tuple[str, ...] | None = None
    num_classes: int | None = None  # K when the lake holds class codes without names (binary: 2)

    @property
    def size(self) -> int | None:
        return len(self.classes) if self.classes is not None else self.num_classes

    def allowed(self) -> tuple[frozenset[float], ...]:
        """The public label sets one of which must hold every label value (empty: any number)."""
        if self.size is None:
            return ()
        positions = frozenset(float(k) for k in range(self.size))
        return (positions, frozenset({-1.0, 1.0})) if self.size == 2 else (positions,)

    def describe(self) -> str:
        if self.size is None:
            return "a continuous label"
        names = f" ({', '.join(self.classes)})" if self.classes is not None else ""
        if self.size == 2:
            return f"two classes{names} coded {{0, 1}} or {{-1, +1}}"
        return f"{self.size} classes{names} coded as their positions 0..{self.size - 1}"


def _regression_metrics(outputs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    baseline = float(np.sqrt(np.mean((y - np.mean(y)) ** 2)))
    return {
        "held-out RMSE (non-private, operator only)": float(np.sqrt(np.mean((outputs - y) ** 2))),
        "held-out RMSE of the label mean (baseline)": baseline,
        "held-out rows": float(len(y)),
    }


def class_positions(y: np.ndarray, num_classes: int) -> np.ndarray:
    """The class position of each label: −1/+1 codes of two classes are read as 0/1."""
    y = np.asarray(y, dtype=np.float64)
    return (y > 0).astype(np.int64) if num_classes == 2 else y.astype(np.int64)


def _classification_metrics(outputs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    num_classes = 2 if outputs.ndim == 1 else outputs.shape[1]
    positions = class_positions(y, num_classes)
    predicted = (outputs > 0).astype(np.int64) if outputs.ndim == 1 else np.argmax(outputs, axis=1)
    counts = np.bincount(positions, minlength=num_classes)
    return {
        "held-out accuracy (non-private, operator only)": float(np.mean(predicted == positions)),
        "held-out accuracy of the majority class (baseline)": float(counts.max() / max(1, len(positions))),
        "held-out classes predicted": float(np.unique(predicted).size),
        "held-out rows": float(len(y)),
    }


# A regression on a preprocessed lake (dpstream.flows.assembly.evaluation): the share of held-out labels
# the preprocessing clipped, their raw values strictly outside the label's public bounds (the RMSE is
# against the raw values, in the label's units) ...
CLIPPED_LABELS = "held-out labels clipped by the preprocessing (share; scored against their raw values)"
# ... or, where the shuffle kept no raw labels, the share that sits at a bound, clipped there or equal to
# it (the RMSE is then against the labels as the lake holds them). Runs before raw labels wrote this key.
AT_BOUNDS_LABELS = "held-out labels at the conversion's bounds (share)"


def summarise(metrics: Mapping[str, float]) -> str:
    """One line: the held-out metric beside its baseline (``ModelKind.evaluate``'s keys)."""
    rows = int(metrics.get("held-out rows", 0))
    for metric, baseline, what in (
        (
            "held-out accuracy (non-private, operator only)",
            "held-out accuracy of the majority class (baseline)",
            "the majority class",
        ),
        (
            "held-out RMSE (non-private, operator only)",
            "held-out RMSE of the label mean (baseline)",
            "the label mean",
        ),
    ):
        if metric in metrics:
            name = metric.split(" (")[0]
            against = f" against {metrics[baseline]:.6g} for {what}" if baseline in metrics else ""
            line = f"{name} {metrics[metric]:.6g}{against} on {rows:,} rows (non-private, operator only)"
            line += _label_bounds_note(metrics)
            if metrics.get("held-out classes predicted") == 1.0:
                line += (
                    "; warning: the model predicts one class for every held-out row, no better than the majority "
                    "class: the noise outweighs the data at this N, epsilon and number of features"
                )
            elif baseline in metrics and _no_better(metric, metrics[metric], metrics[baseline]):
                line += (
                    f"; warning: no better than {what} on these rows: this model adds nothing over the constant "
                    "predictor (more rows, a larger epsilon or fewer features help; with few rows per step, "
                    "DP-AMBSSGD and small-batch DP-SGD take too few or too noisy steps, where AdaSSP, the "
                    "default, does not)"
                )
            return line
    return ", ".join(f"{name}: {value:.6g}" for name, value in metrics.items())


WIDER_RANGE = "a wider public range keeps more: preprocess.bounds in the config, or convert --bounds"


def _label_bounds_note(metrics: Mapping[str, float]) -> str:
    """What the label's public bounds did to the held-out labels an RMSE is against: the share clipped
    (the RMSE is against their raw values), or, without raw labels, the share at a bound; nothing under 1 %."""
    clipped = metrics.get(CLIPPED_LABELS, 0.0)
    if clipped >= 0.01:
        return (
            f"; {clipped:.1%} of the held-out labels lie beyond the preprocessing's label bounds and were clipped "
            "for training: both RMSEs are against their raw values, which a model trained on clipped labels "
            f"does not reach ({WIDER_RANGE})"
        )
    at_bounds = metrics.get(AT_BOUNDS_LABELS, 0.0)
    if at_bounds >= 0.01:
        return (
            f"; {at_bounds:.1%} of the held-out labels sit at the preprocessing's label bounds, clipped there or "
            "equal to a bound: this shuffle keeps no raw labels to tell them apart, so both RMSEs are against the "
            "labels as the lake holds them (shuffle again with --reshuffle, after converting again for a lake "
            f"`dpstream convert` wrote before it kept them, to score against the raw labels; {WIDER_RANGE})"
        )
    return ""


def _no_better(metric: str, value: float, baseline: float) -> bool:
    """Whether a held-out accuracy is at most the majority class's, or an RMSE at least the label mean's."""
    return value <= baseline if "accuracy" in metric else value >= baseline


def probabilities(outputs: np.ndarray) -> np.ndarray:
    """(rows, K) class probabilities from a classifier's margins: σ for one margin, softmax for K."""
    from scipy.special import expit, softmax

    if outputs.ndim == 1:
        positive = expit(outputs)
        return np.column_stack([1.0 - positive, positive])
    return softmax(outputs, axis=1)


@dataclass(frozen=True)
class SmallBudgetChoice:
    """Where "auto" runs ``algorithm`` instead of AdaSSP: row-level DP over at least ``min_rows`` rows and
    ``min_inputs`` model inputs (features and the intercept), at ε ≤ ``max_epsilon`` (the fit's whole
    budget) or, with ``any_epsilon_whitened``, at any ε where the estimators' private preconditioner
    whitens its rows (``dpstream.preconditioner.worth_releasing``), all public. AdaSSP's noisy XᵀX
    grows with d² and its private ridge with it; an iterative algorithm's noise is a d-vector. Measured,
    not derived: the crossover figures are in BENCHMARKS.md ("Where auto runs Accelerated-DP-SRGD")."""

    algorithm: str
    max_epsilon: float
    min_rows: int
    min_inputs: int
    any_epsilon_whitened: bool = False


@dataclass(frozen=True)
class TrainingDefaults:
    """The training settings a kind may tune, at their defaults: the one statement of each. The builder
    (``dpstream.algorithms.builder``) resolves a request's None to them; the pipeline config leaves them
    None and the estimators' signatures read them, so a ``[model]`` section and the estimator of a kind
    train alike. The field defaults are the generic ones, for inputs on the public scale [−1, 1]."""

    learning_rate: float | None = None  # None: the stable step 1/(L·R²) (``dpstream.algorithms.choice``)
    clip_norm: float = 1.0  # per-example gradient clip norm (DP-SGD, Accelerated-DP-SRGD)
    noise: str = "independent"  # DP-SGD's increment noise process: "independent", "lambda" or "nu"
    small_budget: SmallBudgetChoice | None = None  # where "auto" leaves AdaSSP for another algorithm


@dataclass(frozen=True)
class ModelKind:
    name: str
    task: Task
    description: str
    settings: tuple[str, ...]  # the [model] keys the kind reads besides kind, backend and classes
    build_model: Callable[..., Any]  # (backend, num_classes, **settings) -> a dpstream.models model
    max_classes: int | None = None  # classification: the most classes it takes (None: any)
    algorithms: tuple[str, ...] | None = None  # the algorithms it trains with (None: every one)
    training: TrainingDefaults = TrainingDefaults()  # its defaults of the settings a kind may tune
    # Its parameters hold the constant predictor (a linear model: weights 0 and an intercept; the KAN:
    # ``KANModel.constant_margin_params``): a run on a lake can then release the constant where it beats the
    # model (``dpstream.guarded_run``, ``dpstream.release_guard.constant_params``).
    holds_constant: bool = False

    @property
    def classifies(self) -> bool:
        return self.task is Task.CLASSIFICATION

    def build(self, backend: str = "numpy", classes: Sequence[str] | None = None, **settings: Any) -> Any:
        """The model, from a config's [model] section or a model.json's (settings of other kinds ignored)."""
        chosen = {name: settings[name] for name in self.settings if name in settings}
        for name, value in chosen.items():
            if isinstance(value, list):
                chosen[name] = tuple(value)  # JSON lists
        num_classes = len(classes) if classes is not None else (2 if self.classifies else None)
        self.check_classes(num_classes)
        return self.build_model(backend=backend, num_classes=num_classes, **chosen)

    def check_classes(self, num_classes: int | None) -> None:
        if not self.classifies:
            if num_classes is not None:
                raise ValueError(
                    f"model.kind = {self.name!r} is a regression; model.classes is for a classifier "
                    "(kind = 'logistic'): remove it or change the kind"
                )
            return
        if num_classes is None or num_classes < 2:
            raise ValueError(f"model.kind = {self.name!r} needs at least 2 classes, got {num_classes}")
        if self.max_classes is not None and num_classes > self.max_classes:
            raise ValueError(
                f"model.kind = {self.name!r} takes at most {self.max_classes} classes, got {num_classes}; "
                "use kind = 'logistic' for more"
            )

    def label_contract(self, classes: Sequence[str] | None = None) -> LabelContract:
        if not self.classifies:
            return LabelContract()
        return LabelContract(tuple(classes) if classes is not None else None, None if classes else 2)

    def evaluate(self, outputs: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """The held-out metric beside its baseline (non-private, operator only) from the model's outputs."""
        return _classification_metrics(outputs, y) if self.classifies else _regression_metrics(outputs, y)

    def prediction_columns(self, classes: Sequence[str] | None) -> list[str]:
        if not self.classifies:
            return ["prediction"]
        if classes is None:
            return ["prediction", "probability"]
        return ["prediction", *(f"probability_{name}" for name in classes)]

    def clip_outputs(self, outputs: np.ndarray, label_range: tuple[float, float] | None) -> np.ndarray:
        """A regression's outputs within ``label_range``, the range public preprocessing clipped its labels
        to on the lake's scale (None: a label kept as stored, not clipped): no label it learned from
        lies beyond, so no squared error grows by the clip, and the release guard judged the model so
        (``dpstream.release_guard``). A classifier's margins as they are."""
        if self.classifies or label_range is None:
            return outputs
        return np.clip(outputs, *label_range)

    def predictions(
        self,
        outputs: np.ndarray,
        classes: Sequence[str] | None,
        label_map: tuple[float, float] = (1.0, 0.0),
        label_range: tuple[float, float] | None = None,
    ) -> dict[str, np.ndarray]:
        """The prediction output: the label in its units (regression); the class and its probabilities —
        the class position 0/1 and P(class 1) for a lake without a class list, else the class in its
        original spelling and one ``probability_<class>`` column per class."""
        if not self.classifies:
            scale, offset = label_map
            return {"prediction": self.clip_outputs(outputs, label_range) * scale + offset}
        shares = probabilities(outputs)
        if classes is None:
            return {"prediction": np.argmax(shares, axis=1).astype(np.int64), "probability": shares[:, 1]}
        names = np.asarray(list(classes), dtype=object)
        return {
            "prediction": names[np.argmax(shares, axis=1)],
            **{f"probability_{name}": shares[:, k] for k, name in enumerate(classes)},
        }


_KINDS: dict[str, ModelKind] = {}


def register(kind: ModelKind) -> ModelKind:
    if kind.name in _KINDS:
        raise ValueError(f"model kind {kind.name!r} is declared twice")
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> tuple[str, ...]:
    return tuple(_KINDS)


def model_kind(name: Any) -> ModelKind:
    """The declared kind called ``name``; a ``ValueError`` naming the declared kinds otherwise."""
    if not isinstance(name, str) or name not in _KINDS:
        raise ValueError(f"unknown model kind {name!r}; expected one of {', '.join(map(repr, _KINDS))}")
    return _KINDS[name]


def training_defaults(model: Any) -> TrainingDefaults:
    """The training defaults of the kind ``model`` belongs to (by its ``name``, the kind recorded in
    model.json); the generic ones for a model of no declared kind (the ``GLM`` base)."""
    kind = _KINDS.get(getattr(model, "name", None))
    return kind.training if kind is not None else TrainingDefaults()
