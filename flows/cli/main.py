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
Dask's logs to a file (``dpstream.flows.logs``) that their result or error line names; ``--verbose`` shows them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dpstream.flows.cli.budget import add_audit_parser, add_budget_parser
from dpstream.flows.cli.lake import add_lake_parsers
from dpstream.flows.cli.support import (
    EXIT_BAD_INPUT,
    EXIT_BUDGET,
    EXIT_OK,
    EXIT_OTHER,
    log_to_file,
    run_places,
    stopped_run_message,
)
from dpstream.flows.cli.support import refuse as _refuse
from dpstream.flows.logs import quiet_dask

if TYPE_CHECKING:
    from rich.console import Console

# Each command imports what it needs when it runs: `dpstream --help` and argument errors answer without
# loading NumPy, SciPy, pyarrow, pydantic, Prefect or Dask (BENCHMARKS.md, CLI start-up).

__all__ = ["main", "EXIT_OK", "EXIT_BAD_INPUT", "EXIT_BUDGET", "EXIT_OTHER"]


def _validate(args, console: Console) -> int:
    from dpstream.flows.assembly.prepare import validate
    from dpstream.flows.config.pipeline import load_config

    config = load_config(args.config)
    with config.cluster.preparation_client() as client:  # cluster.prepare_on: workers or this process
        validated = validate(config, client)
    summary = validated.summary
    _check_trainable(config, validated)
    console.print(
        f"{args.config}: valid. Lake {config.lake.url}"
        + (f" ({summary.version.describe()})" if summary.version.version is not None else "")
        + f": {summary.num_rows:,} rows in {len(summary.files)} file{'s' if len(summary.files) != 1 else ''}, "
        f"{summary.num_features} features, fingerprint {summary.fingerprint}. Training will use "
        f"{validated.training_rows:,} rows and hold out {validated.held_out_rows:,} (the last of {validated.files} "
        "shuffled files)"
        + (
            f". Privacy unit: a person (every row of one value of {config.privacy.user_column!r}, at most "
            f"{config.privacy.max_rows_per_user} rows each"
            + (
                ", k chosen with DP when the lake is shuffled"
                if config.privacy.max_rows_per_user == "auto"
                else ""
            )
            + "); the rows counted above are before that bound"
            if config.is_user_level
            else ""
        )
    )
    _warn(validated.warnings)
    return EXIT_OK


def _check_trainable(config, validated) -> None:
    """What `train` would refuse before reading a row, refused here too: a hyperparameter the chosen
    algorithm ignores, a plan over its budget, too few rows for the algorithm. The plan built here is a
    check only (public: the row counts of the layout and the config); `train` builds its own."""
    from dpstream.flows.assembly.planning import build_algorithm, check_bounds_unit, lake_preprocessing
    from dpstream.run_plan import RunPlan

    model = config.model.build()
    dim = model.num_params(validated.summary.num_features)
    record = lake_preprocessing(config)
    check_bounds_unit(config, record)
    algorithm = build_algorithm(config, validated.training_rows, dim, record, model)
    RunPlan.build(algorithm, model, validated.training_rows, dim)


def _people(manifest) -> str:
    """The contribution bound a user-level shuffle applied, as the shuffle command states it."""
    unit = manifest.unit
    chosen = (
        f", chosen with DP at mu={unit.auto_mu:g} (charged to the lake's ledger as {unit.charge_id})"
        if unit.requested == "auto"
        else ""
    )
    return (
        f"; {manifest.num_users:,} people (values of {unit.user_column!r}, never written), at most "
        f"{unit.max_rows_per_user} rows each{chosen}"
    )


def _warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"dpstream: warning: {warning}", file=sys.stderr)


