"""``dpstream shuffle CONFIG``: validate the config's lake, then shuffle it once into ``lake.shuffled_url``
(a new generation with ``--reshuffle``; ``--prune`` removes the generations no run reads)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpstream.flows.assembly.cluster import preparation_client
from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.assembly.locations import protected_locations
from dpstream.flows.assembly.prepare import shuffle, validate
from dpstream.flows.cli.interrupt import exit_on_interrupt
from dpstream.flows.cli.log_file import log_to_file
from dpstream.flows.cli.progress import RunProgress
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console, warn
from dpstream.pipelines import Manifest, prune_shuffles
from dpstream.pipelines.shuffle.generations import GenerationStore
from dpstream.privacy import Ledger

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
    inputs = load_inputs(args.config)
    config = inputs.config
    args.places = args.protected = protected_locations(config, args.config)
    if config.cluster.prepares_on_workers:  # the workers' output, and Dask's, go to a log file
        log_to_file(args, "shuffle", Path(args.config).stem, prefect=False)
    with (
        exit_on_interrupt(
            f"the shuffle stopped before its commit: nothing of it is read by any run. Run `dpstream shuffle "
            f"{args.config}` again; `--prune` later removes the unfinished generation's files"
        ),
        preparation_client(config.cluster) as client,  # cluster.prepare_on: workers or this process
    ):
        validated = validate(inputs, client)  # a layout training could not use is refused before shuffling
        warn(validated.warnings)
        with RunProgress(enabled=not args.quiet) as progress:
            manifest = shuffle(
                inputs,
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


def _people(manifest: Manifest) -> str:
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
