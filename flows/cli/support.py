"""What the ``dpstream`` command modules share: exit codes, COLUMN=VALUE parsing, and the error lines that
name a file and its fix. Light: the dispatcher (``dpstream.flows.cli.main``) reports every error with it."""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Sequence
from typing import NamedTuple

from dpstream.extras import MissingExtra, missing_extra
from dpstream.flows.logs import log_directory

__all__ = [
    "EXIT_OK",
    "EXIT_OTHER",
    "EXIT_BAD_INPUT",
    "EXIT_BUDGET",
    "parse_pairs",
    "failure_line",
    "refuse",
    "run_places",
    "Place",
]

EXIT_OK, EXIT_OTHER, EXIT_BAD_INPUT, EXIT_BUDGET = 0, 1, 2, 3


def parse_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{what} must look like COLUMN=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        pairs[key] = value
    return pairs


# Errors another try cannot cure until someone acts: a full disk or quota, a location this user cannot
# write. Their lines name the file, the setting that chose it, and the fix.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
_ENDPOINT = re.compile(r"Could not connect to the endpoint URL: \"?([^\"\s]+)\"?")


def failure_line(error: BaseException, places: Sequence = (), again: str = "") -> str | None:
    """The CLI's line for ``error`` when it names a fix the error's own words do not: no space left on
    a device, a read-only or forbidden location, an object store that cannot be reached (a raw botocore
    ``EndpointConnectionError``). None for any other error. ``places`` are the locations the command
    writes (``dpstream.locations.Protected``: a URL and a name ending in its setting, "(budget.ledger_url)"),
    used to say which setting chose the file; ``again`` how to run the command again, when more than
    "run the command again" is needed (a run's resume)."""
    if type(error).__name__ == "StoreUnavailableError":  # it already names the store and the fix
        return None
    then = f"run the command again{f' ({again})' if again else ''}"
    chain = _chain(error)
    for cause in chain:
        if isinstance(cause, OSError) and cause.errno in _FULL | _NOT_WRITABLE:
            filename = cause.filename or cause.filename2
            where = _setting(str(filename), places) if filename is not None else None
            elsewhere = f"point {where} elsewhere" if where else "point the setting that names it elsewhere"
            if cause.errno in _FULL:
                what = "no space left on device" if cause.errno == errno.ENOSPC else "disk quota exceeded"
                writing = f" writing {filename}" if filename is not None else ""
                return f"dpstream: {what}{writing}: free space there (or {elsewhere}) and {then}"
            subject = str(filename) if filename is not None else "a location this command writes"
            state = (
                "is on a read-only file system"
                if cause.errno == errno.EROFS
                else "is read-only (or not writable) for this user"
            )
            return (
                f"dpstream: {subject} {state} ({cause.strerror or os.strerror(cause.errno)}): make "
                f"it writable (or {elsewhere}) and {then}"
            )
    for cause in chain:
        found = _ENDPOINT.search(str(cause))
        if found or "EndpointConnectionError" in {cls.__name__ for cls in type(cause).__mro__}:
            at = f" at {found.group(1)}" if found else ""
            return (
                f"dpstream: could not reach the object store{at}: check that it is running and that the "
                "endpoint is right (endpoint_url in the location's storage options, or AWS_ENDPOINT_URL) and "
                f"that this machine can reach it, then {then}"
            )
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or while handling, each once."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _setting(filename: str, places: Sequence) -> str | None:
    """The setting of the innermost place holding ``filename`` ("budget.ledger_url"), else None (also for a
    place no single setting names: the config's folder)."""

    def bare(url: str) -> str:
        text = url.split("://", 1)[-1] if "://" in url else os.path.abspath(url)
        return text.rstrip("/")

    path = bare(filename)
    holding = [p for p in places if path == bare(p.url) or path.startswith(bare(p.url) + "/")]
    if not holding:
        return None
    name = max(holding, key=lambda p: len(bare(p.url))).name
    named = re.search(r"\(([^()]+)\)$", name)
    return named.group(1) if named else None


class Place(NamedTuple):
    """A location a command writes, as ``failure_line`` names it (``dpstream.locations.Protected`` has the
    same two fields): its URL, and what it is with its setting in parentheses."""

    url: str
    name: str


def run_places(output: str, operator: str) -> list[Place]:
    """A run's own folders: its publish folder and its operator folder."""
    return [
        Place(output, "the publish folder (--output)"),
        Place(operator, "the operator folder (--operator-output)"),
    ]


def _common_places() -> list[Place]:
    """The folders every command may write besides its config's: the logs, and Dask's scratch when set."""
    places = [Place(str(log_directory()), "the log folder ($DPSTREAM_LOG_DIR)")]
    scratch = os.environ.get("DASK_TEMPORARY_DIRECTORY")
    if scratch:
        places.append(Place(scratch, "Dask's scratch folder ($DASK_TEMPORARY_DIRECTORY)"))
    return places


def refuse(error: Exception, args) -> int:
    """One line on stderr and the exit code for ``error``. ConfigError and LakeError are ValueErrors; a
    BudgetExceededError can only come from the ledger module if that was imported, so nothing is loaded
    just to classify an error. A full disk, a location that cannot be written and an object store out of
    reach are named with the file and the fix (``failure_line``), using the locations the command set in
    ``args.places`` and how to run it again in ``args.again``."""
    ledger = sys.modules.get("dpstream.privacy.ledger")
    if ledger is not None and isinstance(error, ledger.BudgetExceededError):
        print(f"dpstream: budget refused: {error}{_log_note(args)}", file=sys.stderr)
        return EXIT_BUDGET
    if isinstance(error, ImportError):  # a feature whose extra is not installed: name the extra
        error = missing_extra(error) or error
    if not isinstance(error, ValueError):  # a ValueError's own words name the setting and the fix
        places = [*getattr(args, "places", ()), *_common_places()]
        line = failure_line(error, places, getattr(args, "again", ""))
        if line is not None:
            print(f"{line}{_log_note(args)}", file=sys.stderr)
            return EXIT_OTHER
    if isinstance(error, (ValueError, FileNotFoundError, MissingExtra)):
        print(f"dpstream: {error}{_log_note(args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"dpstream: {type(error).__name__}: {error}{_log_note(args)}", file=sys.stderr)
    return EXIT_OTHER


def _log_note(args) -> str:
    return f" (full log: {args.log_file})" if getattr(args, "log_file", None) else ""
