"""One place that turns what a user asked for into an algorithm object: the pipeline config, the
flows and the estimators all build through ``build_algorithm``, so their defaults cannot drift apart.

``AlgorithmSpec`` holds the request: the algorithm's name (``"auto"`` or one of
``dpstream.algorithms.registry``), the budget and the hyperparameters. Its field defaults are the one statement of
the generic defaults (the config's ``[algorithm]`` section and the estimators' signatures read them).
``None`` means "the default for this data and model", resolved here:

- ``clip_norm``, ``noise`` and ``learning_rate``: the model's kind's ``TrainingDefaults``
  (``dpstream.models.kinds``: 1.0 and independent noise for the GLMs, the KAN's tuned ones), where the
  learning rate left None there is the stable step 1/(L·R²) of ``choice.stable_learning_rate`` (R² = the
  number of parameters on the public scale);
- ``batch_size`` (DP-SGD): max(64, N/1000) rows, at most N;
- ``row_norm_bound`` (AdaSSP): sqrt(d), the bound of features on the public scale [−1, 1].

``AlgorithmSpec.given`` names the hyperparameters the user set explicitly; one the chosen algorithm
does not use is refused (its declaration's ``uses``), naming those it does use, instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dpstream.algorithms.choice import choose_algorithm, stable_learning_rate
from dpstream.algorithms.registry import algorithm_names, declared
from dpstream.algorithms.user_level import check_user_level
from dpstream.models.kinds.base import training_defaults
from dpstream.noise.registry import declared_noise, noise_declarations, noise_names
from dpstream.preconditioner import whitens_at
from dpstream.privacy import NeighbouringRelation, PrivacyUnit, mu_for_epsilon_delta

__all__ = [
    "AlgorithmSpec",
    "build_algorithm",
    "chosen_algorithm",
    "default_learning_rate",
    "resolve_model_defaults",
]

# Every hyperparameter an algorithm may read: AlgorithmSpec's settings (each declaration's ``uses`` names
# some of them).
HYPERPARAMETERS = frozenset(
    {
        "clip_norm",
        "learning_rate",
        "batch_size",
        "num_steps",
        "stat_bound",
        "noise",
        "correlation",
        "nu",
        "projection_radius",
        "row_norm_bound",
        "label_bound",
    }
)


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str = "auto"
    epsilon: float = 1.0
    delta: float = 1e-6
    relation: str = "replace-one"
    clip_norm: float | None = None  # DP-SGD, SRGD; None: the model kind's
    learning_rate: float | None = None  # DP-SGD, DP-AMBSSGD
    batch_size: int | None = None  # DP-SGD, SRGD
    num_steps: int | None = None  # DP-AMBSSGD
    stat_bound: float = 1e4  # DP-AMBSSGD: public upper bound of the per-example gradient norms
    noise: str | None = None  # DP-SGD: "independent", "lambda" or "nu"; None: the model kind's
    correlation: float = 0.5  # DP-SGD with noise="lambda"
    nu: float = 0.01  # DP-SGD with noise="nu"
    projection_radius: float | None = None  # DP-SGD, SRGD
    row_norm_bound: float | None = None  # AdaSSP
    label_bound: float = 1.0  # AdaSSP
    intercept_index: int | None = None  # AdaSSP: the constant column, left unpenalised
    unit: PrivacyUnit | None = None  # whose data is protected; None: the row under relation
    # The ε "auto" decides by (``choice.choose_algorithm``): the whole budget's where private bounds or a
    # release guard take a share of it first; None: epsilon.
    auto_epsilon: float | None = None
    # Whether "auto" may take the model kind's small-budget choice (``TrainingDefaults.small_budget``): the
    # estimators set it where private bounds map the columns, the scale it was measured on. A run over a
    # lake leaves it False: each iterative step is a round trip to the workers, AdaSSP's is one pass.
    small_budget_eligible: bool = False
    # Whether the caller whitens the rows of an algorithm that declares a ``whitening_spread`` (the
    # estimators' private preconditioner, ``dpstream.preconditioner``), where the release resolves them
    whitens: bool = False
    # A DP bound on λ_max(E[xxᵀ]) of the rows the algorithm reads (the estimators' private preconditioner,
    # ``dpstream.preconditioner``): the default step is then 1/(L·row_curvature); None: R², the inputs.
    row_curvature: float | None = None
    given: frozenset[str] = (
        frozenset()
    )  # hyperparameters set explicitly: refused where the algorithm ignores them
    known: frozenset[str] = HYPERPARAMETERS  # those the caller exposes (an error names only these)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.given) - HYPERPARAMETERS)
        if unknown:
            raise ValueError(
                f"given names {', '.join(unknown)}, which are not hyperparameters; expected some of "
                f"{', '.join(sorted(HYPERPARAMETERS))}"
            )


def default_learning_rate(model: Any, num_params: int, row_curvature: float | None = None) -> float:
    """The step used when none is given: the model kind's (the KAN's fixed step: its curvature has no
    public bound), else stable for the GLMs (``stable_learning_rate``, from their public bound on φ''
    and ``row_curvature``, a DP bound on the rows' λ_max(E[xxᵀ]), or else R²: the inputs)."""
    declared = training_defaults(model).learning_rate
    if declared is not None:
        return declared
    if getattr(model, "curvature", None) is None:  # a model of no declared kind, without a public φ'' bound
        raise ValueError(
            f"{type(model).__name__} states no curvature bound and belongs to no declared model kind, so "
            "there is no default step size; pass learning_rate"
        )
    return stable_learning_rate(model, row_curvature or num_params // model.outputs)


def resolve_model_defaults(spec: AlgorithmSpec, model: Any) -> AlgorithmSpec:
    """``spec`` with the clip norm and noise it leaves None set to the model kind's defaults
    (``dpstream.models.kinds.base.TrainingDefaults``); the learning rate, which also depends on the number of
    parameters, is resolved by ``build_algorithm``."""
    defaults = training_defaults(model)
    return dataclasses.replace(
        spec,
        clip_norm=spec.clip_norm if spec.clip_norm is not None else defaults.clip_norm,
        noise=spec.noise if spec.noise is not None else defaults.noise,
    )


def chosen_algorithm(spec: AlgorithmSpec, model: Any, num_params: int, num_rows: int | None = None) -> str:
    """The algorithm ``spec.name`` resolves to for ``model`` with ``num_params`` parameters trained on
    ``num_rows`` rows ("auto" by the public quantities of ``dpstream.algorithms.choice``), without
    building it."""
    spec = resolve_model_defaults(spec, model)
    return choose_algorithm(
        spec.name,
        model,
        num_params // model.outputs,  # AdaSSP's XᵀX is inputs × inputs whatever K
        num_steps=spec.num_steps,
        batch_size=spec.batch_size,
        learning_rate=spec.learning_rate,
        num_rows=num_rows if spec.small_budget_eligible else None,
        epsilon=spec.auto_epsilon if spec.auto_epsilon is not None else spec.epsilon,
        user_level=spec.unit is not None and spec.unit.is_user,
        given=spec.given,
        whitened=_whitened(spec, num_params // model.outputs, num_rows),
    )


def _whitened(spec: AlgorithmSpec, inputs: int, num_rows: int | None) -> bool:
    """Whether the caller's private preconditioner would whiten these rows (``spec.whitens`` and the
    release, at its share of the whole budget's μ, resolves their covariance): public quantities."""
    if not (spec.whitens and spec.small_budget_eligible and num_rows is not None):
        return False
    epsilon = spec.auto_epsilon if spec.auto_epsilon is not None else spec.epsilon
    mu = mu_for_epsilon_delta(epsilon, spec.delta)
    return whitens_at(inputs, num_rows, mu, NeighbouringRelation.parse(spec.relation))


def build_algorithm(spec: AlgorithmSpec, model: Any, num_rows: int, num_params: int) -> tuple[str, Any]:
    """(the algorithm chosen for ``spec.name``, the algorithm object) for ``model`` with ``num_params`` parameters
    trained on ``num_rows`` rows."""
    spec = resolve_model_defaults(spec, model)
    name = chosen_algorithm(spec, model, num_params, num_rows)
    _refuse_ignored(spec, name)
    if spec.unit is not None and spec.unit.is_user:
        check_user_level(name, model)
    learning_rate = (
        spec.learning_rate
        if spec.learning_rate is not None
        else default_learning_rate(model, num_params, spec.row_curvature)
    )
    return name, declared(name).build(spec, model, num_rows, learning_rate)


def _noise_settings(noise: str | None) -> tuple[set[str], set[str]]:
    """(the settings some declared noise process reads, those the process ``noise`` reads)."""
    read_by_any = {setting for declaration in noise_declarations() for setting in declaration.reads}
    chosen = set(declared_noise(noise).reads) if noise in noise_names() else set()
    return read_by_any, chosen


def _refuse_ignored(spec: AlgorithmSpec, name: str) -> None:
    used = set(declared(name).uses)
    takes_noise = "noise" in used
    if takes_noise:  # a noise process's own settings are used only with that process
        read_by_any, chosen = _noise_settings(spec.noise)
        used -= read_by_any - chosen
    ignored = sorted(set(spec.given) - used)
    if ignored:
        chosen = f"{name!r}" + (' (what "auto" chose)' if spec.name == "auto" else "")
        shown = sorted(used & set(spec.known))
        uses = f"which uses {', '.join(shown)}" if shown else "which has none of these settings"
        users = sorted(
            other for other in algorithm_names() if set(ignored) & set(declared(other).uses) and other != name
        )
        one = len(ignored) == 1
        # correlation and nu belong to a noise process of DP-SGD: the fix is the noise, not another algorithm
        noises = [
            f"noise={' or '.join(readers)} for {setting}"
            for setting in ignored
            if (
                readers := [f'"{n.name}"' for n in noise_declarations() if n.for_dpsgd and setting in n.reads]
            )
        ]
        fixes = (
            [f"name an algorithm that uses {'it' if one else 'them'} ({', '.join(map(repr, users))})"]
            if users
            else []
        )
        fixes += [f"set {', '.join(noises)}"] if takes_noise and noises else []
        raise ValueError(
            f"{', '.join(ignored)} {'is' if one else 'are'} not used by algorithm {chosen}, {uses}; "
            f"remove {'it' if one else 'them'}" + "".join(f", or {fix}" for fix in fixes)
        )
