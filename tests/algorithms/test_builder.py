"""One builder for the flows and the estimators: the same request gives the same algorithm object."""

import pytest

from dpstream.algorithms import DPSGD, AdaSSP
from dpstream.algorithms.builder import AlgorithmSpec, build_algorithm
from dpstream.estimators import DPLinearRegression
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.planning import build_algorithm as build_for_config
from dpstream.flows.config.pipeline import PipelineConfig
from dpstream.models import KANModel, LinearRegressionModel, LogisticRegressionModel, model_kind

DIM, ROWS = 13, 16_512


def config(model: dict | None = None, features: int = DIM, **algorithm):
    """A pipeline config of ``features`` columns with the [model] section ``model`` (linear by default)."""
    return PipelineConfig.model_validate(
        {
            "lake": {
                "url": "raw",
                "features": [f"x{j}" for j in range(features)],
                "label": "y",
                "shuffled_url": "shuffled",
            },
            "algorithm": algorithm,
            "model": model or {"kind": "linear"},
            "budget": {"epsilon": 1.0, "delta": 1e-6, "lifetime_epsilon": 4.0, "ledger_url": "ledger"},
        }
    )


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"name": "dpsgd"},
        {"name": "srgd", "batch_size": 128},
        {"learning_rate": 0.05},
        {"name": "ambssgd", "num_steps": 8},
        {"name": "dpsgd", "noise": "nu", "nu": 0.05},
    ],
    ids=["auto", "dpsgd", "srgd", "lr-selects-dpsgd", "ambssgd", "nu"],
)
def test_config_and_estimator_build_the_same_algorithm(settings):
    estimator = DPLinearRegression(
        epsilon=1.0,
        delta=1e-6,
        fit_intercept=False,
        algorithm=settings.get("name", "auto"),
        clip_norm=1.0,
        **{k: v for k, v in settings.items() if k != "name"},
    )
    from_estimator = estimator._build_algorithm(LinearRegressionModel(), ROWS, DIM, estimator.epsilon)
    assert build_for_config(RunInputs.of(config(**settings)), ROWS, DIM) == from_estimator


def test_defaults_resolved_in_one_place():
    name, ssp = build_algorithm(AlgorithmSpec(), LogisticRegressionModel(), ROWS, DIM)
    assert name == "ssp" and isinstance(ssp, AdaSSP) and ssp.link == "logistic"
    name, sgd = build_algorithm(AlgorithmSpec(name="dpsgd"), LogisticRegressionModel(), ROWS, DIM)
    assert sgd.learning_rate == pytest.approx(4.0 / DIM)  # stable 1/(L·R²), L = 1/4, R² = d
    assert sgd.batch_size == 64  # max(64, N/1000)
    assert (
        build_algorithm(AlgorithmSpec(name="dpsgd"), LinearRegressionModel(), 10, DIM)[1].batch_size == 10
    )  # ≤ N
    assert sgd.clip_norm == 1.0 and sgd.noise.name == "independent"  # the GLMs' defaults
    name, kan = build_algorithm(AlgorithmSpec(), KANModel(num_hidden=4, grid_size=3), ROWS, 100)
    tuned = model_kind("kan").training  # the KAN's own defaults, read from its kind
    assert name == "dpsgd" and isinstance(kan, DPSGD) and kan.learning_rate == tuned.learning_rate
    assert kan.clip_norm == tuned.clip_norm and kan.noise.name == tuned.noise
    with pytest.raises(ValueError, match="algorithm='ssp' has no steps; learning_rate"):
        build_algorithm(AlgorithmSpec(name="ssp", learning_rate=0.1), LinearRegressionModel(), ROWS, DIM)


def test_a_parameter_the_algorithm_ignores_is_refused():
    """Never silently ignored: the error names what the chosen algorithm uses and what would use it."""
    with pytest.raises(
        ValueError,
        match=r"^clip_norm is not used by algorithm 'ambssgd', which uses learning_rate, "
        r"num_steps, stat_bound; remove it, or name an algorithm that uses it \('dpsgd', 'srgd'\)",
    ):
        build_algorithm(
            AlgorithmSpec(name="ambssgd", given=frozenset({"clip_norm"})), LinearRegressionModel(), ROWS, DIM
        )
    # An estimator has no row_norm_bound / label_bound: the error does not send its user there.
    with pytest.raises(
        ValueError,
        match=r"^clip_norm is not used by algorithm 'ssp' \(what \"auto\" chose\), which has none ",
    ):
        DPLinearRegression(clip_norm=2.0).fit(*_data())
    with pytest.raises(  # only with noise="lambda": the fix names the noise, not another algorithm
        ValueError,
        match=r"^correlation is not used by algorithm 'dpsgd'.*; remove it, or set noise=\"lambda\" for correlation$",
    ):
        DPLinearRegression(algorithm="dpsgd", noise="nu", correlation=0.3).fit(*_data())
    with pytest.raises(ValueError, match=r"^stat_bound is not used by algorithm 'dpsgd'"):
        build_for_config(RunInputs.of(config(name="dpsgd", stat_bound=10.0)), ROWS, DIM)
    # Set to its default value, a parameter counts as not given; used ones pass.
    assert DPLinearRegression(clip_norm=1.0).fit(*_data()).algorithm_ == "ssp"
    assert (
        build_for_config(
            RunInputs.of(config(name="dpsgd", noise="lambda", correlation=0.3)), ROWS, DIM
        ).noise.correlation
        == 0.3
    )
    with pytest.raises(ValueError, match="given names colour, which are not hyperparameters"):
        AlgorithmSpec(given=frozenset({"colour"}))


def _data():
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (2_000, 3))
    return X, X @ np.array([0.3, -0.2, 0.1])


def test_a_model_of_no_kind_without_a_curvature_bound_needs_a_learning_rate():
    class CustomModel:  # a user's model: no declared kind, no public bound on φ''
        outputs = 1

    with pytest.raises(ValueError, match="CustomModel states no curvature bound .* pass learning_rate$"):
        build_algorithm(AlgorithmSpec(name="dpsgd"), CustomModel(), ROWS, DIM)
    name, sgd = build_algorithm(AlgorithmSpec(name="dpsgd", learning_rate=0.1), CustomModel(), ROWS, DIM)
    assert name == "dpsgd" and sgd.learning_rate == 0.1
