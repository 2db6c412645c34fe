"""``dpstream validate CONFIG``: the config and the lake it names, checked as ``train`` checks them before
reading a row; nothing is shuffled, charged or written."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpstream.flows.assembly.cluster import preparation_client
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.assembly.locations import protected_locations
from dpstream.flows.assembly.planning import lake_preprocessing, plan_for
from dpstream.flows.assembly.prepare import ValidatedLake, validate
from dpstream.flows.cli.log_file import log_to_file
from dpstream.flows.cli.progress import RunProgress
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console, warn

__all__ = ["run", "validated_lake"]


def validated_lake(
    args: argparse.Namespace, config_path: str, command: str, *, show_progress: bool
) -> tuple[RunInputs, ValidatedLake]:
    """The config's inputs and its lake validated (``ValidatedLake``), as ``train`` validates them: the
    write locations protected, and where the workers do the work (cluster.prepare_on) their output and
    Dask's in the command's log file."""
    inputs = load_inputs(config_path)
    args.protected = protected_locations(inputs.config, config_path)
    if inputs.config.cluster.prepares_on_workers:
        log_to_file(args, command, Path(config_path).stem, prefect=False)
    with preparation_client(inputs.config.cluster) as client, RunProgress(enabled=show_progress) as progress:
        return inputs, validate(inputs, client, progress=progress.files(command))


def run(args: argparse.Namespace) -> int:
    console = result_console()
    inputs, validated = validated_lake(args, args.config, "validate", show_progress=not args.quiet)
    config = inputs.config
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
