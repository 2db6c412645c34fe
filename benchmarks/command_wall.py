"""Wall time of the user's commands on a 300,000-row lake, start-up included, against the same work in
process.

A lake of ``FILES`` Parquet files (300,000 rows × 8 features on [−1, 1], a linear label), shuffled once
by ``dpstream shuffle``. Then, ``--rounds`` times: ``dpstream validate``, ``dpstream train --quiet`` (a
new run id each round; the temporary Prefect API server, the LocalClusters, AdaSSP, the held-out
evaluation and the publication included) and ``dpstream predict`` of that run's model over the lake.
References in the same rounds, in this process: reading the lake with pyarrow and fitting
``DPLinearRegression`` on its 240,000 training rows (the training's work without orchestration), and
scoring the 300,000 rows with the fitted estimator (predict's work); and ``train`` against a Prefect
server that is already running (``PREFECT_API_URL``), which shows what the temporary server costs.
Medians; this machine is noisy.
The temporary server keeps its database under ``DPSTREAM_PREFECT_HOME`` (here a folder of the run, made
before the first round so the first start's migrations are not counted).

Run: ``python -m benchmarks.command_wall [--rounds 3]`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import markdown_table
from dpstream.flows.prefect_api import prefect_api

DPSTREAM = Path(sys.executable).parent / "dpstream"
FILES, ROWS_PER_FILE, FEATURES = 4, 75_000, 8
CONFIG = """
[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 100.0  # every round trains a new run on the same lake
ledger_url = "ledger"

[lake]
url = "raw"
label = "y"
features = [{features}]
shuffled_url = "shuffled"
"""


def write_lake(root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    (root / "raw").mkdir(parents=True)
    for part in range(FILES):
        X = rng.uniform(-1, 1, (ROWS_PER_FILE, FEATURES))
        y = np.clip(X @ np.linspace(-0.5, 0.5, FEATURES) + 0.2 * rng.standard_normal(ROWS_PER_FILE), -1, 1)
        columns = {f"x{j}": X[:, j] for j in range(FEATURES)}
        pq.write_table(pa.table({**columns, "y": y}), root / "raw" / f"part-{part}.parquet")
    features = ", ".join(f'"x{j}"' for j in range(FEATURES))
    (root / "pipeline.toml").write_text(CONFIG.format(features=features))


def timed(command: list[str], cwd: Path, environment: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def in_process(root: Path) -> tuple[float, float]:
    """(seconds to read the training rows and fit, seconds to score every row), the estimator in process."""
    import pyarrow.dataset as ds

    from dpstream.estimators import DPLinearRegression

    start = time.perf_counter()
    table = ds.dataset(root / "raw").to_table()
    X = np.column_stack([table.column(f"x{j}").to_numpy() for j in range(FEATURES)])
    y = table.column("y").to_numpy()
    training = 4 * len(y) // 5
    model = DPLinearRegression(epsilon=1.0, feature_bounds=(-1.0, 1.0), label_bounds=(-1.0, 1.0))
    model.fit(X[:training], y[:training])
    fitted = time.perf_counter() - start
    start = time.perf_counter()
    model.predict(
        ds.dataset(root / "raw").to_table().to_pandas()[[f"x{j}" for j in range(FEATURES)]].to_numpy()
    )
    return fitted, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_lake(root)
        environment = {
            **os.environ,
            "DPSTREAM_PREFECT_HOME": str(root / "prefect"),
            "DPSTREAM_LOG_DIR": str(root / "logs"),
        }
        environment.pop("PREFECT_API_URL", None)  # each command starts its own server, as a user's would
        dpstream = [str(DPSTREAM)]
        timed([*dpstream, "shuffle", "pipeline.toml"], root, environment)  # once; also creates the database
        times: dict[str, list[float]] = {}
        for round_ in range(args.rounds):
            run = f"bench-{round_}"
            for label, command in (
                ("dpstream validate", ["validate", "pipeline.toml"]),
                ("dpstream train --quiet", ["train", "pipeline.toml", "--run-id", run, "--quiet"]),
                ("dpstream predict", ["predict", f"runs/{run}", "raw", f"predictions-{round_}"]),
            ):
                times.setdefault(label, []).append(timed([*dpstream, *command], root, environment))
            with prefect_api() as url:  # a server that is already running, as `prefect server start` gives
                served = {**environment, "PREFECT_API_URL": url}
                times.setdefault("dpstream train --quiet, PREFECT_API_URL set", []).append(
                    timed(
                        [*dpstream, "train", "pipeline.toml", "--run-id", f"{run}-served", "--quiet"],
                        root,
                        served,
                    )
                )
            fitted, scored = in_process(root)
            times.setdefault("in process: read + DPLinearRegression.fit", []).append(fitted)
            times.setdefault("in process: read + predict", []).append(scored)
    rows = [
        [label, f"{statistics.median(values):.2f}", " ".join(f"{v:.2f}" for v in values)]
        for label, values in times.items()
    ]
    print(markdown_table(["command (300,000 rows, 2 cores)", "median seconds", "rounds"], rows))


if __name__ == "__main__":
    main()
