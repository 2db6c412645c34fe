"""``dpstream audit``: an empirical lower bound on epsilon from a worst-case canary, for each audited
algorithm (``dpstream.audit``)."""

from __future__ import annotations

import argparse
import sys

from rich.table import Table

from dpstream.audit import audit_algorithm, audit_choices, audited_algorithms
from dpstream.flows.cli.support import EXIT_BAD_INPUT, EXIT_OK, EXIT_OTHER
from dpstream.flows.cli.terminal import result_console

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    if args.algorithm not in audit_choices():
        print(
            f"dpstream audit: --algorithm {args.algorithm!r} is not an audited configuration: choose one of "
            f"{', '.join(audit_choices())}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    console = result_console()
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
