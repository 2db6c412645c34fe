"""The per-lake ledger: budgets compose exactly, refusals are clear, retries charge once, races are safe."""

import json
import math
import multiprocessing
import os

import pytest

from dpstream.privacy import (
    BudgetExceededError,
    Ledger,
    LifetimeBudget,
    compose_mu,
    epsilon_for_delta,
    mu_for_epsilon_delta,
)

BUDGET = LifetimeBudget(epsilon=4.0, delta=1e-6)
MU_MAX = mu_for_epsilon_delta(4.0, 1e-6)


@pytest.fixture(params=["local", "s3"])
def ledger_url(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ledger"), None
    url, options = request.getfixturevalue("s3_bucket")
    return f"{url}/ledger", options


def test_runs_compose_and_refuse_past_lifetime_budget(ledger_url):
    url, options = ledger_url
    lake = Ledger(url, options).lake("lake-abc123", BUDGET)
    run_mu = MU_MAX / 2  # four such runs fit exactly: sqrt(4 · μ²/4) = μ_max
    for n in range(4):
        lake.reserve(f"run-{n}", run_mu, mechanism="dp-sgd", relation="replace-one")
        lake.commit(f"run-{n}")
    assert lake.spent_mu() == pytest.approx(MU_MAX)
    assert lake.spent_epsilon() == pytest.approx(4.0, rel=1e-9)
    with pytest.raises(BudgetExceededError) as refused:
        lake.reserve("run-4", 0.01, mechanism="dp-sgd", relation="replace-one")
    message = str(refused.value)
    assert "lake-abc123" in message and "run-4" in message and "lifetime" in message
    assert "Nothing remains" in message and "budget.lifetime_epsilon" in message
    assert len(lake.entries()) == 4
    # Re-opening (another process, a later day) sees the same spend.
    again = Ledger(url, options).lake("lake-abc123")
    assert again.spent_mu() == pytest.approx(MU_MAX)
    assert {e.status for e in again.entries()} == {"committed"}


def test_retry_is_charged_once(ledger_url):
    url, options = ledger_url
    lake = Ledger(url, options).lake("lake1", BUDGET)
    first = lake.reserve("nightly-2026-11-21", 0.5, mechanism="ambssgd", relation="replace-one")
    second = lake.reserve("nightly-2026-11-21", 0.5, mechanism="ambssgd", relation="replace-one")
    assert first == second
    assert lake.spent_mu() == pytest.approx(0.5)
    lake.commit("nightly-2026-11-21")
    lake.commit("nightly-2026-11-21")
    assert lake.spent_mu() == pytest.approx(0.5)


def test_crashed_run_stays_charged(ledger_url):
    url, options = ledger_url
    lake = Ledger(url, options).lake("lake1", BUDGET)
    lake.reserve("crashed", 0.7, mechanism="srgd", relation="replace-one")  # never committed
    reopened = Ledger(url, options).lake("lake1")
    (entry,) = reopened.entries()
    assert entry.status == "reserved"
    assert reopened.spent_mu() == pytest.approx(0.7)
    assert "spent epsilon" in reopened.statement()


def test_same_run_id_with_other_spend_refused(tmp_path):
    lake = Ledger(str(tmp_path)).lake("lake1", BUDGET)
    lake.reserve("r1", 0.5, mechanism="x", relation="replace-one")
    with pytest.raises(ValueError, match="already charged"):
        lake.reserve("r1", 0.6, mechanism="x", relation="replace-one")


def test_relation_and_budget_mismatch_refused(tmp_path):
    ledger = Ledger(str(tmp_path))
    lake = ledger.lake("lake1", BUDGET)
    with pytest.raises(ValueError, match="same neighbouring relation"):
        lake.reserve("r1", 0.5, mechanism="x", relation="zero-out")
    with pytest.raises(ValueError, match="already has lifetime budget"):
        ledger.lake("lake1", LifetimeBudget(epsilon=8.0, delta=1e-6))
    with pytest.raises(ValueError, match=r"other-lake has no ledger at .* \(it holds lake1\)"):
        ledger.lake("other-lake")
    with pytest.raises(ValueError, match=r"it holds no lake yet"):
        Ledger(str(tmp_path / "empty")).lake("lake1")
    raised = ledger.set_budget("lake1", LifetimeBudget(epsilon=8.0, delta=1e-6))
    assert raised.budget.epsilon == 8.0


@pytest.mark.parametrize("name", ["", "../escape", "a/b", "x" * 200, ".hidden"])
def test_unsafe_names_refused(tmp_path, name):
    ledger = Ledger(str(tmp_path))
    with pytest.raises(ValueError, match="fingerprint"):
        ledger.lake(name, BUDGET)
    with pytest.raises(ValueError, match="run_id"):
        ledger.lake("ok", BUDGET).reserve(name, 0.1, mechanism="x", relation="replace-one")


@pytest.mark.parametrize(
    "bad",
    [
        dict(epsilon=0, delta=1e-6),
        dict(epsilon=1, delta=0),
        dict(epsilon=1, delta=1e-6, relation="add"),
    ],
)
def test_bad_budget_values(bad):
    with pytest.raises(ValueError):
        LifetimeBudget(**bad)


def test_corrupt_entry_named_in_error(tmp_path):
    lake = Ledger(str(tmp_path)).lake("lake1", BUDGET)
    lake.reserve("r1", 0.5, mechanism="x", relation="replace-one")
    path = tmp_path / "lake1" / "runs" / "r1.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="r1.json"):
        lake.spent_mu()


def test_writes_leave_no_temporary_files(tmp_path):
    lake = Ledger(str(tmp_path)).lake("lake1", BUDGET)
    for n in range(3):
        lake.reserve(f"r{n}", 0.2, mechanism="x", relation="replace-one")
        lake.commit(f"r{n}")
    names = [name for _, _, files in os.walk(tmp_path) for name in files]
    assert sorted(names) == [
        "_dpstream_ledger.json",
        "budget.json",
        "r0.json",
        "r1.json",
        "r2.json",
    ]
    document = json.loads((tmp_path / "lake1" / "runs" / "r0.json").read_text())
    assert document["status"] == "committed" and document["mu"] == 0.2


def _racer(url, run_id, mu, results):
    lake = Ledger(url).lake("contended")
    try:
        lake.reserve(run_id, mu, mechanism="race", relation="replace-one")
        results.put((run_id, "ok"))
    except BudgetExceededError:
        results.put((run_id, "refused"))


def test_concurrent_runs_never_exceed_the_cap(tmp_path):
    """Eight processes race for a budget that fits three runs: never more than three succeed."""
    url = str(tmp_path)
    Ledger(url).lake("contended", BUDGET)
    run_mu = MU_MAX / math.sqrt(3)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    racers = [context.Process(target=_racer, args=(url, f"racer-{n}", run_mu, results)) for n in range(8)]
    for process in racers:
        process.start()
    for process in racers:
        process.join(timeout=120)
        assert process.exitcode == 0
    outcomes = dict(results.get(timeout=5) for _ in racers)
    accepted = [run for run, outcome in outcomes.items() if outcome == "ok"]
    assert len(accepted) in (1, 2, 3)
    lake = Ledger(url).lake("contended")
    assert sorted(e.run_id for e in lake.entries()) == sorted(accepted)
    assert lake.spent_mu() <= MU_MAX * (1 + 1e-12)
    assert epsilon_for_delta(1e-6, compose_mu(*(run_mu for _ in accepted))) <= 4.0 + 1e-9


def test_lakes_sharing_files_share_their_records_budget(tmp_path):
    """Per-file composition: a copy, a subset and a grown lake are charged against the same records."""
    ledger = Ledger(str(tmp_path))
    cap = BUDGET.mu
    original = ledger.lake("lake-a", BUDGET, files=("md5:1", "md5:2"))
    original.reserve("a1", 0.6 * cap, mechanism="m", relation="replace-one")
    grown = ledger.lake("lake-b", BUDGET, files=("md5:1", "md5:2", "md5:3"))  # an appended file
    assert grown.spent_mu() == pytest.approx(0.6 * cap)
    assert grown.remaining_mu() == pytest.approx(0.8 * cap)  # sqrt(1 - 0.36)
    with pytest.raises(BudgetExceededError, match="runs on lakes that share them"):
        grown.reserve("b1", 0.9 * cap, mechanism="m", relation="replace-one")
    grown.reserve("b1", 0.8 * cap, mechanism="m", relation="replace-one")
    # The grown lake's run charged the original files: nothing is left for the original.
    assert original.remaining_mu() == pytest.approx(0.0, abs=1e-6 * cap)
    with pytest.raises(BudgetExceededError):
        original.reserve("a2", 0.01 * cap, mechanism="m", relation="replace-one")
    # The appended file alone has spent only b1; a lake of only new files is independent of the rest.
    appended_only = ledger.lake("lake-c", BUDGET, files=("md5:3",))
    assert appended_only.spent_mu() == pytest.approx(0.8 * cap)
    fresh = ledger.lake("lake-d", BUDGET, files=("md5:9",))
    assert fresh.spent_mu() == 0.0 and fresh.remaining_mu() == pytest.approx(cap)
    assert "shares source files with lake-a" in grown.statement()


def test_shared_files_take_the_smallest_cap(tmp_path):
    ledger = Ledger(str(tmp_path))
    small = ledger.lake("lake-small", LifetimeBudget(epsilon=0.5, delta=1e-6), files=("md5:1",))
    large = ledger.lake("lake-large", LifetimeBudget(epsilon=8.0, delta=1e-6), files=("md5:1", "md5:2"))
    assert large.remaining_mu() == pytest.approx(small.budget.mu)
    with pytest.raises(ValueError, match="other source files"):
        ledger.lake("lake-small", files=("md5:7",))


@pytest.mark.parametrize("content", ["{}", "[1, 2]", '{"run_id": "r", "mu": "lots", "status": "reserved"}'])
def test_malformed_entry_names_the_file(tmp_path, content):
    lake = Ledger(str(tmp_path)).lake("lake1", BUDGET)
    lake.reserve("good", 0.1, mechanism="m", relation="replace-one")
    (tmp_path / "lake1" / "runs" / "bad.json").write_text(content)
    with pytest.raises(ValueError, match=r"bad\.json is not a dpstream ledger entry .* restore it"):
        lake.spent_mu()


def test_a_refusal_says_which_epsilon_still_fits(tmp_path):
    lake = Ledger(str(tmp_path)).lake("lake-abc123", BUDGET)
    lake.reserve("first", MU_MAX * 0.6, mechanism="m", relation="replace-one")
    with pytest.raises(BudgetExceededError) as refused:
        lake.reserve("second", MU_MAX * 0.9, mechanism="m", relation="replace-one")
    remaining = (MU_MAX**2 - (0.6 * MU_MAX) ** 2) ** 0.5  # GDP composition: μ_max² = Σ μ_i²
    fits = epsilon_for_delta(BUDGET.delta, remaining)
    assert f"to at most {fits:.4g} at delta={BUDGET.delta:g}" in str(refused.value)
    assert "budget.epsilon" in str(refused.value)
    lake.reserve(
        "second", remaining * 0.999, mechanism="m", relation="replace-one"
    )  # what it said fits, fits


def test_a_claim_whose_answer_was_lost_is_recognised_as_ours(tmp_path, monkeypatch):
    """A claim's exclusive PUT that succeeded but was retried after a lost answer finds the key taken:
    the ledger finds its own claim token there and keeps the claim."""
    lake = Ledger(str(tmp_path)).lake("lake-1", BUDGET)
    original = lake.store.create

    def retried(key, document):
        original(key, document)
        return not key.endswith("/runs/r1.json")  # as if the key had been there: the retry's view

    monkeypatch.setattr(lake.store, "create", retried)
    entry = lake.claim("r1", 0.5, mechanism="x", relation="replace-one")
    assert lake.entry("r1").claim == entry.claim and entry.status == "reserved"


def test_a_recorded_budget_above_the_cap_stays_readable_and_changeable(tmp_path):
    """An earlier version could record a lifetime ε above 100; the ledger still opens it, and set_budget
    (`dpstream budget set-lifetime`) replaces it; a new budget above the cap is refused."""
    lake = tmp_path / "lake-1"
    lake.mkdir()
    (lake / "budget.json").write_text(
        json.dumps({"epsilon": 1e300, "delta": 1e-6, "relation": "replace-one"})
    )
    ledger = Ledger(str(tmp_path))
    assert ledger.lake("lake-1").budget.epsilon == 1e300
    assert ledger.set_budget("lake-1", LifetimeBudget(8.0, 1e-6)).budget.epsilon == 8.0
    with pytest.raises(ValueError, match="at most 100"):
        LifetimeBudget(1e300, 1e-6)


PEOPLE = LifetimeBudget(epsilon=4.0, delta=1e-6, unit="user:customer")


def test_a_lakes_unit_is_fixed_by_its_first_run(tmp_path):
    """A lake's budget counts rows or people, as its first run did; the other is refused."""
    from dpstream.privacy import UnitMismatchError

    ledger = Ledger(str(tmp_path))
    lake = ledger.lake("lake1", PEOPLE)
    entry = lake.reserve("u1", 0.5, mechanism="m", relation="replace-one", unit="user:customer")
    assert entry.unit == "user:customer"
    with pytest.raises(UnitMismatchError, match="counts rows, but lake lake1's ledger counts people"):
        lake.reserve("r1", 0.1, mechanism="m", relation="replace-one")  # a row-level run
    with pytest.raises(UnitMismatchError, match="counts people \\(one per value of 'account'\\)"):
        lake.reserve("a1", 0.1, mechanism="m", relation="replace-one", unit="user:account")
    with pytest.raises(UnitMismatchError, match="do not mix"):
        ledger.lake("lake1", BUDGET)  # a row-level config on the same lake
    with pytest.raises(UnitMismatchError, match="its unit cannot change"):
        ledger.set_budget("lake1", BUDGET)
    assert [e.run_id for e in lake.entries()] == ["u1"]  # nothing was charged by the refusals
    with pytest.raises(ValueError, match="'row' or 'user:<id column>'"):
        LifetimeBudget(epsilon=4.0, delta=1e-6, unit="person")


def test_a_budget_written_before_units_is_the_rows(tmp_path):
    ledger = Ledger(str(tmp_path))
    ledger.lake("lake1", BUDGET)
    path = tmp_path / "lake1" / "budget.json"
    document = json.loads(path.read_text())
    del document["unit"]
    path.write_text(json.dumps(document))
    assert ledger.lake("lake1", BUDGET).budget.unit == "row"


def test_lakes_sharing_files_share_their_unit(tmp_path):
    from dpstream.privacy import UnitMismatchError

    ledger = Ledger(str(tmp_path))
    ledger.lake("rows", BUDGET, files=("md5:1",)).reserve("r1", 0.2, mechanism="m", relation="replace-one")
    people = ledger.lake("people", PEOPLE, files=("md5:1", "md5:2"))
    with pytest.raises(UnitMismatchError, match="shares source files with lake rows"):
        people.reserve("u1", 0.2, mechanism="m", relation="replace-one", unit="user:customer")


def test_a_proposed_budget_yields_to_the_recorded_one_but_not_across_relations(tmp_path):
    ledger = Ledger(str(tmp_path))
    ledger.lake("lake1", BUDGET)
    lake = ledger.lake("lake1", LifetimeBudget(epsilon=8.0, delta=1e-6), proposed=True)
    assert lake.budget == BUDGET and lake.proposed.epsilon == 8.0
    assert ledger.lake("lake1", BUDGET, proposed=True).proposed is None
    with pytest.raises(ValueError, match="already has lifetime budget"):
        ledger.lake("lake1", LifetimeBudget(epsilon=8.0, delta=1e-6, relation="zero-out"), proposed=True)
