"""The Dask executor equals the in-memory coordinator bit-for-bit; lakes on S3; external scheduler."""

import os
import socket
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.algorithms import DPAMBSSGD, DPSGD, AdaSSP
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import KANModel, LinearRegressionModel
from dpstream.noise import NoiseKey, make_noise_process
from dpstream.pipelines import DaskExecutor, lake_blocks, plan_on_lake, shuffle_once, train_on_lake

from .conftest import DIM, W_STAR, feature_spec, write_lake

KEY = NoiseKey.from_secret(b"e" * 32)
ALGORITHMS = [
    DPAMBSSGD(1.0, 1e-6, bound=1e3, statistic="gradient_norm", hessian_norm=1.0),  # isotropic test features
    # A one-candidate window: every step whose ζ moves takes the follow-up round trip.
    DPAMBSSGD(1.0, 1e-6, bound=1e3, statistic="gradient_norm", hessian_norm=1.0, candidate_window=0),
    DPSGD(
        1.0,
        1e-6,
        clip_norm=4.0,
        learning_rate=0.5,
        batch_size=1500,
        noise=make_noise_process("lambda", correlation=0.5),
    ),
    AdaSSP(4.0, 1e-6, row_norm_bound=6.0, label_bound=5.0),  # one task per block, one merge, no steps
]


def algorithm_id(algorithm):
    window = getattr(algorithm, "candidate_window", None)
    return algorithm.name + ("" if window in (None, 2) else f"-window{window}")


def fit(algorithm, executor, manifest):
    return run(
        algorithm, executor, num_rows=manifest.num_rows, num_params=DIM, initial_params=np.zeros(DIM), key=KEY
    ).params


@pytest.fixture()
def manifest(lake, tmp_path):
    return shuffle_once(lake, str(tmp_path / "shuffled"), rows_per_file=3500)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=algorithm_id)
def test_local_cluster_equals_in_memory_bit_for_bit(algorithm, manifest, dask_client):
    in_memory = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    executor = CountingDaskExecutor(dask_client, manifest, LinearRegressionModel())
    distributed = fit(algorithm, executor, manifest)
    assert distributed.tobytes() == in_memory.tobytes()
    assert np.abs(distributed - W_STAR).max() < 0.1  # and it learned
    if getattr(algorithm, "candidate_window", None) == 0:
        assert executor.calls > algorithm.plan(manifest.num_rows, DIM).num_steps  # follow-ups ran here


class CountingDaskExecutor(DaskExecutor):
    calls = 0

    def compute(self, span, request):
        self.calls += 1
        return super().compute(span, request)


def s3_put(fs):
    def put(path, table):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        fs.pipe_file(path, sink.getvalue().to_pybytes())

    return put


def test_s3_lake_shuffle_and_train(s3_bucket, dask_client):
    import s3fs

    url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    write_lake(s3_put(fs), f"{url[5:]}/raw", files=3, rows=4000)
    spec = feature_spec(f"{url}/raw", **options)
    manifest = shuffle_once(spec, f"{url}/shuffled", rows_per_file=5000, client=dask_client)
    assert manifest.num_rows == 12_000 and len(manifest.files) == 3
    assert fs.exists(f"{url[5:]}/shuffled/_generations/000001.json")
    algorithm = ALGORITHMS[0]
    distributed = fit(
        algorithm, DaskExecutor(dask_client, manifest, LinearRegressionModel(), options), manifest
    )
    in_memory = fit(
        algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest, options)), manifest
    )
    assert distributed.tobytes() == in_memory.tobytes()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def external_cluster(tmp_path):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1, stopped after the test."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    processes = [
        subprocess.Popen(
            dask + ["--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    for n in range(2):
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--memory-limit",
                    "1GiB",
                    "--local-directory",
                    str(tmp_path / f"w{n}"),
                    "--dashboard-address",
                    ":0",
                    "--host",
                    "127.0.0.1",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        )
    from distributed import Client

    client = Client(address, timeout=60)
    try:
        client.wait_for_workers(2, timeout=120)
        yield client
    finally:
        client.close()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def test_external_scheduler_equals_in_memory(manifest, external_cluster):
    assert len(external_cluster.scheduler_info()["workers"]) == 2
    algorithm = ALGORITHMS[1]
    in_memory = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    distributed = fit(algorithm, DaskExecutor(external_cluster, manifest, LinearRegressionModel()), manifest)
    assert distributed.tobytes() == in_memory.tobytes()


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=algorithm_id)
def test_streaming_mode_equals_in_memory(algorithm, manifest, dask_client):

    in_memory = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    result, mode = train_on_lake(
        manifest,
        plan_on_lake(manifest, algorithm, LinearRegressionModel()),
        dask_client,
        KEY,
        mode="streaming",
        prefetch_blocks=1,
    )
    assert mode == "streaming"
    assert result.params.tobytes() == in_memory.tobytes()


