"""Which algorithm and model pairs train under the user privacy unit, read from the algorithms'
declarations (``AlgorithmDeclaration.user_level``), and the refusal that names them.

A pair trains under the user unit when every release combines a person's rows into one contribution
with a row's bound (``dpstream.models.users``): an algorithm declared ``UserLevel(any_model=True)``
combines them in its own statistics (AdaSSP's weights); one declared ``UserLevel()`` relies on the
model combining a person's gradient (``combines_user_gradients``: the linear and logistic models and
the KAN, ``dpstream.models.user_gradients``); one declared without ``user_level`` does not train under
it. The check reads public settings only, so a refusal comes before any row is read.
"""

from __future__ import annotations

from typing import Any

from dpstream.algorithms.choice import SSP_MAX_DIM
from dpstream.algorithms.registry import AlgorithmDeclaration, declarations

__all__ = ["check_user_level", "user_level_algorithms", "user_level_unsupported"]


def user_level_algorithms() -> tuple[str, ...]:
    """The declared algorithms that train under the user unit (on some model)."""
    return tuple(declaration.name for declaration in declarations() if declaration.user_level is not None)


def user_level_unsupported() -> str:
    """The refusal of a user-level run, naming what trains under the user unit and what does not."""
    supported = [declaration for declaration in declarations() if declaration.user_level is not None]
    any_model = [_named(d, "algorithm ", "any model") for d in supported if d.user_level.any_model]
    gradients = [_named(d, "", d.user_level.note) for d in supported if not d.user_level.any_model]
    without = [declaration.display_name for declaration in declarations() if declaration.user_level is None]
    ways = [_listed(any_model)] if any_model else []
    if gradients:
        ways.append(
            f"with {_listed(gradients)} on the linear and logistic models and the KAN, whose gradients combine "
            "a person's rows into one clipped contribution"
        )
    return (
        f"user-level DP (groups / the user privacy unit) trains with {', or '.join(ways)}; "
        f"{_listed([*without, 'the multi-class model'])} do not combine them yet: use one of those (the "
        f"default 'auto' picks AdaSSP up to {SSP_MAX_DIM} inputs)"
    )


def check_user_level(algorithm: str, model: Any) -> None:
    """Refuse, from public settings, a user-level run whose algorithm or model cannot combine a person's
    rows into one contribution (``user_level_unsupported``), or whose model computes on a GPU (a person's
    rows are combined on the NumPy backend)."""
    support = next((d.user_level for d in declarations() if d.name == algorithm), None)
    if support is None or (not support.any_model and not getattr(model, "combines_user_gradients", False)):
        raise ValueError(user_level_unsupported())
    backend = getattr(model, "backend", "numpy")
    if backend != "numpy":
        raise ValueError(
            f"user-level DP combines a person's rows on the NumPy backend; the model's backend is {backend!r}: set "
            "[model] backend = \"numpy\" in a pipeline config (backend='numpy' for an estimator)"
        )


def _named(declaration: AlgorithmDeclaration, prefix: str, note: str) -> str:
    """'DP-SGD ('dpsgd', any noise)'."""
    return f"{declaration.display_name} ({prefix}{declaration.name!r}{', ' + note if note else ''})"


def _listed(parts: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
