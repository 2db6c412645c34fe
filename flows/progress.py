"""Rich progress bars for the shuffle and the training run: rows, rows/s and ε spent.

The bars are for the operator's terminal (stderr). ε spent after t steps is the exact accountant's ε,
at the run's δ, of the releases made so far (``dpstream.algorithms.base.report_after``); the ledger
reserved the whole run's μ before the first release.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from dpstream.algorithms.base import Plan, report_after

__all__ = ["RunProgress"]

EPSILON_REFRESH_SECONDS = 0.25  # the accountant is cheap, but O(steps) per call for DP-AMBSSGD


class RowsPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("… rows/s" if speed is None else f"{speed:,.0f} rows/s", style="progress.data.speed")


class RunProgress:
    """``with RunProgress() as progress:`` then pass ``progress.shuffle(total)`` to ``shuffle_once`` and
    ``progress.training(algorithm, plan)`` to ``train_on_lake``; disabled, the callbacks do nothing."""

    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(), TextColumn("rows"),
            RowsPerSecond(), TextColumn("{task.fields[epsilon]}"), TimeElapsedColumn(),
            console=console or Console(stderr=True), transient=False,
        )

    def __enter__(self) -> "RunProgress":
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            self._progress.stop()

    def shuffle(self, num_rows: int) -> Callable[[str, int], None]:
        """A ``shuffle_once(on_progress=...)`` callback: one bar per phase, each moves ``num_rows`` rows."""
        if not self.enabled:
            return lambda phase, rows: None
        bars = {phase: self._progress.add_task(f"shuffle: {phase}", total=num_rows, epsilon="") for phase in ("scatter", "gather")}
        return lambda phase, rows: self._progress.advance(bars[phase], rows)

    def training(self, algorithm: Any, plan: Plan) -> Callable[[int, Any], None]:
        """An ``on_step(step, state)`` callback showing rows consumed and ε spent so far."""
        if not self.enabled:
            return lambda step, state: None
        rows_done = [0]
        for span in plan.spans:
            rows_done.append(rows_done[-1] + span.rows)
        bar = self._progress.add_task(f"train: {plan.num_steps} steps", total=rows_done[-1], epsilon="ε spent 0")
        last_refresh = [float("-inf")]

        def on_step(step: int, state: Any) -> None:
            fields = {}
            now = time.monotonic()
            if now - last_refresh[0] >= EPSILON_REFRESH_SECONDS or step + 1 == plan.num_steps:
                report = report_after(algorithm, plan, step + 1)
                fields["epsilon"] = f"ε spent {report.epsilon:.4g} (δ={report.delta:g})"
                last_refresh[0] = now
            self._progress.update(bar, completed=rows_done[step + 1], **fields)

        return on_step
