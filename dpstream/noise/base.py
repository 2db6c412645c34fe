"""The noise-process interface shared by every correlated-noise scheme.

A noise process turns i.i.d. standard normal vectors w_0, w_1, … (one per step, from the keyed
generator) into the unit-scale noise ξ_t a mechanism adds at step t. Over T steps, with W the T×d
matrix of the w's,

    Ξ = M_T · W        (M_T lower triangular, ``noise_matrix(T)``),

so Cov(ξ_t, ξ_s) = (M_T M_Tᵀ)[t, s] · I_d. The caller scales ξ by the noise std s = σ·Δ.

Two targets exist (``target``):

* ``"increment"``: ξ_t is added to step t's clipped gradient sum (DP-SGD, λ-CGD, ν-DP-FTRL;
  Choquette-Choo et al., "Correlated Noise Provably Beats Independent Noise", arXiv:2310.06771, Alg. 1).
  The release is the matrix mechanism C·G + W with encoder C = M_T⁻¹.
* ``"prefix"``: ξ_t is added to the running prefix sum Σ_{i≤t} Δ_i (tree aggregation; Choquette-Choo,
  Ganesh & Thakurta, "Smooth DP-SCO with a Single Epoch", arXiv:2406.02716, Lemma 5.6). With A the
  all-ones lower-triangular matrix, A = M_T · R and the encoder is R = M_T⁻¹ A.

Either way, with single participation (each record in one step) the release is μ-GDP with
μ = Δ · sensitivity(T) / s, where ``sensitivity(T)`` = max_τ ‖encoder[:, τ]‖₂ (Choquette-Choo et al.,
arXiv:2310.06771, Thm 1.1).

Processes are immutable configuration; the evolving part lives in an explicit state, optax-style:
``state = process.init(dim)`` then ``noise, state = process.next(key, state)``. ``state_at`` rebuilds
the state of any step from the key alone, which is what resume uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from dpstream.noise.keys import NoiseKey

__all__ = ["NoiseState", "NoiseProcess", "encoder_matrix", "max_column_norm"]

Target = Literal["increment", "prefix"]


@dataclass(frozen=True)
class NoiseState:
    """``step`` = index of the next draw; ``history`` = the process's cached vectors (may be empty)."""

    dim: int
    step: int = 0
    history: tuple[np.ndarray, ...] = ()

    def memory_floats(self) -> int:
        return int(sum(h.size for h in self.history))


@runtime_checkable
class NoiseProcess(Protocol):
    name: str
    target: Target
    stream: str

    def init(self, dim: int) -> NoiseState: ...

    def next(self, key: NoiseKey, state: NoiseState) -> tuple[np.ndarray, NoiseState]: ...

    def state_at(self, key: NoiseKey, dim: int, step: int) -> NoiseState: ...

    def sensitivity(self, num_steps: int) -> float: ...

    def noise_matrix(self, num_steps: int) -> np.ndarray: ...

    def memory_floats(self, dim: int, num_steps: int) -> int: ...

    def describe(self) -> str: ...


def encoder_matrix(process: NoiseProcess, num_steps: int) -> np.ndarray:
    """The encoder whose largest column norm is the process's sensitivity (dense; for tests)."""
    decoder = process.noise_matrix(num_steps)
    if process.target == "increment":
        return np.linalg.inv(decoder)
    prefix = np.tril(np.ones((num_steps, num_steps)))
    return np.linalg.solve(decoder, prefix)


def max_column_norm(matrix: np.ndarray) -> float:
    return float(np.sqrt((matrix**2).sum(axis=0)).max())
