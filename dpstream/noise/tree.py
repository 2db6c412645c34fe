"""Binary-tree (continual counting) noise for prefix sums (Choquette-Choo, Ganesh & Thakurta, "Smooth
DP-SCO with a Single Epoch", arXiv:2406.02716, Lemma 5.6; docs/design.md, note C2).

Steps are indexed t = 0, 1, …; write i = t + 1. The tree has one node per (j, k) with j odd, covering
the increments ((j−1)2^k, j2^k]; the noise on prefix i is the sum of the nodes for the set bits k of i,
node (i ≫ k, k). Node (j, k) is first needed at index j·2^k, so exactly one new Gaussian node is drawn
per step (at level ctz(i)), and it is drawn from the key at step j·2^k − 1: the live nodes at any step
are rebuilt from the key and the step index alone.

Properties (checked by the tests): the prefix noise at step t has variance popcount(t + 1) per
coordinate; at most ⌊log₂(T + 1)⌋ node vectors are live (O(d log T) memory); each increment lies in at
most ⌊log₂ T⌋ + 1 nodes, so the single-participation sensitivity is sqrt(⌊log₂ T⌋ + 1), the largest
column norm of the encoder R = M⁻¹ A with A the all-ones lower-triangular matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from dpstream.noise.base import NoiseState
from dpstream.noise.keys import NoiseKey, gaussian
from dpstream.noise.registry import NoiseDeclaration, register
from dpstream.validation import check_positive

__all__ = ["TreeNoise"]


def _live_levels(i: int) -> list[int]:
    """Levels of the live nodes after index i, highest first (the set bits of i)."""
    return [k for k in range(i.bit_length() - 1, -1, -1) if (i >> k) & 1]


@dataclass(frozen=True)
class TreeNoise:
    stream: str = "gradient"
    name: ClassVar[str] = "tree"
    target: ClassVar[str] = "prefix"

    def init(self, dim: int) -> NoiseState:
        return NoiseState(dim=check_positive("dim", dim, integer=True))

    def next(self, key: NoiseKey, state: NoiseState) -> tuple[np.ndarray, NoiseState]:
        i = state.step + 1
        kept = state.history[: bin(i).count("1") - 1]  # nodes above the new level stay live
        node = gaussian(key, state.step, self.stream, state.dim)
        history = kept + (node,)
        # Recompute the sum of the live nodes each step rather than updating it: no drift.
        noise = np.sum(history, axis=0) if len(history) > 1 else node.copy()
        return noise, replace(state, step=i, history=history)

    def state_at(self, key: NoiseKey, dim: int, step: int) -> NoiseState:
        dim, i = check_positive("dim", dim, integer=True), int(step)
        nodes = tuple(gaussian(key, ((i >> k) << k) - 1, self.stream, dim) for k in _live_levels(i))
        return NoiseState(dim=dim, step=i, history=nodes)

    def sensitivity(self, num_steps: int) -> float:
        return math.sqrt(
            check_positive("num_steps", num_steps, integer=True).bit_length()
        )  # ⌊log₂ T⌋ + 1 nodes per increment

    def noise_matrix(self, num_steps: int) -> np.ndarray:
        num_steps = check_positive("num_steps", num_steps, integer=True)
        matrix = np.zeros((num_steps, num_steps))
        for t in range(num_steps):
            i = t + 1
            for k in _live_levels(i):
                matrix[t, ((i >> k) << k) - 1] = 1.0
        return matrix

    def memory_floats(self, dim: int, num_steps: int) -> int:
        # The most live nodes is the largest popcount of i ≤ T, which is ⌊log₂(T + 1)⌋.
        return ((check_positive("num_steps", num_steps, integer=True) + 1).bit_length() - 1) * check_positive(
            "dim", dim, integer=True
        )

    def describe(self) -> str:
        return "binary-tree aggregation noise on prefix sums"


# Accelerated-DP-SRGD's binary-tree (continual counting) noise: not one a user picks for DP-SGD.
register(
    NoiseDeclaration(
        "tree",
        build=lambda settings, stream: TreeNoise(stream=stream),
        for_dpsgd=False,
        state_types=(NoiseState,),
    )
)
