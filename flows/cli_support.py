"""What the ``dpstream`` command modules share: exit codes, COLUMN=VALUE parsing, the log file."""

from __future__ import annotations

from collections.abc import Sequence

from dpstream.flows.logs import capture_logs, new_log_file

__all__ = ["EXIT_OK", "EXIT_OTHER", "EXIT_BAD_INPUT", "EXIT_BUDGET", "parse_pairs", "log_to_file"]

EXIT_OK, EXIT_OTHER, EXIT_BAD_INPUT, EXIT_BUDGET = 0, 1, 2, 3


def parse_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{what} must look like COLUMN=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        pairs[key] = value
    return pairs


def log_to_file(args, command: str, name: str) -> None:
    """Prefect's and Dask's logs go to a new file under the log folder (dpstream.flows.logs), named in the result
    or error line; ``--verbose`` shows them on the terminal too. The log folder is a write location like
    any other: refused inside a lake or a ledger (``dpstream.locations``)."""
    from dpstream.flows.logs import log_directory
    from dpstream.locations import check_write_location

    check_write_location(
        str(log_directory()), "the log folder ($DPSTREAM_LOG_DIR)", getattr(args, "protected", ())
    )
    args.log_file = new_log_file(command, name)
    if not args.verbose:
        send_worker_output_to(args.log_file)
    capture_logs(args.log_file, verbose=args.verbose)


def send_worker_output_to(path) -> None:
    """The LocalCluster workers this command starts write their stderr to ``path`` (``dpstream.pipelines.worker_log``):
    the environment for processes started from here, Dask's config for the nannies' workers."""
    import os

    from dpstream.pipelines.worker_log import ENVIRONMENT_VARIABLE

    os.environ[ENVIRONMENT_VARIABLE] = str(path)
    os.environ["DASK_DISTRIBUTED__WORKER__PRELOAD"] = '["dpstream.pipelines.worker_log"]'
    import dask

    dask.config.set({"distributed.worker.preload": ["dpstream.pipelines.worker_log"]})
