"""λ-correlated noise of DP-λCGD (Wang et al., "KANs Trained by DP-SGD with Correlated Noise",
arXiv:2605.12648, Alg. 1 line 10).

    ξ_t = w_t − λ w_{t−1},   w_{−1} = 0,   0 ≤ λ < 1.

The decoder M is lower bidiagonal (1 on the diagonal, −λ below it) and the encoder C = M⁻¹ is the
lower-triangular Toeplitz matrix C[t, u] = λ^{t−u} (the paper's App. F.1). Its largest column is the
first, so a single participation over T steps has sensitivity

    γ_T = ‖C[:, 0]‖₂ = sqrt((1 − λ^{2T}) / (1 − λ²))   (→ 1/sqrt(1 − λ²) as T → ∞).

No history is stored: w_{t−1} is regenerated from the key, which costs one extra draw per step and
zero model-sized buffers (the opake-style seed replay).
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

__all__ = ["LambdaCorrelatedNoise"]


@dataclass(frozen=True)
class LambdaCorrelatedNoise:
    correlation: float
    stream: str = "gradient"
    name: ClassVar[str] = "lambda"
    target: ClassVar[str] = "increment"

    def __post_init__(self) -> None:
        value = float(self.correlation)
        if not (0.0 <= value < 1.0):
            raise ValueError(f"correlation (lambda) must lie in [0, 1), got {self.correlation!r}")
        object.__setattr__(self, "correlation", value)

    def init(self, dim: int) -> NoiseState:
        return NoiseState(dim=check_positive("dim", dim, integer=True))

    def next(self, key: NoiseKey, state: NoiseState) -> tuple[np.ndarray, NoiseState]:
        noise = gaussian(key, state.step, self.stream, state.dim)
        if state.step > 0 and self.correlation != 0.0:
            noise -= self.correlation * gaussian(key, state.step - 1, self.stream, state.dim)
        return noise, replace(state, step=state.step + 1)

    def state_at(self, key: NoiseKey, dim: int, step: int) -> NoiseState:
        return NoiseState(dim=check_positive("dim", dim, integer=True), step=int(step))

    def sensitivity(self, num_steps: int) -> float:
        num_steps = check_positive("num_steps", num_steps, integer=True)
        lam2 = self.correlation**2
        if lam2 == 0.0:
            return 1.0
        return math.sqrt(-math.expm1(num_steps * math.log(lam2)) / (1.0 - lam2))

    def noise_matrix(self, num_steps: int) -> np.ndarray:
        num_steps = check_positive("num_steps", num_steps, integer=True)
        return np.eye(num_steps) - self.correlation * np.eye(num_steps, k=-1)

    def memory_floats(self, dim: int, num_steps: int) -> int:
        return 0

    def describe(self) -> str:
        return f"lambda-correlated noise (DP-lambda-CGD), lambda={self.correlation:g}"


def _build(settings: dict, stream: str) -> LambdaCorrelatedNoise:
    if settings.get("correlation") is None:
        raise ValueError("noise='lambda' needs correlation (lambda) in [0, 1)")
    return LambdaCorrelatedNoise(settings["correlation"], stream=stream)


register(NoiseDeclaration("lambda", build=_build, reads=("correlation",), state_types=(NoiseState,)))
