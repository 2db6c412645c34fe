"""Rich progress bars for the shuffle, the training run and scoring: rows, rows/s, ε spent and the time
left.

The bars are for the operator's terminal (stderr). ε spent after t steps is the exact accountant's ε,
at the run's δ, of the releases made so far (``dpstream.algorithms.base.report_after``); the ledger
reserved the whole run's μ before the first release.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from dpstream.algorithms.base import Plan, report_after

__all__ = ["RunProgress"]

EPSILON_REFRESH_SECONDS = 0.25  # the accountant is cheap, but O(steps) per call for DP-AMBSSGD


def _count(value: float) -> str:
    """3 significant digits with an SI suffix: 16512 → "16.5k", 2e9 → "2.00G" (a bar fits in 80 columns)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale * 0.9995:  # 999,999 shows as 1.00M, not 1000k
            scaled = value / scale
            return (f"{scaled:#.3g}".rstrip(".") if scaled < 99.95 else f"{scaled:.0f}") + suffix
    return f"{value:.0f}"


class RowsDone(ProgressColumn):
    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "rows")  # "people" for a user-level run's steps
        return Text(f"{_count(task.completed)}/{_count(task.total or 0)} {unit}", style="progress.download")


class RowsPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None and task.finished and task.elapsed:
            speed = task.completed / task.elapsed
        unit = task.fields.get("unit", "rows")
        return Text("" if speed is None else f"{_count(speed)} {unit}/s", style="progress.data.speed")


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class TimeLeft(ProgressColumn):
    """The time left while a bar runs ("ETA 0:01:23", from Rich's smoothed speed), and the time it took
    once it is done: one column, so the bar keeps within 80 columns."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text(_clock(task.finished_time or task.elapsed or 0.0), style="progress.elapsed")
        left = task.time_remaining
        return Text("ETA " + ("-:--:--" if left is None else _clock(left)), style="progress.remaining")


class RunProgress:
    """``with RunProgress() as progress:`` then pass ``progress.shuffle(total)`` to ``shuffle_once`` and
    ``progress.training(algorithm, plan)`` to ``train_on_lake``; disabled, the callbacks do nothing."""

    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self._progress = Progress(
            # At most about 78 columns with a billion rows (tests/flows/test_progress.py): a bar that wraps in
            # an 80-column terminal prints a new line at every refresh.
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=8),
            RowsDone(),
            RowsPerSecond(),
            TextColumn("{task.fields[epsilon]}"),
            TimeLeft(),
            console=console or Console(stderr=True),
            transient=False,
        )

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, error_type: Any, *exc_info: Any) -> None:
        if self._progress.live.is_started:
            # A command that fails says so in one line: its bars leave nothing behind (cleared from a
            # terminal, never written to a file or pipe).
            self._progress.live.transient = error_type is not None
            self._progress.stop()

    def _add_bar(self, description: str, total: int, epsilon: str, unit: str = "rows") -> Any:
        # The display starts with its first bar: a command with nothing to show prints not even a blank line.
        if not self._progress.live.is_started:
            self._progress.start()
        return self._progress.add_task(description, total=total, epsilon=epsilon, unit=unit)

    def shuffle(self, num_rows: int) -> Callable[[str, int], None]:
        """A ``shuffle_once(on_progress=...)`` callback: one bar per phase, each moves ``num_rows`` rows."""
        if not self.enabled:
            return lambda phase, rows: None
        bars: dict[str, Any] = {}

        def advance(phase: str, rows: int) -> None:
            if phase not in bars:  # drawn on the first rows moved: a shuffle with nothing to do shows no bar
                bars[phase] = self._add_bar(f"shuffle {phase}", num_rows, "")
            self._progress.advance(bars[phase], rows)

        return advance

    def files(self, description: str) -> Callable[[int], Callable[[], None]]:
        """A ``progress(total)`` hook for work counted in files (validation, scoring): one bar of ``total``
        files, drawn once the total is known; the returned step advances it by one file."""

        def start(total: int) -> Callable[[], None]:
            if not self.enabled or total == 0:
                return lambda: None
            bar = self._add_bar(description, total, "", "files")
            return lambda: self._progress.advance(bar, 1)

        return start

    def training(self, algorithm: Any, plan: Plan) -> Callable[[int, Any], None]:
        """An ``on_step(step, state)`` callback showing rows consumed and ε spent so far."""
        if not self.enabled:
            return lambda step, state: None
        rows_done = [0]
        for span in plan.spans:
            rows_done.append(rows_done[-1] + span.rows)
        bars: list[Any] = []  # drawn at the first step run: a run resumed complete shows no bar
        last_refresh = [float("-inf")]

        def on_step(step: int, state: Any) -> None:
            if not bars:
                unit = getattr(algorithm, "unit", None)
                counted = "people" if unit is not None and unit.is_user else "rows"
                bars.append(self._add_bar(f"train {plan.num_steps} steps", rows_done[-1], "ε 0", counted))
            bar = bars[0]
            fields = {}
            now = time.monotonic()
            if now - last_refresh[0] >= EPSILON_REFRESH_SECONDS or step + 1 == plan.num_steps:
                report = report_after(algorithm, plan, step + 1)
                fields["epsilon"] = f"ε {report.epsilon:.4g}"  # at the run's δ
                last_refresh[0] = now
            self._progress.update(bar, completed=rows_done[step + 1], **fields)

        return on_step
