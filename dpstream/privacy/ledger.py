"""A persistent privacy ledger per lake: lifetime budget, every run's spend, refusal when exhausted.

Layout under the ledger URL (local path or ``s3://``), one folder per lake fingerprint::

    <root>/_dpstream_ledger.json                 marks the folder as a ledger (no output may go there)
    <root>/<fingerprint>/budget.json             lifetime budget (ε, δ, relation), written once
    <root>/<fingerprint>/files.json              the content identities of the lake's source files
    <root>/<fingerprint>/runs/<run_id>.json      one entry per run: reserved, then committed
    <root>/<fingerprint>/aborted/<run_id>-<t>.json  runs that gave their reservation back unreleased

Runs compose exactly: every dpstream run is a μ_i-GDP mechanism under the ledger's relation, so the
lake's cumulative guarantee is sqrt(Σ μ_i²)-GDP (Dong, Roth & Su 2022, Cor. 3.3) and the lifetime
budget (ε, δ) is the cap μ_max = μ*(ε, δ).

**The privacy unit is fixed by the first run.** ``budget.json`` records what the budget counts: rows,
or people (``"user:<id column>"``, ``dpstream.privacy.PrivacyUnit``). A lake's first run writes it;
a run of another unit, on this lake or on a lake sharing its files, is refused (``UnitMismatchError``):
a row's μ bounds nothing about a person of many rows, and a person's budget cannot be split into rows.

**The unit is the data.** A record lives in one source file, and a run on a lake is a mechanism
applied to every record of every file of that lake. So the spend of a record in file f is the
composition over every run of every lake (under this ledger URL) that contains f:
μ_f = sqrt(Σ_{lakes L ∋ f} Σ_{runs r of L} μ_r²), and its cap is the smallest lifetime budget among
those lakes. A run is admitted only if every file of its lake stays within its cap. A byte copy of a
lake at another URL, a lake read with other columns, and a lake that grew by appended files share
files with the original, so their runs are charged to the same records (a run on a grown lake
charges the old files and the new ones; the new files start from zero). Lakes opened without file
identities are their own unit.

Protocol (no locks, safe on S3):

1. ``claim(run_id, mu)`` starts a run: it refuses if the entries already recorded plus ``mu`` exceed
   μ_max, else creates ``runs/<run_id>.json`` *exclusively* (O_EXCL on disk, a conditional PUT on S3)
   with a random claim token, and *then* re-reads all entries. If the total it now sees exceeds μ_max
   it deletes its own new entry and refuses. Of two racing runs the one that lists second sees both,
   so the cap can never be exceeded; at worst both refuse. Of two runs claiming one run id, exactly
   one creates the entry; the other is refused (``RunIdReusedError``) before it draws a noise key, so
   one run id can never release two models.
2. A resumed run continues its claim (``reserve``: an existing entry with the same μ is returned): a
   retried or resumed run is charged once. The same id with a different μ is refused.
3. ``commit(run_id)`` marks the entry complete. A crashed run keeps its reservation: what was
   released is spent, whether or not the run finished.
4. ``abort(run_id, claim, reason)``: a run that fails before its first release gives its reservation
   back; the entry moves to ``aborted/`` with the reason, and the run id is free again.

A store that cannot be reached is waited for (``dpstream.outages``: ``outage``, 10 minutes by default) in
each of these steps, which are idempotent: a claim retried after its write recognises its own token.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import asdict, replace

from dpstream.outages import OutagePolicy, rides_out
from dpstream.privacy import gdp
from dpstream.privacy.ledger_errors import (
    BudgetExceededError,
    RunIdReusedError,
    UnitMismatchError,
    budget_refusal,
    run_id_taken,
    unit_setting,
    unit_word,
)
from dpstream.privacy.ledger_records import (
    LedgerEntry,
    LifetimeBudget,
    check_ledger_unit,
    describe_ledger_unit,
    entries_in,
    entry_at,
    now,
    overlapping_lakes,
)
from dpstream.privacy.ledger_spend import spend_by_file_group
from dpstream.privacy.ledger_store import LedgerStore
from dpstream.privacy.relation import NeighbouringRelation
from dpstream.validation import check_name, check_positive

__all__ = [
    "BudgetExceededError",
    "LakeLedger",
    "LedgerEntry",
    "LifetimeBudget",
    "RunIdReusedError",
    "UnitMismatchError",
    "unit_setting",
]

_MU_SLACK = 1e-12  # relative: float noise in sqrt(Σμ²) must not refuse an exactly-fitting run
_REASON_CHARS = 500


class LakeLedger:
    """The ledger of one lake. Obtain it with ``Ledger(url).lake(fingerprint, budget, files=...)``."""

    def __init__(
        self,
        store: LedgerStore,
        fingerprint: str,
        budget: LifetimeBudget,
        files: frozenset[str] | None = None,
        outage: OutagePolicy | None = None,
    ):
        self.store = store
        self.fingerprint = fingerprint
        self.budget = budget
        self.proposed: LifetimeBudget | None = None  # a config's budget the recorded one overrode
        self.files = files
        self.outage = outage or OutagePolicy()

    @property
    def store_name(self) -> str:
        return f"the privacy ledger of lake {self.fingerprint} ({self.store.show(self.fingerprint)})"

    def _run_path(self, run_id: str) -> str:
        return f"{self.fingerprint}/runs/{check_name('run_id', run_id)}.json"

    def entries(self) -> list[LedgerEntry]:
        """This lake's charged run entries (reserved or committed)."""
        return entries_in(self.store, f"{self.fingerprint}/runs")

    def aborted(self) -> list[LedgerEntry]:
        """Runs that gave their reservation back before releasing anything (not charged)."""
        return entries_in(self.store, f"{self.fingerprint}/aborted")

    @rides_out("read the ledger entry of run")
    def entry(self, run_id: str) -> LedgerEntry | None:
        # The store reads afresh: a write whose answer was lost to an outage may have landed, and a
        # retried claim must see its own entry.
        return entry_at(self.store, self._run_path(run_id))

    def _charges(self, exclude: str | None = None) -> list[tuple[float, float]]:
        return spend_by_file_group(self.store, self.fingerprint, self.budget, self.files, exclude)

    def spent_mu(self) -> float:
        """The μ already spent on this lake's most charged record (runs of overlapping lakes included)."""
        return math.sqrt(max(spent for spent, _ in self._charges()))

    def spent_epsilon(self) -> float:
        return gdp.epsilon_for_delta(self.budget.delta, self.spent_mu())

    def remaining_mu(self, exclude: str | None = None) -> float:
        """The largest μ a further run may spend: min over files of sqrt(μ_max² − Σ μ_i²).

        ``exclude`` leaves that run's own entry out, so a resumed run is measured against what the
        others spent (its reservation would otherwise be counted twice)."""
        return math.sqrt(max(0.0, min(cap**2 - spent for spent, cap in self._charges(exclude))))

    def _fits(self, mu: float, exclude: str | None = None) -> bool:
        return all(
            math.sqrt(spent + mu**2) <= cap * (1.0 + _MU_SLACK) for spent, cap in self._charges(exclude)
        )

    def _refusal(self, run_id: str, mu: float) -> BudgetExceededError:
        charges = self._charges(exclude=run_id)
        return budget_refusal(
            run_id,
            mu,
            self.fingerprint,
            self.budget,
            spent=math.sqrt(max(spent for spent, _ in charges)),
            shared=len(charges) > 1 or bool(self._others()),
            remaining=self.remaining_mu(run_id),
        )

    def _others(self) -> list[str]:
        if self.files is None:
            return []
        return [lake for lake in overlapping_lakes(self.store, self.files) if lake != self.fingerprint]

    @rides_out("check the budget of run")
    def check(self, run_id: str, mu: float) -> None:
        """Refuse (``BudgetExceededError``) unless ``run_id`` may spend ``mu`` now; writes nothing.

        A run id already recorded is checked without its own entry: its resume is charged once."""
        check_name("run_id", run_id)
        if not self._fits(float(mu), exclude=run_id):
            raise self._refusal(run_id, float(mu))

    def _check_relation(
        self, run_id: str, relation: NeighbouringRelation | str, unit: str = "row"
    ) -> NeighbouringRelation:
        relation = NeighbouringRelation.parse(relation)
        if relation is not self.budget.relation:
            raise ValueError(
                f"run {run_id!r} is accounted under {relation} but lake {self.fingerprint}'s ledger "
                f"under {self.budget.relation}; use the same neighbouring relation for every run"
            )
        check_ledger_unit(unit)
        if unit != self.budget.unit:
            raise UnitMismatchError(
                f"run {run_id!r} counts {describe_ledger_unit(unit)}, but lake {self.fingerprint}'s ledger counts "
                f"{describe_ledger_unit(self.budget.unit)} (fixed by its first run): the two do not mix, "
                f"since a row-level ε says nothing of a person's and a person's budget cannot be split into rows. "
                f"Train with the lake's unit ({unit_setting(self.budget.unit)})"
            )
        return relation

    def claim(
        self,
        run_id: str,
        mu: float,
        *,
        mechanism: str,
        relation: NeighbouringRelation | str,
        data_version: str | None = None,
        unit: str = "row",
    ) -> LedgerEntry:
        """Start ``run_id``: charge ``mu`` by creating its entry exclusively (module docstring, step 1).

        Returns the entry with its fresh ``claim`` token; raises ``RunIdReusedError`` when the run id
        already has an entry (another process claimed it, or it ran before), and
        ``BudgetExceededError`` when ``mu`` does not fit."""
        mu = check_positive("mu", mu)
        relation = self._check_relation(run_id, relation, unit)
        entry = LedgerEntry(
            run_id=run_id,
            mu=mu,
            relation=relation.value,
            status="reserved",
            mechanism=mechanism,
            reserved_at=now(),
            claim=secrets.token_hex(16),
            data_version=data_version,
            unit=unit,
        )
        # The token is drawn once, outside the retried part: a retry after an outage that hid whether the
        # write landed finds its own entry instead of refusing it as another run's.
        return self.outage.call(
            lambda: self._place(entry),
            store=self.store_name,
            what=f"reserve run {run_id!r}",
        )

    def _place(self, entry: LedgerEntry) -> LedgerEntry:
        run_id = entry.run_id
        existing = self.entry(run_id)
        if existing is not None and existing.claim != entry.claim:
            raise run_id_taken(run_id, self.fingerprint, existing)
        if existing is None:
            if not self._fits(entry.mu):
                raise self._refusal(run_id, entry.mu)
            if not self.store.create(self._run_path(run_id), asdict(entry)):
                found = self.entry(run_id)  # our own, when an attempt's answer was lost after it landed
                if found is None or found.claim != entry.claim:
                    raise run_id_taken(run_id, self.fingerprint, found)
        # Re-read everything after the write: of two racing reservations (on this lake or on lakes
        # that share files) the one that reads second sees both, so no cap is ever exceeded.
        if not self._fits(0.0):
            self.store.remove(self._run_path(run_id))
            raise self._refusal(run_id, entry.mu)
        return entry

    def reserve(
        self,
        run_id: str,
        mu: float,
        *,
        mechanism: str,
        relation: NeighbouringRelation | str,
        data_version: str | None = None,
        unit: str = "row",
    ) -> LedgerEntry:
        """Charge ``mu`` to this lake for ``run_id`` before anything is released (idempotent: an existing
        entry with the same μ is returned, so a retried or resumed run is charged once; else ``claim``)."""
        mu = check_positive("mu", mu)
        self._check_relation(run_id, relation, unit)
        existing = self.entry(run_id)
        if existing is not None:
            if not math.isclose(existing.mu, mu, rel_tol=1e-12, abs_tol=0.0):
                raise ValueError(
                    f"run {run_id!r} is already charged mu={existing.mu:.6g}, not {mu:.6g}: a resumed "
                    "run must use its original configuration; start a new run id instead"
                )
            return existing
        charge = dict(mechanism=mechanism, relation=relation, data_version=data_version, unit=unit)
        try:
            return self.claim(run_id, mu, **charge)
        except RunIdReusedError:  # claimed by a racing reservation of the same run: charged once
            return self.reserve(run_id, mu, **charge)

    @rides_out("commit run")
    def commit(self, run_id: str, claim: str | None = None) -> LedgerEntry:
        """Mark a reserved run as completed. Committing twice is a no-op. With ``claim`` the entry must be
        that claim's (``RunIdReusedError`` otherwise: the run id was claimed again meanwhile)."""
        entry = self.entry(run_id)
        if entry is None:
            raise KeyError(
                f"run {run_id!r} has no reservation in lake {self.fingerprint}'s ledger; reserve before training"
            )
        if claim is not None and entry.claim is not None and entry.claim != claim:
            raise RunIdReusedError(
                f"run {run_id!r}'s ledger entry belongs to another claim of that run id (reserved {entry.reserved_at}): "
                "this run's reservation was given back by another process; nothing of it is published. Use a new run id"
            )
        if entry.status == "committed":
            return entry
        committed = replace(entry, status="committed", committed_at=now())
        self.store.replace(self._run_path(run_id), asdict(committed))
        return committed

    def abort(self, run_id: str, claim: str | None, reason: str) -> LedgerEntry | None:
        """Give back the reservation of a run that failed before its first release: its entry moves to
        ``aborted/`` with ``reason`` and no longer counts. Only the holder of the entry's ``claim`` token
        may do this, and only a ``reserved`` entry; returns the aborted entry, or None when there was
        nothing of this claim to give back.

        The aborted record is written first, then the entry is read again and removed only if it is still
        this claim's reserved entry: a process that resumed the run from its checkpoint and committed it
        meanwhile keeps its charge (the window between that second read and the removal is not closed on
        object stores, which have no compare-and-delete). The record's name is drawn once, so a retry
        after an outage that hid whether a step landed finds its own record, or its entry already gone."""
        entry = self.entry(run_id)
        if entry is None or entry.status != "reserved" or entry.claim != claim:
            return None
        aborted = replace(entry, status="aborted", aborted_at=now(), reason=reason[:_REASON_CHARS])
        stamp = aborted.aborted_at.replace(":", "").replace("+", "Z")[:17]
        record = f"{self.fingerprint}/aborted/{run_id}-{stamp}-{secrets.token_hex(3)}.json"
        return self.outage.call(
            lambda: self._move_to_aborted(aborted, record),
            store=self.store_name,
            what=f"give back the reservation of run {run_id!r}",
        )

    def _move_to_aborted(self, aborted: LedgerEntry, record: str) -> LedgerEntry | None:
        self.store.create(record, asdict(aborted))  # False: its own, from an attempt whose answer was lost
        again = self.entry(aborted.run_id)
        if again is None:
            return aborted  # removed by an earlier attempt of this abort (only the claim's holder aborts)
        if again.status != "reserved" or again.claim != aborted.claim:
            self.store.remove(record)
            return None
        self.store.remove(self._run_path(aborted.run_id))
        return aborted

    def archive_runs(self, tag: str) -> int:
        """Move every run entry under ``archived-<tag>/``: an operator's reset for a lake whose data were
        replaced by other individuals' records. Returns how many entries moved (each is written to the
        archive before it leaves ``runs/``, so none is ever lost)."""
        check_name("archive tag", tag)
        moved = 0
        for entry in self.entries():
            source = self._run_path(entry.run_id)
            archived = f"{self.fingerprint}/archived-{tag}/{entry.run_id}.json"
            self.store.replace(archived, self.store.read(source))
            self.store.remove(source)
            moved += 1
        return moved

    def archives(self) -> list[tuple[str, list[LedgerEntry]]]:
        """The reset archives (``archived-<tag>/``, oldest first), each with the run entries it holds."""
        prefix = f"{self.fingerprint}/archived-"
        return [
            (folder[len(prefix) :], entries_in(self.store, folder))
            for folder in self.store.list(self.fingerprint)
            if folder.startswith(prefix)
        ]

    def statement(self) -> str:
        entries = self.entries()
        spent = self.spent_mu()
        eps = gdp.epsilon_for_delta(self.budget.delta, spent) if spent > 0 else 0.0
        others = self._others()
        shared = f"; shares source files with {', '.join(others)}, whose runs count too" if others else ""
        return (
            f"lake {self.fingerprint}: {len(entries)} run(s), spent epsilon={eps:.4g} of "
            f"{self.budget.epsilon:g} at delta={self.budget.delta:g} per {unit_word(self.budget.unit)} "
            f"({self.budget.relation}; mu={spent:.4g} of {self.budget.mu:.4g}){shared}"
        )
