"""Quiet Dask by default: a CLI user sees progress, the result and one line per error.

Dask's scheduler, nanny and workers log at INFO (about 35 lines per run). ``quiet_dask`` raises the
``distributed`` loggers to WARNING in this process and, through ``DASK_LOGGING__DISTRIBUTED``, in every
worker process started from it. ``--verbose`` on the CLI, or that variable set by the user, keeps them.
"""

from __future__ import annotations

import logging
import os

__all__ = ["quiet_dask"]


def quiet_dask(verbose: bool = False) -> None:
    if verbose:
        return
    level = os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    logging.getLogger("distributed").setLevel(level.upper())
