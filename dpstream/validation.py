"""The library's parameter checks, in one place: each raises ``ValueError`` naming the parameter, the
range it must lie in and the value it got, and returns the value converted (float, or int).

The pipeline config validates with pydantic and the estimators with scikit-learn's parameter
constraints; these checks guard the library objects (algorithms, noise processes, privacy events,
relations and the GDP conversions) that users may also build directly.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["check_positive", "check_probability", "check_budget", "check_name", "MAX_EPSILON", "RUN_ID_MAX"]

# ε above this protects no one (a likelihood ratio of e^100) and lies outside the range where the exact
# δ(ε; μ) is evaluated without loss (dpstream.privacy.gdp): budgets beyond it are refused, not clamped.
MAX_EPSILON = 100.0
RUN_ID_MAX = 64  # characters: a run id names files (<stamp>-train-<run id>.log, runs/<run id>.json)
# \A and \Z: `$` would also match before a trailing newline.
_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*\Z")


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


def check_budget(epsilon: Any, delta: Any, *, name: str = "epsilon") -> tuple[float, float]:
    """A target (ε, δ): ε a finite number in (0, ``MAX_EPSILON``], δ in (0, 1)."""
    epsilon = check_positive(name, epsilon)
    if epsilon > MAX_EPSILON:
        raise ValueError(
            f"{name} must be at most {MAX_EPSILON:g} (a likelihood ratio of e^{MAX_EPSILON:g} protects no one), "
            f"got {epsilon:g}"
        )
    return epsilon, check_probability("delta", delta)


def check_name(kind: str, value: Any, max_length: int = RUN_ID_MAX) -> str:
    """``value`` when it is safe as one path component everywhere dpstream writes it (a run id, a lake
    fingerprint, an archive tag): 1-``max_length`` letters, digits, '.', '_' or '-', starting with a letter or
    digit. Anything else (a '/', '..', a newline, a name too long for a file system) is refused before
    anything is written."""
    if not isinstance(value, str) or len(value) > max_length or not _NAME.match(value):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:80]) + "..."
        raise ValueError(
            f"{kind} must be 1-{max_length} characters of letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit, got {shown}"
        )
    return value
