"""DP KAN vs DP logistic regression on real data: California housing as binary classification.

Label: median_house_value > $200,000 (a public threshold). Features: the 8 numeric columns with the
public bounds of ``examples.california`` (the KAN maps them with those bounds; logistic regression
gets them clipped and scaled to [0, 1] with the same bounds) and ``ocean_proximity`` one-hot;
total_bedrooms' 207 gaps imputed with the public constant 400. A fixed random 80/20 split; held-out
accuracy, median of 3 fits with fresh noise keys, at ε ∈ {1, 4, 8} (δ = 1e-6, replace-one) and
λ ∈ {0, 0.5, 0.9} for one-pass DP-λCGD. Non-private references on the same split: scikit-learn's
LogisticRegression and HistGradientBoostingClassifier.
Run: ``python -m benchmarks.kan_california``."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from benchmarks.common import markdown_table
from examples.california import SPEC
from examples.data import CALIFORNIA_HOUSING as HOUSING

THRESHOLD = 200_000.0
EPSILONS = (1.0, 4.0, 8.0)
CORRELATIONS = (0.0, 0.5, 0.9)
SEEDS = 3
KAN = dict(num_hidden=64, grid_size=5, input_map="cube", batch_size=128, learning_rate=2.0, clip_norm=1.0)
LOGISTIC = dict(algorithm="dpsgd", batch_size=128, learning_rate=1.0, clip_norm=1.0)


def load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    frame = pd.read_csv(HOUSING)
    frame["total_bedrooms"] = frame["total_bedrooms"].fillna(SPEC.impute_values["total_bedrooms"])
    columns = list(SPEC.columns)
    raw = frame[columns].to_numpy(dtype=np.float64)
    onehot = np.column_stack(
        [
            (frame["ocean_proximity"] == value).to_numpy(dtype=np.float64)
            for value in SPEC.categorical["ocean_proximity"]
        ]
    )
    X = np.hstack([raw, onehot])
    low = np.array([SPEC.bounds[c][0] for c in columns] + [0.0] * onehot.shape[1])
    high = np.array([SPEC.bounds[c][1] for c in columns] + [1.0] * onehot.shape[1])
    y = (frame["median_house_value"].to_numpy() > THRESHOLD).astype(int)
    order = np.random.default_rng(0).permutation(len(y))
    return X[order], y[order], low, high


def main() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    from dpstream.estimators import DPKANClassifier, DPLogisticRegression

    X, y, low, high = load()
    cut = int(0.8 * len(y))
    X_train, y_train, X_test, y_test = X[:cut], y[:cut], X[cut:], y[cut:]
    scaled = lambda A: (np.clip(A, low, high) - low) / (high - low)  # noqa: E731 - public-bounds scaling
    references = {
        "logistic regression (non-private, sklearn)": LogisticRegression(max_iter=2000)
        .fit(scaled(X_train), y_train)
        .score(scaled(X_test), y_test),
        "gradient boosting (non-private, sklearn)": HistGradientBoostingClassifier(random_state=0)
        .fit(X_train, y_train)
        .score(X_test, y_test),
        "majority class": max(np.mean(y_test), 1 - np.mean(y_test)),
    }
    rows = [[name, "–", "–", f"{value:.3f}"] for name, value in references.items()]
    start = time.perf_counter()
    for epsilon in EPSILONS:
        for correlation in CORRELATIONS:
            noise = (
                dict(noise="lambda", correlation=correlation) if correlation else dict(noise="independent")
            )
            kan = [
                DPKANClassifier(epsilon=epsilon, feature_low=low, feature_high=high, **KAN, **noise)
                .fit(X_train, y_train)
                .score(X_test, y_test)
                for _ in range(SEEDS)
            ]
            linear = [
                DPLogisticRegression(epsilon=epsilon, **LOGISTIC, **noise)
                .fit(scaled(X_train), y_train)
                .score(scaled(X_test), y_test)
                for _ in range(SEEDS)
            ]
            rows.append(
                [
                    "DP KAN",
                    f"{epsilon:g}",
                    f"{correlation:g}",
                    f"{np.median(kan):.3f} ({min(kan):.3f}–{max(kan):.3f})",
                ]
            )
            rows.append(
                [
                    "DP logistic regression",
                    f"{epsilon:g}",
                    f"{correlation:g}",
                    f"{np.median(linear):.3f} ({min(linear):.3f}–{max(linear):.3f})",
                ]
            )
    print(markdown_table(["model", "ε", "λ", f"held-out accuracy, median of {SEEDS} (min–max)"], rows))
    print(
        f"\n{len(y_train):,} training rows, {len(y_test):,} held out, positive rate {np.mean(y_test):.3f}; "
        f"KAN {KAN}; logistic {LOGISTIC}; {time.perf_counter() - start:.0f} s for the DP fits"
    )


if __name__ == "__main__":
    main()
