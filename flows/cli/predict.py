"""``dpstream predict MODEL LAKE OUT``: score a lake (a Parquet folder, or a Delta or Iceberg table's live
rows) with a published model on a Dask cluster, into new Parquet files or a new Delta table."""

from __future__ import annotations

import argparse

from dpstream.export import read_model
from dpstream.flows.cli.interrupt import exit_code, report_interrupted, signal_of
from dpstream.flows.cli.log_file import log_to_file
from dpstream.flows.cli.progress import RunProgress
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console
from dpstream.locations import Protected
from dpstream.pipelines import SourceSpec, connect
from dpstream.pipelines.execution.predict import check_predictions_location, predict_lake

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
    model = read_model(args.model)  # checked whole: its run id names the log file
    check_predictions_location(args.out, args.lake)  # before a log, a cluster or a file is written
    args.protected = (
        Protected(args.lake, "the lake being scored"),
        Protected(args.out, "the predictions' folder"),
    )
    log_to_file(args, "predict", model.run_id)  # a worker's traceback goes there, not to the terminal
    try:
        client = connect(args.scheduler, n_workers=args.workers, memory_limit=args.memory_limit)
        try:
            with RunProgress(enabled=not args.quiet) as progress:
                summary = predict_lake(
                    model,
                    args.lake,
                    args.out,
                    client=client,
                    keep=tuple(args.keep),
                    source=SourceSpec(version=args.version),
                    out_format=args.format,
                    progress=progress.files("score"),
                )
        finally:
            client.close()
    except KeyboardInterrupt as interrupted:  # Ctrl-C, or SIGTERM / SIGHUP under the console script
        # Unwound, not exited at once as train is: predict_lake's own clean-up removes its unfinished parts.
        signum = signal_of(interrupted)
        report_interrupted(
            signum,
            f"scoring stopped and nothing was written to {args.out} (log: {args.log_file}); run the same "
            "command again",
        )
        return exit_code(signum)
    columns = ", ".join(model.output_columns()) + ("" if model.is_classifier else f" ({model.label})")
    written = "a new Delta table of" if args.format == "delta" else ""
    source = f" of {summary.source.describe()}" if summary.source.version is not None else ""
    console.print(
        f"scored {summary.rows:,} rows{source} into {written} {len(summary.files)} Parquet file(s) under "
        f"{args.out}: {columns}".replace("  ", " ")
    )
    return EXIT_OK
