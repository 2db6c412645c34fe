"""Replayable noise processes: independent, λ-correlated, ν-DP-FTRL (Toeplitz) and binary tree."""

from __future__ import annotations

from dpstream.noise.base import NoiseProcess, NoiseState, encoder_matrix, max_column_norm
from dpstream.noise.correlated import LambdaCorrelatedNoise
from dpstream.noise.independent import IndependentNoise
from dpstream.noise.keys import NoiseKey, gaussian, symmetric_noise
from dpstream.noise.registry import declared_noise, dpsgd_noise_names, noise_names
from dpstream.noise.toeplitz import ToeplitzNoise, inverse_coefficients, nu_coefficients, nu_gamma_infinity
from dpstream.noise.tree import TreeNoise

__all__ = [
    "NoiseKey",
    "gaussian",
    "symmetric_noise",
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
    "dpsgd_noise_names",
]

NOISE_KINDS = noise_names()  # in declaration order: the processes the modules above declared


def make_noise_process(
    kind: str,
    *,
    correlation: float | None = None,
    nu: float | None = None,
    taps: int | None = None,
    history: str = "buffer",
    stream: str = "gradient",
) -> NoiseProcess:
    """Build a noise process by name (``dpstream.noise.registry``): ``"independent"``, ``"lambda"`` (needs
    ``correlation``), ``"nu"`` (needs ``nu``; optional ``taps``, ``history``) or ``"tree"``."""
    settings = {"correlation": correlation, "nu": nu, "taps": taps, "history": history}
    return declared_noise(kind).build(settings, stream)
