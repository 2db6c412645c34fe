"""A command's log file: Prefect's, Dask's and the workers' logs go to one new file under the log folder
(``dpstream.flows.logs``), named in the command's result or error line; ``--verbose`` shows them on the
terminal too (``capture_logs``)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import dask
import distributed  # noqa: F401 - installs its console handlers when imported; capture_logs moves them

from dpstream.flows.cli.process_tree import start_resource_tracker
from dpstream.flows.logs import log_directory, new_log_file
from dpstream.locations import check_write_location
from dpstream.pipelines.execution.worker_log import ENVIRONMENT_VARIABLE

__all__ = ["log_to_file", "send_worker_output_to", "capture_logs"]

_LOG_FORMAT = "%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"
WORKER_LOG_PRELOAD = "dpstream.pipelines.execution.worker_log"


def log_to_file(args, command: str, name: str, *, prefect: bool = True) -> None:
    """Prefect's and Dask's logs go to a new file under the log folder (dpstream.flows.logs), named in the result
    or error line; ``--verbose`` shows them on the terminal too. The log folder is a write location like
    any other: refused inside a lake or a ledger (``dpstream.locations``). A command that runs no flow
    (``validate``, ``shuffle``) passes ``prefect=False``: its workers' output is captured all the same
    (a heartbeat that fails while the cluster closes prints a traceback), without importing Prefect."""
    check_write_location(
        str(log_directory()), "the log folder ($DPSTREAM_LOG_DIR)", getattr(args, "protected", ())
    )
    args.log_file = new_log_file(command, name)
    start_resource_tracker(args.log_file)
    if not args.verbose:
        send_worker_output_to(args.log_file)
    capture_logs(args.log_file, verbose=args.verbose, prefect=prefect)


def send_worker_output_to(path: str | os.PathLike[str]) -> None:
    """The LocalCluster workers this command starts write their stderr to ``path`` (``dpstream.pipelines.execution.worker_log``):
    the environment for processes started from here, Dask's config for the nannies' workers."""
    os.environ[ENVIRONMENT_VARIABLE] = str(path)
    # First, so that the user's own preloads (kept, in their order) print to the file too.
    theirs = [
        name for name in dask.config.get("distributed.worker.preload", []) if name != WORKER_LOG_PRELOAD
    ]
    preloads = [WORKER_LOG_PRELOAD, *theirs]
    os.environ["DASK_DISTRIBUTED__WORKER__PRELOAD"] = json.dumps(preloads)
    dask.config.set({"distributed.worker.preload": preloads})


def _is_console(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    )


def capture_logs(path: Path, verbose: bool = False, prefect: bool = True) -> logging.Handler:
    """Send this process's logs to ``path``: console handlers are replaced by one file handler (kept
    beside it with ``verbose``), and Prefect logs at INFO so its task states reach the file.

    Prefect and Distributed are imported first (Distributed with this module): both install their
    console handlers when imported, and a handler installed after this call would print to the terminal
    again. Prefect is imported here, after ``PREFECT_LOGGING_LEVEL`` is set, unless a command imported it
    before."""
    # Prefect re-applies PREFECT_LOGGING_LEVEL whenever it sets logging up again (as a flow starts); a
    # level set only on the logger would not last. The file is for the whole story: INFO.
    if prefect:
        if "prefect" not in sys.modules:
            os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
        from prefect.logging.configuration import ensure_logging_setup

        ensure_logging_setup()  # Prefect's handlers, installed now for the same reason (it sets up lazily)

    loggers = [logging.getLogger()] + [
        logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    # Prefect's formatter names the flow or task run of each record; keep it for the file.
    prefect_formatters = [
        handler.formatter for handler in logging.root.handlers if _is_console(handler) and handler.formatter
    ]
    file_handler = logging.FileHandler(path, encoding="utf-8")  # exists from the start: the CLI names it
    file_handler.setFormatter(prefect_formatters[0] if prefect_formatters else logging.Formatter(_LOG_FORMAT))
    for logger in loggers:
        consoles = [handler for handler in logger.handlers if _is_console(handler)]
        if not consoles:
            continue
        if not verbose:
            for handler in consoles:
                logger.removeHandler(handler)
        if (
            logger is logging.root or not logger.propagate
        ):  # a propagating logger reaches the root's file handler
            logger.addHandler(file_handler)
    if file_handler not in logging.root.handlers:
        logging.root.addHandler(file_handler)
    if prefect:
        logging.getLogger("prefect").setLevel(logging.INFO)
    # This process's scheduler and nanny log INFO to the file; worker processes keep quiet_dask's level.
    logging.getLogger("distributed").setLevel(logging.INFO)
    return file_handler
