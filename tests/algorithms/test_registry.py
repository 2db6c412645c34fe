"""An algorithm is one module plus one registry entry: a toy algorithm registered here is built by the
builder, accepted by the pipeline config and named in refusals, checkpointed, trained under the user
unit and audited, without touching any other code; once withdrawn, none of it is accepted."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from dpstream.algorithms import DPSGD
from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm
from dpstream.algorithms.registry import (
    AlgorithmDeclaration,
    UserLevel,
    algorithm_names,
    register,
    unregister,
)
from dpstream.algorithms.user_level import check_user_level, user_level_algorithms, user_level_unsupported
from dpstream.audit import audit_choices, audited_algorithms
from dpstream.flows.assembly.loading import load_config
from dpstream.flows.config.file import ConfigError
from dpstream.models import LinearRegressionModel, MultinomialLogisticModel
from dpstream.noise import make_noise_process
from dpstream.state_codec import StateFormatError, decode, encode


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


@dataclass(frozen=True)
class PlainState:
    """The toy's own checkpointed state type."""

    step: int
    params: np.ndarray


def _audited_plain_sgd(epsilon: float, delta: float, relation: str, noise: None) -> DPSGD:
    return DPSGD(epsilon, delta, clip_norm=1.0, learning_rate=0.5, batch_size=100, relation=relation)


TOY = AlgorithmDeclaration(
    "plain-sgd",
    uses=("clip_norm", "learning_rate", "batch_size"),
    build=_plain_sgd,
    title="plain DP-SGD",
    state_types=(PlainState,),
    user_level=UserLevel(),
    audited=_audited_plain_sgd,
)


@pytest.fixture()
def toy():
    register(TOY)
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


def test_a_registered_algorithm_is_checkpointed_trained_per_person_and_audited(toy):
    state = PlainState(3, np.arange(4.0))
    tree, arrays = encode({"state": state})
    restored = decode(tree, arrays)["state"]
    assert restored.step == 3 and restored.params.tobytes() == state.params.tobytes()
    # Trained under the user unit on a model that combines a person's gradient, and named in the refusal.
    assert toy in user_level_algorithms()
    check_user_level(toy, LinearRegressionModel())
    with pytest.raises(ValueError, match=r"^user-level DP \(groups.*plain DP-SGD \('plain-sgd'\)"):
        check_user_level(toy, MultinomialLogisticModel(num_classes=3))
    assert audit_choices()[-1] == toy
    audited = audited_algorithms(1.0, 1e-5)[toy]
    assert isinstance(audited, DPSGD) and audited.batch_size == 100


def test_a_withdrawn_algorithm_is_no_longer_accepted():
    register(TOY)
    try:
        tree, arrays = encode(PlainState(0, np.zeros(2)))
    finally:
        unregister(TOY.name)
    with pytest.raises(StateFormatError, match="does not know"):  # only declared types are rebuilt
        decode(tree, arrays)
    with pytest.raises(StateFormatError, match="not a declared state type"):
        encode(PlainState(0, np.zeros(2)))
    assert TOY.name not in audit_choices() and TOY.name not in user_level_algorithms()
    assert "plain-sgd" not in user_level_unsupported()
    with pytest.raises(ValueError, match=r"^user-level DP \(groups"):
        check_user_level(TOY.name, LinearRegressionModel())
