"""Private model selection against the defaults at equal total ε: ``DPSearchCV`` choosing the algorithm.

For each regression set of the suite (``benchmarks.never_worse``: its fixed split, sets above 100,000
rows subsampled): ``--fits`` fits with fixed keys of ``DPLinearRegression()`` (the defaults: "auto",
private bounds) at ε, and of ``DPSearchCV(DPLinearRegression(), {"algorithm": GRID})`` at the same total
ε (its 25 % selection share on disjoint shards, the refit at the rest; the score clipped into the
dataset's documented label range, public), δ = 1e-6. Median held-out RMSE ÷ the training mean's, and
how often the search chose each algorithm.

Run: ``python -m benchmarks.private_search [--fits 5] [--epsilon 1] [--datasets california,diamonds]``.
"""

from __future__ import annotations

import argparse
import warnings
from collections import Counter

import numpy as np

from benchmarks.common import markdown_table
from benchmarks.never_worse import prepare
from benchmarks.real_data import noise_key
from benchmarks.real_datasets import load

__all__ = ["compare", "GRID"]

GRID = ("ssp", "srgd", "ambssgd")
SETS = ("california", "diamonds", "cps1988", "flights_delay", "nlswork", "gss_wages", "loans")


def compare(name: str, fits: int, epsilon: float) -> dict[str, object]:
    """Median RMSE ÷ constant of the defaults and of the search, and the search's choices."""
    from dpstream.estimators import DPLinearRegression, DPSearchCV

    prepared = prepare(load(name))
    defaults, searched, chosen = [], [], Counter()
    for fit in range(fits):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPLinearRegression(epsilon=epsilon, noise_key=noise_key(fit))
            model.fit(prepared.X_train, prepared.y_train)
            defaults.append(prepared.score(model.predict(prepared.X_test)) / prepared.constant)
            search = DPSearchCV(
                DPLinearRegression(),
                {"algorithm": list(GRID)},
                epsilon=epsilon,
                score_bounds=prepared.dataset.label_bounds,
                noise_key=noise_key(fit),
            )
            try:
                search.fit(prepared.X_train, prepared.y_train)
            except ValueError:  # every candidate refused: shards too small for private bounds
                chosen["refused"] += 1
                continue
        searched.append(prepared.score(search.predict(prepared.X_test)) / prepared.constant)
        chosen[search.best_params_["algorithm"]] += 1
    return {
        "name": prepared.dataset.name,
        "rows": len(prepared.y_train),
        "defaults": float(np.median(defaults)),
        "search": float(np.median(searched)) if searched else float("nan"),
        "chosen": chosen,
        "auto": model.algorithm_,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fits", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--datasets", default=",".join(SETS))
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets.split(","):
        result = compare(name, args.fits, args.epsilon)
        chosen = ", ".join(f"{algorithm} {count}" for algorithm, count in result["chosen"].most_common())
        rows.append(
            [
                result["name"],
                f"{result['rows']:,}",
                f"{result['defaults']:.3f} ({result['auto']})",
                f"{result['search']:.3f}",
                chosen,
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    headers = ["dataset", "train rows", "defaults (auto ran)", "DPSearchCV", "search chose"]
    print()
    print(markdown_table(headers, rows))
    print(
        f"\nmedian held-out RMSE ÷ the training mean's over {args.fits} fits, total ε = {args.epsilon:g}, δ = 1e-6"
    )


if __name__ == "__main__":
    main()
