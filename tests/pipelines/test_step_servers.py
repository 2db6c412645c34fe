"""Each worker's step server answers a scatter-gather step in one direct call; a share whose
server fails runs as a task with the same statistics, and a data error still stops the run by name."""

import time

import numpy as np
import pytest

from dpstream.coordinator import InMemoryExecutor
from dpstream.models import LinearRegressionModel
from dpstream.pipelines import DaskExecutor, LakeError, lake_blocks, shuffle_once
from dpstream.pipelines.execution.step_servers import FAILURES_ALLOWED, StepServer, StepServers
from dpstream.pipelines.execution.worker_stats import pieces_stats
from dpstream.pipelines.waiting import live_workers

from .conftest import DIM, flip_data_byte
from .test_executor import ALGORITHMS, fit


class CountingClient:
    """A client that counts what it submits, by function."""

    def __init__(self, client):
        self.client, self.submitted, self.keys = client, [], []

    def submit(self, function, *args, **kwargs):
        self.submitted.append(function)
        future = self.client.submit(function, *args, **kwargs)
        self.keys.append((function, future.key))
        return future

    def __getattr__(self, name):
        return getattr(self.client, name)


def _actors(dask_worker) -> list:
    """The keys of the actors this worker holds."""
    return list(dask_worker.state.actors)


@pytest.fixture()
def manifest(lake, tmp_path):
    return shuffle_once(lake, str(tmp_path / "shuffled"), rows_per_file=3500)


def test_every_step_is_served_without_a_task_and_close_releases_the_servers(manifest, dask_client):
    algorithm = ALGORITHMS[0]  # DP-AMBSSGD: many steps, DP-STAT's statistic rows too
    expected = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    counting = CountingClient(dask_client)
    executor = DaskExecutor(counting, manifest, LinearRegressionModel())
    assert fit(algorithm, executor, manifest).tobytes() == expected.tobytes()
    assert counting.submitted.count(StepServer) == 2  # one server per worker, started once
    assert pieces_stats not in counting.submitted
    # Each worker holds one of them (the cluster is the session's: earlier tests' may come and go).
    ours = {key for function, key in counting.keys if function is StepServer}
    held = dask_client.run(_actors)
    assert all(len(ours & set(keys)) == 1 for keys in held.values()) and len(held) == 2
    executor.close()  # without waiting for the garbage collector (the proxies sit in reference cycles)
    assert _wait_for(lambda: not ours & {key for keys in dask_client.run(_actors).values() for key in keys})


def _wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _break_servers(error: type[Exception] | None) -> None:
    """In a worker: make every server's ``stats`` raise ``error`` (None: mend it)."""
    from dpstream.pipelines.execution.step_servers import StepServer

    if error is not None:
        StepServer.working = StepServer.stats
        StepServer.stats = lambda self, *args: _refuse(error)
    else:
        StepServer.stats = StepServer.working


def _refuse(error: type[Exception]):
    raise error("this server is broken")


# TimeoutError: an object store's read timeout is one, and must not read as the poll's own timeout.
@pytest.mark.parametrize("error", [RuntimeError, TimeoutError])
def test_a_share_whose_server_fails_runs_as_a_task_with_the_same_statistics(manifest, dask_client, error):
    algorithm = ALGORITHMS[2]  # DP-λCGD
    expected = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    counting = CountingClient(dask_client)
    executor = DaskExecutor(counting, manifest, LinearRegressionModel())
    dask_client.run(_break_servers, error)
    try:
        assert fit(algorithm, executor, manifest).tobytes() == expected.tobytes()
    finally:
        dask_client.run(_break_servers, None)
    steps = algorithm.plan(manifest.num_rows, DIM).num_steps
    assert counting.submitted.count(pieces_stats) >= steps  # every step fell back, and none failed
    # Each worker's server was tried FAILURES_ALLOWED times, then its shares went straight to tasks.
    assert counting.submitted.count(StepServer) == 2 * FAILURES_ALLOWED < steps


def test_a_corrupt_block_stops_a_served_run_naming_the_part(manifest, dask_client):
    path = manifest.paths()[1]
    flip_data_byte(path)
    counting = CountingClient(dask_client)
    with pytest.raises(LakeError, match="part-00001.parquet: a page of row group 0 fails its checksum"):
        fit(ALGORITHMS[3], DaskExecutor(counting, manifest, LinearRegressionModel()), manifest)
    assert StepServer in counting.submitted and pieces_stats in counting.submitted  # served, then a task


def test_a_warm_up_for_a_lost_server_falls_to_a_task(dask_client):
    """A worker with no piece of a step is asked to decode the next step's blocks by its server; a proxy
    whose worker was lost raises as it is called: the server is forgotten and a task does it instead."""

    class LostProxy:
        def warm(self, blocks):
            raise RuntimeError("Worker holding Actor was lost.  Status: error")

    servers = StepServers(dask_client, None, LinearRegressionModel(), "")
    worker = live_workers(dask_client)[0]
    servers._servers[worker] = LostProxy()
    assert servers.warm(worker, []) is False and servers.warm(worker, []) is False


def test_servers_answer_through_the_runs_client_when_another_is_the_default(dask_client):
    """A flow may hold another cluster's client (a Prefect task runner's), created after the run's and closed
    during the run: a server's proxy is bound to the run's client, not to the process's default one."""
    from distributed import Client, LocalCluster

    other = LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    other_client = Client(other)  # the newest client: the process's default
    servers = StepServers(dask_client, None, LinearRegressionModel(), "")
    worker = live_workers(dask_client)[0]
    try:
        assert servers.round_trip_seconds(worker, 2) is not None
    finally:
        other_client.close()
        other.close()
    assert servers.round_trip_seconds(worker, 2) is not None  # the same server, still answering
    assert servers.server(worker) is not None
    servers.close()


def test_an_adaptive_cluster_runs_its_steps_as_tasks_and_scales_up_from_no_worker(manifest):
    """A cluster this process scales adaptively counts only tasks as load and cannot retire a worker that
    holds an actor gracefully: its steps run as tasks, whose pending state is also what makes it start a
    first worker (for the mode probe as for the steps). Same statistics bit for bit."""
    from distributed import Client, LocalCluster

    from dpstream.models import StatsRequest
    from dpstream.pipelines import choose_mode

    algorithm = ALGORITHMS[2]
    expected = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    with LocalCluster(n_workers=0, threads_per_worker=1, dashboard_address=None) as cluster:
        cluster.adapt(minimum=0, maximum=1, interval="200ms")
        with Client(cluster) as client:
            plan = algorithm.plan(manifest.num_rows, DIM)
            request = StatsRequest(np.zeros(DIM), clip_norms=np.ones(1))
            assert choose_mode(client, plan, LinearRegressionModel(), request, DIM, worker_timeout=60) in (
                "scatter",
                "streaming",
            )
            counting = CountingClient(client)
            executor = DaskExecutor(counting, manifest, LinearRegressionModel(), worker_timeout=60)
            assert fit(algorithm, executor, manifest).tobytes() == expected.tobytes()
    assert StepServer not in counting.submitted and pieces_stats in counting.submitted
