"""Accelerated-DP-SRGD utility (Choquette-Choo, Ganesh & Thakurta, "Smooth DP-SCO with a Single Epoch",
arXiv:2406.02716; docs/design.md, notes C1, C3 and C4).

n = 10⁶, d = 20, ε = 1, δ = 1e-6, replace-one. Least squares: x ~ N(0, I), y = ⟨x, w*⟩ + N(0, 1),
excess ‖w − w*‖²/2. Logistic: P(y = 1 | x) = sigmoid(⟨x, w*⟩) with ‖w*‖ = 2, excess = population
logistic loss − that of w* (estimated on 200,000 fresh rows). SRGD uses B = ⌈√n⌉ = 1,000, T = 1,000,
β = 2·smoothness·T and evaluates every row twice (2n − B gradients). One-pass DP-SGD uses the same
batches, so n gradients (a single pass cannot give it 2n without a second participation). Clip norms
are swept over {2, 4, 8, 16} for both and the best is reported (a non-private tuning choice, stated).
Run: ``python -m benchmarks.srgd_utility``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from benchmarks.common import excess, gaussian_regression, markdown_table, train
from dpstream.algorithms import DPSGD, AcceleratedDPSRGD
from dpstream.models import LinearRegressionModel, LogisticRegressionModel

N, D, EPSILON, DELTA, SEEDS, CLIPS = 10**6, 20, 1.0, 1e-6, (1, 2), (2.0, 4.0, 8.0, 16.0)


def logistic_data(rows: int, seed: int, w_star: np.ndarray | None = None):
    rng = np.random.default_rng(seed)
    if w_star is None:
        w_star = rng.standard_normal(D)
        w_star *= 2 / np.linalg.norm(w_star)
    X = rng.standard_normal((rows, D))
    y = np.where(rng.random(rows) < expit(X @ w_star), 1.0, -1.0)
    return X, y, w_star


def logistic_excess(params, w_star, test) -> float:
    X, y = test
    model = LogisticRegressionModel()
    return float(np.mean(model.loss(X @ params, y)) - np.mean(model.loss(X @ w_star, y)))


def main() -> None:
    rows = []
    for task in ("least squares", "logistic"):
        model = LinearRegressionModel() if task == "least squares" else LogisticRegressionModel()
        smoothness = 1.0 if task == "least squares" else 0.25
        best = {"srgd": [], "dpsgd": [], "nonprivate": []}
        for seed in SEEDS:
            if task == "least squares":
                X, y, w_star = gaussian_regression(N, D, 1.0, seed)
                score = lambda p: excess(p, w_star)
                nonprivate = np.linalg.lstsq(X, y, rcond=None)[0]
            else:
                X, y, w_star = logistic_data(N, seed)
                test = logistic_data(200_000, seed + 100, w_star)[:2]
                score = lambda p: logistic_excess(p, w_star, test)
                from sklearn.linear_model import LogisticRegression

                nonprivate = LogisticRegression(C=1e6, fit_intercept=False, max_iter=500).fit(X, y).coef_[0]
            best["srgd"].append(
                min(
                    score(
                        train(
                            AcceleratedDPSRGD(EPSILON, DELTA, clip_norm=c, smoothness=smoothness),
                            X,
                            y,
                            model=model,
                        ).params
                    )
                    for c in CLIPS
                )
            )
            best["dpsgd"].append(
                min(
                    score(
                        train(
                            DPSGD(
                                EPSILON,
                                DELTA,
                                clip_norm=c,
                                learning_rate=lr,
                                batch_size=1000,
                                averaging="tail",
                            ),
                            X,
                            y,
                            model=model,
                        ).params
                    )
                    for c in CLIPS
                    for lr in (0.25, 1.0)
                )
            )
            best["nonprivate"].append(score(nonprivate))
        med = {k: float(np.median(v)) for k, v in best.items()}
        rows.append(
            [
                task,
                f"{med['srgd']:.3g}",
                f"{med['dpsgd']:.3g}",
                f"{med['nonprivate']:.3g}",
                f"{med['dpsgd'] / med['srgd']:.2f}",
            ]
        )
    print(
        f"n = {N:,}, d = {D}, ε = {EPSILON}, δ = {DELTA:g}; excess risk, median of {len(SEEDS)} seeds, best clip of {CLIPS}\n"
    )
    print(
        markdown_table(
            [
                "task",
                "Accelerated-DP-SRGD",
                "one-pass DP-SGD (same batches)",
                "non-private (full-data ERM)",
                "DP-SGD / SRGD",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
