"""The ledger's documents: a lake's lifetime budget and one run's entry, and how they are read back.

``budget.json`` holds a ``LifetimeBudget``; ``runs/<run id>.json`` one ``LedgerEntry``;
``aborted/<run id>-<stamp>.json`` the entry of a run that gave its reservation back before it released
anything (``LakeLedger.abort``). Reading any of them checks its shape and names the file and the fix
when it is damaged: an entry is never skipped, because the privacy it records was spent.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from dataclasses import dataclass
from typing import Any

from dpstream.privacy import gdp
from dpstream.privacy.ledger_store import LedgerStore
from dpstream.privacy.relation import NeighbouringRelation
from dpstream.validation import check_budget

__all__ = [
    "BUDGET_NAME",
    "FILES_NAME",
    "LEDGER_MARKER",
    "STATUSES",
    "LedgerEntry",
    "LifetimeBudget",
    "check_ledger_unit",
    "describe_ledger_unit",
    "entries_in",
    "entry_at",
    "now",
    "overlapping_lakes",
]

FILES_NAME = "files.json"
BUDGET_NAME = "budget.json"
# At the ledger's root: tells every dpstream write-location check that this folder is a ledger.
LEDGER_MARKER = "_dpstream_ledger.json"
# "reserved": charged, running or crashed; "committed": finished; "aborted": gave its reservation back
# before its first release (kept under aborted/, not counted).
STATUSES = ("reserved", "committed", "aborted")


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def check_ledger_unit(unit: Any) -> str:
    """``"row"`` or ``"user:<id column>"`` (``PrivacyUnit.ledger_unit``), else ``ValueError``."""
    if unit == "row" or (isinstance(unit, str) and unit.startswith("user:") and unit[5:].strip()):
        return unit
    raise ValueError(f"a ledger's unit is 'row' or 'user:<id column>', got {unit!r}")


def describe_ledger_unit(unit: str) -> str:
    return "rows" if unit == "row" else f"people (one per value of {unit[5:]!r})"


@dataclass(frozen=True)
class LifetimeBudget:
    """A lake's lifetime budget, per *unit*: ``"row"`` (a record), or ``"user:<column>"`` (every row of one
    value of that column: the budget is per person). The first run on a lake fixes its unit."""

    epsilon: float
    delta: float
    relation: NeighbouringRelation = NeighbouringRelation.REPLACE_ONE
    unit: str = "row"

    def __post_init__(self) -> None:
        epsilon, delta = check_budget(self.epsilon, self.delta, name="lifetime epsilon")
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "relation", NeighbouringRelation.parse(self.relation))
        check_ledger_unit(self.unit)
        self.mu  # noqa: B018 - a budget the accountant cannot calibrate against is refused before it is stored

    @property
    def mu(self) -> float:
        return gdp.mu_for_epsilon_delta(self.epsilon, self.delta)

    def to_json(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "relation": self.relation.value,
            "unit": self.unit,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> LifetimeBudget:
        """A recorded budget, read as it is: budget.json files an earlier version wrote with ε above
        ``MAX_EPSILON`` stay readable (and changeable with ``dpstream budget set-lifetime``); only new
        budgets are capped."""
        epsilon, delta = float(document["epsilon"]), float(document["delta"])
        if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
            raise ValueError(
                f"a recorded lifetime budget must have a finite epsilon > 0 and delta in (0, 1), got {document}"
            )
        budget = object.__new__(cls)
        object.__setattr__(budget, "epsilon", epsilon)
        object.__setattr__(budget, "delta", delta)
        object.__setattr__(budget, "relation", NeighbouringRelation.parse(document["relation"]))
        # Budgets written before the privacy unit was recorded are the row's: every run then was.
        object.__setattr__(budget, "unit", check_ledger_unit(document.get("unit", "row")))
        return budget


@dataclass(frozen=True)
class LedgerEntry:
    run_id: str
    mu: float
    relation: str
    status: str  # one of STATUSES
    mechanism: str
    reserved_at: str
    committed_at: str | None = None
    # A random token drawn when the run id was claimed; the run's checkpoint holds the same one, so a
    # resume proves it continues this claim and not another process's.
    claim: str | None = None
    data_version: str | None = (
        None  # what the run reads (the pinned shuffle generation), as the data plane names it
    )
    aborted_at: str | None = None
    reason: str | None = None  # why an aborted run gave its reservation back
    unit: str | None = None  # the ledger unit the run was charged in (None: written before units, the row)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> LedgerEntry:
        return cls(**{name: document.get(name) for name in cls.__dataclass_fields__})

    @property
    def charged(self) -> bool:
        return self.status in ("reserved", "committed")


def entry_at(store: LedgerStore, key: str) -> LedgerEntry | None:
    """The entry at ``key``, or None when there is none; a damaged one is refused naming its file."""
    document = store.read(key)
    if document is None:
        return None
    try:
        if not isinstance(document, dict):
            raise TypeError(f"a JSON object was expected, got {type(document).__name__}")
        entry = LedgerEntry.from_json(document)
        mu = float(entry.mu)
        if not entry.run_id or entry.status not in STATUSES or not math.isfinite(mu) or mu < 0:
            raise ValueError("run_id, a finite mu >= 0 and a known status are required")
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{store.show(key)} is not a dpstream ledger entry ({error}); restore it from a backup. Never delete "
            "an entry: the privacy it records was spent"
        ) from None
    return entry


def entries_in(store: LedgerStore, folder: str) -> list[LedgerEntry]:
    """The entries (``*.json``) directly in ``folder``, by file name; none when it does not exist. An entry
    listed but gone when read (an abort or an archive moved it meanwhile) is skipped: it no longer counts."""
    entries = (entry_at(store, key) for key in store.list(folder) if key.endswith(".json"))
    return [entry for entry in entries if entry is not None]


def overlapping_lakes(
    store: LedgerStore, files: frozenset[str]
) -> dict[str, tuple[LifetimeBudget, frozenset[str]]]:
    """Every lake in ``store`` that shares a source file with ``files``: name -> (budget, its files)."""
    found = {}
    for lake in store.list(""):
        recorded = store.read(f"{lake}/{FILES_NAME}") if not lake.endswith(".json") else None
        if recorded is None:
            continue
        lake_files = frozenset(recorded["files"])
        if lake_files & files:
            budget = _budget_of_new_lake(store, lake)
            if budget is not None:
                found[lake] = (budget, lake_files)
    return found


def _budget_of_new_lake(store: LedgerStore, lake: str, wait_seconds: float = 5.0) -> LifetimeBudget | None:
    """The budget of ``lake``, whose files are recorded. A lake's first run records its files and then its
    budget, so a run starting at the same moment on a lake sharing files can find the files alone: it
    waits a moment for the budget; a lake still without one has no run (a run needs the budget before it
    claims), so it charges nothing and caps nothing yet. Files recorded long ago without a budget (a first
    run that crashed in between) are not waited for."""
    age = store.age_seconds(f"{lake}/{FILES_NAME}")
    deadline = time.monotonic() + (wait_seconds if age is None or age < 60.0 else 0.0)
    while True:
        document = store.read(f"{lake}/{BUDGET_NAME}")
        if document is not None:
            return LifetimeBudget.from_json(document)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
