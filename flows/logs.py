"""Where the CLI's logs go: the terminal shows progress, the result and one line per error.

Left alone, a ``dpstream train`` prints Prefect's flow and task states on stderr (a refused run adds
60–170 lines of traceback before the CLI's one-line reason) and Dask's scheduler, nanny and workers log
at INFO (about 35 lines a run). Instead:

- ``quiet_dask`` raises the ``distributed`` loggers to WARNING in this process and, through
  ``DASK_LOGGING__DISTRIBUTED``, in every worker process started from it (a value the user set wins).
- ``capture_logs(path)`` moves every console handler of this process (Prefect's, Dask's, the root
  logger's) to one log file and lets Prefect's INFO records through to it, so the file holds the
  whole story: task states, retries, the full traceback of a failure. The CLI names the file in its
  result or error line. ``--verbose`` keeps the console handlers as well.

Log files live in one place, ``$DPSTREAM_LOG_DIR`` or else ``~/.dpstream/logs``; each command keeps
the newest ``KEEP_LOGS`` files there, so the folder is bounded.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import sys
from pathlib import Path

__all__ = ["quiet_dask", "log_directory", "new_log_file", "capture_logs", "KEEP_LOGS"]

KEEP_LOGS = 20
_LOG_FORMAT = "%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"


def quiet_dask(verbose: bool = False) -> None:
    if verbose:
        return
    level = os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    logging.getLogger("distributed").setLevel(level.upper())


def log_directory() -> Path:
    """``$DPSTREAM_LOG_DIR``, else ``~/.dpstream/logs``."""
    configured = os.environ.get("DPSTREAM_LOG_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".dpstream" / "logs"


def new_log_file(command: str, name: str) -> Path:
    """A fresh log file path for one command run, ``<stamp>-<command>-<name>.log``; older logs of the
    command beyond the newest ``KEEP_LOGS - 1`` are removed (only files matching our own pattern)."""
    folder = log_directory()
    folder.mkdir(parents=True, exist_ok=True)
    ours = sorted(folder.glob(f"*-{command}-*.log"))
    for old in ours[: max(0, len(ours) - (KEEP_LOGS - 1))]:
        old.unlink(missing_ok=True)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return folder / f"{stamp}-{command}-{name}.log"


def _is_console(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    )


def capture_logs(path: Path, verbose: bool = False) -> logging.Handler:
    """Send this process's logs to ``path``: console handlers are replaced by one file handler (kept
    beside it with ``verbose``), and Prefect logs at INFO so its task states reach the file.

    Imports Prefect and Distributed first: both install their console handlers when imported, and a
    handler installed after this call would print to the terminal again."""
    # Prefect re-applies PREFECT_LOGGING_LEVEL whenever it sets logging up again (as a flow starts); a
    # level set only on the logger would not last. The file is for the whole story: INFO.
    if "prefect" not in sys.modules:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    import distributed  # noqa: F401 - installs its handlers now, so they are moved below
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
    logging.getLogger("prefect").setLevel(logging.INFO)
    # This process's scheduler and nanny log INFO to the file; worker processes keep quiet_dask's level.
    logging.getLogger("distributed").setLevel(logging.INFO)
    return file_handler
