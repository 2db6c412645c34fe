"""The claims of runs in this process that no step has used yet, for a signal to give back.

A run claims its run id in the ledger before it draws its noise key, and gives the claim back if it fails
before its first noisy update (``dpstream.coordinator.run``). A command stopped by a signal exits without
unwinding (its children are stopped and the process ends at once), so that give-back would never run and
the reservation would stay charged with no checkpoint to resume it. The run therefore registers its
give-back here while it holds a claim no step has used; the command's signal handler calls
``give_back_all`` before it exits. The run's own thread takes its claim out of the registry, under the
same lock, just before a step uses the noise (``mark_used``), and learns there if it was given back
meanwhile: then it stops instead of using a key whose charge is gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["StoppedBeforeRelease", "hold", "mark_used", "forget", "give_back_all"]


class StoppedBeforeRelease(RuntimeError):
    """The run's claim was given back (a signal stopped the command) before any step used its noise."""


_lock = threading.Lock()
_held: dict[str, Callable[[BaseException], None]] = {}
_given_back: set[str] = set()


def hold(run_id: str, give_back: Callable[[BaseException], None]) -> None:
    """Register ``give_back(reason)`` for ``run_id``'s claim, which no step has used yet."""
    with _lock:
        _given_back.discard(run_id)
        _held[run_id] = give_back


def mark_used(run_id: str) -> None:
    """A step of ``run_id`` is about to use the noise: its claim is no longer given back by a signal.
    Raises ``StoppedBeforeRelease`` when it already was."""
    with _lock:
        if run_id in _given_back:
            raise StoppedBeforeRelease(
                f"run {run_id!r} was stopped before its first release and its reservation given back"
            )
        _held.pop(run_id, None)


def forget(run_id: str) -> None:
    """The run ended (or gave its claim back itself): nothing of it is held here any more."""
    with _lock:
        _held.pop(run_id, None)


def give_back_all(reason: str) -> list[str]:
    """Give back every held claim (each run's own ``give_back``), returning their run ids. A give-back that
    fails leaves that charge in the ledger: reserved, never lost."""
    with _lock:
        held = list(_held.items())
        _held.clear()
        _given_back.update(run_id for run_id, _ in held)
    for _, give_back in held:
        try:
            give_back(StoppedBeforeRelease(reason))
        except Exception:  # noqa: BLE001 - the signal's exit goes on; the charge then stays reserved
            pass
    return [run_id for run_id, _ in held]
