"""Dask worker preload (``distributed.worker.preload``): a worker process writes its stderr, and with it
every log record and traceback it prints, to the file ``$DPSTREAM_WORKER_LOG`` names.

The CLI sets both for the LocalCluster it starts, so a worker's warnings (a heartbeat that failed while
the command was stopping, a spilled task) go to the command's log file rather than through the terminal
under ``--quiet``; ``--verbose`` leaves them on the terminal.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["dask_setup", "ENVIRONMENT_VARIABLE"]

ENVIRONMENT_VARIABLE = "DPSTREAM_WORKER_LOG"


def dask_setup(worker: Any = None) -> None:
    path = os.environ.get(ENVIRONMENT_VARIABLE)
    if not path:
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:  # a worker on another machine (the variable exported with the environment): keep stderr
        return
    try:
        os.dup2(descriptor, 2)
    finally:
        os.close(descriptor)
