"""The privacy commands. ``dpstream budget``: show a lake's ledger, reset it for a lake that now holds other
people's data, or change its lifetime budget deliberately (``set-lifetime``). ``dpstream audit``: an
empirical lower bound on epsilon from a worst-case canary."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
from typing import TYPE_CHECKING

from dpstream.flows.cli.support import EXIT_OK, EXIT_OTHER

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["budget_command", "add_budget_parser", "audit_command", "add_audit_parser"]


def add_budget_parser(commands) -> None:
    budget = commands.add_parser(
        "budget", help="show, reset or change a lake's privacy ledger (lifetime budget: set-lifetime)"
    )
    budget.add_argument("action", choices=["show", "reset", "set-lifetime"])
    budget.add_argument("lake", help="the lake fingerprint (`dpstream validate CONFIG` prints it)")
    budget.add_argument("--ledger", required=True, help="ledger URL")
    budget.add_argument("--epsilon", type=float, default=None, help="set-lifetime: the new lifetime ε")
    budget.add_argument(
        "--delta", type=float, default=None, help="set-lifetime: the new δ (default: the recorded one)"
    )
    budget.add_argument(
        "--confirm", action="store_true", help="reset and set-lifetime change the ledger only with it"
    )
    budget.set_defaults(handler=budget_command)


INTERACTIVE_OUTAGE_SECONDS = 30.0


def budget_command(args: argparse.Namespace, console: Console) -> int:
    from dpstream.outages import OutagePolicy
    from dpstream.privacy import Ledger, LifetimeBudget, gdp

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


def add_audit_parser(commands) -> None:
    audit = commands.add_parser(
        "audit", help="empirical privacy audit: a lower bound on epsilon from a worst-case canary"
    )
    audit.add_argument(
        "--algorithm",
        default="all",
        choices=["all", "dpsgd", "dpsgd-lambda", "dpsgd-nu", "ambssgd", "srgd", "ssp"],
    )
    audit.add_argument("--epsilon", type=float, default=2.0, help="the claimed epsilon to audit")
    audit.add_argument("--delta", type=float, default=1e-5)
    audit.add_argument("--relation", choices=["replace-one", "zero-out"], default="replace-one")
    audit.add_argument(
        "--trials", type=int, default=2000, help="runs on each of the two neighbouring datasets"
    )
    audit.add_argument("--seed", type=int, default=0, help="fixes the data and the trial noise keys")
    audit.set_defaults(handler=audit_command)


def audit_command(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from dpstream.audit import audit_algorithm, audited_algorithms

    algorithms = audited_algorithms(args.epsilon, args.delta, args.relation)
    chosen = list(algorithms) if args.algorithm == "all" else [args.algorithm]
    table = Table(
        title=f"empirical privacy audit: claimed ({args.epsilon:g}, {args.delta:g})-DP, {args.relation}, "
        f"{args.trials} trials per dataset, seed {args.seed}"
    )
    results = []
    for name in chosen:
        result = audit_algorithm(algorithms[name], trials=args.trials, seed=args.seed)
        results.append(result)
        if not table.columns:
            for column in ("configuration", "TPR", "FPR", "ε lower bound (95%)", "verdict"):
                table.add_column(column)
        table.add_row(
            name,
            f"{result.true_positive_rate:.3f}",
            f"{result.false_positive_rate:.3f}",
            f"{result.epsilon_lower_bound:.3f}",
            "consistent" if result.passed else "VIOLATED",
        )
    console.print(table)
    violated = [name for name, result in zip(chosen, results, strict=True) if not result.passed]
    if violated:
        print(
            f"dpstream: audit: the empirical lower bound exceeds the claimed epsilon for {', '.join(violated)}: "
            "the mechanism adds less noise than it claims",
            file=sys.stderr,
        )
        return EXIT_OTHER
    return EXIT_OK
