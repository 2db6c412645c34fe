"""The coordinator streams blocks once, in order, and refuses over-budget configurations."""

from dataclasses import replace

import numpy as np
import pytest

from dpstream.algorithms import DPAMBSSGD, DPSGD, AdaSSP
from dpstream.coordinator import InMemoryExecutor, RowStream, run
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey

KEY = NoiseKey.from_secret(b"c" * 32)


def data(rows=50_000, dim=5):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, dim))
    return X, X @ np.ones(dim) + rng.standard_normal(rows)


def fit(algorithm, blocks, rows, dim):
    return run(
        algorithm,
        InMemoryExecutor(LinearRegressionModel(), blocks),
        num_rows=rows,
        num_params=dim,
        initial_params=np.zeros(dim),
        key=KEY,
    )


@pytest.mark.parametrize(
    "algorithm",
    [
        DPAMBSSGD(1.0, 1e-6, bound=1e3, statistic="gradient_norm"),
        DPSGD(1.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=777),
        AdaSSP(1.0, 1e-6, row_norm_bound=5.0, label_bound=8.0),
    ],
)
def test_irregular_blocks_give_the_same_model(algorithm):
    X, y = data()
    whole = fit(algorithm, [(X, y)], *X.shape).params
    cuts = [0, 1, 999, 5000, 5001, 23_456, 50_000]
    generator = ((X[a:b], y[a:b]) for a, b in zip(cuts, cuts[1:], strict=False))
    np.testing.assert_allclose(fit(algorithm, generator, *X.shape).params, whole, rtol=1e-10, atol=1e-12)


def test_stream_is_single_pass_and_reports_short_data():
    X, y = data(100)
    stream = RowStream([(X[:40], y[:40]), (X[40:], y[40:])])
    pieces = list(stream.take(30, 50))
    assert [p[0].shape[0] for p in pieces] == [10, 10]
    with pytest.raises(ValueError, match="single-pass"):
        list(stream.take(10, 20))
    with pytest.raises(ValueError, match="ended at row 100, before row 120"):
        list(stream.take(90, 120))


def test_over_budget_configuration_refused_before_reading_data():
    algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=100)
    plan = algorithm.plan(10_000, 3)
    with pytest.raises(AttributeError):  # a plan is frozen: its noise cannot be edited after calibration
        plan.calibration = None
    plan = replace(plan, calibration=replace(plan.calibration, noise_std=plan.calibration.noise_std / 2))
    with pytest.raises(ValueError, match="more than the requested epsilon=1"):
        algorithm.report(plan)

    def exploding_blocks():
        raise AssertionError("data read before the budget check")
        yield

    class HalfNoise(DPSGD):
        def plan(self, num_rows, dim):
            plan = super().plan(num_rows, dim)
            return replace(
                plan, calibration=replace(plan.calibration, noise_std=plan.calibration.noise_std / 2)
            )

    with pytest.raises(ValueError, match="more than the requested"):
        fit(
            HalfNoise(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=100),
            exploding_blocks(),
            10_000,
            3,
        )


def test_one_run_id_releases_one_model(tmp_path):
    """A repeated run id replays its checkpoint (bit-identical model, one charge) or is refused."""
    from dpstream.checkpoint import CheckpointPolicy
    from dpstream.privacy import Ledger, LifetimeBudget, RunIdReusedError

    X, y = data(5_000)
    algorithm = DPSGD(1.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=500)
    ledger = Ledger(str(tmp_path / "ledger")).lake("lake-1", LifetimeBudget(1.0, 1e-6))  # one run fills it

    def train(run_id, checkpoint_url, key=None):
        policy = None if checkpoint_url is None else CheckpointPolicy(str(checkpoint_url), every_steps=3)
        return run(
            algorithm,
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            num_rows=5_000,
            num_params=5,
            initial_params=np.zeros(5),
            key=key,
            checkpoint=policy,
            run_id=run_id,
            ledger=ledger,
        ).params

    first = train("r1", tmp_path / "ckpt")
    again = train("r1", tmp_path / "ckpt")  # the run's own charge filled the budget: still allowed once
    assert again.tobytes() == first.tobytes()
    assert [(e.run_id, e.status) for e in ledger.entries()] == [("r1", "committed")]
    for checkpoint_url in (tmp_path / "elsewhere", None):  # the key is gone: a fresh one would differ
        with pytest.raises(RunIdReusedError, match="run 'r1' is already committed .* new run id"):
            train("r1", checkpoint_url)
    with pytest.raises(RunIdReusedError):  # also through the ledger's subclass relation (exit code 3)
        train("r1", None, key=NoiseKey.generate())
    assert [e.run_id for e in ledger.entries()] == ["r1"]


