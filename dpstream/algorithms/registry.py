"""The algorithms, each declared once: its name, the hyperparameters it reads, and how it is built.

An algorithm is one module (its state machine) plus one ``register(AlgorithmDeclaration(...))`` at the
end of that module. Everything that names algorithms reads this registry: the builder builds through
``declared(name).build`` and refuses a setting the chosen algorithm does not read (``uses``); the
choice of ``"auto"`` and the estimators' ``algorithm`` parameter accept ``algorithm_names()``; the
pipeline config's ``[algorithm] name`` is checked against it. ``build(spec, model, num_rows,
learning_rate)`` receives the request (``dpstream.algorithms.builder.AlgorithmSpec``, its model
defaults resolved) and the learning rate the builder resolved for the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AlgorithmDeclaration", "register", "unregister", "declared", "algorithm_names", "AUTO"]

AUTO = "auto"  # not an algorithm: the request to choose one (``dpstream.algorithms.choice``)


@dataclass(frozen=True)
class AlgorithmDeclaration:
    name: str
    uses: tuple[str, ...]  # the hyperparameters it reads (AlgorithmSpec's fields)
    build: Callable[[Any, Any, int, float], Any]  # (spec, model, num_rows, learning_rate) -> the algorithm


_REGISTRY: dict[str, AlgorithmDeclaration] = {}


def register(declaration: AlgorithmDeclaration) -> AlgorithmDeclaration:
    """Declare an algorithm; its name must be new (and not ``"auto"``)."""
    if declaration.name == AUTO or declaration.name in _REGISTRY:
        raise ValueError(f"an algorithm named {declaration.name!r} is already declared")
    _REGISTRY[declaration.name] = declaration
    return declaration


def unregister(name: str) -> None:
    """Withdraw a declaration (a test's toy algorithm)."""
    _REGISTRY.pop(name, None)


def algorithm_names() -> tuple[str, ...]:
    """The declared algorithms, in the order they were declared."""
    return tuple(_REGISTRY)


def declared(name: str) -> AlgorithmDeclaration:
    """The declaration of ``name``; ``ValueError`` naming the declared ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        names = ", ".join(map(repr, (AUTO, *_REGISTRY)))
        raise ValueError(f"algorithm must be one of {names}, got {name!r}") from None
