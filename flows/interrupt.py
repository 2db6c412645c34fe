"""Ctrl-C for long CLI commands: stop at once, leave no child process, say how to go on.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the Dask workers and the
ephemeral Prefect API die with the CLI, and Prefect's engine then spends about a minute retrying to
report the crash to the API that is gone. Durability does not depend on that unwinding: checkpoints
and ledger entries are written atomically, the ledger reservation was made before the first release
(so it stays ``reserved``), and a resumed run replays the same noise. So on the first SIGINT the
command stops its own process tree (terminate, then kill after a grace period), prints one line and
exits with 130 without unwinding.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["exit_on_interrupt", "EXIT_INTERRUPTED", "stop_children"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention
GRACE_SECONDS = 2.0  # for the kernel to reap the killed processes


def stop_children(rounds: int = 5, grace_seconds: float = GRACE_SECONDS) -> None:
    """Stop every descendant of this process, with none left behind.

    A Dask nanny restarts a worker that dies while the nanny lives, so terminating a snapshot of the
    tree can miss a process started meanwhile. The tree is first frozen (SIGSTOP, repeated until no new
    descendant appears: a stopped process cannot start another), then killed."""
    import psutil

    frozen: dict[int, psutil.Process] = {}
    for _ in range(rounds):
        try:
            new = [
                p
                for p in psutil.Process().children(recursive=True) + _orphans_of_our_group()
                if p.pid not in frozen
            ]
        except psutil.Error:
            break
        if not new:
            break
        for process in new:
            try:
                process.suspend()
                frozen[process.pid] = process
            except psutil.Error:
                pass
    for process in frozen.values():
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(frozen.values()), timeout=grace_seconds)


def _no_new_resource_tracker() -> None:
    """multiprocessing relaunches its resource tracker (a child process) when it finds it killed; after the
    clean-up that new child would outlive us and print tracebacks. The process is about to exit: stop it."""
    try:
        from multiprocessing import resource_tracker

        tracker = resource_tracker._resource_tracker
        tracker.ensure_running = lambda: None
        tracker._send = lambda *args, **kwargs: None
    except (ImportError, AttributeError):  # another Python: nothing to stop
        pass


def _orphans_of_our_group() -> list:
    """Processes of this process group that lost their parent: a terminal's Ctrl-C reaches every process
    of the group, and a Dask worker whose nanny died of it is re-parented to init (or a subreaper), out
    of our tree. Searched only when this process leads its group, as the first process of a terminal
    job does; members started by our shell (``dpstream train | tee log``) keep their parent and are left
    alone."""
    import psutil

    group, me, my_parent = os.getpgid(0), os.getpid(), os.getppid()
    if group != me:  # only a group this process leads (a terminal job) is ours to search
        return []
    descendants = {p.pid for p in psutil.Process().children(recursive=True)}
    orphans = []
    for process in psutil.process_iter(["pid", "ppid"]):
        try:
            # Adopted by init or by a subreaper: neither ours, nor a sibling started by our shell.
            adopted = process.info["ppid"] not in (me, my_parent) and process.pid not in descendants
            if adopted and process.pid != me and os.getpgid(process.pid) == group:
                orphans.append(process)
        except (psutil.Error, ProcessLookupError, PermissionError):
            pass
    return orphans


@contextmanager
def exit_on_interrupt(message: str, before_exit: Callable[[str], None] | None = None) -> Iterator[None]:
    """Within the block, SIGINT stops the process tree, prints ``dpstream: interrupted; <message>`` and exits
    130. ``before_exit(message)`` runs first, while the children still live (the train command reports its
    flow run to the Prefect API there: ``dpstream.flows.prefect_api.mark_flow_run_crashed``)."""

    def handle(signum, frame) -> None:  # noqa: ARG001 - the signal module's signature
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        if before_exit is not None:
            before_exit(message)
        _no_new_resource_tracker()
        stop_children()
        sys.stderr.write(f"\ndpstream: interrupted; {message}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(EXIT_INTERRUPTED)

    previous = signal.signal(signal.SIGINT, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
