"""Progress bars: rows consumed and ε spent come from the plan and the exact accountant."""

import io
import re

import numpy as np
import pytest
from rich.console import Console

from dpstream.algorithms import DPAMBSSGD, DPSGD
from dpstream.algorithms.base import report_after
from dpstream.flows.cli.progress import RunProgress
from dpstream.noise import make_noise_process


def test_report_after_bounds_the_prefix():
    correlated = DPSGD(
        1.0,
        1e-6,
        clip_norm=1.0,
        learning_rate=0.1,
        batch_size=100,
        noise=make_noise_process("lambda", correlation=0.5),
    )
    plan = correlated.plan(10_000, 4)
    full = correlated.report(plan)
    prefix = [report_after(correlated, plan, t).epsilon for t in (1, 10, plan.num_steps)]
    assert prefix[-1] == pytest.approx(full.epsilon, rel=1e-12)
    assert all(e <= full.epsilon * (1 + 1e-12) for e in prefix)
    assert prefix == sorted(prefix)  # never decreases as releases accumulate
    # Disjoint single-pass batches with independent noise: one release already spends the run's ε.
    ambssgd = DPAMBSSGD(1.0, 1e-6, bound=10.0, statistic="gradient_norm", num_steps=20)
    plan = ambssgd.plan(100_000, 4)
    assert report_after(ambssgd, plan, 1).epsilon == pytest.approx(ambssgd.report(plan).epsilon, rel=1e-9)
    with pytest.raises(ValueError, match=r"steps must lie in \[1, 20\]"):
        report_after(ambssgd, plan, 0)


def test_training_bar_reaches_all_rows_and_the_final_epsilon():
    algorithm = DPSGD(
        1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=250, noise=make_noise_process("nu", nu=0.05)
    )
    plan = algorithm.plan(5_000, 3)
    sink = io.StringIO()
    with RunProgress(console=Console(file=sink, width=200, force_terminal=False)) as progress:
        on_step = progress.training(algorithm, plan)
        for step in range(plan.num_steps):
            on_step(step, None)
    text = sink.getvalue()
    done = f"{plan.rows_used / 1000:#.3g}k"
    assert f"{done}/{done} rows" in text
    shown = float(re.search(r"ε ([0-9.e+-]+)", text).group(1))
    assert shown == pytest.approx(algorithm.report(plan).epsilon, rel=1e-3)  # printed with 4 digits


def test_bars_fit_an_80_column_terminal_at_a_billion_rows():
    algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=1_000_000)
    plan = algorithm.plan(1_999_999_999, 3)
    sink = io.StringIO()
    with RunProgress(console=Console(file=sink, width=80, force_terminal=False)) as progress:
        shuffle = progress.shuffle(2_000_000_000)
        shuffle("scatter", 2_000_000_000)
        shuffle("gather", 1_234_567_890)
        on_step = progress.training(algorithm, plan)
        for step in (0, 1, plan.num_steps - 1):
            on_step(step, None)
    lines = sink.getvalue().rstrip("\n").splitlines()
    # One line per bar (three), none wrapped or cut: every field is still there.
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines), lines
    assert (
        "2.00G/2.00G rows" in lines[0]
        and "1.23G/2.00G rows" in lines[1]
        and "ETA " in lines[1]  # a bar still running says the time left; a finished one the time it took
        and re.search(r"ε [0-9.]+ ", lines[2])
    )
    assert "train 1999 steps" in lines[2] and "2.00G/2.00G rows" in lines[2]


def test_nothing_to_do_draws_no_bar():
    sink = io.StringIO()
    with RunProgress(console=Console(file=sink, width=80)) as progress:
        progress.shuffle(1_000)
        algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=10)
        progress.training(algorithm, algorithm.plan(100, 2))
    assert sink.getvalue() == ""  # a kept manifest, a run resumed complete: no bars at 0


def test_disabled_progress_prints_nothing():
    sink = io.StringIO()
    with RunProgress(enabled=False, console=Console(file=sink)) as progress:
        progress.shuffle(10)("scatter", 10)
        algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=10)
        progress.training(algorithm, algorithm.plan(100, 2))(0, np.zeros(2))
    assert sink.getvalue() == ""
