"""The ledger under damage and races: a binary-corrupted entry names its file and the fix; two first
claims at one moment on lakes sharing files both get a clear answer; a claim retried after an outage
that hid whether it landed is recognised as its own."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from dpstream.outages import OutagePolicy
from dpstream.privacy import Ledger, LifetimeBudget, RunIdReusedError

BUDGET = LifetimeBudget(4.0, 1e-6)


def test_a_binary_corrupted_entry_names_its_file_and_the_fix(tmp_path):
    lake = Ledger(str(tmp_path)).lake("lake1", BUDGET)
    lake.reserve("r1", 0.3, mechanism="x", relation="replace-one")
    path = tmp_path / "lake1" / "runs" / "r1.json"
    path.write_bytes(b"\xca\xfe\xba\xbe\x00\x01binary")
    with pytest.raises(ValueError) as refused:
        lake.spent_mu()
    message = str(refused.value)
    assert str(path) in message and "not valid JSON (binary bytes" in message
    assert "restore it from a backup" in message and "utf-8" not in message


def test_simultaneous_first_claims_on_lakes_sharing_files_both_get_an_answer(tmp_path):
    shared = ("md5:shared",)
    for attempt in range(20):
        url = str(tmp_path / f"ledger-{attempt}")
        errors: list[BaseException] = []
        charged: list[str] = []
        barrier = threading.Barrier(2)

        def first_run(
            lake: str,
            files: tuple[str, ...],
            where=url,
            seen=errors,
            done=charged,
            start=barrier,
        ) -> None:
            start.wait()
            try:
                ledger = Ledger(where).lake(lake, BUDGET, files=files)
                ledger.reserve("nightly", 0.3, mechanism="m", relation="replace-one")
                done.append(lake)
            except BaseException as error:  # noqa: BLE001 - recorded and asserted on below
                seen.append(error)

        threads = [
            threading.Thread(target=first_run, args=("lake-a", shared + ("md5:a",))),
            threading.Thread(target=first_run, args=("lake-b", shared + ("md5:b",))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and sorted(charged) == ["lake-a", "lake-b"], (
            attempt,
            errors,
        )
        # Both runs charge the shared file: its spend is the composition of the two.
        assert Ledger(url).lake("lake-a").spent_mu() == pytest.approx((0.3**2 + 0.3**2) ** 0.5)


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_claim_retried_after_an_outage_finds_its_own_entry(tmp_path, monkeypatch, store, request):
    """The write landed but its answer was lost to an outage: the retry must not refuse the run's own
    claim as another run's (the token is drawn once, before the retried part), nor count it twice near
    the cap (on S3 the folder listing cached before the write must not hide the entry)."""
    url, options = (str(tmp_path), None) if store == "local" else request.getfixturevalue("s3_bucket")
    outage = OutagePolicy(window_seconds=10.0, first_wait_seconds=0.01, longest_wait_seconds=0.02)
    lake = Ledger(f"{url}/ledger", options, outage=outage).lake("lake-1", BUDGET)
    lake.reserve("earlier", BUDGET.mu * 0.7, mechanism="x", relation="replace-one")
    files, original, failures = lake.store, lake.store.create, []

    def lost_answer(key, document):
        listed = dict(getattr(files.fs, "dircache", {}))  # the listing the budget check just read
        created = original(key, document)
        if key.endswith("/runs/r1.json") and not failures:
            failures.append(key)
            if hasattr(
                files.fs, "dircache"
            ):  # a PUT that landed unanswered leaves the client's listing as it was
                files.fs.dircache.clear()
                files.fs.dircache.update(listed)
            raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")
        return created

    monkeypatch.setattr(files, "create", lost_answer)
    entry = lake.claim("r1", BUDGET.mu * 0.7, mechanism="x", relation="replace-one")  # fits once, not twice
    assert failures and lake.entry("r1").claim == entry.claim and len(lake.entries()) == 2
    with pytest.raises(RunIdReusedError):  # a second claim of the id is still refused
        lake.claim("r1", 0.1, mechanism="x", relation="replace-one")


def test_an_abort_retried_after_an_outage_gives_back_once(tmp_path, monkeypatch):
    """The entry's removal landed but its answer was lost: the retried abort finds the entry gone and its
    own record, and reports the reservation given back (one aborted record, nothing charged)."""
    outage = OutagePolicy(window_seconds=10.0, first_wait_seconds=0.01, longest_wait_seconds=0.02)
    lake = Ledger(str(tmp_path), outage=outage).lake("lake-1", BUDGET)
    entry = lake.claim("r1", 0.3, mechanism="x", relation="replace-one")
    original, lost = lake.store.remove, []

    def remove(key):
        original(key)
        if key.endswith("/runs/r1.json") and not lost:
            lost.append(key)
            raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")

    monkeypatch.setattr(lake.store, "remove", remove)
    given_back = lake.abort("r1", entry.claim, "failed before its first release")
    assert lost and given_back is not None and given_back.status == "aborted"
    assert lake.entries() == [] and [e.run_id for e in lake.aborted()] == ["r1"]


def test_files_recorded_long_ago_without_a_budget_are_not_waited_for(tmp_path):
    """A first run that crashed between recording its lake's files and its budget leaves files alone:
    runs on lakes sharing them do not wait for a budget that will never come."""
    import json
    import time

    orphan = tmp_path / "lake-crashed"
    orphan.mkdir()
    (orphan / "files.json").write_text(json.dumps({"files": ["md5:shared"]}))
    old = time.time() - 3600
    os.utime(orphan / "files.json", (old, old))
    lake = Ledger(str(tmp_path)).lake("lake-new", BUDGET, files=("md5:shared", "md5:new"))
    started = time.monotonic()
    lake.reserve("r1", 0.3, mechanism="x", relation="replace-one")
    assert time.monotonic() - started < 2.0 and lake.spent_mu() == pytest.approx(0.3)
