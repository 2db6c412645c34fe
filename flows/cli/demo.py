"""``dpstream demo``: a synthetic lake through the real pipeline, with the non-private baseline beside.

Writes N rows of d float32 features in F Parquet files (public seeds: synthetic, non-sensitive data),
a pipeline config, then runs ``train_flow`` (validate, shuffle once, plan, train on a LocalCluster,
evaluate, publish) and a non-private least-squares fit on the same training rows for comparison.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console

from dpstream.flows.cli.interrupt import exit_on_interrupt
from dpstream.flows.cli.log_file import log_to_file
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console
from dpstream.flows.prefect_api import command_owns_sigterm, prefect_api
from dpstream.pipelines import Manifest, lake_blocks, read_manifest

__all__ = [
    "make_synthetic_lake",
    "write_demo_config",
    "nonprivate_baseline",
    "prune_demo_runs",
    "run_demo",
    "run",
]


def make_synthetic_lake(root: str, rows: int, files: int, dim: int) -> np.ndarray:
    os.makedirs(root, exist_ok=True)
    w_star = np.linspace(-1.0, 1.0, dim)
    per_file = rows // files
    for index in range(files):
        rng = np.random.default_rng([2026, index])
        X = rng.standard_normal((per_file, dim), dtype=np.float32)
        y = X.astype(np.float64) @ w_star + rng.standard_normal(per_file)
        table = pa.table({**{f"x{j}": X[:, j] for j in range(dim)}, "y": y})
        pq.write_table(table, os.path.join(root, f"day-{index:03d}.parquet"), use_dictionary=False)
    return w_star


def write_demo_config(path: str, root: str, dim: int, epsilon: float, rows_per_file: int) -> str:
    features = ", ".join(f'"x{j}"' for j in range(dim))
    # Public facts of the synthetic lake: x ~ N(0, I) so ‖x‖ ≈ sqrt(d) ± 3; y = xᵀw* + N(0, 1) with
    # w* = linspace(−1, 1, d), so |y| ≤ 5·sqrt(‖w*‖² + 1) but for ~1e-6 of the rows.
    row_bound = float(np.sqrt(dim) + 3)
    label_bound = float(5 * np.sqrt(np.sum(np.linspace(-1.0, 1.0, dim) ** 2) + 1))
    with open(path, "w") as handle:
        handle.write(f"""# Written by `dpstream demo`.
[lake]
url = "{root}/raw"
features = [{features}]
label = "y"
shuffled_url = "{root}/shuffled"
rows_per_file = {rows_per_file}

[algorithm]
name = "auto"  # AdaSSP for this linear model: noisy XᵀX and Xᵀy of clipped rows, one round
row_norm_bound = {row_bound:.4g}
label_bound = {label_bound:.4g}

[budget]
epsilon = {epsilon}
delta = 1e-6
lifetime_epsilon = 100.0
ledger_url = "{root}/ledger"

