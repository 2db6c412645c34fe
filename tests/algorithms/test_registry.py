"""An algorithm is one module plus one registry entry: a toy algorithm registered here is built by the
builder, accepted by the pipeline config and named in refusals, without touching any other code."""

from __future__ import annotations

import pytest

from dpstream.algorithms import DPSGD
from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm
from dpstream.algorithms.registry import AlgorithmDeclaration, algorithm_names, register, unregister
from dpstream.flows.config.pipeline import ConfigError, load_config
from dpstream.models import LinearRegressionModel
from dpstream.noise import make_noise_process


def _plain_sgd(spec, model, num_rows: int, learning_rate: float) -> DPSGD:
    return DPSGD(
        spec.epsilon,
        spec.delta,
        clip_norm=spec.clip_norm,
        learning_rate=learning_rate,
        batch_size=spec.batch_size or 256,
        noise=make_noise_process("independent"),
        relation=spec.relation,
        unit=spec.unit,
    )


@pytest.fixture()
def toy():
    register(
        AlgorithmDeclaration("plain-sgd", uses=("clip_norm", "learning_rate", "batch_size"), build=_plain_sgd)
    )
    try:
        yield "plain-sgd"
    finally:
        unregister("plain-sgd")


def test_a_registered_algorithm_is_built_configured_and_named(toy, tmp_path):
    assert algorithm_names()[-1] == toy and set(algorithm_names()) >= {"ssp", "ambssgd", "dpsgd", "srgd"}
    spec = AlgorithmSpec(
        name=toy, clip_norm=2.0, batch_size=500, given=frozenset({"clip_norm", "batch_size"})
    )
    name, algorithm = build_algorithm(spec, LinearRegressionModel(), 10_000, 4)
    assert name == toy and isinstance(algorithm, DPSGD) and algorithm.batch_size == 500
    # A setting the toy does not read is refused, naming the algorithms that read it.
    with pytest.raises(ValueError, match=r"num_steps is not used by algorithm 'plain-sgd'.*'ambssgd'"):
        build_algorithm(
            AlgorithmSpec(name=toy, num_steps=5, given=frozenset({"num_steps"})),
            LinearRegressionModel(),
            10_000,
            4,
        )
    config = tmp_path / "pipeline.toml"
    text = f"""
[lake]
url = "{tmp_path / "raw"}"
features = ["x0"]
label = "y"
shuffled_url = "{tmp_path / "shuffled"}"

[algorithm]
name = "{toy}"

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 4.0
ledger_url = "{tmp_path / "ledger"}"
"""
    config.write_text(text)
    assert load_config(config).algorithm.name == toy
    config.write_text(text.replace(f'name = "{toy}"', 'name = "nope"'))
    with pytest.raises(ConfigError, match=r"algorithm must be one of 'auto', .*'plain-sgd', got 'nope'"):
        load_config(config)


def test_a_name_is_declared_once():
    with pytest.raises(ValueError, match="already declared"):
        register(AlgorithmDeclaration("dpsgd", uses=(), build=_plain_sgd))
    with pytest.raises(ValueError, match="already declared"):
        register(AlgorithmDeclaration("auto", uses=(), build=_plain_sgd))
