"""Empirical privacy audit of every algorithm and noise process (``dpstream.audit``).

For claimed ε ∈ {1, 2, 4} at δ = 1e-5 (replace-one), each configuration runs ``TRIALS`` times on each of
two neighbouring datasets differing in one worst-case canary, and the Clopper–Pearson lower bound on ε
(95 %) is printed beside the claim; the same configuration with its noise divided by 10 (still claiming
the original ε) shows the audit's power. Run: ``python -m benchmarks.privacy_audit``.
"""

from __future__ import annotations

import time

from dpstream.audit import NoiseScaledDown, audit_algorithm, audited_algorithms
from dpstream.privacy import gdp

EPSILONS = (1.0, 2.0, 4.0)
DELTA = 1e-5
TRIALS = 4000
SEED = 2026


def main() -> None:
    print(
        f"{TRIALS} trials per dataset, seed {SEED}, δ = {DELTA:g}, replace-one; lower bounds at 95 % confidence"
    )
    print(
        "| claimed ε | configuration | μ of the run | ε lower bound, honest | TPR / FPR | ε lower bound, noise ÷ 10 | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    for epsilon in EPSILONS:
        for name, algorithm in audited_algorithms(epsilon, DELTA).items():
            start = time.perf_counter()
            honest = audit_algorithm(algorithm, trials=TRIALS, seed=SEED)
            broken = audit_algorithm(NoiseScaledDown(algorithm, 10.0), trials=TRIALS, seed=SEED)
            mu = gdp.mu_for_epsilon_delta(epsilon, DELTA)
            verdict = "" if broken.epsilon_lower_bound > epsilon else " (missed)"
            print(
                f"| {epsilon:g} | {name} | {mu:.3f} | {honest.epsilon_lower_bound:.3f}"
                f"{'' if honest.passed else ' VIOLATED'} | {honest.true_positive_rate:.3f} / {honest.false_positive_rate:.3f} | "
                f"{broken.epsilon_lower_bound:.3f}{verdict} | {time.perf_counter() - start:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