def test_auto_mode_picks_by_batch_size(manifest, dask_client):

    small = DPSGD(1.0, 1e-6, clip_norm=4.0, learning_rate=0.5, batch_size=16)
    _, mode = train_on_lake(
        manifest, plan_on_lake(manifest, small, LinearRegressionModel()), dask_client, KEY
    )
    assert mode == "streaming"
    from dpstream.models import StatsRequest
    from dpstream.pipelines import choose_mode

    # Steps of 5,000,000 rows (a 10⁸-row lake) cost seconds each against a round trip of milliseconds.
    plan = DPSGD(1.0, 1e-6, clip_norm=4.0, learning_rate=0.5, batch_size=5_000_000).plan(10**8, DIM)
    request = StatsRequest(np.zeros(DIM), clip_norms=np.ones(31))
    assert choose_mode(dask_client, plan, LinearRegressionModel(), request, DIM) == "scatter"
    with pytest.raises(ValueError, match="mode must be one of"):
        train_on_lake(
            manifest, plan_on_lake(manifest, small, LinearRegressionModel()), dask_client, KEY, mode="fast"
        )


def test_connect_owns_its_local_cluster():
    from dpstream.pipelines import connect

    client = connect(n_workers=1, memory_limit="1GiB")
    try:
        assert len(client.scheduler_info()["workers"]) == 1
        assert client.submit(sum, [1, 2, 3]).result() == 6
    finally:
        client.close()
    assert client.cluster.status.name in ("closed", "closing")


def test_many_row_groups_per_file(lake, tmp_path, dask_client, monkeypatch):
    import dpstream.pipelines.shuffle.rows as shuffle_module

    monkeypatch.setattr(shuffle_module, "ROW_GROUP_ROWS", 1000)
    manifest = shuffle_once(
        lake, str(tmp_path / "groups"), rows_per_file=7000
    )  # in-process: the patch applies
    # 20,000 rows in 3 files of 6,667 / 6,667 / 6,666, each in 7 equal row groups of at most 1,000
    assert manifest.row_groups[0] == (953,) * 6 + (949,) and manifest.row_groups[2] == (953,) * 6 + (948,)
    assert sum(rows for *_, rows in manifest.blocks()) == 20_000 and len(manifest.blocks()) == 21
    for algorithm in ALGORITHMS:
        in_memory = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
        distributed = fit(algorithm, DaskExecutor(dask_client, manifest, LinearRegressionModel()), manifest)
        assert distributed.tobytes() == in_memory.tobytes()

    class CountingClient:  # the scheduler's cost is per task: a step must not cost one per row group
        def __init__(self, client):
            self.client, self.submits = client, 0

        def submit(self, *args, **kwargs):
            self.submits += 1
            return self.client.submit(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.client, name)

    counting = CountingClient(dask_client)
    adassp = ALGORITHMS[-1]  # one step over all 21 row groups
    assert fit(adassp, DaskExecutor(counting, manifest, LinearRegressionModel()), manifest).tobytes() == (
        fit(adassp, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest).tobytes()
    )
    assert counting.submits == len(dask_client.scheduler_info()["workers"]) == 2


def _count_block_reads() -> None:
    """In a worker: count the blocks this process reads and decodes (``executor.read_block``)."""
    from dpstream.pipelines.execution import worker_stats as executor

    original = executor.read_block

    def counted(*args, **kwargs):
        executor.BLOCK_READS = getattr(executor, "BLOCK_READS", 0) + 1
        return original(*args, **kwargs)

    executor.read_block, executor.BLOCK_READS, executor.UNCOUNTED = counted, 0, original


def _block_reads() -> int:
    """In a worker: the blocks read since ``_count_block_reads``, which it then undoes (the workers
    outlive this test)."""
    from dpstream.pipelines.execution import worker_stats as executor

    executor.read_block = executor.UNCOUNTED
    return executor.BLOCK_READS


