"""Which algorithm "auto" runs, and the step size that cannot diverge: shared by the estimators and the flows.

``choose_algorithm``: AdaSSP (``"ssp"``) when the model has least-squares moments (linear and logistic
GLMs) and at most ``SSP_MAX_DIM`` parameters: one release of noisy XᵀX and Xᵀy, exact at any N and with
no step size to tune; DP-SGD otherwise (the KAN, or d where the d² statistics per block cost more than
the d-vector ones). A step hyperparameter named by the user selects the algorithm it belongs to. A model
kind may name where it does better (``TrainingDefaults.small_budget``: the linear regression runs
Accelerated-DP-SRGD at the row level over N ≥ 20,000 rows and at least 20 inputs, at ε ≤ 1 or wherever
the estimators' private preconditioner whitens its rows), decided from public quantities only: the
budget's ε, the row count N, the inputs d and the privacy unit.

``stable_learning_rate``: 1/(L·R²). For a loss φ(⟨x, w⟩, y) with φ'' ≤ L and rows ‖x‖ ≤ R the Hessian of
the mean loss has norm ≤ L·R², so gradient steps with η ≤ 1/(L·R²) contract (η·λ_max ≤ 1 < 2) on every
dataset with that row bound. On the public scale (features in [−1, 1], or [0, 1], plus a constant
intercept feature) R² is the number of inputs.
"""

from __future__ import annotations

from typing import Any

from dpstream.algorithms.registry import AUTO, declarations, declared
from dpstream.models.kinds.base import training_defaults

__all__ = ["SSP_MAX_DIM", "choose_algorithm", "stable_learning_rate"]

SSP_MAX_DIM = 256


def choose_algorithm(
    requested: str,
    model: Any,
    num_params: int,
    *,
    num_steps: Any = None,
    batch_size: Any = None,
    learning_rate: Any = None,
    num_rows: int | None = None,
    epsilon: float | None = None,
    user_level: bool = False,
    given: frozenset[str] = frozenset(),
    whitened: bool = False,
) -> str:
    """The algorithm to run for ``requested`` (``"auto"`` or a declared one: ``registry.algorithm_names``) on
    ``model`` with ``num_params`` parameters. ``num_rows``, ``epsilon`` (the whole budget's) and
    ``user_level`` decide the model kind's small-budget choice, which needs the first two; ``given`` (the
    settings the user named) keeps AdaSSP where they are its own (``row_norm_bound``, ``label_bound``);
    ``whitened``: the caller's private preconditioner would whiten the rows of an algorithm that declares a
    ``whitening_spread`` (``SmallBudgetChoice.any_epsilon_whitened``)."""
    if requested != AUTO:
        declared(requested)  # an unknown name is refused, naming the declared ones
    moments = getattr(model, "supports_moments", False)
    if requested == "ssp":
        given = [
            name
            for name, value in (
                ("num_steps", num_steps),
                ("batch_size", batch_size),
                ("learning_rate", learning_rate),
            )
            if value is not None
        ]
        if given:
            iterative = sorted(
                d.name for d in declarations() if {"num_steps", "batch_size", "learning_rate"} & set(d.uses)
            )
            raise ValueError(
                f"algorithm='ssp' has no steps; {', '.join(given)} applies to the iterative algorithms "
                f"({', '.join(map(repr, iterative))})"
            )
        if not moments:
            raise ValueError(
                "algorithm='ssp' (sufficient statistics) is for linear and logistic models; use 'dpsgd'"
            )
    if requested != "auto":
        return requested
    if num_steps is not None:
        return "ambssgd"
    if batch_size is not None or learning_rate is not None:
        return "dpsgd"
    if not (moments and num_params <= SSP_MAX_DIM):
        return "dpsgd"
    small = training_defaults(model).small_budget
    if (
        small is not None
        and not user_level
        and not given & set(declared("ssp").uses) - set(declared(small.algorithm).uses)
        and num_rows is not None
        and epsilon is not None
        and num_rows >= small.min_rows
        and num_params >= small.min_inputs
        and (
            epsilon <= small.max_epsilon
            or (small.any_epsilon_whitened and whitened and declared(small.algorithm).whitening_spread)
        )
    ):
        return small.algorithm
    return "ssp"


def stable_learning_rate(model: Any, row_norm_squared: float) -> float:
    """1/(L·R²) with L = ``model.curvature`` (1 for the squared loss, 1/4 for the logistic loss)."""
    return 1.0 / (model.curvature * row_norm_squared)
