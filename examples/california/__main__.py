"""``python -m examples.california``: convert, train at ε = 1 through the train flow, compare.

Prints the privacy report and the held-out RMSE in dollars of the DP model beside two non-private
references on the same split: least squares fitted on the training rows, and the training mean.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from dpstream.flows.logs import quiet_dask
from examples.california import LABEL_RANGE, SPEC
from examples.data import CALIFORNIA_HOUSING as HOUSING

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> dict[str, float]:
    from dpstream.flows.cli.demo import nonprivate_baseline
    from dpstream.flows.flows import train_flow
    from dpstream.pipelines import read_manifest
    from dpstream.pipelines.conversion.convert import csv_to_parquet
    from dpstream.pipelines.execution.executor import lake_blocks

    parser = argparse.ArgumentParser(prog="python -m examples.california", description=__doc__)
    parser.add_argument("--csv", default=str(HOUSING), help="the California housing CSV")
    parser.add_argument("--directory", default=".california", help="where the work folder is created")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--verbose", action="store_true", help="keep Dask's INFO logs")
    args = parser.parse_args(argv)
    quiet_dask(verbose=args.verbose)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    console = Console(soft_wrap=True)

    work = Path(args.directory).resolve() / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    config = Path(shutil.copy(HERE / "pipeline.toml", work / "pipeline.toml"))
    paths = csv_to_parquet(args.csv, str(work / "lake" / "raw"), SPEC)
    console.print(f"converted {args.csv} into {len(paths)} Parquet file(s) under {work / 'lake' / 'raw'}")
    result = train_flow(str(config), output_dir=str(work / "run"), show_progress=not args.quiet)

    training, holdout = read_manifest(str(work / "lake" / "shuffled")).split_last_file()
    dollars = (LABEL_RANGE[1] - LABEL_RANGE[0]) / (
        SPEC.scale_range[1] - SPEC.scale_range[0]
    )  # dollars per label unit
    least_squares, _ = nonprivate_baseline(training, holdout)
    training_mean = np.mean(np.concatenate([y for _, y in lake_blocks(training)]))
    held_out = np.concatenate([y for _, y in lake_blocks(holdout)])
    figures = {
        "DP linear regression": result["metrics"]["held-out RMSE (non-private, operator only)"],  # in dollars
        "least squares (non-private)": least_squares * dollars,
        "training mean (non-private)": float(np.sqrt(np.mean((held_out - training_mean) ** 2))) * dollars,
    }
    console.print(result["report"].to_markdown())
    console.print(
        f"\n[bold]Held-out RMSE[/bold] on {len(held_out):,} block groups (evaluation is non-private, operator only):"
    )
    for name, value in figures.items():
        console.print(f"  {name:<30} ${value:>9,.0f}")
    console.print(f"Model, report and plots: {work / 'run'}")
    return figures


if __name__ == "__main__":
    main()
