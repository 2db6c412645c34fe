"""Subprocesses a test interrupts with Ctrl-C start as a terminal's job would: SIGINT at its default.

Run from a script's background (a non-interactive shell's ``&``, as ``make test &`` is), pytest and every
child inherit SIGINT ignored, and a command keeps ignoring a signal it was started ignoring, as the CLI
does on purpose (``dpstream.flows.cli.interrupt``) and as bash does for a trap. A test that sends SIGINT
must therefore restore it in the child, or it tests how the command was started instead of the command.
"""

from __future__ import annotations

import signal

__all__ = ["as_terminal_job"]


def as_terminal_job() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT back to its default in the child, before exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
