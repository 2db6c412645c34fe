"""A Dask worker preload that writes one line to its process's stderr, as a user's preload, a worker's
warning or a failed heartbeat's traceback would."""

import sys

WORKER_LINE = "a line a worker process wrote on its stderr"


def dask_setup(worker=None) -> None:
    print(WORKER_LINE, file=sys.stderr, flush=True)
