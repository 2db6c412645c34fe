"""``dpstream budget``: show a lake's privacy ledger, reset it for a lake that now holds other people's
data, or change its lifetime budget deliberately (``set-lifetime``)."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
from pathlib import Path

from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console
from dpstream.outages import OutagePolicy
from dpstream.privacy import Ledger, LifetimeBudget, gdp

__all__ = ["run"]

INTERACTIVE_OUTAGE_SECONDS = 30.0


def _lake_and_ledger(args: argparse.Namespace) -> tuple[str, str]:
    """(the lake's fingerprint, the ledger URL) from a pipeline config, or as given."""
    if not Path(args.lake).is_file():
        if args.ledger is None:
            raise ValueError(
                f"{args.lake} is not a pipeline config file, so it is read as a lake fingerprint, which needs "
                "--ledger URL; or pass the config (its budget.ledger_url is the ledger)"
            )
        return args.lake, args.ledger
    from dpstream.flows.cli.validate import validated_lake  # the config's lake, read as validate does

    inputs, validated = validated_lake(args, args.lake, "budget", show_progress=False)
    return validated.summary.fingerprint, args.ledger or inputs.config.budget.ledger_url


def run(args: argparse.Namespace) -> int:
    console = result_console()
    args.lake, args.ledger = _lake_and_ledger(args)
    # Someone at a terminal: an unreachable ledger is reported within half a minute, not a run's 10.
    ledger = Ledger(args.ledger, outage=OutagePolicy(window_seconds=INTERACTIVE_OUTAGE_SECONDS))
    lake = ledger.lake(args.lake)
    if args.action == "show":
        console.print(lake.statement())
        for entry in lake.entries():
            console.print(_entry_line(entry))
        aborted = lake.aborted()
        if aborted:
            console.print(
                f"{len(aborted)} run(s) gave their reservation back before releasing anything (not charged):"
            )
            for entry in aborted:
                console.print(f"  {entry.run_id}: aborted {entry.aborted_at}: {entry.reason}")
        for tag, entries in lake.archives():
            spent = math.sqrt(sum(entry.mu**2 for entry in entries))
            console.print(
                f"reset {tag}: {len(entries)} earlier run(s) archived, mu={spent:.6g} (epsilon="
                f"{gdp.epsilon_for_delta(lake.budget.delta, spent) if spent else 0.0:.4g} at delta="
                f"{lake.budget.delta:g}); not counted above, and not restored to the individuals whose "
                "data those runs read"
            )
            for entry in entries:
                console.print(_entry_line(entry))
        return EXIT_OK
    if args.action == "set-lifetime":
        if args.epsilon is None:
            raise ValueError("budget set-lifetime needs --epsilon E (and --delta D to change δ)")
        budget = LifetimeBudget(
            args.epsilon,
            args.delta if args.delta is not None else lake.budget.delta,
            lake.budget.relation,
            unit=lake.budget.unit,  # per row or per person, as the lake's first run fixed it
        )
        spent = lake.spent_epsilon() if lake.entries() else 0.0
        change = (
            f"lake {args.lake}: lifetime budget epsilon={lake.budget.epsilon:g}, delta={lake.budget.delta:g} -> "
            f"epsilon={budget.epsilon:g}, delta={budget.delta:g} ({len(lake.entries())} run(s) recorded, "
            f"epsilon={spent:.4g} spent at the old delta)"
        )
        if not args.confirm:
            raise ValueError(
                f"{change}. A lifetime budget bounds what every run on this lake may ever spend for the people in "
                "it: change it only deliberately. Re-run with --confirm"
            )
        ledger.set_budget(args.lake, budget)
        console.print(f"{change}: done. Runs recorded before stay charged")
        return EXIT_OK
    if not args.confirm:
        raise ValueError(
            "budget reset forgets every recorded run of this lake; only do it when the lake's data were replaced "
            "by new individuals' records. Re-run with --confirm"
        )
    archived = lake.archive_runs(_dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ"))
    console.print(
        f"archived {archived} run(s) of lake {args.lake}: new runs are charged from zero. A reset restores no "
        "privacy: what those runs spent stays spent for the individuals whose records they read, so reset "
        f"only for a lake that now holds other individuals' data. `dpstream budget show {args.lake} --ledger "
        f"{args.ledger}` lists the archive"
    )
    return EXIT_OK


def _entry_line(entry) -> str:
    return (
        f"  {entry.run_id}: mu={entry.mu:.6g} {entry.status} ({entry.mechanism}) reserved {entry.reserved_at}"
    )
