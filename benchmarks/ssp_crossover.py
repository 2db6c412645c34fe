"""Where "auto" stops choosing AdaSSP: cost and accuracy of sufficient statistics against DP-SGD by d.

Cost: seconds per 65,536-row float32 block of the worker kernel, AdaSSP's XᵀX and Xᵀy (d² work per row)
against DP-SGD's clipped gradient sum (d work per row), medians of 5, one BLAS thread (as on a worker),
with a NumPy ``X.T @ X`` on the same block as the reference. Accuracy: held-out MSE of the two estimators
with defaults at ε = 1 on synthetic data (x uniform on [−1, 1]^d, ‖w*‖² = 0.3, noise 0.2, y clipped to
[−1, 1], N = 10⁵), medians of 3 fits, and the constant predictor's MSE.

Run: ``python -m benchmarks.ssp_crossover``.
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import markdown_table, median_time
from dpstream.estimators import DPLinearRegression
from dpstream.models import LinearRegressionModel, StatsRequest

DIMS = (8, 32, 128, 256, 512)
BLOCK = 65_536


def data(rows: int, dim: int, seed: int):
    w_star = np.random.default_rng(dim).standard_normal(dim)  # one w* per d, shared by train and test
    w_star *= np.sqrt(0.3) / np.linalg.norm(w_star)
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (rows, dim))
    return X, np.clip(X @ w_star + 0.2 * rng.standard_normal(rows), -1, 1)


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")  # scale / ridge notes; the table carries the results
    rows = []
    model = LinearRegressionModel()
    for dim in DIMS:
        X, y = data(BLOCK, dim, 0)
        X32 = X.astype(np.float32)
        moments = StatsRequest(
            params=np.zeros(dim), kind="moments", row_norm_bound=float(np.sqrt(dim)), label_bound=1.0
        )
        gradient = StatsRequest(params=np.zeros(dim), clip_norms=np.array([1.0]))
        with threadpool_limits(1, user_api="blas"):
            ssp_time = median_time(lambda: model.block_stats(X32, y, moments), repeats=5)
            sgd_time = median_time(lambda: model.block_stats(X32, y, gradient), repeats=5)
            gemm_time = median_time(lambda: X32.T @ X32, repeats=5)
        X_train, y_train = data(100_000, dim, 1)
        X_test, y_test = data(20_000, dim, 2)
        ols = np.linalg.lstsq(np.hstack([X_train, np.ones((len(X_train), 1))]), y_train, rcond=None)[0]
        mse = {}
        for algorithm in ("ssp", "dpsgd"):  # noqa: B007 - the comprehension runs inside this iteration
            scores = [
                np.mean(
                    (DPLinearRegression(algorithm=algorithm).fit(X_train, y_train).predict(X_test) - y_test)
                    ** 2
                )
                for _ in range(3)
            ]
            mse[algorithm] = float(np.median(scores))
        rows.append(
            [
                str(dim),
                f"{ssp_time * 1e3:.1f}",
                f"{sgd_time * 1e3:.1f}",
                f"{gemm_time * 1e3:.1f}",
                f"{ssp_time / sgd_time:.1f}",
                f"{ssp_time / gemm_time:.2f}",
                f"{mse['ssp']:.4f}",
                f"{mse['dpsgd']:.4f}",
                f"{np.mean((X_test @ ols[:-1] + ols[-1] - y_test) ** 2):.4f}",
                f"{np.mean((y_test - y_train.mean()) ** 2):.4f}",
            ]
        )
    print(
        markdown_table(
            [
                "d",
                "AdaSSP stats ms/block",
                "DP-SGD stats ms/block",
                "X.T@X ms/block",
                "AdaSSP / DP-SGD",
                "AdaSSP / X.T@X",
                "AdaSSP MSE (ε=1)",
                "DP-SGD MSE (ε=1)",
                "OLS MSE",
                "constant MSE",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
