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

from dpstream.registry import Registry

__all__ = ["AlgorithmDeclaration", "register", "unregister", "declared", "algorithm_names", "AUTO"]

AUTO = "auto"  # not an algorithm: the request to choose one (``dpstream.algorithms.choice``)


@dataclass(frozen=True)
class AlgorithmDeclaration:
    name: str
    uses: tuple[str, ...]  # the hyperparameters it reads (AlgorithmSpec's fields)
    build: Callable[[Any, Any, int, float], Any]  # (spec, model, num_rows, learning_rate) -> the algorithm


_REGISTRY: Registry[AlgorithmDeclaration] = Registry("algorithm", reserved=(AUTO,))


def register(declaration: AlgorithmDeclaration) -> AlgorithmDeclaration:
    """Declare an algorithm; its name must be new (and not ``"auto"``)."""
    return _REGISTRY.register(declaration.name, declaration)


unregister = _REGISTRY.unregister
algorithm_names = _REGISTRY.names  # the declared algorithms, in declaration order
declared = _REGISTRY.get  # ValueError naming "auto" and the declared ones for another name
