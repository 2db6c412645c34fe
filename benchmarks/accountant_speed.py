"""Accountant speed and agreement: the exact GDP curve against dp_accounting's PLD and RDP on reference
cases (a single Gaussian; one pass with parallel composition), timed in the same process.
Run: ``python -m benchmarks.accountant_speed``."""

from __future__ import annotations

import math
import statistics
import time

import dp_accounting

from dpstream.privacy import GaussianEvent, GdpAccountant, NeighbouringRelation

ZERO = NeighbouringRelation.ZERO_OUT
CASES = [
    ("single Gaussian, σ = 1, δ = 1e-5", 1.0, 1, 1e-5),
    ("10 composed Gaussians, σ = 1, δ = 1e-5", 1.0, 10, 1e-5),
    ("tree, T = 1000, σ = 3, δ = 1e-5", 3.0 / math.sqrt(10), 1, 1e-5),
    ("one pass, σ = 4.53, δ = 1e-6 (dp_accounting's RDP test vector)", 4.530877117, 1, 1e-6),
]


def median_seconds(function, repeats: int = 5) -> tuple[float, float]:
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def main() -> None:
    print("| case | exact ε | PLD ε | RDP ε | exact time | PLD time | PLD / exact time |")
    print("|---|---|---|---|---|---|---|")
    for label, sigma, count, delta in CASES:
        exact_t, exact = median_seconds(
            lambda: (
                GdpAccountant(ZERO).compose(GaussianEvent(1.0, sigma, ZERO), count=count).get_epsilon(delta)
            )
        )

        def pld():
            accountant = dp_accounting.pld.PLDAccountant()
            accountant.compose(dp_accounting.GaussianDpEvent(sigma), count)
            return accountant.get_epsilon(delta)

        def rdp():
            accountant = dp_accounting.rdp.RdpAccountant()
            accountant.compose(dp_accounting.GaussianDpEvent(sigma), count)
            return accountant.get_epsilon(delta)

        pld_t, pld_eps = median_seconds(pld)
        _, rdp_eps = median_seconds(rdp, repeats=1)
        print(
            f"| {label} | {exact:.6f} | {pld_eps:.6f} | {rdp_eps:.6f} | {exact_t * 1e3:.3f} ms | "
            f"{pld_t * 1e3:.1f} ms | {pld_t / exact_t:.0f}× |"
        )


if __name__ == "__main__":
    main()