def _shuffle(args, console: Console) -> int:
    from dpstream.flows.assembly.locations import protected_locations
    from dpstream.flows.assembly.prepare import shuffle, validate
    from dpstream.flows.cli.interrupt import exit_on_interrupt
    from dpstream.flows.cli.progress import RunProgress
    from dpstream.flows.config.pipeline import load_config
    from dpstream.pipelines import prune_shuffles
    from dpstream.pipelines.shuffle.generations import GenerationStore

    config = load_config(args.config)
    args.places = protected_locations(config, args.config)
    with (
        exit_on_interrupt(
            f"the shuffle stopped before its commit: nothing of it is read by any run. Run `dpstream shuffle "
            f"{args.config}` again; `--prune` later removes the unfinished generation's files"
        ),
        config.cluster.preparation_client() as client,  # cluster.prepare_on: workers or this process
    ):
        validated = validate(config, client)  # a layout training could not use is refused before shuffling
        _warn(validated.warnings)
        with RunProgress(enabled=not args.quiet) as progress:
            manifest = shuffle(
                config,
                args.config,
                validated,
                client=client,
                on_progress=progress.shuffle(validated.summary.num_rows),
                reshuffle=args.reshuffle,
            )
    console.print(
        f"shuffled lake at {manifest.url}: generation {manifest.number} ({manifest.generation}), "
        f"{manifest.num_rows:,} rows in {len(manifest.files)} files (source fingerprint {manifest.source_fingerprint})"
        + (_people(manifest) if manifest.unit is not None else "")
    )
    options = config.lake.storage_options
    if args.prune:
        from dpstream.privacy import Ledger

        unfinished = Ledger(config.budget.ledger_url).unfinished_data_versions()  # runs that may resume
        removed = prune_shuffles(config.lake.shuffled_url, options, keep=unfinished)
        console.print(
            f"pruned {len(removed)} superseded or unfinished generation(s)"
            + (f": {', '.join(removed)}" if removed else "")
        )
    else:
        store = GenerationStore(config.lake.shuffled_url, options)
        earlier = len(store.numbers()) - 1 + len(store.uncommitted())
        if earlier > 0:
            console.print(
                f"{earlier} earlier or unfinished generation(s) kept for the runs that pinned them: "
                f"`dpstream shuffle {args.config} --prune` removes them when no run is in flight"
            )
    return EXIT_OK


def _train(args, console: Console) -> int:
    import uuid

    from dpstream.flows.assembly.locations import protected_locations, run_locations
    from dpstream.flows.cli.interrupt import exit_on_interrupt, set_interrupt_message
    from dpstream.flows.config.pipeline import load_config
    from dpstream.flows.flows import train_flow
    from dpstream.flows.prefect_api import command_owns_sigterm, mark_flow_run_crashed, prefect_api

    # A bad config, run id or output folder is refused at once, before a log, a server or a cluster starts.
    config = load_config(args.config)
    run_id = args.run_id or f"run-{uuid.uuid4().hex[:12]}"
    locations = run_locations(config, args.config, run_id, args.output, args.operator_output)
    args.protected = protected_locations(config, args.config)
    args.places = [*args.protected, *run_places(locations.output, locations.operator)]
    log_to_file(args, "train", run_id)
    resume = f"dpstream train {args.config} --run-id {run_id}" + "".join(
        f" {flag} {value}"
        for flag, value in (("--output", args.output), ("--operator-output", args.operator_output))
        if value
    )
    args.again = f"`{resume}` resumes the run, charged once"
    set_interrupt_message(f"run {run_id} had not started: nothing was trained or charged")
    with (
        exit_on_interrupt(
            stopped_run_message(config, run_id, args.log_file, resume), before_exit=mark_flow_run_crashed
        ),
        prefect_api(args.log_file),
        command_owns_sigterm(),
    ):
        result = train_flow(
            args.config,
            run_id=run_id,
            output_dir=args.output,
            operator_dir=args.operator_output,
            show_progress=not args.quiet,
        )
    set_interrupt_message(f"run {run_id} had finished; its release is under {locations.output}")
    console.print(result["report"].to_markdown())
    from dpstream.models.kinds import summarise

    console.print(summarise(result["metrics"]), soft_wrap=True)  # one line, whatever the terminal's width
    resumed, steps = result["resumed_at"], result["steps"]
    if resumed == steps:
        console.print(
            f"run {run_id} was already complete: its model was recomputed from the final checkpoint, bit for bit the "
            "model it released before; nothing was trained or charged again"
        )
    elif resumed:
        console.print(
            f"run {run_id} resumed from its checkpoint at step {resumed} of {steps}; it is charged once"
        )
    console.print(
        f"run {result['run_id']}: the release (model, privacy report, plots) under {locations.output}; "
        f"operator-only metrics and loss plot under {locations.operator}; log {args.log_file}"
    )
    return EXIT_OK


