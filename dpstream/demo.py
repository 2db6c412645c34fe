"""``make demo`` until the Prefect flows exist: a private continual release over a synthetic stream.

What runs, for real:

1. N synthetic rows of d features are made (a fixed public seed: the data are synthetic, not
   sensitive), each row is clipped to ``clip_norm``, and the rows are cut into T disjoint steps (one
   pass, each row in exactly one step).
2. For each noise process (independent, λ-correlated, ν-DP-FTRL, binary tree) the exact accountant
   calibrates the noise std for (ε, δ) under replace-one, the run reserves its μ in the lake's
   ledger, a fresh key from OS entropy drives the noise, and the T noisy prefix sums of the clipped
   rows are released (per-step sums for the increment processes, prefix sums for the tree).
3. The report compares each release's prefix-sum error with the error its decoder predicts, prints
   the privacy statement of every run, and shows the ledger refusing a run past the lake's lifetime
   budget.
4. Private training: DP linear regression on a synthetic stream of 2,000,000 rows read block by block
   in one pass, with DP-AMBSSGD, DP-SGD with ν-DP-FTRL noise and Accelerated-DP-SRGD at ε = 1, each
   charged to its lake's ledger, beside the non-private least-squares baseline on a held-out split.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import tempfile
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from dpstream.algorithms import DPAMBSSGD, DPSGD, AcceleratedDPSRGD, AdaSSP
from dpstream.algorithms.base import Algorithm
from dpstream.coordinator import FitResult, InMemoryExecutor
from dpstream.coordinator import run as run_algorithm
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey, NoiseProcess, make_noise_process
from dpstream.privacy import (
    BudgetExceededError,
    GdpAccountant,
    LakeLedger,
    Ledger,
    LifetimeBudget,
    NeighbouringRelation,
    calibrate_clipped_sum,
)

RELATION = NeighbouringRelation.REPLACE_ONE


@dataclass(frozen=True)
class DemoConfig:
    rows: int = 400_000
    dim: int = 16
    steps: int = 1000
    clip_norm: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-6
    lifetime_epsilon: float = 2.25
    correlation: float = 0.5
    nu: float = 0.01

    def __post_init__(self) -> None:
        if self.rows < self.steps or self.steps < 1:
            raise ValueError(f"rows ({self.rows}) must be at least steps ({self.steps}) and steps >= 1")
        if self.dim < 1:
            raise ValueError(f"dim must be >= 1, got {self.dim}")


def clipped_rows(config: DemoConfig) -> np.ndarray:
    rng = np.random.default_rng(20261121)  # public seed: synthetic, non-sensitive demo data
    rows = rng.standard_normal((config.rows, config.dim)) * 0.4 + 0.2
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows * np.minimum(1.0, config.clip_norm / np.maximum(norms, 1e-300))


def release_prefix_sums(
    step_sums: np.ndarray, process: NoiseProcess, noise_std: float, key: NoiseKey
) -> np.ndarray:
    """Noisy prefix sums of the per-step sums: the only data-dependent values the demo releases."""
    state = process.init(step_sums.shape[1])
    noise = np.empty_like(step_sums)
    for t in range(step_sums.shape[0]):
        noise[t], state = process.next(key, state)
    if process.target == "increment":
        return np.cumsum(step_sums + noise_std * noise, axis=0)
    return np.cumsum(step_sums, axis=0) + noise_std * noise


def predicted_rmse(process: NoiseProcess, steps: int, noise_std: float) -> float:
    """Per-coordinate prefix-sum RMSE implied by the decoder M: sqrt(‖A·M‖_F² / T)·std (A = all-ones
    lower triangular for increments; prefix processes add M directly)."""
    decoder = process.noise_matrix(steps)
    if process.target == "increment":
        decoder = np.cumsum(decoder, axis=0)
    return float(np.sqrt((decoder**2).sum() / steps) * noise_std)


def run(config: DemoConfig, ledger_url: str, console: Console) -> None:
    rows = clipped_rows(config)
    fingerprint = "synthetic-" + hashlib.sha256(rows.tobytes()).hexdigest()[:16]
    step_sums = np.add.reduceat(rows, np.linspace(0, config.rows, config.steps + 1, dtype=int)[:-1], axis=0)
    truth = np.cumsum(step_sums, axis=0)
    lake = Ledger(ledger_url).lake(
        fingerprint, LifetimeBudget(config.lifetime_epsilon, config.delta, RELATION)
    )
    console.print(
        f"[bold]dpstream demo[/bold]: {config.rows:,} rows × {config.dim} features in {config.steps} disjoint "
        f"steps (single pass), clip norm {config.clip_norm}, target ε={config.epsilon} at δ={config.delta:g}, "
        f"{RELATION.describe()}."
    )
    processes = [
        make_noise_process("independent"),
        make_noise_process("lambda", correlation=config.correlation),
        make_noise_process("nu", nu=config.nu),
        make_noise_process("tree"),
    ]
    for process in processes:
        console.print(f"  {process.name:12s} {process.describe()}")
    table = Table(title="Private prefix sums of clipped rows (one release per process)")
    for column in (
        "noise process",
        "sensitivity γ_T",
        "noise std",
        "ε at δ",
        "prefix RMSE",
        "expected RMSE",
        "memory (floats)",
    ):
        table.add_column(column, justify="right" if column != "noise process" else "left")
    for process in processes:
        gamma = process.sensitivity(config.steps)
        calibration = calibrate_clipped_sum(
            config.epsilon, config.delta, config.clip_norm, max_column_norm=gamma, relation=RELATION
        )
        event = calibration.event(config.steps, label=process.describe())
        accountant = GdpAccountant(RELATION).compose(event)
        run_id = f"demo-{process.name}"
        try:
            lake.reserve(run_id, accountant.mu, mechanism=process.describe(), relation=RELATION)
        except BudgetExceededError as refusal:
            console.print(f"[yellow]ledger refused {run_id}[/yellow]: {refusal}")
            continue
        refused_rerun = accountant.mu  # a further run of the same cost, tried after the table
        released = release_prefix_sums(step_sums, process, calibration.noise_std, NoiseKey.generate())
        lake.commit(run_id)
        rmse = float(np.sqrt(np.mean((released - truth) ** 2)))
        table.add_row(
            process.name,
            f"{gamma:.4f}",
            f"{calibration.noise_std:.3f}",
            f"{accountant.get_epsilon(config.delta):.4f}",
            f"{rmse:.2f}",
            f"{predicted_rmse(process, config.steps, calibration.noise_std):.2f}",
            f"{process.memory_floats(config.dim, config.steps):,}",
        )
    console.print(table)
    console.print(
        "Each run is μ-GDP with μ = Δ·γ_T/std (Δ = 2·clip norm under replace-one); the release is the "
        "T noisy prefix sums, nothing else. Prefix RMSE is per coordinate, measured against the "
        "non-private prefix sums (non-private, operator only)."
    )
    console.print(f"[bold]Ledger[/bold] ({ledger_url}): {lake.statement()}")
    try:
        lake.reserve(
            "demo-rerun", refused_rerun, mechanism="another run at the same epsilon", relation=RELATION
        )
        console.print("[red]the ledger accepted a run past the lifetime budget[/red]")
    except BudgetExceededError as refusal:
        console.print(f"[bold]A fifth run is refused[/bold]: {refusal}")


TRAIN_ROWS, TRAIN_DIM, BLOCK_ROWS = 2_000_000, 16, 100_000


def training_blocks(seed: int, rows: int, w_star: np.ndarray):
    """Synthetic regression rows in blocks (public seeds): x ~ N(0, I), y = ⟨x, w*⟩ + N(0, 1)."""
    for index in range(0, rows, BLOCK_ROWS):
        rng = np.random.default_rng([seed, index])
        X = rng.standard_normal((min(BLOCK_ROWS, rows - index), w_star.size), dtype=np.float32)
        yield X, X.astype(np.float64) @ w_star + rng.standard_normal(X.shape[0])


def training_algorithms(config: DemoConfig) -> list[tuple[str, Algorithm]]:
    """The four private methods the training section compares, each with its table label, at the
    demo's (ε, δ). Their settings use only public facts of this synthetic lake: x ~ N(0, I) (‖H‖ = 1,
    ‖x‖ ≈ sqrt(d) ± 3) and y's std ≈ 2.6."""
    return [
        (
            "AdaSSP (noisy XᵀX, Xᵀy; one round)",
            AdaSSP(config.epsilon, config.delta, row_norm_bound=math.sqrt(TRAIN_DIM) + 3, label_bound=10.0),
        ),
        (
            "DP-AMBSSGD (DP-STAT adaptive clipping)",
            DPAMBSSGD(config.epsilon, config.delta, bound=1e4, statistic="gradient_norm", hessian_norm=1.0),
        ),
        (
            "DP-SGD, ν-DP-FTRL noise",
            DPSGD(
                config.epsilon,
                config.delta,
                clip_norm=8.0,
                learning_rate=0.5,
                batch_size=2000,
                noise=make_noise_process("nu", nu=0.01),
                averaging="tail",
            ),
        ),
        ("Accelerated-DP-SRGD (tree noise)", AcceleratedDPSRGD(config.epsilon, config.delta, clip_norm=8.0)),
    ]


