"""Privacy nearly free at scale: DP-AMBSSGD against non-private one-pass SGD with the same
schedule, N ∈ {10⁶, 10⁷, 10⁸}, rows generated in blocks of 10⁶ (never all in memory), d = 20, σ = 1,
ε = 1, δ = 1e-6, one seed per N. Reports each variant's excess-risk ratio to (b) and the smallest N at
which it is within 2×. Variants keep privacy fixed: the paper's clip ζ = R_x γ √ln N on the residual;
DP-STAT on the per-example gradient norm (ζ = γ); and the latter with the disjoint-rows accounting
(stat and gradient rows never overlap, so a record pays μ = 1/α: docs/design.md, note A6).
Run: ``python -m benchmarks.ambssgd_scale`` (about 3 minutes).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from benchmarks.ambssgd_utility import ambssgd, nonprivate_same_schedule
from benchmarks.common import excess, markdown_table

D, SIGMA, BLOCK = 20, 1.0, 10**6
SIZES = (10**6, 10**7, 10**8)


def blocks(rows: int, w_star: np.ndarray, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for index in range(math.ceil(rows / BLOCK)):
        rng = np.random.default_rng([seed, index])
        n = min(BLOCK, rows - index * BLOCK)
        X = rng.standard_normal((n, D), dtype=np.float32)
        y = X.astype(np.float64) @ w_star + SIGMA * rng.standard_normal(n)
        yield X, y


def main() -> None:
    w_star = np.random.default_rng(0).standard_normal(D)
    w_star /= np.linalg.norm(w_star)
    variants = {
        "paper clip (residual)": lambda n: ambssgd("residual", n, disjoint_accounting=False),
        "gradient-norm DP-STAT": lambda n: ambssgd("gradient_norm", n, disjoint_accounting=False),
        "gradient-norm + disjoint accounting": lambda n: ambssgd(
            "gradient_norm", n, disjoint_accounting=True
        ),
    }
    table, crossover = [], {name: None for name in variants}
    for rows in SIZES:
        plan = variants["paper clip (residual)"](rows).plan(rows, D)
        baseline = excess(nonprivate_same_schedule(plan, blocks(rows, w_star, rows)), w_star)
        line = [f"{rows:,}", f"{baseline:.3g}"]
        for name, make in variants.items():
            value = excess(_train_blocks(make(rows), rows, w_star), w_star)
            line.append(f"{value:.3g} ({value / baseline:.2f}×)")
            if crossover[name] is None and value <= 2 * baseline:
                crossover[name] = rows
        table.append(line)
    print(f"d = {D}, σ = {SIGMA}, ε = 1, δ = 1e-6; excess risk and its ratio to (b), one seed per N\n")
    print(markdown_table(["N", "(b) non-private one-pass SGD"] + list(variants), table))
    print()
    print(
        markdown_table(
            ["variant", "smallest N within 2× of (b)"],
            [[name, f"{n:,}" if n else f"> {SIZES[-1]:,}"] for name, n in crossover.items()],
        )
    )


def _train_blocks(algorithm, rows: int, w_star: np.ndarray) -> np.ndarray:
    from dpstream.coordinator import InMemoryExecutor, run
    from dpstream.models import LinearRegressionModel
    from dpstream.noise import NoiseKey

    model = LinearRegressionModel()
    return run(
        algorithm,
        InMemoryExecutor(model, blocks(rows, w_star, rows)),
        num_rows=rows,
        num_params=D,
        initial_params=np.zeros(D),
        key=NoiseKey.generate(),
    ).params


if __name__ == "__main__":
    main()
