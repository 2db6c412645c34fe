"""``dpstream serve CONFIG``: the train flow served as a Prefect deployment on a cron schedule
(``--cron``, or ``schedule.cron`` of the config) until the command is stopped."""

from __future__ import annotations

import argparse
import os

from prefect.client.schemas.schedules import CronSchedule
from pydantic import ValidationError

from dpstream.flows.assembly.loading import load_inputs
from dpstream.flows.cli.interrupt import exit_on_interrupt
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console, warn
from dpstream.flows.flows import train_flow
from dpstream.flows.prefect_api import command_owns_sigterm, prefect_api

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
    config = load_inputs(args.config).config
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
    if not os.environ.get("PREFECT_API_URL"):  # Prefect's runner said so for its own temporary server
        warn(
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