def train_privately(algorithm: Algorithm, lake: LakeLedger, rows: int, w_star: np.ndarray) -> FitResult:
    """One private fit over the synthetic stream, its μ reserved in ``lake`` before the run and
    committed after it."""
    report = algorithm.report(algorithm.plan(rows, TRAIN_DIM))
    lake.reserve(f"demo-{algorithm.name}", report.mu, mechanism=report.mechanism, relation=RELATION)
    result = run_algorithm(
        algorithm,
        InMemoryExecutor(LinearRegressionModel(), training_blocks(1, rows, w_star)),
        num_rows=rows,
        num_params=TRAIN_DIM,
        initial_params=np.zeros(TRAIN_DIM),
        key=NoiseKey.generate(),
    )
    lake.commit(f"demo-{algorithm.name}")
    return result


def least_squares(rows: int, w_star: np.ndarray) -> np.ndarray:
    """The non-private baseline on the same rows: w = (XᵀX)⁻¹Xᵀy from one pass of sufficient
    statistics (non-private, operator only)."""
    gram, moment = np.zeros((TRAIN_DIM, TRAIN_DIM)), np.zeros(TRAIN_DIM)
    for X, y in training_blocks(1, rows, w_star):
        gram += X.T.astype(np.float64) @ X
        moment += X.T.astype(np.float64) @ y
    return np.linalg.solve(gram, moment)


