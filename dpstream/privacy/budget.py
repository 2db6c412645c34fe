"""One privacy budget shared by many fits: ``PrivacyBudget``.

A notebook fits, refits, cross-validates and searches over the same rows; each fit is a (ε, δ)-DP
release, and together they compose. ``PrivacyBudget(epsilon, delta)`` states the total the analyst
allows for one dataset and refuses the fit that would exceed it, before that fit releases anything.

Composition is exact: every fit of the estimators is μ-Gaussian DP (its ``privacy_report_.mu``), and
μ-GDP mechanisms on the same data compose to sqrt(Σ μ_i²)-GDP, adaptively (Dong, Roth & Su, "Gaussian
Differential Privacy", arXiv:1905.02383, Cor. 3.3). The budget is the μ_B of its (ε, δ) under the exact
δ(ε; μ) curve (``dpstream.privacy.gdp``); a fit at (ε_i, δ_i) charges μ_i = μ(ε_i, δ_i), and is refused
when sqrt(Σ μ² + μ_i²) > μ_B. The charges are kept as events (``GaussianEvent``), so ``accountant``
states the total with the same accountant a run uses.

The unit: a budget protects a row (``unit="row"``) or a person (``unit="person"``). A person-level fit
protects every row of a person, so it may charge a row budget with its μ; a row-level fit does not
protect a person, and a person budget refuses it. Both relations are supported, one per budget: μ under
replace-one and under zero-out are different guarantees and do not add up.

Sharing: scikit-learn's ``clone`` deep-copies an estimator's parameters; a budget's ``__deepcopy__``
returns the budget itself, so every clone of a search (``GridSearchCV``, ``cross_val_score``, the refit)
charges the one budget. A budget that crosses a process boundary (pickled: joblib's ``n_jobs > 1``, a
saved estimator loaded elsewhere) arrives detached and refuses to charge, saying why: its charges in
another process would never reach this one. ``with budget:`` makes it the budget of every fit in the
block that names none (a context variable: threads and asyncio tasks each see their own).
"""

from __future__ import annotations

import contextvars
import math
import threading
from dataclasses import dataclass
from typing import Any

from dpstream.privacy.accountant import GdpAccountant
from dpstream.privacy.events import GaussianEvent
from dpstream.privacy.gdp import compose_mu, epsilon_for_delta, mu_for_epsilon_delta
from dpstream.privacy.relation import NeighbouringRelation

__all__ = ["BudgetError", "Charge", "PrivacyBudget", "active_budget"]

UNITS = ("row", "person")
_ACTIVE: contextvars.ContextVar[PrivacyBudget | None] = contextvars.ContextVar(
    "dpstream_budget", default=None
)


class BudgetError(ValueError):
    """A fit would take a ``PrivacyBudget`` past its total; nothing was released."""


@dataclass(frozen=True)
class Charge:
    """One fit charged to a budget: what it was and its μ-GDP event (``event.mu``)."""

    what: str
    event: GaussianEvent


class PrivacyBudget:
    """A total (ε, δ)-DP budget under ``relation`` for one dataset, charged by each fit that names it
    (``budget=``) or runs inside ``with budget:`` (module docstring)."""

    def __init__(
        self, epsilon: float, delta: float = 1e-6, relation: str = "replace-one", unit: str = "row"
    ) -> None:
        if unit not in UNITS:
            raise ValueError(f"unit must be 'row' or 'person', got {unit!r}")
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.mu = mu_for_epsilon_delta(self.epsilon, self.delta)  # checks ε > 0 and δ in (0, 1)
        self.relation = NeighbouringRelation.parse(relation)
        self.unit = unit
        self._charges: list[Charge] = []
        self._lock = threading.Lock()
        self._detached = False
        self._tokens: list[contextvars.Token] = []

    # Composition.

    @property
    def charges(self) -> tuple[Charge, ...]:
        return tuple(self._charges)

    @property
    def spent_mu(self) -> float:
        return compose_mu(*(charge.event.mu for charge in self._charges)) if self._charges else 0.0

    def spent_epsilon(self, delta: float | None = None) -> float:
        """The ε spent so far at ``delta`` (the budget's by default): exact, from the composed μ."""
        spent = self.spent_mu
        return 0.0 if spent == 0 else epsilon_for_delta(self.delta if delta is None else delta, spent)

    def remaining_epsilon(self) -> float:
        """The largest ε a further fit at the budget's δ may take."""
        left = math.sqrt(max(self.mu**2 - self.spent_mu**2, 0.0))
        return 0.0 if left == 0 else epsilon_for_delta(self.delta, left)

    def accountant(self) -> GdpAccountant:
        """A ``GdpAccountant`` holding every charge: ``.get_epsilon(delta)`` states the total."""
        accountant = GdpAccountant(self.relation)
        for charge in self._charges:
            accountant.compose(charge.event)
        return accountant

    def charge(self, mu: float, what: str, relation: str, people: bool) -> None:
        """Charge a μ-GDP fit (``what`` names it) under ``relation``, protecting people or rows; refused
        with ``BudgetError`` (charging nothing) where it would exceed the budget or does not match it."""
        if self._detached:
            raise BudgetError(
                f"{self!r} was copied into another process (pickled: joblib's n_jobs > 1, or an estimator saved "
                "and loaded), where its charges could never reach the original; fit in the process that made "
                "the budget (n_jobs=1), or pass budget=None to this copy"
            )
        if NeighbouringRelation.parse(relation) is not self.relation:
            raise BudgetError(
                f"{what} is stated under {relation}, the budget under {self.relation.value}: the two guarantees "
                "do not compose; give the estimator relation=" + repr(self.relation.value)
            )
        if self.unit == "person" and not people:
            raise BudgetError(
                f"{what} protects rows, and this budget protects people: fit with groups=ids (user-level DP) "
                "or use a row budget"
            )
        event = GaussianEvent(1.0, 1.0 / mu, self.relation, what)
        with self._lock:
            if compose_mu(self.spent_mu, mu) > self.mu * (1 + 1e-12):
                raise BudgetError(self._refusal(mu, what))
            self._charges.append(Charge(what, event))

    def _refusal(self, mu: float, what: str) -> str:
        asked = epsilon_for_delta(self.delta, mu)
        return (
            f"{what} needs epsilon={asked:.4g} at delta={self.delta:g}, and {self!r} has epsilon="
            f"{self.remaining_epsilon():.4g} left after {len(self._charges)} fit(s) (spent {self.spent_epsilon():.4g}; "
            "Gaussian DP adds up mu², not epsilon). Fit with a smaller epsilon, or start a budget for other data"
        )

    # Sharing.

    def __deepcopy__(self, memo: dict) -> PrivacyBudget:
        return self  # scikit-learn's clone keeps the one budget: every fit of a search charges it

    def __copy__(self) -> PrivacyBudget:
        return self

    def __getstate__(self) -> dict[str, Any]:
        state = {key: value for key, value in self.__dict__.items() if key not in ("_lock", "_tokens")}
        return {**state, "_detached": True}  # arrives in another process unable to charge

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock(), _tokens=[])

    def __enter__(self) -> PrivacyBudget:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._tokens.pop())

    def __repr__(self) -> str:
        return (
            f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}, relation={self.relation.value!r}, "
            f"unit={self.unit!r})"
        )


def active_budget() -> PrivacyBudget | None:
    """The budget of the innermost ``with budget:`` block, or None."""
    return _ACTIVE.get()
