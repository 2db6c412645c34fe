"""The ledger's refusals: the errors a run meets and the lines that say what remains and how to go on."""

from __future__ import annotations

from typing import Any

from dpstream.privacy import gdp

__all__ = [
    "BudgetExceededError",
    "UnitMismatchError",
    "RunIdReusedError",
    "unit_word",
    "unit_setting",
    "budget_refusal",
    "run_id_taken",
]


class BudgetExceededError(RuntimeError):
    """A run would take a lake past its lifetime privacy budget."""


class UnitMismatchError(ValueError):
    """A run counts another privacy unit (row, or a person by some id column) than the lake's ledger, which
    its first run fixed: spends per row and per person cannot be composed."""


def unit_word(unit: str) -> str:
    return "row" if unit == "row" else f"person (one per value of {unit[5:]!r})"


def unit_setting(unit: str) -> str:
    if unit == "row":
        return "no [privacy] section, or unit = 'row'"
    return f"[privacy] unit = 'user', user_column = {unit[5:]!r}"


class RunIdReusedError(BudgetExceededError):
    """A run id that already released (or reserved) on a lake is started again without the checkpoint
    that replays it: running it would publish a second, differently noised model for one charge."""


def budget_refusal(
    run_id: str, mu: float, fingerprint: str, budget: Any, *, spent: float, shared: bool, remaining: float
) -> BudgetExceededError:
    """The refusal of a run needing ``mu`` on a lake that has ``spent`` (its most charged record's μ) of
    ``budget``, with ``remaining`` μ left; ``shared``: runs on lakes sharing its files count too."""
    would = gdp.epsilon_for_delta(budget.delta, gdp.compose_mu(spent, mu))
    note = " (its files' spend includes runs on lakes that share them)" if shared else ""
    return BudgetExceededError(
        f"run {run_id!r} needs mu={mu:.6g} but lake {fingerprint} has spent "
        f"epsilon={gdp.epsilon_for_delta(budget.delta, spent):.4g} of its lifetime "
        f"epsilon={budget.epsilon:g} at delta={budget.delta:g}{note}; with this run it would "
        f"reach epsilon={would:.4g}. {_what_remains(budget, remaining)}"
    )


def _what_remains(budget: Any, remaining: float) -> str:
    if remaining <= 0.0:
        return (
            "Nothing remains: the lake's lifetime budget (budget.lifetime_epsilon in a pipeline config) is spent; "
            "raise it only deliberately (`dpstream budget set-lifetime`)"
        )
    at_most = gdp.epsilon_for_delta(budget.delta, remaining)
    return (
        f"Lower the run's epsilon (budget.epsilon in a pipeline config) to at most {at_most:.4g} at "
        f"delta={budget.delta:g} (mu={remaining:.6g} remains), or raise the lake's lifetime budget "
        "deliberately (`dpstream budget set-lifetime`)"
    )


def run_id_taken(run_id: str, fingerprint: str, entry: Any) -> RunIdReusedError:
    """The refusal of a second claim of ``run_id`` (``entry``: the one the ledger holds, if read)."""
    since = f" (since {entry.reserved_at})" if entry is not None else ""
    state = entry.status if entry is not None else "claimed"
    return RunIdReusedError(
        f"run {run_id!r} is already {state} in lake {fingerprint}'s ledger{since}: another run with this "
        "id ran or is running, and a second one would release a second, differently noised model for one "
        "charge. Use a new run id, or resume the run from the checkpoint location it was started with"
    )
