"""A Dask worker killed during training: the run completes with the same model."""

import os
import signal

from dpstream.coordinator import InMemoryExecutor
from dpstream.models import LinearRegressionModel
from dpstream.pipelines import DaskExecutor, lake_blocks, shuffle_once

from .test_executor import ALGORITHMS, fit


def test_killed_worker_is_replaced_and_the_model_is_unchanged(lake, tmp_path):
    from distributed import Client, LocalCluster

    manifest = shuffle_once(lake, str(tmp_path / "shuffled"), rows_per_file=3500)
    algorithm = ALGORITHMS[1]  # DP-λCGD: 13 steps
    reference = fit(algorithm, InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)), manifest)
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="1GiB"
    )
    client = Client(cluster)
    try:
        before = set(client.run(os.getpid).values())
        victim = sorted(before)[0]
        executor = DaskExecutor(client, manifest, LinearRegressionModel())
        original = executor.compute
        killed = []

        def compute(span, request):
            if (
                span.step == 4 and not killed
            ):  # SIGKILL a worker holding this step's blocks, then ask for the step
                os.kill(victim, signal.SIGKILL)  # (once: a step may ask twice, for DP-STAT's follow-up)
                killed.append(victim)
            return original(span, request)

        executor.compute = compute
        params = fit(algorithm, executor, manifest)
        client.wait_for_workers(2, timeout=60)
        after = set(client.run(os.getpid).values())
    finally:
        client.close()
        cluster.close()
    assert victim not in after and len(after) == 2  # the nanny replaced the killed process
    assert params.tobytes() == reference.tobytes()
