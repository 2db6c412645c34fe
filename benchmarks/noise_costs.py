"""What each kind of correlation costs in sensitivity: ε at δ for the four noise processes at the same
noise multiplier and horizon (the table in docs/privacy.md). Run: ``python -m benchmarks.noise_costs``."""

from __future__ import annotations

from dpstream.noise import make_noise_process
from dpstream.privacy import NeighbouringRelation, epsilon_for_delta

NOISE_MULTIPLIER = 10.0  # noise std / clip norm, the Opacus convention
STEPS = 1000
DELTA = 1e-6
PROCESSES = [
    ("independent (DP-SGD)", make_noise_process("independent")),
    ("λ-correlated, λ = 0.5", make_noise_process("lambda", correlation=0.5)),
    ("λ-correlated, λ = 0.9", make_noise_process("lambda", correlation=0.9)),
    ("ν-DP-FTRL, ν = 0.01", make_noise_process("nu", nu=0.01)),
    ("ν-DP-FTRL, ν = 0.001", make_noise_process("nu", nu=0.001)),
    ("binary tree (prefix sums)", make_noise_process("tree")),
]


def table() -> str:
    lines = [
        "| noise process | sensitivity γ_T | ε, replace-one | ε, zero-out |",
        "|---|---|---|---|",
    ]
    for label, process in PROCESSES:
        gamma = process.sensitivity(STEPS)
        cells = [f"{gamma:.4f}"]
        for relation in (NeighbouringRelation.REPLACE_ONE, NeighbouringRelation.ZERO_OUT):
            mu = relation.clipped_sum_sensitivity(1.0) * gamma / NOISE_MULTIPLIER
            cells.append(f"{epsilon_for_delta(DELTA, mu):.3f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    print(
        f"ε at δ = {DELTA:g}, noise multiplier σ = {NOISE_MULTIPLIER:g}, T = {STEPS}, single participation\n"
    )
    print(table())


if __name__ == "__main__":
    main()
