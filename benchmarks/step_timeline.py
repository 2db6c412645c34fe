"""Where a DP-AMBSSGD run's steps spend their time on the data-plane cluster: each worker's
step server (a Dask actor, ``pipelines.step_servers``) against a Dask task per worker and step.

``python -m benchmarks.step_timeline``: first the median round trip of an empty step (a no-op task per worker,
then an empty call to each worker's server), then shuffles ``benchmarks.data_plane``'s lake (8 M rows × 64 float32
in 40 files, written there if missing) and trains DP-AMBSSGD (window of 5 candidates, scatter-gather)
on 2 single-threaded workers, 3 rounds, each round once with tasks only and once with the step servers,
alternately. Per run it prints the wall time and its ratio to the plain 2-process decode of the same parts
(``data_plane.plain_decode_seconds``), the median milliseconds per step in the coordinator, and the CPU
seconds of every process of the cluster (this one holds the scheduler and the client) against the two
cores' wall; with tasks, from Dask's task stream, the median milliseconds from submitting a step to its
first task's start and from its last task's end to the result in the coordinator.
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np


def main() -> None:
    import psutil
    from distributed import get_task_stream

    from benchmarks.data_plane import (
        ROOT,
        ROWS,
        SPEC_COLUMNS,
        _warm_kernels,
        plain_decode_seconds,
        write_source,
    )
    from dpstream.algorithms import DPAMBSSGD
    from dpstream.coordinator import execute
    from dpstream.models import LinearRegressionModel
    from dpstream.noise import NoiseKey
    from dpstream.pipelines import DaskExecutor, LakeSpec, connect, plan_on_lake, shuffle_once

    spec = LakeSpec(write_source(), SPEC_COLUMNS, "y")
    client = connect(n_workers=2, memory_limit="2GiB")
    target = os.path.join(ROOT, "step-timeline")
    shutil.rmtree(target, ignore_errors=True)
    steps: list[tuple[float, float]] = []

    class TimedExecutor(DaskExecutor):
        def compute(self, span, request):
            start = time.time()
            result = super().compute(span, request)
            steps.append((start, time.time()))
            return result

    try:
        print(_empty_round_trips(client), flush=True)
        manifest = shuffle_once(spec, target, rows_per_file=ROWS, client=client)
        plain = plain_decode_seconds(manifest.paths(), (*SPEC_COLUMNS, "y"))
        client.run(_warm_kernels)
        walls: dict[str, list[float]] = {"tasks": [], "servers": []}
        for run in range(3):
            for path in walls:
                steps.clear()
                model = LinearRegressionModel()
                plan = plan_on_lake(
                    manifest, DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm"), model
                )
                processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
                cpu_before = [sum(p.cpu_times()[:2]) for p in processes]
                with get_task_stream(client) as stream:
                    start = time.time()
                    executor = TimedExecutor(client, manifest, model, servers=path == "servers")
                    try:
                        execute(
                            plan,
                            executor,
                            initial_params=model.init_params(manifest.num_features),
                            key=NoiseKey.generate(),
                            lake=manifest.row_order,
                        )
                    finally:
                        executor.close()
                    wall = time.time() - start
                walls[path].append(wall)
                cpu = sum(
                    sum(p.cpu_times()[:2]) - before for p, before in zip(processes, cpu_before, strict=True)
                )
                main_cpu = sum(processes[0].cpu_times()[:2]) - cpu_before[0]
                line = (
                    f"round {run + 1}, {path}: {len(steps)} steps in {wall:.2f} s (plain decode {plain:.2f} s, "
                    f"ratio {plain / wall:.2f}); step median {1e3 * np.median([b - a for a, b in steps]):.1f} ms; "
                    f"CPU {cpu:.2f} s of {2 * wall:.2f} on 2 cores ({cpu / (2 * wall):.0%}), scheduler and "
                    f"client {main_cpu:.2f} s"
                )
                if path == "tasks":
                    line += _task_gaps(stream.data, steps)
                print(line, flush=True)
        ratios = {path: plain / np.median(values) for path, values in walls.items()}
        print(
            f"median of 3: tasks {np.median(walls['tasks']):.2f} s (ratio {ratios['tasks']:.2f}), servers "
            f"{np.median(walls['servers']):.2f} s (ratio {ratios['servers']:.2f})",
            flush=True,
        )
    finally:
        client.close()
        shutil.rmtree(target, ignore_errors=True)


def _empty_round_trips(client, samples: int = 200) -> str:
    """Median milliseconds of an empty task on each worker against an empty call to each step server."""
    from dpstream.models import LinearRegressionModel
    from dpstream.pipelines.execution.step_servers import StepServers
    from dpstream.pipelines.waiting import live_workers

    workers = live_workers(client)
    tasks = []
    for _ in range(samples):
        start = time.perf_counter()
        client.gather([client.submit(_nothing, workers=[worker], pure=False) for worker in workers])
        tasks.append(time.perf_counter() - start)
    servers = StepServers(client, None, LinearRegressionModel(), "")
    try:
        calls = [servers.server(worker) for worker in workers]
        server_calls = []
        for _ in range(samples):
            start = time.perf_counter()
            for call in [server.ping() for server in calls]:
                call.result()
            server_calls.append(time.perf_counter() - start)
    finally:
        servers.close()
    return (
        f"an empty step on {len(workers)} workers, median of {samples}: tasks {1e3 * np.median(tasks):.1f} ms, "
        f"step servers {1e3 * np.median(server_calls):.1f} ms"
    )


def _nothing() -> None:
    return None


def _task_gaps(stream: list[dict], steps: list[tuple[float, float]]) -> str:
    """Per step, from the task stream: submit → first task start, last task end → result."""
    tasks = [
        (part["start"], part["stop"])
        for task in stream
        for part in task["startstops"]
        if part["action"] == "compute"
    ]
    to_start, to_result = [], []
    for begin, end in steps:
        inside = [(a, b) for a, b in tasks if a >= begin and b <= end]
        if inside:
            to_start.append(min(a for a, _ in inside) - begin)
            to_result.append(end - max(b for _, b in inside))
    return (
        f"; submit → first task {1e3 * np.median(to_start):.1f} ms, last task → result "
        f"{1e3 * np.median(to_result):.1f} ms (sums {sum(to_start):.2f} and {sum(to_result):.2f} s)"
    )


if __name__ == "__main__":
    main()
