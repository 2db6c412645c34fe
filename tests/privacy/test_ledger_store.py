"""The ledger store seam: the ledger's policy runs unchanged on another store. A store of documents in a
dict (what a database table or key-value service would be) holds the same protocol: claims exclusive,
runs composed across lakes sharing files, refusals, aborts, archives."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from dpstream.privacy import (
    BudgetExceededError,
    Ledger,
    LifetimeBudget,
    RunIdReusedError,
)

BUDGET = LifetimeBudget(4.0, 1e-6)


class DictLedgerStore:
    """A ``LedgerStore`` in memory: keys to JSON documents, ``create`` exclusive under a lock."""

    def __init__(self) -> None:
        self.url = "memory://ledger"
        self.documents: dict[str, Any] = {}
        self._lock = threading.Lock()

    def read(self, key: str) -> Any | None:
        return copy.deepcopy(self.documents.get(key))

    def create(self, key: str, document: Any) -> bool:
        with self._lock:
            if key in self.documents:
                return False
            self.documents[key] = copy.deepcopy(document)
            return True

    def replace(self, key: str, document: Any) -> None:
        self.documents[key] = copy.deepcopy(document)

    def remove(self, key: str) -> None:
        self.documents.pop(key, None)

    def list(self, folder: str) -> list[str]:
        prefix = f"{folder}/" if folder else ""
        return sorted(
            {prefix + key[len(prefix) :].split("/", 1)[0] for key in self.documents if key.startswith(prefix)}
        )

    def age_seconds(self, key: str) -> float | None:
        return None

    def show(self, key: str) -> str:
        return f"{self.url}/{key}"


def test_the_ledger_runs_on_another_store():
    store = DictLedgerStore()
    ledger = Ledger(store.url, store=store)
    lake = ledger.lake("lake-a", BUDGET, files=("md5:1", "md5:2"))
    first = lake.claim("r1", BUDGET.mu * 0.6, mechanism="m", relation="replace-one")
    with pytest.raises(RunIdReusedError):
        lake.claim("r1", 0.1, mechanism="m", relation="replace-one")
    assert lake.commit("r1", first.claim).status == "committed"
    # A lake sharing a file with lake-a is charged with lake-a's runs on that file.
    other = ledger.lake("lake-b", BUDGET, files=("md5:2", "md5:3"))
    with pytest.raises(BudgetExceededError):
        other.reserve("r2", BUDGET.mu * 0.9, mechanism="m", relation="replace-one")
    second = other.claim("r2", BUDGET.mu * 0.5, mechanism="m", relation="replace-one")
    assert other.abort("r2", second.claim, "failed before its first release").status == "aborted"
    assert other.entries() == [] and [e.run_id for e in other.aborted()] == ["r2"]
    assert lake.archive_runs("reset-1") == 1 and lake.entries() == []
    assert [(tag, [e.run_id for e in entries]) for tag, entries in lake.archives()] == [("reset-1", ["r1"])]
    assert (
        "lake-a/archived-reset-1/r1.json" in store.documents and "lake-a/runs/r1.json" not in store.documents
    )
    assert Ledger(store.url, store=store).lake("lake-a").budget == BUDGET  # reopened from the documents


def test_simultaneous_claims_of_one_run_id_on_another_store_have_one_winner():
    store = DictLedgerStore()
    lake = Ledger(store.url, store=store).lake("lake-a", BUDGET)
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def claim() -> None:
        barrier.wait()
        try:
            lake.claim("nightly", 0.2, mechanism="m", relation="replace-one")
            outcomes.append("claimed")
        except RunIdReusedError:
            outcomes.append("refused")

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["claimed", "refused", "refused", "refused"]
