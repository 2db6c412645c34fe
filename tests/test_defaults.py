"""One default per setting: the pipeline config, the estimators and the builder agree, and a pipeline with
``[model] kind = "kan"`` trains the KAN as ``DPKANClassifier()`` does."""

import inspect

import pytest

from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm
from dpstream.estimators import DPKANClassifier, DPLinearRegression, DPLogisticRegression
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.planning import build_algorithm as build_for_config
from dpstream.flows.config.pipeline import AlgorithmConfig, ModelConfig
from dpstream.models import KANModel, model_kind
from dpstream.models.kinds.base import SmallBudgetChoice, TrainingDefaults
from tests.algorithms.test_builder import config

FEATURES, ROWS = 5, 20_000
SPEC = AlgorithmSpec()
# The settings a model kind tunes: None in the request and the config means "the kind's".
TUNED = ("clip_norm", "noise", "learning_rate")


def signature_defaults(estimator: type) -> dict:
    return {name: p.default for name, p in inspect.signature(estimator.__init__).parameters.items()}


def test_the_config_defaults_are_the_builders():
    """The [algorithm] keys are AlgorithmSpec's fields, with its defaults; the tuned ones are None there."""
    config = AlgorithmConfig()
    for name in AlgorithmConfig.model_fields:
        assert getattr(config, name) == getattr(SPEC, name), name
    assert {name: getattr(SPEC, name) for name in TUNED} == dict.fromkeys(TUNED)


@pytest.mark.parametrize("estimator", [DPLinearRegression, DPLogisticRegression, DPKANClassifier])
def test_the_estimators_defaults_are_the_builders_and_their_kinds(estimator):
    defaults = signature_defaults(estimator)
    for name in (
        "epsilon",
        "delta",
        "relation",
        "correlation",
        "nu",
        "stat_bound",
        "num_steps",
        "batch_size",
    ):
        if name in defaults:
            assert defaults[name] == getattr(SPEC, name), name
    if "algorithm" in defaults:
        assert defaults["algorithm"] == SPEC.name
    training = estimator._kind.training
    for name in TUNED:
        assert defaults[name] == getattr(training, name), name


def test_the_glm_kinds_tune_nothing_but_the_linear_small_budget_choice_and_the_kan_its_own():
    assert model_kind("logistic").training == TrainingDefaults()
    linear = model_kind("linear").training
    assert linear == TrainingDefaults(
        small_budget=SmallBudgetChoice(
            "srgd", max_epsilon=1.0, min_rows=20_000, min_inputs=20, any_epsilon_whitened=True
        )
    )
    assert model_kind("kan").training != TrainingDefaults()
    assert DPKANClassifier._kind is model_kind("kan")


def test_the_kan_settings_are_the_models():
    model, config, estimator = KANModel(), ModelConfig(), signature_defaults(DPKANClassifier)
    for name in model_kind("kan").settings:
        assert getattr(config, name) == getattr(model, name), name
    for name in ("num_hidden", "grid_size", "activation", "input_map"):
        assert estimator[name] == getattr(model, name), name
    assert estimator["random_state"] is None  # the public KANModel.seed, with fresh noise
    kan = DPKANClassifier()
    kan.n_features_in_ = 2
    assert kan._fit_model().seed == model.seed


def kan_config(**algorithm):
    return config(model={"kind": "kan", "num_hidden": 8, "grid_size": 3}, features=FEATURES, **algorithm)


@pytest.mark.parametrize("algorithm", [{}, {"batch_size": 100, "correlation": 0.9}], ids=["defaults", "set"])
def test_a_kan_pipeline_and_the_kan_estimator_train_alike(algorithm):
    """Same data shape, same request: the same algorithm object (learning rate, clip norm, noise, batch)."""
    config = kan_config(**algorithm)
    model = config.model.build()
    assert model == KANModel(num_hidden=8, grid_size=3)  # the estimator's KAN with public bounds [-1, 1]
    dim = model.num_params(FEATURES)
    estimator = DPKANClassifier(num_hidden=8, grid_size=3, **algorithm)
    from_estimator = estimator._build_algorithm(model, ROWS, dim, estimator.epsilon)
    from_config = build_for_config(RunInputs.of(config), ROWS, dim)
    assert from_config == from_estimator
    tuned = model_kind("kan").training
    assert (from_config.learning_rate, from_config.clip_norm, from_config.noise.name) == (
        tuned.learning_rate,
        tuned.clip_norm,
        tuned.noise,
    )


def test_an_explicit_setting_overrides_the_kinds_default():
    config = kan_config(clip_norm=1.0, learning_rate=0.5, noise="independent")
    model = config.model.build()
    built = build_for_config(RunInputs.of(config), ROWS, model.num_params(FEATURES))
    assert (built.learning_rate, built.clip_norm, built.noise.name) == (0.5, 1.0, "independent")
    _, linear = build_algorithm(AlgorithmSpec(name="dpsgd"), model_kind("linear").build(), ROWS, FEATURES)
    assert (linear.clip_norm, linear.noise.name) == (1.0, "independent")
