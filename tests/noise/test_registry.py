"""A noise process is one module plus one registry entry: a toy process registered here is built by
make_noise_process and accepted as DP-SGD's noise by the pipeline config and the builder."""

from __future__ import annotations

import pytest

from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm
from dpstream.models import LinearRegressionModel
from dpstream.noise import IndependentNoise, make_noise_process
from dpstream.noise.registry import NoiseDeclaration, dpsgd_noise_names, noise_names, register, unregister


@pytest.fixture()
def toy():
    register(NoiseDeclaration("toy", build=lambda settings, stream: IndependentNoise(stream=f"toy-{stream}")))
    try:
        yield "toy"
    finally:
        unregister("toy")


def test_a_registered_noise_process_is_built_and_chosen_for_dpsgd(toy):
    assert toy in noise_names() and toy in dpsgd_noise_names() and "tree" not in dpsgd_noise_names()
    assert make_noise_process(toy) == IndependentNoise(stream="toy-gradient")
    _, algorithm = build_algorithm(
        AlgorithmSpec(name="dpsgd", noise=toy, batch_size=500), LinearRegressionModel(), 10_000, 4
    )
    assert algorithm.noise == IndependentNoise(stream="toy-gradient")


def test_the_config_accepts_the_declared_dpsgd_processes_only(toy):
    from pydantic import ValidationError

    from dpstream.flows.config.pipeline import AlgorithmConfig

    assert AlgorithmConfig(name="dpsgd", noise=toy).noise == toy
    with pytest.raises(ValidationError, match=r"noise must be one of .*'toy', got 'tree'"):
        AlgorithmConfig(name="dpsgd", noise="tree")