def test_the_next_steps_blocks_are_decoded_at_the_end_of_a_step_once(lake, tmp_path, dask_client):
    """A step's task decodes the next step's blocks on a background thread after returning its
    statistics (no prefetch task of its own while it has pieces: on 2 cores the scheduler's and the
    client's cost per task was a third of the step); the statistics are unchanged bit for bit, and
    every block is still read and decoded once by the whole cluster (a block the next step asks for while
    the thread decodes it is waited for, not decoded twice)."""
    manifest = shuffle_once(lake, str(tmp_path / "prefetch"), rows_per_file=2000)
    algorithm = ALGORITHMS[0]
    expected = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    dask_client.run(_count_block_reads)
    try:
        counting = CountingDaskExecutor(dask_client, manifest, LinearRegressionModel())
        assert fit(algorithm, counting, manifest).tobytes() == expected.tobytes()
    finally:
        reads = sum(dask_client.run(_block_reads).values())
    assert reads == len(manifest.blocks()) == 10
    assert counting.calls >= 5  # several steps, each prefetching the next


def test_a_block_is_loaded_once_however_many_threads_ask():
    """The workers' cache (``LruCache``): a thread asking for a block being decoded waits for that
    decode; a failed load is not cached, so the next asker loads (and reports) it itself."""
    import threading
    import time

    from dpstream.pipelines.lake.blocks import LruCache

    cache, loads, release = LruCache(2), [], threading.Event()

    def slow_load():
        loads.append(1)
        release.wait(5)
        return "block"

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("a", slow_load))) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(5)
    assert results == ["block"] * 4 and len(loads) == 1

    def failing():
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        cache.get("b", failing)
    assert cache.get("b", lambda: "read again") == "read again"


def test_durable_training_on_a_lake_resumes_from_its_checkpoint(manifest, dask_client, tmp_path):
    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore
    from dpstream.privacy import Ledger, LifetimeBudget

    algorithm = ALGORITHMS[1]
    policy = CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=4)
    lake = Ledger(str(tmp_path / "ledger")).lake(manifest.fingerprint, LifetimeBudget(5.0, 1e-6))
    first, _ = train_on_lake(
        manifest,
        plan_on_lake(manifest, algorithm, LinearRegressionModel(), policy),
        dask_client,
        mode="scatter",
        run_id="lake-run",
        ledger=lake,
    )
    saved = CheckpointStore(policy).load("lake-run")
    assert saved.step == len(first.training_loss)
    again, _ = train_on_lake(
        manifest,
        plan_on_lake(manifest, algorithm, LinearRegressionModel(), policy),
        dask_client,
        mode="streaming",
        run_id="lake-run",
        ledger=lake,
    )  # complete: nothing left to run
    assert again.params.tobytes() == first.params.tobytes()
    assert [e.status for e in lake.entries()] == ["committed"]
    reference = run(
        algorithm,
        InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)),
        num_rows=manifest.num_rows,
        num_params=DIM,
        initial_params=np.zeros(DIM),
        key=saved.key,
    ).params
    assert first.params.tobytes() == reference.tobytes()  # same key, same data order: bit-for-bit


def test_a_checkpoint_never_resumes_on_another_shuffle_of_the_lake(lake, manifest, dask_client, tmp_path):
    """After a reshuffle, the steps left would read rows the first steps already used: refused."""
    from dpstream.checkpoint import CheckpointError, CheckpointPolicy

    policy = CheckpointPolicy(str(tmp_path / "ckpt"), every_steps=4)
    train_on_lake(
        manifest,
        plan_on_lake(manifest, ALGORITHMS[1], LinearRegressionModel(), policy),
        dask_client,
        mode="streaming",
        run_id="r",
    )
    reshuffled = shuffle_once(lake, manifest.url, rows_per_file=3500, reshuffle=True)
    assert reshuffled.fingerprint == manifest.fingerprint  # same data: the ledger's unit is unchanged
    with pytest.raises(
        CheckpointError,
        match=r"written for another lake or shuffle of it \(it read .*: another configuration, lake, shuffle",
    ):
        train_on_lake(
            reshuffled,
            plan_on_lake(reshuffled, ALGORITHMS[1], LinearRegressionModel(), policy),
            dask_client,
            mode="streaming",
            run_id="r",
        )


