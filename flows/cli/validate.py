"""``dpstream validate CONFIG``: the config and the lake it names, checked as ``train`` checks them before
reading a row; nothing is shuffled, charged or written."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpstream.flows.assembly.cluster import preparation_client
from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.assembly.locations import protected_locations
from dpstream.flows.assembly.planning import lake_preprocessing, plan_for
from dpstream.flows.assembly.prepare import validate
from dpstream.flows.cli.log_file import log_to_file
from dpstream.flows.cli.progress import RunProgress
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console, warn

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
    inputs = load_inputs(args.config)
    config = inputs.config
    args.protected = protected_locations(config, args.config)
    if config.cluster.prepares_on_workers:  # the workers' output, and Dask's, go to a log file
        log_to_file(args, "validate", Path(args.config).stem, prefect=False)
    # cluster.prepare_on: workers or this process
    with preparation_client(config.cluster) as client, RunProgress(enabled=not args.quiet) as progress:
        validated = validate(inputs, client, progress=progress.files("validate"))
    summary = validated.summary
    # What `train` would refuse before reading a row is refused here too: a hyperparameter the chosen
    # algorithm ignores, a plan over its budget, too few rows for the algorithm. The plan is a check only
    # (public: the row counts of the layout and the config); `train` builds its own.
    plan_for(inputs, validated.training_rows, summary.num_features, lake_preprocessing(inputs))
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
    warn(validated.warnings)
    return EXIT_OK