def _serve(args, console: Console) -> int:
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    from dpstream.flows.config.pipeline import load_config
    from dpstream.flows.flows import train_flow

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
    from dpstream.flows.cli.interrupt import exit_on_interrupt
    from dpstream.flows.prefect_api import command_owns_sigterm, prefect_api

    console.print(
        f"serving train flow {args.name!r} for {args.config} on cron {cron!r} ({args.timezone}); Ctrl-C stops"
    )
    if not os.environ.get("PREFECT_API_URL"):  # Prefect's runner said so for its own temporary server
        _warn(
            [
                "no PREFECT_API_URL: the temporary Prefect API this command starts runs no scheduler, so no "
                "run starts on the cron; point PREFECT_API_URL at a Prefect server (`prefect server start`)"
            ]
        )
    with (  # the API server is this command's child: no way of stopping the command leaves it running
        exit_on_interrupt(
            f"serving {args.name!r} stopped, with any flow run it had started; run the same command to serve again"
        ),
        prefect_api(),
        command_owns_sigterm(runner=True),
    ):
        train_flow.serve(
            name=args.name,
            schedules=[schedule],
            parameters={"config_path": os.path.abspath(args.config)},
            print_starting_message=False,
        )
    return EXIT_OK


def _demo(args, console: Console) -> int:
    from dpstream.flows.cli.demo import run_demo

    if args.rows < 2 * args.files or args.files < 2:
        raise ValueError("the demo needs at least 2 files and 2 rows per file (--rows, --files)")
    from dpstream.flows.cli.interrupt import exit_on_interrupt
    from dpstream.flows.prefect_api import command_owns_sigterm, prefect_api

    log_to_file(args, "demo", "run")
    with (
        exit_on_interrupt("the demo stopped; run `dpstream demo` again to start a new one"),
        prefect_api(args.log_file),
        command_owns_sigterm(),
    ):
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


def _run_id(value: str) -> str:
    """argparse's check of --run-id: refused (exit 2) before anything is written."""
    from dpstream.validation import check_name

    try:
        return check_name("--run-id", value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's contract for bad arguments: one line on stderr and exit code 2 (argparse's
    own prints the usage first)."""

    def error(self, message: str):  # type: ignore[override]
        command = self.prog.removeprefix("dpstream").strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_BAD_INPUT, f"dpstream: {where}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpstream", description="Differentially private training over Parquet lakes.")
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
    add_lake_parsers(commands)
    shuffle = commands.add_parser("shuffle", help="shuffle the config's lake once")
    shuffle.add_argument("config")
    shuffle.add_argument("--quiet", action="store_true", help="no progress bars")
    shuffle.add_argument(
        "--reshuffle",
        action="store_true",
        help="shuffle again as a new generation (e.g. after changing lake.rows_per_file or the lake); runs "
        "that pinned an earlier generation keep reading it",
    )
    shuffle.add_argument(
        "--prune",
        action="store_true",
        help="delete superseded generations and unfinished shuffles (a run still reading one then stops)",
    )
    shuffle.set_defaults(handler=_shuffle)
    add_budget_parser(commands)
    train = commands.add_parser("train", help="run the train flow for a pipeline config")
    train.add_argument("config")
    train.add_argument(
        "--run-id",
        default=None,
        type=_run_id,
        help="resume or name the run: 1-64 letters, digits, '.', '_' or '-' (default: a new id)",
    )
    train.add_argument(
        "--output", default=None, help="the publish folder: the release (model, privacy report, plots) only"
    )
    train.add_argument(
        "--operator-output",
        default=None,
        help="the operator folder: non-private metrics and the loss plot (default operator/<run id> beside the config)",
    )
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
    add_audit_parser(commands)
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
    from rich.console import Console

    console = Console(soft_wrap=True)  # one record per line, whatever the terminal width
    args.log_file = None  # set by the commands that run flows (_log_to_file)
    try:
        return args.handler(args, console)
    except Exception as error:  # noqa: BLE001 - the CLI's contract is one line and an exit code
        return _refuse(error, args)


# Commands that start neither Prefect nor Dask (no server, cluster or child process to stop).
_LIGHT_COMMANDS = frozenset({"validate", "convert", "report", "budget", "audit"})


def run() -> None:
    """The console script: ``main()``, then exit with its code.

    SIGINT, SIGTERM and SIGHUP are answered from the first moment: during the imports and Prefect's
    start-up one of them ends the command with one line (``dpstream: interrupted; ...``), its children
    stopped, and 128 + the signal's number (``dpstream.flows.cli.interrupt``), not with a traceback.

    A light command leaves by ``os._exit`` once its output is flushed and Python's exit handlers have
    run, skipping the interpreter's finalisation: there a native thread pool was seen aborting the
    process ("terminate called without an active exception", status −6) after ``validate`` had printed
    its result, about once in hundreds of runs on a loaded machine, turning exit 2 into a crash."""
    import atexit

    from dpstream.flows.cli.interrupt import exit_interrupted, unwind_on_signals

    unwind_on_signals()
    try:
        code = main()
    except KeyboardInterrupt as interrupted:
        exit_interrupted(interrupted)
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command in _LIGHT_COMMANDS:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run()
