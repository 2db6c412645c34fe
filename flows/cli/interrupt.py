"""Ctrl-C, SIGTERM and SIGHUP for CLI commands: stop at once, leave no child process, say how to go on.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group, ``timeout`` and service managers
send SIGTERM, a closed terminal SIGHUP. Whichever arrives, the command stops its own process tree (the
Dask workers, the temporary Prefect API, anything either started), prints one line and exits with
128 + the signal's number (130 for Ctrl-C), so nothing is left running for minutes afterwards.

Two phases:

* A command that starts children runs its work inside ``exit_on_interrupt``: the first signal stops the
  process tree (``dpstream.flows.cli.process_tree``) and exits without unwinding. Prefect's engine would
  otherwise spend about a minute retrying to report the crash to the API that is gone. Durability does
  not depend on that unwinding: checkpoints and ledger entries are written atomically, a ledger
  reservation stays ``reserved`` until the run is resumed with its run id, and a resumed run replays the
  same noise.
* Before and after that block (imports, config loading, the result lines), and in the commands that clean
  up as they unwind (``predict``), ``unwind_on_signals`` turns each of the three signals into
  ``Interrupted``, a KeyboardInterrupt: the console script catches it and ends the same way, with one
  line. A watchdog ends the process if the exception was swallowed (a KeyboardInterrupt raised inside a
  garbage-collector callback is only printed) or the unwinding hangs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from dpstream.flows.cli.process_tree import no_new_children, stop_children

__all__ = [
    "EXIT_INTERRUPTED",
    "SIGNALS",
    "Interrupted",
    "exit_code",
    "exit_interrupted",
    "exit_on_interrupt",
    "report_interrupted",
    "set_interrupt_message",
    "signal_of",
    "stop_and_exit",
    "unwind_on_signals",
]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention
UNWIND_SECONDS = 20.0  # how long an unwinding command may take after a signal before the watchdog ends it
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_exiting = threading.Lock()  # held by the one thread that stops the tree and exits


class Interrupted(KeyboardInterrupt):
    """The signal ``signum`` arrived while the command unwinds on signals (``unwind_on_signals``). A
    KeyboardInterrupt, so the clean-up code written for Ctrl-C runs for SIGTERM and SIGHUP too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(signum: int) -> int:
    """The shell's convention for a command ended by a signal: 128 + its number."""
    return 128 + signum


def signal_of(error: BaseException) -> int:
    """The signal an ``Interrupted`` carries; SIGINT for a plain KeyboardInterrupt."""
    return getattr(error, "signum", signal.SIGINT)


def interrupted_line(signum: int, message: str) -> str:
    """The command's last line. After Ctrl-C the terminal shows ``^C`` where the cursor was, so the line
    starts on a new one; the other signals are named."""
    if signum == signal.SIGINT:
        return f"\ndpstream: interrupted; {message}\n"
    return f"dpstream: interrupted ({signal.Signals(signum).name}); {message}\n"


