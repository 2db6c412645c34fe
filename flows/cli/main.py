"""The ``dpstream`` command line.

    dpstream validate CONFIG            validate the config and the lake it names
    dpstream convert CSV OUT ...        CSV -> Parquet lake with explicit policies
    dpstream predict MODEL LAKE OUT     score a lake with a published model (Parquet out)
    dpstream shuffle CONFIG [--reshuffle]  validate, then shuffle the lake once (idempotent)
    dpstream budget show LAKE --ledger URL
    dpstream budget reset LAKE --ledger URL --confirm
    dpstream train CONFIG [--run-id ID]  run the train flow (Prefect)
    dpstream serve CONFIG --cron "0 2 * * *"  serve the train flow as a cron deployment
    dpstream demo [--rows N --files F]  a synthetic lake through the whole train flow
    dpstream report RUN_DIR             the privacy report and metrics a run published
    dpstream audit [--algorithm A]      empirical lower bound on epsilon from a worst-case canary

Exit codes: 0 ok, 2 bad input or config, 3 budget refused, 1 anything else; each failure prints one
line on stderr that says what is wrong and how to fix it. ``train`` and ``demo`` send Prefect's and
Dask's logs to a file (``dpstream.flows.cli.log_file``) that their result or error line names;
``--verbose`` shows them.

This module is the dispatcher: ``COMMANDS`` declares every command once, with its arguments (light
modules: ``dpstream.flows.cli.parsers``, ``dpstream.flows.cli.budget``) and the module that runs it
(its ``run(args)`` returns the exit code). Only the chosen command's module is imported, so `dpstream
--help` and argument errors answer without loading NumPy, SciPy, pyarrow, pydantic, rich, Prefect or
Dask (BENCHMARKS.md, CLI start-up).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from dpstream import __version__
from dpstream.flows.cli import parsers
from dpstream.flows.cli.budget import audit_arguments, budget_arguments
from dpstream.flows.cli.interrupt import Interrupted, arrived_signal, exit_interrupted, unwind_on_signals
from dpstream.flows.cli.support import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_OK, EXIT_OTHER, refuse
from dpstream.flows.logs import quiet_dask

__all__ = [
    "main",
    "run",
    "build_parser",
    "COMMANDS",
    "EXIT_OK",
    "EXIT_BAD_INPUT",
    "EXIT_BUDGET",
    "EXIT_OTHER",
]


class Command(NamedTuple):
    module: str  # the module whose run(args) carries the command out and returns its exit code
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    light: bool  # starts neither Prefect nor Dask (no server, cluster or child process to stop)


# In the order `dpstream --help` lists them.
COMMANDS: dict[str, Command] = {
    "validate": Command(
        "dpstream.flows.cli.validate",
        "validate a pipeline config and its lake",
        parsers.validate_arguments,
        True,
    ),
    "convert": Command(
        "dpstream.flows.cli.convert",
        "convert a CSV file into a Parquet lake",
        parsers.convert_arguments,
        True,
    ),
    "predict": Command(
        "dpstream.flows.cli.predict",
        "score a lake (Parquet folder, Delta or Iceberg table) with a published model on a Dask cluster",
        parsers.predict_arguments,
        False,
    ),
    "report": Command(
        "dpstream.flows.cli.report",
        "print the privacy report of a published run (its model.json, checked whole)",
        parsers.report_arguments,
        True,
    ),
    "shuffle": Command(
        "dpstream.flows.cli.shuffle", "shuffle the config's lake once", parsers.shuffle_arguments, False
    ),
    "budget": Command(
        "dpstream.flows.cli.ledger",
        "show, reset or change a lake's privacy ledger (lifetime budget: set-lifetime)",
        budget_arguments,
        True,
    ),
    "train": Command(
        "dpstream.flows.cli.train", "run the train flow for a pipeline config", parsers.train_arguments, False
    ),
    "serve": Command(
        "dpstream.flows.cli.serve",
        "serve the train flow on a cron schedule (Prefect deployment)",
        parsers.serve_arguments,
        False,
    ),
    "demo": Command(
        "dpstream.flows.cli.demo",
        "a synthetic lake through the whole train flow",
        parsers.demo_arguments,
        False,
    ),
    "audit": Command(
        "dpstream.flows.cli.audit",
        "empirical privacy audit: a lower bound on epsilon from a worst-case canary",
        audit_arguments,
        True,
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's contract for bad arguments: one line on stderr and exit code 2 (argparse's
    own prints the usage first)."""

    def error(self, message: str):  # type: ignore[override]
        command = self.prog.removeprefix("dpstream").strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_BAD_INPUT, f"dpstream: {where}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpstream", description="Differentially private training over Parquet lakes.")
    parser.add_argument("--version", action="version", version=f"dpstream {__version__}")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Prefect's and Dask's logs on stderr too (by default they go to the log file the "
        "result or error line names, under $DPSTREAM_LOG_DIR or ~/.dpstream/logs)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.arguments(commands.add_parser(name, help=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Prefect's 20 s default for starting its ephemeral API counts only its sleeps and is too short on a
    # loaded 2-core machine (a fresh server took 12-16 s on an idle one); a value the user set wins.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # The ephemeral API's usage telemetry: off unless the user turns it on (it also prints an error on
    # every run of a machine without internet access).
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    quiet_dask(verbose=args.verbose)
    args.log_file = None  # set by the commands that run flows (dpstream.flows.cli.log_file.log_to_file)
    try:
        return importlib.import_module(COMMANDS[args.command].module).run(args)
    except Exception as error:  # noqa: BLE001 - the CLI's contract is one line and an exit code
        signum = arrived_signal()
        if signum is not None:  # the interrupt, wrapped by a library in an error of its own
            exit_interrupted(Interrupted(signum))
        return refuse(error, args)


def run() -> None:
    """The console script: ``main()``, then exit with its code.

    SIGINT, SIGTERM and SIGHUP are answered from the first moment: during the imports and Prefect's
    start-up one of them ends the command with one line (``dpstream: interrupted; ...``), its children
    stopped, and 128 + the signal's number (``dpstream.flows.cli.interrupt``), not with a traceback.

    A light command leaves by ``os._exit`` once its output is flushed and Python's exit handlers have
    run, skipping the interpreter's finalisation: there a native thread pool was seen aborting the
    process ("terminate called without an active exception", status −6) after ``validate`` had printed
    its result, about once in hundreds of runs on a loaded machine, turning exit 2 into a crash."""
    unwind_on_signals()
    try:
        code = main()
    except KeyboardInterrupt as interrupted:
        exit_interrupted(interrupted)
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command in COMMANDS and COMMANDS[command].light:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run()