@pytest.mark.parametrize("mode", ["scatter", "streaming"])
def test_kan_through_the_cluster_equals_in_memory(manifest, dask_client, mode):
    """The KAN uses the same model interface: shipped to the workers, the in-memory fit to within 4 units
    in the last place. OpenBLAS's last bit depends on the alignment of a process's temporaries
    (``dpstream.pipelines.execution.cluster``): on a loaded machine one parameter once differed
    by one ulp. A retried step, in its own process, is compared bit for bit elsewhere."""
    model = KANModel(num_hidden=8, grid_size=4, feature_low=-4.0, feature_high=4.0)
    algorithm = DPSGD(
        1.0,
        1e-6,
        clip_norm=1.0,
        learning_rate=1.0,
        batch_size=1000,
        noise=make_noise_process("lambda", correlation=0.5),
    )
    dim = model.num_params(DIM)
    in_memory = run(
        algorithm,
        InMemoryExecutor(model, lake_blocks(manifest)),
        num_rows=manifest.num_rows,
        num_params=dim,
        initial_params=model.init_params(DIM),
        key=KEY,
    ).params
    result, used = train_on_lake(
        manifest, plan_on_lake(manifest, algorithm, model), dask_client, KEY, mode=mode
    )
    assert used == mode
    np.testing.assert_array_max_ulp(result.params, in_memory, maxulp=4)
    assert not np.array_equal(result.params, model.init_params(DIM))  # it moved


@pytest.mark.parametrize("kind", ["linear", "logistic", "kan"])
def test_auto_mode_runs_every_model_kind(kind, manifest, dask_client):
    """``choose_mode`` probes with the lake's feature count, not the model's parameter count (the KAN
    has m·d·p parameters; its probe used to be built with that many columns and failed)."""
    from dpstream.models import LogisticRegressionModel

    model = {
        "linear": LinearRegressionModel(),
        "logistic": LogisticRegressionModel(),
        "kan": KANModel(num_hidden=4, grid_size=3, feature_low=-4.0, feature_high=4.0),
    }[kind]
    algorithm = DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.5, batch_size=500)
    result, mode = train_on_lake(
        manifest, plan_on_lake(manifest, algorithm, model), dask_client, KEY, mode="auto"
    )
    assert mode in ("scatter", "streaming")
    assert result.params.shape == (model.num_params(DIM),) and np.isfinite(result.params).all()


def test_a_reshuffle_never_changes_what_a_pinned_generation_reads(lake, tmp_path):
    """A reshuffle writes a new generation under new paths: a run pinned to the first one reads the same rows
    after it (a fresh read, not a cached one, checked against the part's identity), never the new ones."""
    from dpstream.models import StatsRequest
    from dpstream.pipelines.execution.worker_stats import slice_stats

    model, request = LinearRegressionModel(), StatsRequest(params=np.zeros(DIM))
    first = shuffle_once(lake, str(tmp_path / "s"), rows_per_file=3500)
    _, path, group, _ = first.blocks()[0]
    check = first.part_checks()[path]
    before = slice_stats(
        path, group, first.spec(), 0, 500, model, request, "gradient", first.row_order, check
    )
    second = shuffle_once(lake, str(tmp_path / "s"), rows_per_file=3500, reshuffle=True)
    assert second.paths()[0] != path and second.row_order != first.row_order
    again = slice_stats(path, group, first.spec(), 0, 500, model, request, "gradient", "uncached", check)
    assert again.clipped_sums.tobytes() == before.clipped_sums.tobytes()
    X, y = next(lake_blocks(second))
    after = model.block_stats(X[:500], y[:500], request)
    assert after.clipped_sums.tobytes() != before.clipped_sums.tobytes()


def test_streaming_decodes_in_this_process_in_lake_order(manifest):
    """Streaming's blocks are decoded by reader threads of the coordinator, not shipped from
    the workers: the same blocks as lake_blocks, in order, 64-byte aligned, with no cluster at all; a
    stream stopped early does not wait for the blocks it drops."""
    from dpstream.pipelines import prefetched_blocks

    reference = list(lake_blocks(manifest))
    streamed = list(prefetched_blocks(None, manifest, prefetch_blocks=3, decode_threads=2))
    assert len(streamed) == len(reference) > 3
    for (X, y), (X_ref, y_ref) in zip(streamed, reference, strict=True):
        assert X.tobytes() == X_ref.tobytes() and y.tobytes() == y_ref.tobytes()
        assert X.ctypes.data % 64 == 0 and y.ctypes.data % 64 == 0
    stream = prefetched_blocks(None, manifest, prefetch_blocks=2)
    next(stream)
    stream.close()
    with pytest.raises(ValueError, match="decode_threads must be a positive integer"):
        next(prefetched_blocks(None, manifest, decode_threads=0))
