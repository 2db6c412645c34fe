"""CLI start-up: the time to an answer for commands that load little, against the bare interpreter.

``dpstream --help`` and an argument error should answer at once; each command imports NumPy, pyarrow,
pydantic, Prefect or Dask only when it runs (``flows/cli/main.py``). ``validate`` of a missing config file
shows the cost of the config layer (pydantic) and the error path. Reference in the same run: ``python
-c pass`` with the same interpreter. Medians of ``REPEATS`` runs (this machine is noisy).

Run: ``python -m benchmarks.cli_startup`` (about 10 s).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import markdown_table

DPSTREAM = Path(sys.executable).parent / "dpstream"
REPEATS = 9


def median_seconds(command: list[str]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    reference = median_seconds([sys.executable, "-c", "pass"])
    rows = [["python -c pass (reference)", f"{reference:.3f}", "1.0"]]
    for label, arguments in (
        ("dpstream --help", ["--help"]),
        ("dpstream train --help", ["train", "--help"]),
        ("dpstream validate missing.toml (exit 2)", ["validate", "missing.toml"]),
    ):
        seconds = median_seconds([str(DPSTREAM), *arguments])
        rows.append([label, f"{seconds:.3f}", f"{seconds / reference:.1f}"])
    print(markdown_table(["command", "median seconds", "× python -c pass"], rows))


if __name__ == "__main__":
    main()
