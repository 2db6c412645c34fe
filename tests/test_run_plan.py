"""The run plan: built once, frozen, carrying its own privacy event, checked (never rebuilt) downstream."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpstream.algorithms import DPAMBSSGD, DPSGD, AcceleratedDPSRGD, AdaSSP
from dpstream.checkpoint import CheckpointPolicy
from dpstream.coordinator import InMemoryExecutor, execute
from dpstream.models import KANModel, LinearRegressionModel, LogisticRegressionModel, MultinomialLogisticModel
from dpstream.noise import NoiseKey, make_noise_process
from dpstream.privacy import GdpAccountant, NeighbouringRelation
from dpstream.run_plan import PlanMismatchError, RunPlan

ROWS, DIM = 20_000, 5
ALGORITHMS = {
    "ssp": AdaSSP(1.0, 1e-6),
    "dpsgd-lambda": DPSGD(
        1.0,
        1e-6,
        clip_norm=1.0,
        learning_rate=0.2,
        batch_size=500,
        noise=make_noise_process("lambda", correlation=0.5),
    ),
    "ambssgd": DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm"),
    "srgd": AcceleratedDPSRGD(2.0, 1e-6, clip_norm=1.0, relation="zero-out"),
}


@pytest.mark.parametrize("name", ALGORITHMS)
def test_the_plan_carries_the_event_its_report_interprets(name):
    algorithm = ALGORITHMS[name]
    plan = RunPlan.build(algorithm, LinearRegressionModel(), ROWS, DIM, CheckpointPolicy("/tmp/unused"))
    accountant = GdpAccountant(NeighbouringRelation(plan.report.relation)).compose(plan.event)
    assert accountant.mu == pytest.approx(plan.mu, rel=1e-12)
    assert plan.report.epsilon <= algorithm.epsilon * (1 + 1e-9)
    assert (plan.num_rows, plan.num_params) == (ROWS, DIM)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps = algorithm.plan(ROWS // 2, DIM)  # type: ignore[misc]


def _blocks(rows: int):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (rows, DIM))
    return [(X, X @ np.linspace(-0.5, 0.5, DIM))]


def test_the_coordinator_refuses_an_executor_of_another_model():
    plan = RunPlan.build(ALGORITHMS["ssp"], LinearRegressionModel(), ROWS, DIM)
    other = InMemoryExecutor(LogisticRegressionModel(), _blocks(ROWS))
    with pytest.raises(
        PlanMismatchError, match="LogisticRegressionModel.*give the executor the plan's model"
    ):
        execute(plan, other, initial_params=np.zeros(DIM), key=NoiseKey.generate())
    fitted = execute(
        plan, InMemoryExecutor(LinearRegressionModel(), _blocks(ROWS)), initial_params=np.zeros(DIM)
    )
    assert fitted.report.mu == pytest.approx(plan.mu)


def test_data_plane_refuses_a_plan_built_for_other_rows(tmp_path):
    from dpstream.pipelines import plan_on_lake, shuffle_once, train_on_lake
    from tests.pipelines.conftest import feature_spec, local_put, write_lake

    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    manifest = shuffle_once(feature_spec(str(raw)), str(tmp_path / "shuffled"), rows_per_file=4000)
    training, _ = manifest.split_last_file()
    plan = plan_on_lake(training, ALGORITHMS["ssp"], LinearRegressionModel())
    with pytest.raises(
        PlanMismatchError, match=rf"{manifest.num_rows:,} rows .* built for {training.num_rows:,} rows"
    ):
        train_on_lake(manifest, plan, None, mode="streaming")


def test_event_and_report_follow_the_steps_they_are_made_from():
    """A plan cannot carry a charge of other steps than the ones whose noise it draws."""
    plan = RunPlan.build(ALGORITHMS["dpsgd-lambda"], LinearRegressionModel(), ROWS, DIM)
    with pytest.raises(TypeError):
        RunPlan(plan.algorithm, plan.model, plan.steps, None, plan.event, plan.report)  # type: ignore[call-arg]
    smaller = dataclasses.replace(plan, steps=plan.algorithm.plan(ROWS // 10, DIM))
    assert smaller.event == plan.algorithm.event(smaller.steps) and smaller.event != plan.event
    assert smaller.report == plan.algorithm.report(smaller.steps)


def test_the_plan_states_its_privacy_unit_which_owns_the_sensitivities():
    """AdaSSP under a user unit (a user's rows combined into one contribution, ``dpstream.models.users``)
    keeps one row's sensitivities, so its noise is the row unit's; the report says whose data it protects.
    DP-SGD and DP-AMBSSGD combine a person's gradient into one clipped contribution (the same noise); SRGD and
    the KAN refuse the user unit, and a plan refuses an executor that does not read users the way its unit
    says."""
    from dpstream.privacy import PrivacyUnit

    user = PrivacyUnit.user("customer_id", 8)
    row_plan = RunPlan.build(ALGORITHMS["ssp"], LinearRegressionModel(), ROWS, DIM)
    user_plan = RunPlan.build(AdaSSP(1.0, 1e-6, unit=user), LinearRegressionModel(), ROWS, DIM)
    assert user_plan.mu == pytest.approx(row_plan.mu, rel=1e-12) and user_plan.event == row_plan.event
    assert (
        row_plan.report.unit.startswith("one row")
        and "privacy unit | one row" in row_plan.report.to_markdown()
    )
    assert "one value of 'customer_id' (at most 8 rows" in user_plan.report.unit
    assert (
        user_plan.algorithm != row_plan.algorithm
    )  # the unit is part of what a checkpoint's fingerprint covers
    for name in ("dpsgd-lambda", "ambssgd"):  # a person's gradient is combined: one row's sensitivity
        relation = ALGORITHMS[name].relation
        per_person = dataclasses.replace(
            ALGORITHMS[name], unit=PrivacyUnit.user("customer_id", 8, relation=relation)
        )
        person_plan = RunPlan.build(per_person, LinearRegressionModel(), ROWS, DIM)
        rows_plan = RunPlan.build(ALGORITHMS[name], LinearRegressionModel(), ROWS, DIM)
        assert (
            person_plan.mu == pytest.approx(rows_plan.mu, rel=1e-12) and "one user" in person_plan.report.unit
        )
        assert RunPlan.build(per_person, KANModel(), ROWS, DIM).report.unit.startswith("one user")
        with pytest.raises(ValueError, match=r"SRGD and the multi-class model do not combine"):
            RunPlan.build(per_person, MultinomialLogisticModel(), ROWS, DIM)
        with pytest.raises(ValueError, match=r"on the NumPy backend; the model's backend is 'auto'"):
            RunPlan.build(per_person, LinearRegressionModel(backend="auto"), ROWS, DIM)
    with pytest.raises(ValueError, match=r"SRGD and the multi-class model do not combine"):
        relation = ALGORITHMS["srgd"].relation
        dataclasses.replace(ALGORITHMS["srgd"], unit=PrivacyUnit.user("customer_id", 8, relation=relation))
    with pytest.raises(PlanMismatchError, match="the executor reads rows without their users"):
        execute(
            user_plan, InMemoryExecutor(LinearRegressionModel(), _blocks(ROWS)), initial_params=np.zeros(DIM)
        )
    with pytest.raises(ValueError, match="disagrees with the unit's"):
        AdaSSP(1.0, 1e-6, relation="zero-out", unit=user)
