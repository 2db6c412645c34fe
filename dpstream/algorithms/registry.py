"""The algorithms, each declared once: its name, the hyperparameters it reads, how it is built, the
state types it checkpoints, whether it trains under the user privacy unit, its audited configuration
and whether the estimators precondition its rows.

An algorithm is one module (its state machine) plus one ``register(AlgorithmDeclaration(...))`` at the
end of that module, and its import in ``dpstream.algorithms``. Everything that names algorithms reads
this registry: the builder builds through ``declared(name).build`` and refuses a setting the chosen
algorithm does not read (``uses``); the choice of ``"auto"`` and the estimators' ``algorithm`` parameter
accept ``algorithm_names()``; the pipeline config's ``[algorithm] name`` is checked against it; the
checkpoint codec rebuilds only the declared ``state_types`` (``dpstream.state_codec``); the user-level
refusal names the algorithms by their ``user_level`` (``dpstream.algorithms.user_level``); ``dpstream
audit`` audits each ``audited`` configuration (``dpstream.audit``). ``build(spec, model, num_rows,
learning_rate)`` receives the request (``dpstream.algorithms.builder.AlgorithmSpec``, its model defaults
resolved) and the learning rate the builder resolved for the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpstream.registry import Registry

__all__ = [
    "AlgorithmDeclaration",
    "UserLevel",
    "register",
    "unregister",
    "declared",
    "declarations",
    "algorithm_names",
    "AUTO",
]

AUTO = "auto"  # not an algorithm: the request to choose one (``dpstream.algorithms.choice``)


@dataclass(frozen=True)
class UserLevel:
    """How an algorithm trains under the user privacy unit (``dpstream.models.users``): with ``any_model``
    a person's rows are combined in its own statistics whatever the model (AdaSSP's weights); otherwise
    only on a model whose gradients combine a person's rows into one clipped contribution (the model's
    ``combines_user_gradients``). ``note`` qualifies it where messages name it ("any noise")."""

    any_model: bool = False
    note: str = ""


@dataclass(frozen=True)
class AlgorithmDeclaration:
    name: str
    uses: tuple[str, ...]  # the hyperparameters it reads (AlgorithmSpec's fields)
    build: Callable[[Any, Any, int, float], Any]  # (spec, model, num_rows, learning_rate) -> the algorithm
    title: str = ""  # how messages name it ("DP-SGD"); its name where empty
    state_types: tuple[type, ...] = ()  # the dataclasses its state is made of, noise states aside
    user_level: UserLevel | None = None  # None: it trains under the row unit only
    # (epsilon, delta, relation, noise process or None) -> the configuration ``dpstream audit`` runs; the
    # noise process is given to an algorithm that ``uses`` "noise", once per process DP-SGD takes
    audited: Callable[[float, float, str, Any], Any] | None = None
    # The estimators whiten its rows first with a private preconditioner (``dpstream.preconditioner``)
    # where that was measured to help it, mapping this many whitened standard deviations onto [−1, 1];
    # None: its rows are not preconditioned
    whitening_spread: float | None = None

    @property
    def display_name(self) -> str:
        return self.title or self.name


_REGISTRY: Registry[AlgorithmDeclaration] = Registry("algorithm", reserved=(AUTO,))


def register(declaration: AlgorithmDeclaration) -> AlgorithmDeclaration:
    """Declare an algorithm; its name must be new (and not ``"auto"``)."""
    return _REGISTRY.register(declaration.name, declaration)


unregister = _REGISTRY.unregister
algorithm_names = _REGISTRY.names  # the declared algorithms, in declaration order
declarations = _REGISTRY.entries  # their declarations, in the same order
declared = _REGISTRY.get  # ValueError naming "auto" and the declared ones for another name
