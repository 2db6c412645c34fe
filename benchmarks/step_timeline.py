"""Where a DP-AMBSSGD run's steps spend their time on the data-plane cluster (issue 34).

``python -m benchmarks.step_timeline``: shuffles ``benchmarks.data_plane``'s lake (8 M rows × 64 float32
in 40 files, written there if missing) and trains DP-AMBSSGD (window of 5 candidates, scatter-gather)
on 2 single-threaded workers, 3 times. Per run it prints the wall time, the plain 2-process decode of
the same parts (``data_plane.plain_decode_seconds``), and, from Dask's task stream and the
coordinator's step times: the median milliseconds per step from submitting a step to its first task's
start and from its last task's end to the result in the coordinator, their sums over the run, and the
CPU seconds of every process of the cluster (this one holds the scheduler and the client) against the
two cores' wall.
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
    from dpstream.models import LinearRegressionModel
    from dpstream.noise import NoiseKey
    from dpstream.pipelines import LakeSpec, connect, executor, plan_on_lake, shuffle_once, train_on_lake

    spec = LakeSpec(write_source(), SPEC_COLUMNS, "y")
    client = connect(n_workers=2, memory_limit="2GiB")
    target = os.path.join(ROOT, "step-timeline")
    shutil.rmtree(target, ignore_errors=True)
    steps: list[tuple[float, float]] = []
    compute = executor.DaskExecutor.compute

    def timed(self, span, request):
        start = time.time()
        result = compute(self, span, request)
        steps.append((start, time.time()))
        return result

    executor.DaskExecutor.compute = timed
    try:
        manifest = shuffle_once(spec, target, rows_per_file=ROWS, client=client)
        plain = plain_decode_seconds(manifest.paths(), (*SPEC_COLUMNS, "y"))
        client.run(_warm_kernels)
        for run in range(3):
            steps.clear()
            plan = plan_on_lake(
                manifest, DPAMBSSGD(1.0, 1e-6, bound=1e4, statistic="gradient_norm"), LinearRegressionModel()
            )
            processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
            cpu_before = [sum(p.cpu_times()[:2]) for p in processes]
            with get_task_stream(client) as stream:
                start = time.time()
                train_on_lake(manifest, plan, client, NoiseKey.generate(), mode="scatter")
                wall = time.time() - start
            cpu = sum(
                sum(p.cpu_times()[:2]) - before for p, before in zip(processes, cpu_before, strict=True)
            )
            main_cpu = sum(processes[0].cpu_times()[:2]) - cpu_before[0]
            tasks = [
                (part["start"], part["stop"])
                for task in stream.data
                for part in task["startstops"]
                if part["action"] == "compute"
            ]
            to_start, to_result = [], []
            for begin, end in steps:
                inside = [(a, b) for a, b in tasks if a >= begin and b <= end]
                if inside:
                    to_start.append(min(a for a, _ in inside) - begin)
                    to_result.append(end - max(b for _, b in inside))
            print(
                f"run {run + 1}: {len(steps)} steps in {wall:.2f} s (plain decode {plain:.2f} s, ratio "
                f"{plain / wall:.2f}); per step, median: submit → first task {1e3 * np.median(to_start):.1f} ms, "
                f"last task → result {1e3 * np.median(to_result):.1f} ms (sums {sum(to_start):.2f} and "
                f"{sum(to_result):.2f} s); CPU {cpu:.2f} s of {2 * wall:.2f} on 2 cores "
                f"({cpu / (2 * wall):.0%}), scheduler and client {main_cpu:.2f} s",
                flush=True,
            )
    finally:
        executor.DaskExecutor.compute = compute
        client.close()
        shutil.rmtree(target, ignore_errors=True)


if __name__ == "__main__":
    main()
