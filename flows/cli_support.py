"""What the ``dpstream`` command modules share: exit codes, COLUMN=VALUE parsing, the log file."""

from __future__ import annotations

from collections.abc import Sequence

from flows.logs import capture_logs, new_log_file

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
    """Prefect's and Dask's logs go to a new file under the log folder (flows.logs), named in the result
    or error line; ``--verbose`` shows them on the terminal too."""
    args.log_file = new_log_file(command, name)
    capture_logs(args.log_file, verbose=args.verbose)
