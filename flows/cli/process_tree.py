"""The command's process tree: stopped whole when a signal ends the command
(``dpstream.flows.cli.interrupt``), and multiprocessing's resource tracker, started so that it outlives
the tree and frees what the stopped processes held.
"""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
from multiprocessing import resource_tracker

import psutil

__all__ = ["GRACE_SECONDS", "start_resource_tracker", "stop_children", "no_new_children"]

GRACE_SECONDS = 2.0  # for the kernel to reap the killed processes


def start_resource_tracker(log_file: str | os.PathLike[str]) -> None:
    """Start multiprocessing's resource tracker now, as this command's: it ignores SIGHUP as it already
    ignores SIGINT and SIGTERM, and writes to ``log_file``. A hang-up sent to the whole process group
    (a closed terminal, ``timeout -s HUP``) would otherwise kill it, every Dask process would relaunch one
    and print a traceback, and the semaphores it tracks would leak; ``stop_children`` leaves it alive, so
    once this process is gone it frees what the stopped processes held (its notes go to the log)."""
    with open(log_file, "ab") as log:
        saved_stderr = os.dup(2)
        hang_up = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an ignored signal stays ignored in the child
        try:
            os.dup2(log.fileno(), 2)  # the tracker is started with this process's stderr
            resource_tracker.ensure_running()
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            signal.signal(signal.SIGHUP, hang_up)


def _tracker_pid() -> int | None:
    try:
        return resource_tracker._resource_tracker._pid
    except AttributeError:
        return None


def stop_children(rounds: int = 5, grace_seconds: float = GRACE_SECONDS) -> None:
    """Stop every descendant of this process, with none left behind but the resource tracker, which
    frees the stopped processes' semaphores and exits once this process is gone (``start_resource_tracker``).

    A Dask nanny restarts a worker that dies while the nanny lives, so terminating a snapshot of the
    tree can miss a process started meanwhile. The tree is first frozen (SIGSTOP, repeated until no new
    descendant appears: a stopped process cannot start another), then killed."""
    frozen: dict[int, psutil.Process] = {}
    tracker = _tracker_pid()
    for _ in range(rounds):
        try:
            new = [
                p
                for p in psutil.Process().children(recursive=True) + _orphans_of_our_group()
                if p.pid not in frozen and p.pid != tracker
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


def no_new_children() -> None:
    """From now on this process starts no process: the process is about to exit, and a child started
    after ``stop_children`` took its snapshot would outlive it or print a traceback as it finds its
    parent gone. Dask's nanny restarts a worker it sees killed, multiprocessing relaunches its resource
    tracker when it finds it killed, Prefect may start an API server: each is refused or does nothing."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("dpstream is exiting: no new process is started")

    multiprocessing.process.BaseProcess.start = refuse  # type: ignore[method-assign]
    subprocess.Popen._execute_child = refuse  # type: ignore[attr-defined]
    try:
        tracker = resource_tracker._resource_tracker
        tracker.ensure_running = lambda: None
        tracker._send = lambda *args, **kwargs: None
    except AttributeError:  # another Python: nothing to stop
        pass


def _orphans_of_our_group() -> list:
    """Processes of this process group that lost their parent: a terminal's Ctrl-C reaches every process
    of the group, and a Dask worker whose nanny died of it is re-parented to init (or a subreaper), out
    of our tree. Searched only when this process leads its group, as the first process of a terminal
    job does; members started by our shell (``dpstream train | tee log``) keep their parent and are left
    alone."""
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
