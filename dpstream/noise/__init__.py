"""Replayable noise processes: independent, λ-correlated, ν-DP-FTRL (Toeplitz) and binary tree."""

from __future__ import annotations

from dpstream.noise.base import NoiseProcess, NoiseState, encoder_matrix, max_column_norm
from dpstream.noise.correlated import LambdaCorrelatedNoise
from dpstream.noise.independent import IndependentNoise
from dpstream.noise.keys import NoiseKey, gaussian
from dpstream.noise.toeplitz import ToeplitzNoise, inverse_coefficients, nu_coefficients, nu_gamma_infinity
from dpstream.noise.tree import TreeNoise

__all__ = [
    "NoiseKey",
    "gaussian",
    "NoiseProcess",
    "NoiseState",
    "IndependentNoise",
    "LambdaCorrelatedNoise",
    "ToeplitzNoise",
    "TreeNoise",
    "make_noise_process",
    "encoder_matrix",
    "max_column_norm",
    "nu_coefficients",
    "inverse_coefficients",
    "nu_gamma_infinity",
    "NOISE_KINDS",
]

NOISE_KINDS = ("independent", "lambda", "nu", "tree")


def make_noise_process(
    kind: str,
    *,
    correlation: float | None = None,
    nu: float | None = None,
    taps: int | None = None,
    history: str = "buffer",
    stream: str = "gradient",
) -> NoiseProcess:
    """Build a noise process by name: ``"independent"``, ``"lambda"`` (needs ``correlation``),
    ``"nu"`` (needs ``nu``; optional ``taps``, ``history``) or ``"tree"``."""
    if kind == "independent":
        return IndependentNoise(stream=stream)
    if kind == "lambda":
        if correlation is None:
            raise ValueError("noise='lambda' needs correlation (lambda) in [0, 1)")
        return LambdaCorrelatedNoise(correlation, stream=stream)
    if kind == "nu":
        if nu is None:
            raise ValueError("noise='nu' needs nu in (0, 1]")
        return ToeplitzNoise(nu=nu, taps=taps, history=history, stream=stream)
    if kind == "tree":
        return TreeNoise(stream=stream)
    raise ValueError(f"noise must be one of {', '.join(map(repr, NOISE_KINDS))}, got {kind!r}")
