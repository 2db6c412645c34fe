"""The noise processes, each declared once: its name, the settings it reads, how it is built, and the
state types it checkpoints.

A noise process is one module (the process) plus one ``register(NoiseDeclaration(...))`` at the end of
that module, and its import in ``dpstream.noise``. ``make_noise_process(name, **settings)`` builds
through the declaration; the processes a user may choose for DP-SGD (``for_dpsgd``: the tree is
Accelerated-DP-SRGD's own) are what the pipeline config's ``[algorithm] noise`` and the estimators'
``noise`` accept (``dpsgd_noise_names``); the builder refuses a setting the chosen process does not
read (``reads``); the checkpoint codec rebuilds only the declared ``state_types`` (``dpstream.state_codec``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpstream.registry import Registry

__all__ = [
    "NoiseDeclaration",
    "register",
    "unregister",
    "declared_noise",
    "noise_names",
    "noise_declarations",
    "dpsgd_noise_names",
]


@dataclass(frozen=True)
class NoiseDeclaration:
    name: str
    # build(settings, stream) -> the process; settings: correlation, nu, taps, history (None: not given)
    build: Callable[[dict[str, Any], str], Any]
    for_dpsgd: bool = True
    reads: tuple[str, ...] = ()  # the settings ``build`` reads
    state_types: tuple[type, ...] = ()  # the dataclasses its state is made of


_REGISTRY: Registry[NoiseDeclaration] = Registry("noise")


def register(declaration: NoiseDeclaration) -> NoiseDeclaration:
    return _REGISTRY.register(declaration.name, declaration)


unregister = _REGISTRY.unregister
noise_names = _REGISTRY.names
noise_declarations = _REGISTRY.entries
declared_noise = _REGISTRY.get


def dpsgd_noise_names() -> tuple[str, ...]:
    """The processes a user chooses among for DP-SGD."""
    return tuple(declaration.name for declaration in _REGISTRY.entries() if declaration.for_dpsgd)
