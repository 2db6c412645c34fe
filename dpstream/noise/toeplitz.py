"""Toeplitz correlated noise and ν-DP-FTRL (Choquette-Choo et al., "Correlated Noise Provably Beats
Independent Noise", arXiv:2310.06771, Eq. 7 and 13; docs/design.md, notes B1 and B2).

The decoder is lower-triangular Toeplitz, M[t, τ] = β_{t−τ}, so ξ_t = Σ_{τ≤t} β_τ w_{t−τ}. ν-DP-FTRL
uses

    β_t = (−1)^t C(1/2, t) (1 − ν)^t,   β_0 = 1,  β_t = β_{t−1} · (t − 3/2)/t · (1 − ν),

the power-series coefficients of sqrt(1 − (1 − ν)z). The encoder C = M⁻¹ is Toeplitz with the
reciprocal series c (for ν-DP-FTRL c_t = C(2t, t)/4^t · (1 − ν)^t), and its largest column is the
first, so the single-participation sensitivity is γ_T = ‖c_{0:T}‖₂, increasing to
γ_∞² = 1/AGM(1, sqrt(ν(2 − ν))) (docs/design.md, note B2).

``taps=K`` keeps β_0..β_{K−1} only (banded Toeplitz). The sensitivity is then recomputed exactly from
the reciprocal series of the *truncated* β, never taken from the untruncated one.

``history="buffer"`` keeps the last K − 1 draws (memory (K − 1)·d floats, or (T − 1)·d when exact);
``history="replay"`` keeps none and regenerates them from the key (time K·d per step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from dpstream.noise.base import NoiseState
from dpstream.noise.keys import NoiseKey, gaussian
from dpstream.noise.registry import NoiseDeclaration, register
from dpstream.validation import check_positive

__all__ = [
    "ToeplitzNoise",
    "nu_coefficients",
    "nu_inverse_coefficients",
    "inverse_coefficients",
    "nu_gamma_infinity",
]


def nu_coefficients(nu: float, length: int) -> np.ndarray:
    """β_0..β_{length−1} of ν-DP-FTRL (Choquette-Choo et al., arXiv:2310.06771, Eq. 7): a running
    product of the recurrence factors (t − 3/2)/t · (1 − ν), each of modulus < 1, so nothing overflows."""
    factors = (np.arange(1, length) - 1.5) / np.arange(1, length) * (1.0 - nu)
    return np.concatenate([[1.0], np.cumprod(factors)])


def nu_inverse_coefficients(nu: float, length: int) -> np.ndarray:
    """First column of the untruncated ν-DP-FTRL encoder: c_t = C(2t, t)/4^t · (1 − ν)^t."""
    factors = (np.arange(1, length) - 0.5) / np.arange(1, length) * (1.0 - nu)
    return np.concatenate([[1.0], np.cumprod(factors)])


def inverse_coefficients(beta: np.ndarray, length: int) -> np.ndarray:
    """First column c of Toeplitz(β)⁻¹: the power-series reciprocal of β (β_0 ≠ 0).

    c_0 = 1/β_0,  c_t = −(1/β_0) Σ_{s=1}^{min(t, K−1)} β_s c_{t−s}.
    """
    beta = np.asarray(beta, dtype=float)
    if beta[0] == 0.0:
        raise ValueError("beta_0 must be non-zero for the noise matrix to be invertible")
    taps = len(beta)
    c = np.zeros(length)
    c[0] = 1.0 / beta[0]
    for t in range(1, length):
        s = min(t, taps - 1)
        c[t] = -np.dot(beta[1 : s + 1], c[t - 1 :: -1][:s]) / beta[0]
    return c


def _agm(a: float, b: float) -> float:
    for _ in range(100):
        a, b = 0.5 * (a + b), math.sqrt(a * b)
        if abs(a - b) <= 1e-16 * a:
            break
    return a


def nu_gamma_infinity(nu: float) -> float:
    """γ_∞ of ν-DP-FTRL: γ_∞² = (2/π) K(1 − ν) = 1 / AGM(1, sqrt(ν(2 − ν))) (docs/design.md, note B2)."""
    if not (0.0 < nu <= 1.0):
        raise ValueError(f"nu must lie in (0, 1], got {nu!r}")
    return 1.0 / math.sqrt(_agm(1.0, math.sqrt(nu * (2.0 - nu))))


@dataclass(frozen=True)
class ToeplitzNoise:
    """ν-DP-FTRL noise (``nu``), or any Toeplitz decoder given by its ``coefficients``."""

    nu: float | None = None
    coefficients: tuple[float, ...] | None = None
    taps: int | None = None
    history: Literal["buffer", "replay"] = "buffer"
    stream: str = "gradient"
    name: ClassVar[str] = "nu"
    target: ClassVar[str] = "increment"

    def __post_init__(self) -> None:
        if (self.nu is None) == (self.coefficients is None):
            raise ValueError("give exactly one of nu (nu-DP-FTRL) or coefficients (a Toeplitz decoder)")
        if self.nu is not None:
            nu = float(self.nu)
            if not (0.0 < nu <= 1.0):
                raise ValueError(f"nu must lie in (0, 1], got {self.nu!r}")
            object.__setattr__(self, "nu", nu)
        else:
            coefficients = tuple(float(c) for c in self.coefficients)
            if not coefficients or coefficients[0] == 0.0 or not all(map(math.isfinite, coefficients)):
                raise ValueError("coefficients must be finite with a non-zero first entry")
            object.__setattr__(self, "coefficients", coefficients)
            limit = len(coefficients)
            object.__setattr__(self, "taps", limit if self.taps is None else min(int(self.taps), limit))
        if self.taps is not None and int(self.taps) < 1:
            raise ValueError(f"taps must be a positive integer or None (exact), got {self.taps!r}")
        if self.history not in ("buffer", "replay"):
            raise ValueError(f"history must be 'buffer' or 'replay', got {self.history!r}")

    def beta(self, length: int) -> np.ndarray:
        """The decoder's first column, zero beyond the taps kept."""
        kept = length if self.taps is None else min(length, int(self.taps))
        if self.coefficients is not None:
            values = np.asarray(self.coefficients[:kept])
        else:
            values = nu_coefficients(self.nu, kept)
        return np.concatenate([values, np.zeros(length - kept)])

    def init(self, dim: int) -> NoiseState:
        return NoiseState(dim=check_positive("dim", dim, integer=True))

    def _window(self, step: int) -> int:
        return step + 1 if self.taps is None else min(step + 1, int(self.taps))

    def next(self, key: NoiseKey, state: NoiseState) -> tuple[np.ndarray, NoiseState]:
        step, window = state.step, self._window(state.step)
        current = gaussian(key, step, self.stream, state.dim)
        if self.history == "buffer":
            # history[0] holds the past draws as rows, most recent first.
            past = state.history[0][: window - 1] if state.history else np.empty((0, state.dim))
        else:
            past = np.array([gaussian(key, step - lag, self.stream, state.dim) for lag in range(1, window)])
            past = past.reshape(window - 1, state.dim)
        beta = self.beta(window)
        noise = beta[0] * current + (beta[1:] @ past if window > 1 else 0.0)
        if self.history == "buffer":
            keep = step + 1 if self.taps is None else int(self.taps) - 1
            new_history = (np.concatenate([current[None, :], past])[:keep],) if keep > 0 else ()
        else:
            new_history = ()
        return noise, replace(state, step=step + 1, history=new_history)

    def state_at(self, key: NoiseKey, dim: int, step: int) -> NoiseState:
        dim, step = check_positive("dim", dim, integer=True), int(step)
        kept = step if self.taps is None else min(step, int(self.taps) - 1)
        if self.history == "replay" or kept == 0:
            return NoiseState(dim=dim, step=step)
        past = np.array([gaussian(key, step - lag, self.stream, dim) for lag in range(1, kept + 1)])
        return NoiseState(dim=dim, step=step, history=(past,))

    def sensitivity(self, num_steps: int) -> float:
        num_steps = check_positive("num_steps", num_steps, integer=True)
        if self.nu is not None and (self.taps is None or self.taps >= num_steps):
            inverse = nu_inverse_coefficients(self.nu, num_steps)  # closed form, O(T)
        else:
            inverse = inverse_coefficients(self.beta(num_steps), num_steps)  # O(T·taps)
        return float(np.sqrt(np.sum(inverse**2)))

    def noise_matrix(self, num_steps: int) -> np.ndarray:
        num_steps = check_positive("num_steps", num_steps, integer=True)
        beta = self.beta(num_steps)
        index = np.subtract.outer(np.arange(num_steps), np.arange(num_steps))
        return np.where(index >= 0, beta[np.clip(index, 0, None)], 0.0)

    def memory_floats(self, dim: int, num_steps: int) -> int:
        if self.history == "replay":
            return 0
        kept = num_steps - 1 if self.taps is None else min(num_steps - 1, int(self.taps) - 1)
        return int(kept) * int(dim)

    def describe(self) -> str:
        what = f"nu-DP-FTRL Toeplitz noise, nu={self.nu:g}" if self.nu is not None else "Toeplitz noise"
        taps = "exact" if self.taps is None else f"{self.taps} taps"
        return f"{what} ({taps}, history={self.history})"


def _build(settings: dict, stream: str) -> ToeplitzNoise:
    if settings.get("nu") is None:
        raise ValueError("noise='nu' needs nu in (0, 1]")
    return ToeplitzNoise(
        nu=settings["nu"],
        taps=settings.get("taps"),
        history=settings.get("history") or "buffer",
        stream=stream,
    )


register(NoiseDeclaration("nu", build=_build, reads=("nu", "taps", "history"), state_types=(NoiseState,)))
