"""The arguments of the privacy commands: ``dpstream budget`` (show a lake's ledger, reset it for a lake
that now holds other people's data, or change its lifetime budget deliberately: ``set-lifetime``) and
``dpstream audit`` (an empirical lower bound on epsilon from a worst-case canary). Light, as every
module of arguments: the commands themselves are ``dpstream.flows.cli.ledger`` and
``dpstream.flows.cli.audit``."""

from __future__ import annotations

import argparse

__all__ = ["budget_arguments", "audit_arguments"]


def budget_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show", "reset", "set-lifetime"])
    parser.add_argument(
        "lake",
        help="a pipeline config (its lake and budget.ledger_url), or a lake fingerprint (`dpstream validate "
        "CONFIG` prints it) with --ledger",
    )
    parser.add_argument("--ledger", default=None, help="ledger URL (default: the config's budget.ledger_url)")
    parser.add_argument("--epsilon", type=float, default=None, help="set-lifetime: the new lifetime ε")
    parser.add_argument(
        "--delta", type=float, default=None, help="set-lifetime: the new δ (default: the recorded one)"
    )
    parser.add_argument(
        "--confirm", action="store_true", help="reset and set-lifetime change the ledger only with it"
    )


def audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--algorithm",
        default="all",
        metavar="NAME",
        # The names come from the algorithm and noise registries (dpstream.audit.audit_choices), which this
        # light module does not import; the command checks the name.
        help="'all' (the default) or one audited configuration, e.g. dpsgd, dpsgd-lambda, ambssgd, srgd, ssp",
    )
    parser.add_argument("--epsilon", type=float, default=2.0, help="the claimed epsilon to audit")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--relation", choices=["replace-one", "zero-out"], default="replace-one")
    parser.add_argument(
        "--trials", type=int, default=2000, help="runs on each of the two neighbouring datasets"
    )
    parser.add_argument("--seed", type=int, default=0, help="fixes the data and the trial noise keys")