def held_out_rmse(params: np.ndarray, test_X: np.ndarray, test_y: np.ndarray) -> float:
    """Root mean squared prediction error of ``params`` on the held-out split."""
    return float(np.sqrt(np.mean((test_X @ params.astype(np.float32) - test_y) ** 2)))


def train_models(config: DemoConfig, ledger_url: str, console: Console, rows: int = TRAIN_ROWS) -> None:
    """Fit each of ``training_algorithms`` privately over ``rows`` streamed rows, charged to its lake's
    ledger, and print each one's excess risk ½‖w − w*‖² and held-out RMSE beside the least-squares
    baseline."""
    w_star = np.linspace(-1, 1, TRAIN_DIM)
    test_X, test_y = next(training_blocks(99, 200_000, w_star))
    lake = Ledger(ledger_url).lake("synthetic-regression", LifetimeBudget(4.0, config.delta, RELATION))
    table = Table(
        title=f"Private training: linear regression, {rows:,} rows × {TRAIN_DIM} streamed in blocks of {BLOCK_ROWS:,}"
    )
    for column in (
        "method",
        "excess risk ½‖w − w*‖²",
        "test RMSE",
        "ε at δ",
        "steps × rows/step",
        "clip norm",
    ):
        table.add_column(column, justify="left" if column == "method" else "right")
    for label, algorithm in training_algorithms(config):
        result = train_privately(algorithm, lake, rows, w_star)
        clips = result.report.clip_norms
        clip = f"{clips[0]:.3g}" if len(set(clips)) == 1 else f"{min(clips):.3g}–{max(clips):.3g}"
        table.add_row(
            label,
            f"{0.5 * float(np.sum((result.params - w_star) ** 2)):.3g}",
            f"{held_out_rmse(result.params, test_X, test_y):.4f}",
            f"{result.report.epsilon:.4f}",
            f"{result.report.steps} × {result.report.rows_per_step:,}",
            clip,
        )
    ols = least_squares(rows, w_star)
    table.add_row(
        "non-private least squares (non-private, operator only)",
        f"{0.5 * float(np.sum((ols - w_star) ** 2)):.3g}",
        f"{held_out_rmse(ols, test_X, test_y):.4f}",
        "∞",
        "",
        "",
    )
    console.print(table)
    console.print(f"Noise floor: the label noise has RMSE 1.0. [bold]Ledger[/bold]: {lake.statement()}")
    console.print(f"Privacy report of the last run:\n{result.report.to_markdown()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dpstream.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=DemoConfig.rows)
    parser.add_argument("--dim", type=int, default=DemoConfig.dim)
    parser.add_argument("--steps", type=int, default=DemoConfig.steps)
    parser.add_argument("--epsilon", type=float, default=DemoConfig.epsilon)
    parser.add_argument("--lifetime-epsilon", type=float, default=DemoConfig.lifetime_epsilon)
    parser.add_argument("--train-rows", type=int, default=TRAIN_ROWS)
    parser.add_argument("--ledger", default=None, help="ledger URL (default: a fresh temporary directory)")
    args = parser.parse_args(argv)
    console = Console(width=max(120, Console().width))
    try:
        config = DemoConfig(
            rows=args.rows,
            dim=args.dim,
            steps=args.steps,
            epsilon=args.epsilon,
            lifetime_epsilon=args.lifetime_epsilon,
        )
    except ValueError as error:
        console.print(f"[red]error:[/red] {error}")
        return 2
    if args.ledger:
        run(config, args.ledger, console)
        train_models(config, args.ledger, console, rows=args.train_rows)
    else:
        with tempfile.TemporaryDirectory(prefix="dpstream-demo-ledger-") as ledger_dir:
            run(config, ledger_dir, console)
            train_models(config, ledger_dir, console, rows=args.train_rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
