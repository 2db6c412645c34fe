"""A noise process is one module plus one registry entry: a toy process registered here is built by
make_noise_process, accepted as DP-SGD's noise by the pipeline config and the builder, checkpointed and
audited; a toy that reads a setting has it accepted by the builder."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm
from dpstream.audit import audit_choices, audited_algorithms
from dpstream.models import LinearRegressionModel
from dpstream.noise import IndependentNoise, LambdaCorrelatedNoise, make_noise_process
from dpstream.noise.registry import NoiseDeclaration, dpsgd_noise_names, noise_names, register, unregister
from dpstream.state_codec import StateFormatError, decode, encode


@dataclass(frozen=True)
class ToyNoiseState:
    """The toy's own checkpointed state type."""

    draws: int


@pytest.fixture()
def toy():
    register(
        NoiseDeclaration(
            "toy",
            build=lambda settings, stream: IndependentNoise(stream=f"toy-{stream}"),
            state_types=(ToyNoiseState,),
        )
    )
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


def test_a_registered_noise_process_is_checkpointed_and_audited(toy):
    tree, arrays = encode(ToyNoiseState(7))
    assert decode(tree, arrays) == ToyNoiseState(7)
    assert "dpsgd-toy" in audit_choices()
    assert audited_algorithms(1.0, 1e-5)["dpsgd-toy"].noise == IndependentNoise(stream="toy-gradient")
    unregister(toy)
    with pytest.raises(StateFormatError, match="does not know"):
        decode(tree, arrays)
    assert "dpsgd-toy" not in audit_choices()


def test_the_settings_a_process_reads_are_accepted_with_it_only():
    register(
        NoiseDeclaration(
            "toy-lambda",
            build=lambda settings, stream: LambdaCorrelatedNoise(settings["correlation"], stream=stream),
            reads=("correlation",),
        )
    )
    try:
        spec = AlgorithmSpec(
            name="dpsgd", noise="toy-lambda", correlation=0.3, given=frozenset({"correlation"})
        )
        _, algorithm = build_algorithm(spec, LinearRegressionModel(), 10_000, 4)
        assert algorithm.noise == LambdaCorrelatedNoise(0.3)
        with pytest.raises(ValueError, match=r'or set noise="lambda" or "toy-lambda" for correlation$'):
            build_algorithm(
                AlgorithmSpec(name="dpsgd", noise="nu", correlation=0.3, given=frozenset({"correlation"})),
                LinearRegressionModel(),
                10_000,
                4,
            )
    finally:
        unregister("toy-lambda")