[cluster]
n_workers = 2
mode = "auto"
""")
    return path


def nonprivate_baseline(training: Manifest, holdout: Manifest) -> tuple[float, np.ndarray]:
    """Held-out RMSE of least squares fitted on the training rows (non-private, operator only)."""
    gram, moment = 0.0, 0.0
    for X, y in lake_blocks(training):
        X = X.astype(np.float64)
        gram, moment = gram + X.T @ X, moment + X.T @ y
    weights = np.linalg.solve(gram, moment)
    X, y = [np.concatenate(parts) for parts in zip(*lake_blocks(holdout), strict=True)]
    return float(np.sqrt(np.mean((X.astype(np.float64) @ weights - y) ** 2))), weights


DEMO_MARKER = ".dpstream-demo"  # in each demo run's folder: what prune_demo_runs may delete
_DEMO_NAME = re.compile(r"^\d{8}-\d{6}$")


def prune_demo_runs(directory: str, keep: str) -> list[str]:
    """Remove the demo runs under ``directory`` other than ``keep``, so the demo folder holds one run
    (about 280 MB at the defaults) however often it runs. Only folders the demo wrote are removed: a
    timestamp name and the demo's marker file (or, before the marker, the demo's pipeline.toml)."""
    removed = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name == os.path.basename(keep) or not _DEMO_NAME.match(name) or not os.path.isdir(path):
            continue
        config = os.path.join(path, "pipeline.toml")
        written_by_demo = os.path.exists(os.path.join(path, DEMO_MARKER)) or (
            os.path.exists(config) and open(config).readline().startswith("# Written by `dpstream demo`")
        )
        if written_by_demo:
            shutil.rmtree(path)
            removed.append(path)
    return removed


def run(args: argparse.Namespace) -> int:
    """``dpstream demo``: the demo's train flow with its own Prefect API and its logs in a file."""
    console = result_console()
    if args.rows < 2 * args.files or args.files < 2:
        raise ValueError("the demo needs at least 2 files and 2 rows per file (--rows, --files)")
    log_to_file(args, "demo", "run")
    with (
        exit_on_interrupt("the demo stopped; run `dpstream demo` again to start a new one"),
        prefect_api(args.log_file),
        command_owns_sigterm(),
    ):
        run_demo(
            console,
            args.rows,
            args.files,
            args.dim,
            args.epsilon,
            args.directory,
            show_progress=not args.quiet,
        )
    console.print(f"log {args.log_file}")
    return EXIT_OK


def run_demo(
    console: Console,
    rows: int,
    files: int,
    dim: int,
    epsilon: float,
    directory: str,
    show_progress: bool = True,
) -> None:
    # Imported once the log file captures Prefect's logs (dpstream.flows.cli.log_file.capture_logs).
    from dpstream.flows.flows import train_flow

    root = os.path.abspath(os.path.join(directory, time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(root, exist_ok=True)
    open(os.path.join(root, DEMO_MARKER), "w").close()
    start = time.perf_counter()
    w_star = make_synthetic_lake(os.path.join(root, "raw"), rows, files, dim)
    config = write_demo_config(
        os.path.join(root, "pipeline.toml"), root, dim, epsilon, rows_per_file=rows // files
    )
    console.print(
        f"[bold]dpstream demo[/bold]: {rows:,} rows × {dim} features in {files} Parquet files under {root}/raw "
        f"({time.perf_counter() - start:.1f} s); running the train flow …",
        markup=True,
    )
    result = train_flow(config, output_dir=os.path.join(root, "run"), show_progress=show_progress)
    manifest = read_manifest(os.path.join(root, "shuffled"))
    training, holdout = manifest.split_last_file()  # the same split the flow evaluated on
    baseline, baseline_weights = nonprivate_baseline(training, holdout)
    dp_rmse = result["metrics"]["held-out RMSE (non-private, operator only)"]
    console.print(result["report"].to_markdown())
    console.print(
        f"\n[bold]Utility[/bold] on {int(result['metrics']['held-out rows']):,} held-out rows (evaluation is "
        f"non-private, operator only): DP model RMSE {dp_rmse:.4f} (ε = {result['report'].epsilon:.3g}) vs "
        f"non-private least squares {baseline:.4f}; the label noise alone gives 1.0. Excess risk "
        f"½‖w − w*‖²: DP {0.5 * np.sum((result['params'] - w_star) ** 2):.3g}, non-private "
        f"{0.5 * np.sum((baseline_weights - w_star) ** 2):.3g}.",
        markup=True,
    )
    console.print(
        f"Executor mode: {result['mode']}. Model, report and plots: {os.path.dirname(result['paths']['model'])}"
    )
    removed = prune_demo_runs(directory, keep=root)
    console.print(
        f"Total {time.perf_counter() - start:.0f} s."
        + (
            f" Removed {len(removed)} earlier demo run(s) under {directory}: it keeps the latest only."
            if removed
            else ""
        )
    )