def test_ledger_check_excludes_the_runs_own_reservation(tmp_path):
    from dpstream.privacy import BudgetExceededError, Ledger, LifetimeBudget

    lake = Ledger(str(tmp_path)).lake("lake-1", LifetimeBudget(1.0, 1e-6))
    lake.reserve("r1", lake.budget.mu, mechanism="m", relation="replace-one")
    lake.check("r1", lake.budget.mu)  # a resume of r1: charged once
    with pytest.raises(BudgetExceededError):
        lake.check("r2", 1e-3)


class FailingExecutor(InMemoryExecutor):
    """Fails when asked for step ``fail_at`` (a lost lake part, a dead cluster)."""

    def __init__(self, model, blocks, fail_at):
        super().__init__(model, blocks)
        self.fail_at = fail_at

    def compute(self, span, request):
        if span.step == self.fail_at:
            raise OSError(f"part-00003.parquet vanished at step {span.step}")
        return super().compute(span, request)


def test_a_failure_before_the_first_release_gives_the_reservation_back(tmp_path):
    """Nothing released, nothing charged (recorded as aborted, with the reason, and the
    key deleted); once a step used the noise, the charge stays."""
    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore
    from dpstream.privacy import Ledger, LifetimeBudget

    X, y = data(5_000)
    algorithm = DPSGD(1.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=500)
    lake = Ledger(str(tmp_path / "ledger")).lake("lake-1", LifetimeBudget(4.0, 1e-6))
    policy = CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=1)

    def train(run_id, fail_at):
        return run(
            algorithm,
            FailingExecutor(LinearRegressionModel(), [(X, y)], fail_at),
            num_rows=5_000,
            num_params=5,
            initial_params=np.zeros(5),
            checkpoint=policy,
            run_id=run_id,
            ledger=lake,
        )

    with pytest.raises(OSError, match="vanished at step 0"):
        train("early", fail_at=0)
    assert lake.entries() == [] and lake.spent_mu() == 0.0
    (aborted,) = lake.aborted()
    assert (
        aborted.run_id == "early" and aborted.status == "aborted" and "vanished at step 0" in aborted.reason
    )
    assert not CheckpointStore(policy).exists("early")  # the key of a run that released nothing is gone
    assert train("early", fail_at=-1).params.shape == (5,)  # the id is free again: a new claim, a new key
    assert [(e.run_id, e.status) for e in lake.entries()] == [("early", "committed")]
    with pytest.raises(OSError, match="vanished at step 3"):
        train("late", fail_at=3)
    assert {e.run_id: e.status for e in lake.entries()} == {"early": "committed", "late": "reserved"}
    assert CheckpointStore(policy).load("late").step == 3  # resumable; charged once when it resumes
    assert [e.run_id for e in lake.aborted()] == ["early"]


def test_one_run_id_started_twice_at_once_releases_one_model(tmp_path):
    """The run id is claimed by an exclusive create before the key is drawn. Of two runs
    started together with one id, the second is refused or replays the first's key: one model."""
    import threading

    from dpstream.checkpoint import CheckpointError, CheckpointPolicy
    from dpstream.privacy import Ledger, LifetimeBudget, RunIdReusedError

    X, y = data(5_000)
    algorithm = DPSGD(1.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=500)
    for trial in range(8):
        lake = Ledger(str(tmp_path / f"ledger-{trial}")).lake("lake-1", LifetimeBudget(8.0, 1e-6))
        policy = CheckpointPolicy(str(tmp_path / f"ckpt-{trial}"), every_steps=1)
        barrier, results = threading.Barrier(2), []

        def train(lake=lake, policy=policy, barrier=barrier, results=results):
            barrier.wait()
            try:
                fit = run(
                    algorithm,
                    InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
                    num_rows=5_000,
                    num_params=5,
                    initial_params=np.zeros(5),
                    checkpoint=policy,
                    run_id="nightly",
                    ledger=lake,
                )
                results.append(fit.params.tobytes())
            except (RunIdReusedError, CheckpointError) as refused:
                results.append(type(refused).__name__)

        threads = [threading.Thread(target=train) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        models = {r for r in results if isinstance(r, bytes)}
        assert len(models) == 1, results  # one model released, whatever the interleaving
        assert [e.run_id for e in lake.entries()] == ["nightly"] and lake.aborted() == []


def test_a_resumed_run_never_gives_back_the_claim_it_continues(tmp_path):
    """Run A claims its run id and writes its first checkpoint, then waits at step 0; run B resumes that
    checkpoint and fails before its first step. B cannot know whether A used the noise: A's reservation
    and key stay, and A completes and commits."""
    import threading

    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore
    from dpstream.privacy import Ledger, LifetimeBudget

    X, y = data(5_000)
    algorithm = DPSGD(1.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=500)
    lake = Ledger(str(tmp_path / "ledger")).lake("lake-1", LifetimeBudget(4.0, 1e-6))
    policy = CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=1)
    started, gate, results = threading.Event(), threading.Event(), []

    class Holding(InMemoryExecutor):
        def compute(self, span, request):
            if span.step == 0:
                started.set()
                gate.wait(60)
            return super().compute(span, request)

    def train(executor):
        return run(
            algorithm,
            executor,
            num_rows=5_000,
            num_params=5,
            initial_params=np.zeros(5),
            checkpoint=policy,
            run_id="r",
            ledger=lake,
        )

    first = threading.Thread(target=lambda: results.append(train(Holding(LinearRegressionModel(), [(X, y)]))))
    first.start()
    assert started.wait(60)
    with pytest.raises(OSError, match="vanished at step 0"):
        train(FailingExecutor(LinearRegressionModel(), [(X, y)], fail_at=0))
    assert [(e.run_id, e.status) for e in lake.entries()] == [("r", "reserved")] and lake.aborted() == []
    assert CheckpointStore(policy).exists("r")
    gate.set()
    first.join(60)
    assert results and [(e.run_id, e.status) for e in lake.entries()] == [("r", "committed")]


