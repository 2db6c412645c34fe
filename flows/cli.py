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
Dask's logs to a file (``flows.logs``) that their result or error line names; ``--verbose`` shows them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flows.cli_lake import convert_command, predict_command, report_command
from flows.cli_support import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_OK, EXIT_OTHER, log_to_file
from flows.logs import quiet_dask

if TYPE_CHECKING:
    from rich.console import Console

# Each command imports what it needs when it runs: `dpstream --help` and argument errors answer without
# loading NumPy, SciPy, pyarrow, pydantic, Prefect or Dask (BENCHMARKS.md, CLI start-up).

__all__ = ["main", "EXIT_OK", "EXIT_BAD_INPUT", "EXIT_BUDGET", "EXIT_OTHER"]


def _validate(args, console: Console) -> int:
    from flows.config import delta_warning, load_config

    config = load_config(args.config)
    with config.cluster.preparation_client() as client:  # cluster.prepare_on: workers or this process
        summary = config.validate_lake(client)
    files, training, held_out = config.training_split(summary.num_rows)
    console.print(
        f"{args.config}: valid. Lake {config.lake.url}: {summary.num_rows:,} rows in {len(summary.files)} files, "
        f"{summary.num_features} features, fingerprint {summary.fingerprint}. Training will use {training:,} rows and "
        f"hold out {held_out:,} (the last of {files} shuffled files)"
    )
    for warning in (summary.stray_note(), delta_warning(config.budget.delta, summary.num_rows)):
        if warning:
            print(f"dpstream: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _shuffle(args, console: Console) -> int:
    from flows.config import load_config
    from flows.interrupt import exit_on_interrupt
    from flows.progress import RunProgress

    config = load_config(args.config)
    with (
        exit_on_interrupt(
            f"the shuffle stopped before its manifest; run `dpstream shuffle {args.config}` again to "
            "redo it (it removes only what it wrote)"
        ),
        config.cluster.preparation_client() as client,  # cluster.prepare_on: workers or this process
    ):
        summary = config.validate_lake(client)
        config.training_split(summary.num_rows)  # a layout training could not use is refused before shuffling
        with RunProgress(enabled=not args.quiet) as progress:
            manifest = config.shuffle_lake(
                summary,
                client=client,
                on_progress=progress.shuffle(summary.num_rows),
                protected=(os.path.dirname(os.path.abspath(args.config)),),
                reshuffle=args.reshuffle,
            )
    console.print(
        f"shuffled lake at {manifest.url}: {manifest.num_rows:,} rows in {len(manifest.files)} files "
        f"(source fingerprint {manifest.source_fingerprint})"
    )
    return EXIT_OK


def _budget(args, console: Console) -> int:
    from dpstream.privacy import Ledger, gdp

    ledger = Ledger(args.ledger)
    lake = ledger.lake(args.lake)
    if args.action == "show":
        console.print(lake.statement())
        for entry in lake.entries():
            console.print(_entry_line(entry))
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


def _train(args, console: Console) -> int:
    import uuid

    from flows.config import load_config, run_locations
    from flows.flows import train_flow
    from flows.interrupt import exit_on_interrupt

    config = load_config(
        args.config
    )  # a bad config or output folder is refused at once, before the Prefect API starts
    run_id = args.run_id or f"run-{uuid.uuid4().hex[:12]}"
    run_locations(config, args.config, run_id, args.output)
    log_to_file(args, "train", run_id)
    resume = f"dpstream train {args.config} --run-id {run_id}" + (
        f" --output {args.output}" if args.output else ""
    )
    with exit_on_interrupt(
        f"run {run_id} stopped (log: {args.log_file}); its ledger charge stays reserved and it "
        f"resumes from its checkpoint with: {resume}"
    ):
        result = train_flow(args.config, run_id=run_id, output_dir=args.output, show_progress=not args.quiet)
    console.print(result["report"].to_markdown())
    for name, value in result["metrics"].items():
        console.print(f"{name}: {value:.6g}")
    console.print(
        f"run {result['run_id']}: model, report and plots under {os.path.dirname(result['paths']['model'])}; "
        f"log {args.log_file}"
    )
    return EXIT_OK


def _serve(args, console: Console) -> int:
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    from flows.config import load_config
    from flows.flows import train_flow

    config = load_config(args.config)
    cron = args.cron or (config.schedule.cron if config.schedule else None)
    if cron is None:
        raise ValueError(
            f'{args.config}: no schedule; pass --cron "0 2 * * *" or set schedule.cron in the config'
        )
    try:
        schedule = CronSchedule(cron=cron, timezone=args.timezone)
    except ValidationError as error:
        raise ValueError(
            f"--cron {cron!r} / --timezone {args.timezone!r}: {error.errors()[0]['msg']}"
        ) from None
    console.print(
        f"serving train flow {args.name!r} for {args.config} on cron {cron!r} ({args.timezone}); Ctrl-C stops"
    )
    train_flow.serve(
        name=args.name,
        schedules=[schedule],
        parameters={"config_path": os.path.abspath(args.config)},
        print_starting_message=False,
    )
    return EXIT_OK


def _demo(args, console: Console) -> int:
    from flows.demo import run_demo

    if args.rows < 2 * args.files or args.files < 2:
        raise ValueError("the demo needs at least 2 files and 2 rows per file (--rows, --files)")
    from flows.interrupt import exit_on_interrupt

    log_to_file(args, "demo", "run")
    with exit_on_interrupt("the demo stopped; run `dpstream demo` again to start a new one"):
        run_demo(
            console,
            args.rows,
            args.files,
            args.dim,
            args.epsilon,
            args.directory,
            show_progress=not args.quiet,
        )
    console.print(f"log {args.log_file}")
    return EXIT_OK


def _audit(args, console: Console) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpstream", description="Differentially private training over Parquet lakes."
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Prefect's and Dask's logs on stderr too (by default they go to the log file the "
        "result or error line names, under $DPSTREAM_LOG_DIR or ~/.dpstream/logs)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="validate a pipeline config and its lake")
    validate.add_argument("config")
    validate.set_defaults(handler=_validate)
    convert = commands.add_parser("convert", help="convert a CSV file into a Parquet lake")
    convert.add_argument("csv")
    convert.add_argument("out")
    convert.add_argument("--columns", nargs="+", default=[], help="numeric feature columns to keep")
    convert.add_argument("--label", required=True)
    convert.add_argument("--missing", choices=["drop", "impute"], default="drop")
    convert.add_argument(
        "--impute", nargs="*", default=[], metavar="COLUMN=VALUE", help="public imputation constants"
    )
    convert.add_argument(
        "--categorical", nargs="*", default=[], metavar="COLUMN=A,B,C", help="public category lists (one-hot)"
    )
    convert.add_argument(
        "--bounds",
        nargs="*",
        default=[],
        metavar="COLUMN=LOW,HIGH",
        help="public ranges: clip to [LOW, HIGH] and map onto --scale-range",
    )
    convert.add_argument(
        "--unscaled",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="numeric columns already on the public scale, kept as they are (every other numeric "
        "column, the label included, needs --bounds)",
    )
    convert.add_argument(
        "--scale-range",
        nargs=2,
        type=float,
        default=[-1.0, 1.0],
        metavar=("LOW", "HIGH"),
        help="the range bounded columns are mapped onto (default -1 1, the public scale the "
        "algorithms' row bounds and steps assume)",
    )
    convert.add_argument(
        "--private-bounds",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="numeric columns with no public range: estimate their bounds with DP from every 10th row, "
        "which is then left out of the lake (the lake's ledger is not charged; model.json states the guarantee)",
    )
    convert.add_argument(
        "--private-epsilon", type=float, default=1.0, help="ε of the private bounds (default 1)"
    )
    convert.add_argument(
        "--private-delta", type=float, default=1e-6, help="δ of the private bounds (default 1e-6)"
    )
    convert.add_argument("--unknown-category", choices=["error", "drop"], default="error")
    convert.add_argument("--rows-per-file", type=int, default=250_000)
    convert.set_defaults(handler=convert_command)
    predict = commands.add_parser(
        "predict", help="score a Parquet lake with a published model on a Dask cluster, writing Parquet"
    )
    predict.add_argument("model", help="model.json of a run (or the run's folder)")
    predict.add_argument("lake", help="the lake to score: features as in the training lake, any column order")
    predict.add_argument("out", help="a new location for the predictions (one file per lake file)")
    predict.add_argument(
        "--keep",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="lake columns to copy beside the predictions (an id)",
    )
    predict.add_argument(
        "--scheduler", default=None, help="a Dask scheduler address (default: a LocalCluster)"
    )
    predict.add_argument("--workers", type=int, default=2, help="LocalCluster workers (default 2)")
    predict.add_argument(
        "--memory-limit", default="2GiB", help="LocalCluster memory per worker (default 2GiB)"
    )
    predict.set_defaults(handler=predict_command)
    shuffle = commands.add_parser("shuffle", help="shuffle the config's lake once")
    shuffle.add_argument("config")
    shuffle.add_argument("--quiet", action="store_true", help="no progress bars")
    shuffle.add_argument(
        "--reshuffle",
        action="store_true",
        help="delete the committed shuffle at lake.shuffled_url and shuffle again (e.g. after changing "
        "lake.rows_per_file); runs checkpointed on the old shuffle can no longer resume",
    )
    shuffle.set_defaults(handler=_shuffle)
    budget = commands.add_parser("budget", help="show or reset a lake's privacy ledger")
    budget.add_argument("action", choices=["show", "reset"])
    budget.add_argument("lake", help="the lake fingerprint")
    budget.add_argument("--ledger", required=True, help="ledger URL")
    budget.add_argument("--confirm", action="store_true")
    budget.set_defaults(handler=_budget)
    train = commands.add_parser("train", help="run the train flow for a pipeline config")
    train.add_argument("config")
    train.add_argument("--run-id", default=None, help="resume or name the run (default: a new id)")
    train.add_argument("--output", default=None, help="where the model, report and plots go")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.set_defaults(handler=_train)
    serve = commands.add_parser("serve", help="serve the train flow on a cron schedule (Prefect deployment)")
    serve.add_argument("config")
    serve.add_argument(
        "--cron", default=None, help='cron string, e.g. "0 2 * * *" (default: schedule.cron of the config)'
    )
    serve.add_argument("--timezone", default="UTC")
    serve.add_argument("--name", default="nightly", help="deployment name")
    serve.set_defaults(handler=_serve)
    demo = commands.add_parser("demo", help="a synthetic lake through the whole train flow")
    demo.add_argument("--rows", type=int, default=2_000_000)
    demo.add_argument("--files", type=int, default=16)
    demo.add_argument("--dim", type=int, default=16)
    demo.add_argument("--epsilon", type=float, default=1.0)
    demo.add_argument("--directory", default=".demo")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(handler=_demo)
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
    audit.set_defaults(handler=_audit)
    report = commands.add_parser("report", help="print the privacy report and metrics of a published run")
    report.add_argument("run", help="the run's output folder (holds model.json)")
    report.set_defaults(handler=report_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Prefect's 20 s default for starting its ephemeral API is too short on a loaded 2-core machine
    # (../shared/spec/stack.md §2); a value the user set wins.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # The ephemeral API's usage telemetry: off unless the user turns it on (it also prints an error on
    # every run of a machine without internet access).
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    quiet_dask(verbose=args.verbose)
    from rich.console import Console

    console = Console(soft_wrap=True)  # one record per line, whatever the terminal width
    args.log_file = None  # set by the commands that run flows (_log_to_file)
    try:
        return args.handler(args, console)
    except Exception as error:  # noqa: BLE001 - the CLI's contract is one line and an exit code
        return _refuse(error, args)


def _refuse(error: Exception, args) -> int:
    """One line on stderr and the exit code for ``error``. ConfigError and LakeError are ValueErrors; a
    BudgetExceededError can only come from the ledger module if that was imported, so nothing is loaded
    just to classify an error."""
    ledger = sys.modules.get("dpstream.privacy.ledger")
    if ledger is not None and isinstance(error, ledger.BudgetExceededError):
        print(f"dpstream: budget refused: {error}{_log_note(args)}", file=sys.stderr)
        return EXIT_BUDGET
    if isinstance(error, (ValueError, FileNotFoundError)):
        print(f"dpstream: {error}{_log_note(args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"dpstream: {type(error).__name__}: {error}{_log_note(args)}", file=sys.stderr)
    return EXIT_OTHER


def _log_note(args) -> str:
    return f" (full log: {args.log_file})" if args.log_file else ""


# Commands that start neither Prefect nor Dask (no server, cluster or child process to stop).
_LIGHT_COMMANDS = frozenset({"validate", "convert", "report", "budget", "audit"})


def run() -> None:
    """The console script: ``main()``, then exit with its code.

    A light command leaves by ``os._exit`` once its output is flushed and Python's exit handlers have
    run, skipping the interpreter's finalisation: there a native thread pool was seen aborting the
    process ("terminate called without an active exception", status −6) after ``validate`` had printed
    its result, about once in hundreds of runs on a loaded machine, turning exit 2 into a crash."""
    import atexit

    code = main()
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command in _LIGHT_COMMANDS:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run()
