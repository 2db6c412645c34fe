"""The library's parameter checks, in one place: each raises ``ValueError`` naming the parameter, the
range it must lie in and the value it got, and returns the value converted (float, or int).

The pipeline config validates with pydantic and the estimators with scikit-learn's parameter
constraints; these checks guard the library objects (algorithms, noise processes, privacy events,
relations and the GDP conversions) that users may also build directly.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_positive", "check_probability", "check_budget"]


def check_positive(
    name: str, value: Any, *, optional: bool = False, integer: bool = False, allow_zero: bool = False
) -> Any:
    """``value`` as a float (an int with ``integer``) when it is finite and > 0 (≥ 0 with ``allow_zero``);
    None passes when ``optional``. Booleans are refused: ``True`` is not a count."""
    if value is None and optional:
        return None
    if integer:
        kind = "a non-negative integer" if allow_zero else "a positive integer"
    else:
        kind = f"a finite number {'>= 0' if allow_zero else '> 0'}"
    try:
        number = float(value)
        ok = (
            not isinstance(value, bool)
            and math.isfinite(number)
            and (number >= 0 if allow_zero else number > 0)
            and (not integer or int(number) == number)
        )
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be {kind}{' or None' if optional else ''}, got {value!r}")
    return int(number) if integer else number


def check_probability(name: str, value: Any) -> float:
    """``value`` as a float in the open interval (0, 1), e.g. δ."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (0.0 < number < 1.0):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {value!r}")
    return number


def check_budget(epsilon: Any, delta: Any) -> tuple[float, float]:
    """A target (ε, δ): ε a finite number > 0, δ in (0, 1)."""
    return check_positive("epsilon", epsilon), check_probability("delta", delta)
