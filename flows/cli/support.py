"""What the ``dpstream`` command modules share: exit codes, COLUMN=VALUE parsing, the log file, and the
error lines that name a file and its fix."""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from dpstream.flows.cli.interrupt import start_resource_tracker
from dpstream.flows.logs import capture_logs, new_log_file

if TYPE_CHECKING:
    from dpstream.flows.config.pipeline import PipelineConfig

__all__ = [
    "EXIT_OK",
    "EXIT_OTHER",
    "EXIT_BAD_INPUT",
    "EXIT_BUDGET",
    "parse_pairs",
    "log_to_file",
    "failure_line",
    "refuse",
    "run_places",
    "stopped_run_message",
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
    start_resource_tracker(args.log_file)
    if not args.verbose:
        send_worker_output_to(args.log_file)
    capture_logs(args.log_file, verbose=args.verbose)


def send_worker_output_to(path) -> None:
    """The LocalCluster workers this command starts write their stderr to ``path`` (``dpstream.pipelines.execution.worker_log``):
    the environment for processes started from here, Dask's config for the nannies' workers."""
    import os

    from dpstream.pipelines.execution.worker_log import ENVIRONMENT_VARIABLE

    os.environ[ENVIRONMENT_VARIABLE] = str(path)
    os.environ["DASK_DISTRIBUTED__WORKER__PRELOAD"] = '["dpstream.pipelines.execution.worker_log"]'
    import dask

    dask.config.set({"distributed.worker.preload": ["dpstream.pipelines.execution.worker_log"]})


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
    from dpstream.flows.logs import log_directory

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
    if not isinstance(error, ValueError):  # a ValueError's own words name the setting and the fix
        places = [*getattr(args, "places", ()), *_common_places()]
        line = failure_line(error, places, getattr(args, "again", ""))
        if line is not None:
            print(f"{line}{_log_note(args)}", file=sys.stderr)
            return EXIT_OTHER
    if isinstance(error, (ValueError, FileNotFoundError)):
        print(f"dpstream: {error}{_log_note(args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"dpstream: {type(error).__name__}: {error}{_log_note(args)}", file=sys.stderr)
    return EXIT_OTHER


def _log_note(args) -> str:
    return f" (full log: {args.log_file})" if getattr(args, "log_file", None) else ""


def stopped_run_message(
    config: PipelineConfig, run_id: str, log_file: Path | str | None, resume: str, timeout: float = 3.0
) -> Callable[[], str]:
    """The line of a ``train`` run stopped by a signal, as a function asked at that moment: it says what
    the ledger then holds for the run and what to do. The process exits without unwinding, so a run that
    holds a claim no step has used gives it back first (``dpstream.unreleased``: its entry moves to
    ``aborted/``, its checkpoint is deleted); a reservation a step used stays until the run is resumed
    from its checkpoint. When the ledger cannot be read within ``timeout`` seconds (an object store out of
    reach), the line says what holds either way."""
    stopped = f"run {run_id} stopped (log: {log_file})"

    def message() -> str:
        status, saved = _within(timeout, lambda: _given_back_then_state(config, run_id))
        if status is None and saved is not None:
            return f"{stopped} before it charged the ledger: nothing is charged for it; start it again with: {resume}"
        if status == "committed":
            return (
                f"{stopped} after it finished (its ledger entry is committed); its model is published again, "
                f"charged nothing more, with: {resume}"
            )
        if status == "reserved" and saved is False:
            return (
                f"{stopped} after it reserved its charge but before its first checkpoint: the reservation stays "
                "in the ledger, counted against the lake's budget, and this run id cannot resume; train again "
                f"with a new --run-id (`dpstream budget show` lists the reservation)"
            )
        held = (
            "its ledger charge stays reserved"
            if status == "reserved"
            else "a ledger charge it reserved stays reserved"
        )
        return (
            f"{stopped}; {held}, counted against the lake's budget, until the run is resumed from its "
            f"checkpoint (charged once) with: {resume}"
        )

    return message


def _given_back_then_state(config: PipelineConfig, run_id: str) -> tuple[str | None, bool]:
    from dpstream.unreleased import give_back_all

    give_back_all("stopped by a signal before its first release")
    return _run_state(config, run_id)


def _run_state(config: PipelineConfig, run_id: str) -> tuple[str | None, bool]:
    """(the status of ``run_id``'s ledger entry, or None without one; whether its checkpoint exists)."""
    from dpstream.checkpoint import FILE_NAME
    from dpstream.flows.assembly.locations import checkpoint_root
    from dpstream.storage import open_url, read_json

    fs, root = open_url(config.budget.ledger_url)
    fs.invalidate_cache(root)
    entries = fs.glob(f"{root.rstrip('/')}/*/runs/{run_id}.json")
    status = read_json(fs, entries[0]).get("status") if entries else None
    fs, root = open_url(checkpoint_root(config))
    return status, bool(fs.exists(f"{root.rstrip('/')}/{run_id}/{FILE_NAME}"))


def _within(timeout: float, question: Callable[[], tuple]) -> tuple:
    """``question()``'s answer, or (None, None) when it fails or takes longer than ``timeout`` seconds."""
    import threading

    answer: list[tuple] = []

    def ask() -> None:
        try:
            answer.append(question())
        except Exception:  # noqa: BLE001 - an unreadable ledger leaves the line that holds either way
            pass

    thread = threading.Thread(target=ask, name="dpstream-ledger-state", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else (None, None)
