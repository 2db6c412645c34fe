"""DP-AMBSSGD utility against baselines (Varshney et al., "Optimal Private Linear Regression via Adaptive
Clipping", arXiv:2207.04686; docs/design.md, note A7).

x ~ N(0, I_d), y = ⟨x, w*⟩ + N(0, σ²), ‖w*‖ = 1, d = 20, N = 10⁶, ε = 1, δ = 1e-6, σ ∈ {1, 0.1, 0}.
Excess risk ‖w − w*‖²/2 (median of 3 seeds) for
  DP-AMBSSGD (paper clip ζ = R_x γ √ln N on the residual; and DP-STAT on the gradient norm),
  (a) non-private OLS, (b) non-private one-pass SGD with the same schedule, (c) fixed-clip one-pass
  DP-SGD at the same ε, (d) diffprivlib LinearRegression at the same ε, (e) the predictor of note A7
  (d/T)(σ²/b + 4α²·mean(ζ_t²)/b²).
Run: ``python -m benchmarks.ambssgd_utility``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from benchmarks.common import FIGURES, excess, gaussian_regression, import_diffprivlib, markdown_table, train
from dpstream.algorithms import DPAMBSSGD, DPSGD

D, N, EPSILON, DELTA, SEEDS = 20, 10**6, 1.0, 1e-6, (1, 2, 3)
SIGMAS = (1.0, 0.1, 0.0)


def ambssgd(statistic: str, rows: int = N, **extra) -> DPAMBSSGD:
    r_x = math.sqrt(D + 2)
    if statistic == "residual":
        return DPAMBSSGD(
            EPSILON, DELTA, bound=r_x * 2 * math.log(rows), feature_norm=r_x, hessian_norm=1.0, **extra
        )
    return DPAMBSSGD(EPSILON, DELTA, bound=1e4, statistic="gradient_norm", hessian_norm=1.0, **extra)


def nonprivate_same_schedule(plan, blocks) -> np.ndarray:
    """(b): the same T, b, η and tail average, exact clipped-free gradients and no noise."""
    from dpstream.coordinator import RowStream

    stream = RowStream(blocks)
    w, tail, count = np.zeros(plan.num_params), np.zeros(plan.num_params), 0
    eta, b = plan.learning_rate, plan.gradient_rows
    for span in plan.spans:
        gradient = np.zeros(plan.num_params)
        for X, y in stream.take(*span.gradient_rows):
            gradient += X.T @ (X @ w - y)
        w = w - eta * gradient / b
        if span.step + 1 > plan.num_steps // 2:
            tail, count = tail + w, count + 1
    return tail / count


def predictor(result, plan, sigma: float) -> float:
    T, b, alpha = plan.num_steps, plan.gradient_rows, plan.alpha
    tail = np.array(result.report.clip_norms[T // 2 :])
    return D / T * (sigma**2 / b + 4 * alpha**2 * np.mean(tail**2) / b**2)


def diffprivlib_excess(X, y, w_star) -> float:
    LinearRegression = import_diffprivlib().LinearRegression

    bound = 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LinearRegression(
            epsilon=EPSILON,
            bounds_X=(-bound, bound),
            bounds_y=(-bound * 1.5, bound * 1.5),
            fit_intercept=False,
        ).fit(np.clip(X, -bound, bound), np.clip(y, -1.5 * bound, 1.5 * bound))
    return excess(model.coef_, w_star)


def main() -> None:
    rows, figures = [], {}
    for sigma in SIGMAS:
        results: dict[str, list[float]] = {
            k: [] for k in ("paper", "gradnorm", "ols", "sgd", "fixed", "diffprivlib", "predicted")
        }
        for seed in SEEDS:
            X, y, w_star = gaussian_regression(N, D, sigma, seed)
            paper_alg = ambssgd("residual")
            plan = paper_alg.plan(N, D)
            paper = train(paper_alg, X, y)
            results["paper"].append(excess(paper.params, w_star))
            results["predicted"].append(predictor(paper, plan, sigma))
            results["gradnorm"].append(excess(train(ambssgd("gradient_norm"), X, y).params, w_star))
            results["ols"].append(excess(np.linalg.lstsq(X, y, rcond=None)[0], w_star))
            results["sgd"].append(excess(nonprivate_same_schedule(plan, [(X, y)]), w_star))
            fixed_clip = math.sqrt(D) * math.sqrt(1 + sigma**2) * math.log(N)
            fixed = DPSGD(
                EPSILON,
                DELTA,
                clip_norm=fixed_clip,
                learning_rate=plan.learning_rate,
                batch_size=plan.gradient_rows + plan.stat_rows,
                averaging="tail",
            )
            results["fixed"].append(excess(train(fixed, X, y).params, w_star))
            results["diffprivlib"].append(diffprivlib_excess(X, y, w_star))
        med = {k: float(np.median(v)) for k, v in results.items()}
        figures[sigma] = med
        ratio = med["paper"] / med["predicted"] if med["predicted"] > 0 else float("nan")
        rows.append(
            [
                f"{sigma:g}",
                f"{med['paper']:.3g}",
                f"{med['gradnorm']:.3g}",
                f"{med['predicted']:.3g}",
                f"{ratio:.2f}",
                f"{med['ols']:.3g}",
                f"{med['sgd']:.3g}",
                f"{med['fixed']:.3g}",
                f"{med['diffprivlib']:.3g}",
                f"{med['fixed'] / med['paper']:.3g}",
                f"{med['diffprivlib'] / med['paper']:.3g}",
            ]
        )
    print(
        f"d = {D}, N = {N:,}, ε = {EPSILON}, δ = {DELTA:g}, replace-one; excess risk, median of {len(SEEDS)} seeds\n"
    )
    print(
        markdown_table(
            [
                "σ",
                "AMBSSGD (paper clip)",
                "AMBSSGD (grad-norm DP-STAT)",
                "(e) predictor",
                "paper / (e)",
                "(a) OLS",
                "(b) one-pass SGD",
                "(c) fixed-clip DP-SGD",
                "(d) diffprivlib",
                "(c) / paper",
                "(d) / paper",
            ],
            rows,
        )
    )
    plot(figures)


def plot(figures) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        ("paper", "DP-AMBSSGD (paper clip)"),
        ("gradnorm", "DP-AMBSSGD (grad-norm DP-STAT)"),
        ("ols", "(a) OLS"),
        ("sgd", "(b) one-pass SGD"),
        ("fixed", "(c) fixed-clip DP-SGD"),
        ("diffprivlib", "(d) diffprivlib"),
    ]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = np.arange(len(SIGMAS))
    width = 0.13
    for i, (key, label) in enumerate(labels):
        values = [max(figures[s][key], 1e-20) for s in SIGMAS]
        ax.bar(xs + (i - 2.5) * width, values, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"σ = {s:g}" for s in SIGMAS])
    ax.set_ylabel("excess risk (log)")
    ax.set_title(f"Linear regression, d = {D}, N = 10⁶, ε = 1, δ = 1e-6")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{FIGURES}/ambssgd_utility.png", dpi=110)


if __name__ == "__main__":
    main()
