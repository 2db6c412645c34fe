"""Independent Gaussian noise: plain DP-SGD (Choquette-Choo et al., "Correlated Noise Provably Beats
Independent Noise", arXiv:2310.06771, Alg. 1 with B = I).

ξ_t = w_t with w_t ~ N(0, I_d) i.i.d.; decoder and encoder are the identity, so the sensitivity of a
single participation is 1 for any number of steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from dpstream.noise.base import NoiseState
from dpstream.noise.keys import NoiseKey, gaussian
from dpstream.noise.registry import NoiseDeclaration, register
from dpstream.validation import check_positive

__all__ = ["IndependentNoise"]


@dataclass(frozen=True)
class IndependentNoise:
    stream: str = "gradient"
    name: ClassVar[str] = "independent"
    target: ClassVar[str] = "increment"

    def init(self, dim: int) -> NoiseState:
        return NoiseState(dim=check_positive("dim", dim, integer=True))

    def draw(self, key: NoiseKey, step: int, size: int) -> np.ndarray:
        """w_step ~ N(0, I_size): the stateless form of ``next`` for mechanisms whose every release is
        a fresh draw (DP-AMBSSGD, AdaSSP), so their state need not carry a noise counter."""
        return gaussian(key, step, self.stream, size)

    def next(self, key: NoiseKey, state: NoiseState) -> tuple[np.ndarray, NoiseState]:
        return self.draw(key, state.step, state.dim), replace(state, step=state.step + 1)

    def state_at(self, key: NoiseKey, dim: int, step: int) -> NoiseState:
        return NoiseState(dim=check_positive("dim", dim, integer=True), step=int(step))

    def sensitivity(self, num_steps: int) -> float:
        check_positive("num_steps", num_steps, integer=True)
        return 1.0

    def noise_matrix(self, num_steps: int) -> np.ndarray:
        return np.eye(check_positive("num_steps", num_steps, integer=True))

    def memory_floats(self, dim: int, num_steps: int) -> int:
        return 0

    def describe(self) -> str:
        return "independent Gaussian noise (DP-SGD)"


register(
    NoiseDeclaration(
        "independent",
        build=lambda settings, stream: IndependentNoise(stream=stream),
        state_types=(NoiseState,),
    )
)
