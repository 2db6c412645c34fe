"""Where the CLI's logs go: the terminal shows progress, the result and one line per error.

Left alone, a ``dpstream train`` prints Prefect's flow and task states on stderr (a refused run adds
60–170 lines of traceback before the CLI's one-line reason) and Dask's scheduler, nanny and workers log
at INFO (about 35 lines a run). Instead:

- ``quiet_dask`` raises the ``distributed`` loggers to WARNING in this process and, through
  ``DASK_LOGGING__DISTRIBUTED``, in every worker process started from it (a value the user set wins).
- ``capture_logs(path)`` (``dpstream.flows.cli.log_file``) moves every console handler of this process
  (Prefect's, Dask's, the root logger's) to one log file and lets Prefect's INFO records through to it,
  so the file holds the whole story: task states, retries, the full traceback of a failure. The CLI
  names the file in its result or error line. ``--verbose`` keeps the console handlers as well.

Log files live in one place, ``$DPSTREAM_LOG_DIR`` or else ``~/.dpstream/logs``; each command keeps
the newest ``KEEP_LOGS`` files there, so the folder is bounded.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from pathlib import Path

__all__ = ["quiet_dask", "log_directory", "new_log_file", "KEEP_LOGS"]

KEEP_LOGS = 20


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
