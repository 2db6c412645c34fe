"""The noise processes, each declared once: its name, the settings it reads, and how it is built.

A noise process is one module (the process) plus one ``register(NoiseDeclaration(...))`` at the end of
that module. ``make_noise_process(name, **settings)`` builds through the declaration; the processes a
user may choose for DP-SGD (``for_dpsgd``: the tree is Accelerated-DP-SRGD's own) are what the pipeline
config's ``[algorithm] noise`` and the estimators' ``noise`` accept (``dpsgd_noise_names``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["NoiseDeclaration", "register", "unregister", "declared_noise", "noise_names", "dpsgd_noise_names"]


@dataclass(frozen=True)
class NoiseDeclaration:
    name: str
    # build(settings, stream) -> the process; settings: correlation, nu, taps, history (None: not given)
    build: Callable[[dict[str, Any], str], Any]
    for_dpsgd: bool = True


_REGISTRY: dict[str, NoiseDeclaration] = {}


def register(declaration: NoiseDeclaration) -> NoiseDeclaration:
    if declaration.name in _REGISTRY:
        raise ValueError(f"a noise process named {declaration.name!r} is already declared")
    _REGISTRY[declaration.name] = declaration
    return declaration


def unregister(name: str) -> None:
    """Withdraw a declaration (a test's toy process)."""
    _REGISTRY.pop(name, None)


def noise_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def dpsgd_noise_names() -> tuple[str, ...]:
    """The processes a user chooses among for DP-SGD."""
    return tuple(name for name, declaration in _REGISTRY.items() if declaration.for_dpsgd)


def declared_noise(name: str) -> NoiseDeclaration:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"noise must be one of {', '.join(map(repr, _REGISTRY))}, got {name!r}") from None
