"""The estimators' parameter rules, checked once at fit as scikit-learn checks its own, without importing
its private ``sklearn.utils._param_validation``.

Each estimator class states ``_parameter_constraints``: for every ``__init__`` parameter, the list of
what it may be (any one suffices):

- ``Interval(Real, 0, None, closed="neither")``: a number in a range (``Integral`` for integers; ``None``
  for an open end; booleans are not numbers here);
- ``Options({"replace-one", "zero-out"})``: one of these strings;
- a class (``NoiseKey``, ``tuple``): an instance of it;
- ``None``, ``"boolean"``, ``"array-like"``.

``check_parameters(estimator)`` raises ``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``,
as scikit-learn's own) naming the parameter, what it must be and what it got.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = ["Interval", "Options", "InvalidParameterError", "check_parameters"]


class InvalidParameterError(ValueError, TypeError):
    """A parameter outside its rule (both a ``ValueError`` and a ``TypeError``, as scikit-learn's)."""


_BRACKETS = {"left": "[)", "right": "(]", "both": "[]", "neither": "()"}


@dataclass(frozen=True)
class Interval:
    """A number of ``kind`` (``Real`` or ``Integral``) between ``low`` and ``high`` (``None``: unbounded),
    each end included where ``closed`` says ("left", "right", "both" or "neither")."""

    kind: type
    low: float | None
    high: float | None
    closed: str

    def __post_init__(self) -> None:
        if self.closed not in _BRACKETS:
            raise ValueError(f"closed must be one of {sorted(_BRACKETS)}, got {self.closed!r}")

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.kind):
            return False
        if isinstance(value, Real) and math.isnan(value):
            return False
        left, right = _BRACKETS[self.closed]
        above = self.low is None or (value >= self.low if left == "[" else value > self.low)
        below = self.high is None or (value <= self.high if right == "]" else value < self.high)
        return bool(above and below)

    def describe(self) -> str:
        left, right = _BRACKETS[self.closed]
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        kind = "an int" if self.kind is Integral else "a float"
        return f"{kind} in the range {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options:
    """One of a set of strings."""

    options: frozenset[str]

    def __init__(self, options: Iterable[str]):
        object.__setattr__(self, "options", frozenset(options))

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.options

    def describe(self) -> str:
        return "a str among {" + ", ".join(repr(option) for option in sorted(self.options)) + "}"


def _accepts(rule: Any, value: Any) -> bool:
    if rule is None:
        return value is None
    if rule == "boolean":
        return isinstance(value, (bool, np.bool_))
    if rule == "array-like":
        return isinstance(value, (list, tuple, np.ndarray)) or hasattr(value, "__array__")
    if isinstance(rule, type):
        return isinstance(value, rule)
    return rule.accepts(value)


def _describe(rule: Any) -> str:
    if rule is None:
        return "None"
    if isinstance(rule, str):
        return f"{'a' if rule == 'boolean' else 'an'} {rule}"
    if isinstance(rule, type):
        return f"an instance of {rule.__name__!r}"
    return rule.describe()


def check_parameters(estimator: Any) -> None:
    """Raise ``InvalidParameterError`` for the first parameter of ``estimator`` that meets none of its
    rules in ``type(estimator)._parameter_constraints``."""
    for name, rules in type(estimator)._parameter_constraints.items():
        value = getattr(estimator, name)
        if any(_accepts(rule, value) for rule in rules):
            continue
        expected = [_describe(rule) for rule in rules]
        allowed = expected[0] if len(expected) == 1 else ", ".join(expected[:-1]) + " or " + expected[-1]
        raise InvalidParameterError(
            f"The {name!r} parameter of {type(estimator).__name__} must be {allowed}. Got {value!r} instead."
        )
