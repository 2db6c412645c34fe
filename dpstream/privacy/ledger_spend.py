"""What a run on a lake is measured against: the spend and the cap of each group of the lake's files.

A record lives in one source file, so the spend of a record in file f is the composition over every run
of every lake (under one ledger URL) that contains f, μ_f = sqrt(Σ_{lakes L ∋ f} Σ_{runs r of L} μ_r²)
(Dong, Roth & Su 2022, Cor. 3.3), and its cap is the smallest lifetime budget among those lakes
(``dpstream.privacy.ledger``, "The unit is the data"). Files that the same lakes contain share one spend
and one cap.
"""

from __future__ import annotations

from typing import Any

from dpstream.privacy.ledger_errors import UnitMismatchError, unit_setting
from dpstream.privacy.ledger_records import (
    LifetimeBudget,
    describe_ledger_unit,
    entries_in,
    overlapping_lakes,
)
from dpstream.privacy.ledger_store import LedgerStore

__all__ = ["spend_by_file_group"]


def spend_by_file_group(
    store: LedgerStore,
    fingerprint: str,
    budget: LifetimeBudget,
    files: frozenset[str] | None,
    exclude: str | None = None,
) -> list[tuple[float, float]]:
    """(Σ μ² spent, cap μ_max) of every group of lake ``fingerprint``'s files that the same lakes contain;
    one group, this lake's own runs, for a lake opened without file identities (``files`` None).
    ``exclude`` leaves that run of this lake out (a resumed run is measured against what the others spent).
    Lakes sharing files must share the neighbouring relation (``ValueError``) and the privacy unit
    (``UnitMismatchError``)."""
    if files is None:
        spent = sum(e.mu**2 for e in entries_in(store, f"{fingerprint}/runs") if e.run_id != exclude)
        return [(spent, budget.mu)]
    lakes = overlapping_lakes(store, files)
    groups: dict[frozenset[str], list[Any]] = {}
    for name in files:
        groups.setdefault(
            frozenset(lake for lake, (_, lake_files) in lakes.items() if name in lake_files),
            [],
        ).append(name)
    charges = []
    for members in groups:
        spent, cap = 0.0, budget.mu
        for lake in members:
            other, _ = lakes[lake]
            if other.relation is not budget.relation:
                raise ValueError(
                    f"lake {fingerprint} shares source files with lake {lake}, accounted under "
                    f"{other.relation}; use the same neighbouring relation ({budget.relation}) for both"
                )
            if other.unit != budget.unit:
                raise UnitMismatchError(
                    f"lake {fingerprint} shares source files with lake {lake}, whose budget counts "
                    f"{describe_ledger_unit(other.unit)}, not {describe_ledger_unit(budget.unit)}: the two "
                    f"spends cannot be added. Train both with the privacy unit of lake {lake} "
                    f"({unit_setting(other.unit)})"
                )
            cap = min(cap, other.mu)
            own = lake == fingerprint
            spent += sum(
                e.mu**2 for e in entries_in(store, f"{lake}/runs") if not (own and e.run_id == exclude)
            )
        charges.append((spent, cap))
    return charges or [(0.0, budget.mu)]
