"""The release guard of a run on a lake (``dpstream.guarded_run``): over the held-out rows, at the run's
μ by parallel composition, from the run's key."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from dpstream.algorithms import DPSGD
from dpstream.coordinator import InMemoryExecutor, execute
from dpstream.guarded_run import LakeGuard, with_parallel_release
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey
from dpstream.privacy import GaussianEvent, NeighbouringRelation
from dpstream.release_guard import RegressionGuard
from dpstream.run_plan import RunPlan

KEY = NoiseKey.from_secret(bytes(range(32)))
DIM = 4  # three features and the intercept column, last


def rows(count: int, seed: int, offset: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """Features on [−1, 1] with the constant 1 last; labels near ``offset`` with a linear signal."""
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.uniform(-1, 1, (count, DIM - 1)), np.ones((count, 1))])
    y = np.clip(offset + X[:, :3] @ np.array([0.2, -0.1, 0.1]) + 0.05 * rng.standard_normal(count), -1, 1)
    return X, y


def lake_guard(mu: float = 0.5, count: int = 5_000) -> LakeGuard:
    X, y = rows(count, 1)
    blocks = lambda: iter([(X[:2_500], y[:2_500]), (X[2_500:], y[2_500:])])  # noqa: E731
    return LakeGuard(RegressionGuard(mu, NeighbouringRelation.REPLACE_ONE), blocks, count, DIM, DIM - 1)


def test_a_model_worse_than_the_mean_gives_way_to_the_noisy_mean_with_the_run_mu_unchanged():
    guard, model = lake_guard(), LinearRegressionModel()
    bad = np.array([0.0, 0.0, 0.0, -0.8])  # predicts −0.8 for labels near 0.6
    report = _report(mu=0.5)
    params, stated, decision = guard.finish(KEY, model, bad, report)
    assert not decision.model and np.all(params[:3] == 0)
    assert params[3] == pytest.approx(0.6, abs=0.02)  # the noisy label mean of the held-out rows
    assert stated.mu == report.mu and stated.epsilon == report.epsilon  # parallel: no extra charge
    assert "the noisy label mean, the constant predictor was released instead" in stated.notes[-1]
    # The same key and rows, in a new guard: the same constant and decision (a retried or resumed run).
    again, _, _ = lake_guard().finish(KEY, model, bad, report)
    assert again.tobytes() == params.tobytes()


def test_adassps_own_label_mean_is_kept_over_the_guards_noisier_one():
    """Where training released only the noisy label mean (AdaSSP's λ₀ > N rule, from every training row at
    the run's μ), the guard does not swap it for its own mean of the held-out file; any other model that
    loses still gives way."""
    guard, model = lake_guard(), LinearRegressionModel()
    trained_mean = np.array([0.0, 0.0, 0.0, 0.55])  # loses to the held-out mean on the guard's comparison
    plain = _report(mu=0.5)
    _, _, lost = guard.finish(KEY, model, trained_mean, plain)
    assert not lost.model
    params, stated, decision = guard.finish(KEY, model, trained_mean, plain, label_mean_only=True)
    assert decision.model and params.tobytes() == trained_mean.tobytes()
    assert "the trained model is itself the noisy label mean" in stated.notes[-1]


def test_a_model_that_beats_the_mean_is_released_and_training_starts_at_the_mean():
    guard, model = lake_guard(), LinearRegressionModel()
    good = np.array([0.2, -0.1, 0.1, 0.6])
    params, _, decision = guard.finish(KEY, model, good, _report(mu=0.5))
    assert decision.model and params.tobytes() == good.tobytes()
    start = guard.start(KEY, np.zeros(DIM))
    assert np.all(start[:3] == 0) and start[3] == pytest.approx(0.6, abs=0.02)


def test_a_parallel_release_above_the_run_mu_is_refused():
    event = GaussianEvent(1.0, 1.0 / 0.6, NeighbouringRelation.REPLACE_ONE, "guard")
    with pytest.raises(ValueError, match="exceeds the run's μ"):
        with_parallel_release(_report(mu=0.5), event, "note")


def test_execute_starts_at_the_guard_constant_and_returns_its_decision():
    """Through the coordinator: DP-SGD from the noisy label mean, with the guard's decision in the result;
    the same key gives the same release."""
    X, y = rows(20_000, 2)
    model = LinearRegressionModel()
    algorithm = DPSGD(epsilon=1.0, delta=1e-6, clip_norm=1.0, learning_rate=0.25, batch_size=500)
    plan = RunPlan.build(algorithm, model, len(y), DIM)
    guard = lake_guard(mu=plan.mu)  # the run's μ, as the flow sets it
    results = [
        execute(
            plan, InMemoryExecutor(model, iter([(X, y)])), initial_params=np.zeros(DIM), key=KEY, guard=guard
        )
        for _ in range(2)
    ]
    assert results[0].params.tobytes() == results[1].params.tobytes()
    assert results[0].guard is not None and results[0].guard.model
    assert math.isclose(results[0].report.mu, plan.mu, rel_tol=1e-12)
    assert abs(results[0].params[3] - 0.6) < 0.05  # started at the mean, not walking from 0


def _report(mu: float):
    from dpstream.algorithms.base import PrivacyReport
    from dpstream.privacy import epsilon_for_delta

    return PrivacyReport(
        mechanism="test",
        relation="replace-one",
        epsilon=epsilon_for_delta(1e-6, mu),
        delta=1e-6,
        mu=mu,
        noise_multiplier=1.0,
        sensitivity=1.0,
        steps=1,
        rows_per_step=1,
        accountant="gdp",
        events="test",
    )


def test_model_json_says_constant_for_the_guard_and_for_adassps_label_mean_rule():
    from dpstream.flows.flows import released

    guard = SimpleNamespace(model=True)
    assert released(SimpleNamespace(state=SimpleNamespace(), guard=None)) == "model"
    assert released(SimpleNamespace(state=SimpleNamespace(), guard=guard)) == "model"
    assert (
        released(SimpleNamespace(state=SimpleNamespace(), guard=SimpleNamespace(model=False))) == "constant"
    )
    assert released(SimpleNamespace(state=SimpleNamespace(label_mean_only=True), guard=guard)) == "constant"


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
@pytest.mark.parametrize("input_map", ["cube", "ball"])
def test_kan_weights_hold_any_reachable_constant_margin(activation, input_map):
    """``KANModel.constant_margin_params``: the margin is the target on every row, however far outside the public
    bounds; a target beyond the second layer's reach gives its extreme, with the target's sign."""
    from dpstream.models import KANModel

    model = KANModel(
        num_hidden=16, activation=activation, input_map=input_map, feature_low=-2, feature_high=2
    )
    X = np.random.default_rng(3).uniform(-9, 9, (300, 5))
    for target in (-1.0, -0.3, 0.0, 0.8):
        margins = model.predict_margin(X, model.constant_margin_params(5, target))
        np.testing.assert_allclose(margins, target, atol=1e-9)
    for target in (-1e3, 1e3):
        margins = model.predict_margin(X, model.constant_margin_params(5, target))
        assert np.ptp(margins) < 1e-9 and np.sign(margins[0]) == np.sign(target) and abs(margins[0]) > 1


def test_a_kan_worse_than_the_majority_class_gives_way_to_it_on_a_lake():
    """The KAN's guard: a model that predicts the minority class everywhere loses the comparison, and the
    published parameters are KAN weights whose every prediction is the majority class, at the noisy
    class frequencies' log-odds; the run's μ is unchanged (parallel composition)."""
    from dpstream.models import KANModel
    from dpstream.release_guard import ClassificationGuard

    model = KANModel(num_hidden=16, feature_low=-1, feature_high=1)
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, (4_000, 3))
    y = np.where(rng.random(4_000) < 0.8, 1.0, -1.0)  # 80 % class +1
    guard = LakeGuard(
        ClassificationGuard(0.5, NeighbouringRelation.REPLACE_ONE, 2), lambda: iter([(X, y)]), 4_000, 3, None
    )
    minority = model.constant_margin_params(3, -2.0)  # predicts −1 everywhere
    report = _report(mu=0.5)
    params, stated, decision = guard.finish(KEY, model, minority, report)
    assert not decision.model
    margins = model.predict_margin(X, params)
    assert np.ptp(margins) < 1e-9 and margins[0] == pytest.approx(math.log(0.8 / 0.2), abs=0.1)
    assert stated.mu == report.mu
    assert "the majority class" in stated.notes[-1]


def test_a_kan_that_cannot_output_both_signs_is_refused_when_built():
    """The guard may choose the majority class; a KAN whose public output layer cannot reach margins of both
    signs could not publish it, so it is refused up front, naming the fix (one hidden unit, one grid
    interval: most seeds)."""
    from dpstream.models import KANModel

    refused = 0
    for seed in range(20):
        try:
            model = KANModel(num_hidden=1, grid_size=1, seed=seed)
        except ValueError as error:
            refused += 1
            assert "more hidden units or another seed" in str(error)
            continue
        low, high = model.margin_reach()
        assert low < 0 < high
        for target in (low / 2, high / 2):  # both classes reachable
            margins = model.predict_margin(np.zeros((3, 2)), model.constant_margin_params(2, target))
            assert np.allclose(margins, target, atol=1e-9)
    assert 0 < refused < 20