@pytest.mark.parametrize("every_seconds, saved_step", [(None, 0), (1e-9, 3)])
def test_every_seconds_saves_checkpoints_by_time(tmp_path, every_seconds, saved_step):
    """Steps every 1,000 keep only the start (step 0) before a failure at step 3; a time limit already passed saves
    after each step, so the run resumes from step 3."""
    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore

    X, y = data(5_000)
    algorithm = DPSGD(1.0, 1e-6, clip_norm=3.0, learning_rate=0.5, batch_size=500)
    policy = CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=1_000, every_seconds=every_seconds)
    with pytest.raises(OSError, match="vanished at step 3"):
        run(algorithm, FailingExecutor(LinearRegressionModel(), [(X, y)], 3), num_rows=5_000, num_params=5,
            initial_params=np.zeros(5), checkpoint=policy, run_id="timed", key=KEY)  # fmt: skip
    saved = CheckpointStore(policy).load("timed")
    assert (saved.step if saved is not None else None) == saved_step


def test_the_checkpoint_fingerprint_covers_every_model_setting():
    from dpstream.checkpoint import config_fingerprint
    from dpstream.models import KANModel, MultinomialLogisticModel

    algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.5, batch_size=100)
    base = KANModel(num_hidden=4)
    fingerprints = {
        config_fingerprint(algorithm, model, 1000, 40)
        for model in (
            base,
            replace(base, activation="sigmoid"),
            replace(base, seed=1),
            replace(base, grid_size=6),
            replace(base, feature_low=-2.0),
            replace(base, input_map="ball"),
        )
    }
    assert len(fingerprints) == 6
    assert config_fingerprint(
        algorithm, MultinomialLogisticModel(num_classes=3), 1000, 30
    ) != config_fingerprint(algorithm, MultinomialLogisticModel(num_classes=4), 1000, 30)


def test_a_checkpoint_of_another_configuration_is_refused_as_bad_input(tmp_path):
    """A changed budget under a run id that was checkpointed: refused (a ValueError: the CLI's exit 2),
    saying it is the configuration and not the lake that differs."""
    from dpstream.checkpoint import CheckpointMismatchError, CheckpointPolicy

    X, y = data(rows=5_000)
    policy = CheckpointPolicy(str(tmp_path / "ckpt"))

    def fit_with(epsilon):
        return run(
            AdaSSP(epsilon, 1e-6),
            InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
            num_rows=len(y),
            num_params=X.shape[1],
            initial_params=np.zeros(X.shape[1]),
            checkpoint=policy,
            run_id="changed",
        )

    fit_with(1.0)
    with pytest.raises(
        CheckpointMismatchError, match=r"another configuration \(algorithm, budget or model settings\)"
    ) as refused:
        fit_with(2.0)
    assert isinstance(refused.value, ValueError)


def test_a_user_stream_refuses_a_user_split_across_blocks_even_past_an_empty_one():
    from dpstream.coordinator import UserStream

    def block(users):
        users = np.asarray(users, dtype=np.int64)
        return np.ones((users.size, 2)), np.zeros(users.size), users

    whole = UserStream([block([0, 0, 1]), block([]), block([2, 3, 3])])
    taken = [users.tolist() for _, _, users in whole.take(0, 4)]
    assert taken == [[0, 0, 1], [2, 3, 3]]
    split = UserStream([block([0, 1]), block([]), block([1, 2])])
    with pytest.raises(ValueError, match=r"user 1 follows user 1"):
        list(split.take(0, 3))