def stop_and_exit(
    signum: int,
    message: str | None,
    before_exit: Callable[[str, str], None] | None = None,
) -> NoReturn:
    """Stop the process tree, print ``interrupted_line(signum, message)`` (nothing when ``message`` is
    None: the command printed its own) and exit with ``exit_code(signum)``, skipping Python's exit
    handlers: Prefect's would wait for the API that was just stopped. ``before_exit(message, cause)``
    runs first, while the children still live. Only one thread does this; another that arrives meanwhile
    (the watchdog, the signal handler) waits for the exit."""
    if not _exiting.acquire(blocking=False):
        threading.Event().wait()
    if threading.current_thread() is threading.main_thread():
        for each in SIGNALS:  # a second signal must not interrupt the clean-up
            signal.signal(each, signal.SIG_IGN)
    try:
        if before_exit is not None and message is not None:
            before_exit(message, "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)
    finally:
        no_new_children()
        stop_children()
        if message is not None:
            sys.stderr.write(interrupted_line(signum, message))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(exit_code(signum))


def _answered() -> list[int]:
    """The signals to answer: those not ignored. A command started under ``nohup`` (SIGHUP ignored) or in
    the background of a script (SIGINT ignored) keeps ignoring them, as it would without a handler."""
    return [each for each in SIGNALS if signal.getsignal(each) is not signal.SIG_IGN]


@contextmanager
def _handling(handler: Callable[[int, object], None]) -> Iterator[None]:
    previous = {each: signal.signal(each, handler) for each in _answered()}
    try:
        yield
    finally:
        for each, handler_before in previous.items():
            signal.signal(each, handler_before)


@contextmanager
def exit_on_interrupt(
    message: str | Callable[[], str], before_exit: Callable[[str, str], None] | None = None
) -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM or SIGHUP stops the process tree, prints ``dpstream: interrupted;
    <message>`` and exits with 128 + the signal's number (``stop_and_exit``). A callable ``message`` is
    asked when the signal arrives (what a run holds then). ``before_exit(message, cause)`` runs first,
    while the children still live (the train command reports its flow run to the Prefect API there:
    ``dpstream.flows.prefect_api.mark_flow_run_crashed``)."""

    def handle(signum: int, frame: object) -> None:  # noqa: ARG001 - the signal module's signature
        for each in SIGNALS:  # a second signal must not interrupt the clean-up, this question included
            signal.signal(each, signal.SIG_IGN)
        try:
            text = message() if callable(message) else message
        except Exception:  # noqa: BLE001 - the tree is stopped whatever the question met
            text = "the command stopped"
        stop_and_exit(signum, text, before_exit)

    with _handling(handle):
        yield


_unwinding: dict[str, object] = {
    "message": "the command stopped before it finished",
    "reported": False,
    "signal": None,
}


def set_interrupt_message(message: str) -> None:
    """What the line says when a signal ends the command outside ``exit_on_interrupt`` from now on: a
    command names what it has done so far (nothing charged yet; a run that had finished)."""
    _unwinding["message"] = message


def exit_interrupted(error: BaseException) -> NoReturn:
    """End the command that ``error`` (a KeyboardInterrupt, ``Interrupted``) reached the top of: the tree
    stopped, the line of ``set_interrupt_message`` unless the command printed its own, 128 + signal."""
    stop_and_exit(signal_of(error), _pending_line())


def arrived_signal() -> int | None:
    """The signal ``unwind_on_signals`` answered, if one arrived: an error that reaches the top after it
    is the interrupt, wrapped by a library (pydantic's serializer reports it as its own error)."""
    signum = _unwinding.get("signal")
    return int(signum) if signum is not None else None


def _pending_line() -> str | None:
    return None if _unwinding["reported"] else str(_unwinding["message"])


def report_interrupted(signum: int, message: str) -> None:
    """Print the line of a command that unwound by itself (``predict``), so that no second one follows."""
    _unwinding["reported"] = True
    sys.stderr.write(interrupted_line(signum, message))
    sys.stderr.flush()


def unwind_on_signals(grace_seconds: float = UNWIND_SECONDS) -> None:
    """From now on SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` in the main thread (the console
    script installs this first, so that a signal during the imports or Prefect's start-up gives one
    line, not a traceback). The first signal also starts a watchdog: if the process still runs
    ``grace_seconds`` later, the watchdog stops the tree and exits. A second signal does so at once."""
    arrived: list[int] = []

    def watchdog(signum: int) -> None:
        stop_and_exit(signum, _pending_line())

    def handle(signum: int, frame: object) -> None:  # noqa: ARG001 - the signal module's signature
        if arrived:
            stop_and_exit(signum, _pending_line())
        arrived.append(signum)
        _unwinding["signal"] = signum
        timer = threading.Timer(grace_seconds, watchdog, args=(signum,))
        timer.daemon = True
        timer.start()
        raise Interrupted(signum)

    for each in _answered():
        signal.signal(each, handle)
