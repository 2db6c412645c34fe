"""``dpstream train CONFIG``: the train flow (``dpstream.flows.flows.train_flow``) for a pipeline config,
with its own Prefect API when none is configured, its logs in a file, and a stop by any signal that
leaves no process behind and says what the ledger then holds."""

from __future__ import annotations

import argparse
import os
import uuid

from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.assembly.locations import protected_locations, run_locations
from dpstream.flows.cli.interrupt import exit_on_interrupt, set_interrupt_message
from dpstream.flows.cli.log_file import log_to_file
from dpstream.flows.cli.run_state import stopped_run_message
from dpstream.flows.cli.support import EXIT_OK, run_places
from dpstream.flows.cli.terminal import result_console, warn
from dpstream.flows.flows import train_flow
from dpstream.flows.prefect_api import command_owns_sigterm, flow_run_url, mark_flow_run_crashed, prefect_api
from dpstream.models.kinds.base import summarise

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
    # A bad config, run id or output folder is refused at once, before a log, a server or a cluster starts.
    config = load_inputs(args.config).config
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
    user_api = bool(os.environ.get("PREFECT_API_URL"))  # before prefect_api points Prefect at its own
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
    warn(result["warnings"])
    console.print(result["report"].to_markdown())
    if result["released"] == "constant":
        console.print(
            "released: the constant predictor (the noisy label mean, or the majority class) as model.json, weights "
            "0 and the intercept; the fitted model did not beat it (the privacy report states why). The held-out "
            "figures below score that constant"
        )
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
    page = flow_run_url(result["flow_run_id"], user_api)
    if page is not None:
        console.print(f"Prefect flow run {run_id}: {page}", soft_wrap=True)
    return EXIT_OK
