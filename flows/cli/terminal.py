"""Where a command's output goes: its result lines on stdout, one record per line whatever the terminal's
width (``result_console``), and its warnings on stderr (``warn``). Not for the dispatcher: rich costs
tens of milliseconds that ``dpstream --help`` does not pay."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.console import Console

__all__ = ["result_console", "warn"]


def result_console() -> Console:
    """The console a command prints its result to: one record per line, whatever the terminal's width.
    Text prints as written: Rich's markup would eat "[preprocess]" or a column named "[x]" (a line that
    wants markup asks for it, ``print(..., markup=True)``)."""
    return Console(soft_wrap=True, markup=False)


def warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"dpstream: warning: {warning}", file=sys.stderr)
