"""The collection of per-lake ledgers under one URL (``Ledger``): opening a lake's ledger with its budget
and files, the lake's unit fixed by its first run, deliberate budget changes, and what a prune must
keep. One lake's ledger and the charging protocol are ``dpstream.privacy.ledger.LakeLedger``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dpstream.outages import OutagePolicy, rides_out
from dpstream.privacy.ledger import LakeLedger, UnitMismatchError, unit_setting
from dpstream.privacy.ledger_records import (
    BUDGET_NAME,
    FILES_NAME,
    LEDGER_MARKER,
    LifetimeBudget,
    check_ledger_unit,
    describe_ledger_unit,
    entries_in,
)
from dpstream.privacy.ledger_store import FsspecLedgerStore, LedgerStore
from dpstream.validation import check_name

__all__ = ["Ledger"]


class Ledger:
    """The collection of per-lake ledgers under one URL, kept in a ``LedgerStore`` (files under the URL;
    pass ``store`` for another kind)."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        outage: OutagePolicy | None = None,
        store: LedgerStore | None = None,
    ):
        self.url = url
        self.outage = outage or OutagePolicy()
        if store is None:
            files = FsspecLedgerStore(url, storage_options)
            self.outage.call(
                files.check_exclusive_create,
                store=self.store_name,
                what="probe its conditional writes",
            )
            store = files
        self.store = store

    @property
    def store_name(self) -> str:
        return f"the privacy ledger {self.url}"

    def _mark(self) -> None:
        """Write the ledger's root marker once (before its first lake), so no output is ever written here."""
        if self.store.read(LEDGER_MARKER) is None:
            self.store.create(LEDGER_MARKER, {"format": "dpstream-ledger/1"})

    @rides_out("open the ledger of lake")
    def lake(
        self,
        fingerprint: str,
        budget: LifetimeBudget | None = None,
        files: tuple[str, ...] | frozenset[str] | None = None,
        proposed: bool = False,
    ) -> LakeLedger:
        """Open (and on first use create) the ledger of the lake with this fingerprint.

        ``budget`` is required the first time; afterwards it must match the recorded one, so a
        lifetime budget cannot be raised by accident (``set_budget`` is the deliberate change). With
        ``proposed`` (a pipeline config's ``lifetime_epsilon``), ``budget`` only proposes the lake's first
        budget: the recorded one is the lake's one lifetime budget and wins where they differ in ε or δ
        (``LakeLedger.proposed`` keeps the losing proposal, for the run to say so); another relation is
        still refused.
        ``files`` are the content identities of the lake's source files (``pipelines`` computes them):
        recorded once, they make runs on lakes that share files count against the same records.
        """
        check_name("lake fingerprint", fingerprint)
        budget_key = f"{fingerprint}/{BUDGET_NAME}"
        document = self.store.read(budget_key)
        if document is not None:
            recorded = LifetimeBudget.from_json(document)
            if (
                budget is not None
                and budget.unit != recorded.unit
                and budget == replace(recorded, unit=budget.unit)
            ):
                unused = self._open(fingerprint, recorded, self._files(fingerprint, files))
                if (
                    not unused.entries() and not unused.aborted()
                ):  # opened, never charged: the first run decides
                    self.store.replace(budget_key, budget.to_json())
                    return self._open(fingerprint, budget, unused.files)
            if budget is not None and budget.unit != recorded.unit:
                raise UnitMismatchError(
                    f"lake {fingerprint}'s ledger at {self.url} counts {describe_ledger_unit(recorded.unit)} (fixed by "
                    f"its first run), not {describe_ledger_unit(budget.unit)}: row-level and user-level runs on one "
                    f"lake do not mix (a second ledger would not make them: the records are the same). Train with "
                    f"the lake's unit ({unit_setting(recorded.unit)})"
                )
            differs = budget is not None and budget != recorded
            if differs and not (proposed and budget.relation == recorded.relation):
                raise ValueError(
                    f"lake {fingerprint} already has lifetime budget epsilon={recorded.epsilon:g}, "
                    f"delta={recorded.delta:g} ({recorded.relation}); the requested "
                    f"epsilon={budget.epsilon:g}, delta={budget.delta:g} ({budget.relation}) differs. "
                    "Use the recorded budget (in a pipeline config: budget.lifetime_epsilon and budget.delta), or change "
                    f"it deliberately: `dpstream budget set-lifetime {fingerprint} --ledger {self.url} --epsilon E "
                    "--delta D --confirm` (Python: Ledger.set_budget)"
                )
            opened = self._open(fingerprint, recorded, self._files(fingerprint, files))
            if differs:  # a proposed budget: the recorded one governs, and the caller says so
                opened.proposed = budget
            return opened
        if budget is None:
            names = self._lakes()
            holds = f"it holds {', '.join(names)}" if names else "it holds no lake yet"
            raise ValueError(
                f"lake {fingerprint} has no ledger at {self.url} yet ({holds}): no run has been charged to it there. "
                "Check the fingerprint (`dpstream validate CONFIG` prints it) and the ledger URL (budget.ledger_url); "
                "a first `dpstream train` creates it (Python: pass LifetimeBudget(epsilon, delta))"
            )
        self._mark()
        recorded_files = self._files(fingerprint, files)
        if not self.store.create(budget_key, budget.to_json()):
            return self.lake(fingerprint, budget, files)
        return self._open(fingerprint, budget, recorded_files)

    def _open(self, fingerprint: str, budget: LifetimeBudget, files: frozenset[str] | None) -> LakeLedger:
        return LakeLedger(self.store, fingerprint, budget, files, self.outage)

    def _lakes(self) -> list[str]:
        """The lakes this ledger holds (a folder with a budget), by fingerprint."""
        return [lake for lake in self.store.list("") if self.store.read(f"{lake}/{BUDGET_NAME}") is not None]

    def check_unit(self, fingerprint: str, unit: str) -> None:
        """Refuse (``UnitMismatchError``), reading only, a run of ``unit`` on a lake whose ledger counts
        another unit: the check a pipeline makes before it shuffles, so a refusal costs no shuffle."""
        check_name("lake fingerprint", fingerprint)
        document = self.store.read(f"{fingerprint}/{BUDGET_NAME}")
        if document is None:
            return
        recorded = LifetimeBudget.from_json(document)
        if recorded.unit != check_ledger_unit(unit) and self.lake(fingerprint).entries():
            raise UnitMismatchError(
                f"lake {fingerprint}'s ledger at {self.url} counts {describe_ledger_unit(recorded.unit)} (fixed by its "
                f"first run), not {describe_ledger_unit(unit)}: row-level and user-level runs on one lake do not mix "
                f"(a second ledger would not make them: the records are the same). Train with the lake's unit "
                f"({unit_setting(recorded.unit)})"
            )

    def _files(
        self, fingerprint: str, files: tuple[str, ...] | frozenset[str] | None
    ) -> frozenset[str] | None:
        """The lake's recorded source files; records ``files`` on first use (before its budget, so a lake
        is never visible without them)."""
        key = f"{fingerprint}/{FILES_NAME}"
        document = self.store.read(key)
        if document is not None:
            recorded = frozenset(document["files"])
            if files is not None and frozenset(files) != recorded:
                raise ValueError(
                    f"lake {fingerprint} is recorded with other source files than given; "
                    "the fingerprint must come from the files (dpstream.pipelines.validate_lake)"
                )
            return recorded
        if not files:
            return None
        if not self.store.create(key, {"files": sorted(files)}):
            return self._files(fingerprint, files)
        return frozenset(files)

    def unfinished_data_versions(self) -> frozenset[str]:
        """The data versions (pinned shuffle generations) of every ``reserved`` run of every lake here: what
        a run that may still resume will read again, so a prune must keep it."""
        versions = set()
        for lake in self._lakes():
            for entry in entries_in(self.store, f"{lake}/runs"):
                if entry.status == "reserved" and entry.data_version:
                    versions.add(entry.data_version)
        return frozenset(versions)

    def set_budget(self, fingerprint: str, budget: LifetimeBudget) -> LakeLedger:
        """Replace a lake's lifetime budget (an operator decision; past spend stays recorded)."""
        check_name("lake fingerprint", fingerprint)
        lake = (
            self.lake(fingerprint, None)
            if self.store.read(f"{fingerprint}/{BUDGET_NAME}") is not None
            else None
        )
        if lake is not None and budget.relation is not lake.budget.relation and lake.entries():
            raise ValueError(
                f"lake {fingerprint} has runs accounted under {lake.budget.relation}; "
                "its relation cannot change"
            )
        if lake is not None and budget.unit != lake.budget.unit and lake.entries():
            raise UnitMismatchError(
                f"lake {fingerprint} has runs that count {describe_ledger_unit(lake.budget.unit)}; its unit "
                "cannot change"
            )
        self._mark()
        self.store.replace(f"{fingerprint}/{BUDGET_NAME}", budget.to_json())
        return self._open(fingerprint, budget, self._files(fingerprint, None))
