"""`make bench-scale`: a lake 20× the workers' memory, end to end through the CLI.

Lake: ``--rows`` (default 2·10⁸) rows × 16 float32 features in their own units (means from 1 to 50,000,
standard deviations a third of the mean) and a float64 label ``y`` (a linear function of the standardized
features plus noise), in Parquet files of 1,000,000 rows written with pyarrow's defaults (snappy): 14.4 GB
at 2·10⁸ rows. The config prepares it with public ranges (``[preprocess.bounds]``, mean ± 5 sd), as a
user's lake in its own units would be. A classification lake of a quarter of the rows has a 0/1 label
``churned`` drawn from a logistic model of the same features.

Cluster: one ``dask scheduler`` and two ``dask worker --nthreads 1 --memory-limit LIMIT`` processes (with
their nannies), the deployment of a real cluster; every stage runs on it, and the train flows report to
a ``prefect server start`` on loopback (as a deployment's would, instead of an ephemeral API per
command). Stages, each a ``dpstream`` command timed from the shell (start-up included): ``validate``,
``shuffle``, ``train`` with AdaSSP (``algorithm.name = "ssp"``) and with DP-AMBSSGD, and ``predict`` of
the whole raw lake, at ε = 1,
δ = 10⁻⁹ (replace-one, row level). The classification lake adds ``validate``/``shuffle``/``train`` with
DP-AMBSSGD on a logistic model.

References measured in the same run on the same lakes: the plain decode (whole files, one pyarrow thread
each, a ``multiprocessing`` pool of as many processes as workers; ``benchmarks.data_plane.plain_decode``'s
method) of the shuffled lake (for training) and of the raw lake (for validate, shuffle and predict); the
peer, dask-ml's non-private ``LinearRegression`` / ``LogisticRegression`` (L-BFGS, ``--peer-iterations``
passes at most) on the shuffled lake's prepared columns through the same scheduler and workers. Held-out
quality on a separately generated 1,000,000-row lake: RMSE in the label's units against the constant
predictor (the training labels' mean), accuracy against the majority class.

Per stage: wall time, rows/s, ratio to the plain decode of the lake it reads, peak RSS of each worker
(sampled every 0.2 s), and the disk the lake folders hold. Results go to stdout as markdown and to
``.bench/scale/results.json``.

Run: ``make bench-scale`` (``python -m benchmarks.scale``; about an hour at 2·10⁸ rows on 2 cores, ~45 GB
of disk at the shuffle's peak). ``--rows 4000000`` is a quick check of the whole path.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import RssSampler, markdown_table
from benchmarks.data_plane import plain_decode_seconds

ROOT = Path(__file__).resolve().parent.parent / ".bench" / "scale"
DPSTREAM = Path(sys.executable).parent / "dpstream"
DASK = Path(sys.executable).parent / "dask"
FEATURES = tuple(f"f{j:02d}" for j in range(16))
MEANS = np.array([(10.0 ** (j % 5)) * (1 + j // 5) for j in range(16)])  # 1 … 40,000: mixed units
SCALES = MEANS / 3
WEIGHTS = np.linspace(-1.0, 1.0, 16)
LABEL_MEAN, LABEL_SIGNAL, LABEL_NOISE = 100.0, 20.0, 20.0
LABEL_SD = float(np.hypot(LABEL_SIGNAL * np.linalg.norm(WEIGHTS), LABEL_NOISE))
ROWS_PER_SOURCE_FILE = 1_000_000
HOLDOUT_ROWS = 1_000_000


def _write_file(arguments: tuple[str, int, int, str]) -> int:
    """One source file of ``rows`` rows drawn with seed ``seed``: features in their own units and the
    regression label ``y``, or the 0/1 label ``churned`` for ``task == "classification"``."""
    path, rows, seed, task = arguments
    rng = np.random.default_rng(seed)
    standard = rng.standard_normal((rows, len(FEATURES)), dtype=np.float32)
    columns = {
        name: (standard[:, j] * np.float32(SCALES[j]) + np.float32(MEANS[j]))
        for j, name in enumerate(FEATURES)
    }
    margin = standard @ WEIGHTS.astype(np.float32)
    if task == "regression":
        columns["y"] = (
            LABEL_MEAN + LABEL_SIGNAL * margin.astype(np.float64) + LABEL_NOISE * rng.standard_normal(rows)
        )
    else:
        columns["churned"] = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(np.int8)
    temporary = f"{path}.partial"
    pq.write_table(pa.table(columns), temporary)
    os.replace(temporary, path)
    return rows


def write_lake(folder: Path, rows: int, task: str, seed: int, processes: int) -> float:
    """The lake's files under ``folder`` (kept between runs: a complete lake is not rewritten); seconds."""
    files = max(1, -(-rows // ROWS_PER_SOURCE_FILE))
    jobs = []
    for index in range(files):
        count = min(ROWS_PER_SOURCE_FILE, rows - index * ROWS_PER_SOURCE_FILE)
        path = folder / f"part-{index:05d}.parquet"
        if not path.exists():
            jobs.append((str(path), count, seed * 1_000_003 + index, task))
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if jobs:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            pool.map(_write_file, jobs, chunksize=1)
    return time.perf_counter() - start


def bounds() -> dict[str, list[float]]:
    """The public ranges the config declares: mean ± 5 standard deviations (documented, never measured)."""
    ranges = {
        name: [float(MEANS[j] - 5 * SCALES[j]), float(MEANS[j] + 5 * SCALES[j])]
        for j, name in enumerate(FEATURES)
    }
    ranges["y"] = [LABEL_MEAN - 5 * LABEL_SD, LABEL_MEAN + 5 * LABEL_SD]
    return ranges


def write_config(path: Path, lake: Path, shuffled: Path, task: str, algorithm: str, scheduler: str) -> Path:
    label, kind = ("y", "linear") if task == "regression" else ("churned", "logistic")
    ranges = bounds()
    lines = [
        "[lake]",
        f'url = "{lake}"',
        f"features = {json.dumps(list(FEATURES))}",
        f'label = "{label}"',
        f'shuffled_url = "{shuffled}"',
        "",
        "[preprocess.bounds]",
        *(f"{name} = {json.dumps(ranges[name])}" for name in (*FEATURES, *(["y"] if label == "y" else []))),
        "",
        "[model]",
        f'kind = "{kind}"',
        "",
        "[algorithm]",
        f'name = "{algorithm}"',
        "",
        "[budget]",
        "epsilon = 1.0",
        "delta = 1e-9",
        "lifetime_epsilon = 10.0",
        f'ledger_url = "{path.parent / "ledger"}"',
        "",
        "[cluster]",
        f'address = "{scheduler}"',
        'prepare_on = "workers"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# The memory limit is enforced as Dask does (the nanny restarts a worker at 95 %), but nothing is spilled
# and a worker pauses at 90 %, not 80 %: neither dpstream nor the peer keeps data in Dask's memory, and a
# worker process's own memory (its imports: ~260 MiB with the Numba kernels, more with dask-ml's scipy and
# scikit-learn) then made the default policy spill every task result to disk and pause the workers most
# of the time, which slowed the peer's L-BFGS passes ~5× in the first run (BENCHMARKS.md).
WORKER_ENV = {
    **os.environ,
    "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "0.9",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """A ``dask scheduler`` and ``workers`` ``dask worker`` processes on loopback, stopped on exit."""

    def __init__(self, workers: int, memory_limit: str, log_folder: Path):
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.workers, self.memory_limit, self.log_folder = workers, memory_limit, log_folder
        self.processes: list[subprocess.Popen] = []
        self.env: dict[str, str] | None = None  # the CLI commands' environment (PrefectApi.env)

    def __enter__(self) -> Cluster:
        from distributed import Client

        self.log_folder.mkdir(parents=True, exist_ok=True)
        port = self.address.rsplit(":", 1)[1]
        self._start(
            "scheduler", [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"]
        )
        for index in range(self.workers):
            self._start(
                f"worker-{index}",
                [
                    str(DASK),
                    "worker",
                    self.address,
                    "--nthreads",
                    "1",
                    "--memory-limit",
                    self.memory_limit,
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    "--name",
                    f"worker-{index}",
                ],
            )
        self.client = Client(self.address, timeout=60)
        self.client.wait_for_workers(self.workers, timeout=120)
        return self

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.log_folder / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        self.processes.append(
            subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=WORKER_ENV
            )
        )

    def worker_pids(self) -> list[int]:
        """The worker processes (not their nannies), in worker-name order: a restarted worker is a new pid."""
        pids = self.client.run(os.getpid)
        return [
            pids[address]
            for address in sorted(
                pids, key=lambda address: self.client.scheduler_info()["workers"][address]["name"]
            )
        ]

    def __exit__(self, *exc) -> None:
        self.client.close()
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


class PrefectApi:
    """``prefect server start`` on loopback with its own home, as a deployment has one: the CLI's runs
    report to it instead of each starting an ephemeral API (~14 s a command here). ``env`` for them."""

    def __init__(self, home: Path):
        self.home, self.port = home, _free_port()
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
        self.env.update(
            PREFECT_HOME=str(home),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_SERVER_UI_ENABLED="false",
            PREFECT_LOGGING_LEVEL="WARNING",
            DO_NOT_TRACK="1",
        )

    def __enter__(self) -> PrefectApi:
        import httpx

        self.home.mkdir(parents=True, exist_ok=True)
        self.log = (self.home / "server.log").open("w")
        command = [
            str(DPSTREAM.parent / "prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.process = subprocess.Popen(command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{self.port}/api"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    self.env["PREFECT_API_URL"] = url
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"prefect server did not start; see {self.home / 'server.log'}")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def run_stage(name: str, command: list[str], cluster: Cluster, log: Path) -> dict:
    """One CLI command on the cluster: wall seconds and each worker's peak RSS while it ran."""
    with RssSampler(cluster.worker_pids()) as sampler:
        start = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True, check=False, env=cluster.env)
        seconds = time.perf_counter() - start
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(command)}\n{completed.stdout}{completed.stderr}\n")
    if completed.returncode != 0:
        raise RuntimeError(f"{name} failed ({completed.returncode}): {completed.stderr.strip()[-2000:]}")
    return {"stage": name, "seconds": seconds, "peak_rss": sampler.peaks, "output": completed.stdout.strip()}


class DiskSampler(RssSampler):
    """The least free space on ``folder``'s filesystem while the ``with`` block runs (``peaks[0]`` is the
    most bytes used beyond what was in use when it started)."""

    def __init__(self, folder: Path, interval: float = 0.5):
        import threading

        self.folder, self.interval = folder, interval
        self.start_used = shutil.disk_usage(folder).used
        self.peaks = [0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peaks[0] = max(self.peaks[0], shutil.disk_usage(self.folder).used - self.start_used)
            time.sleep(self.interval)


def shuffled_parts(shuffled: Path) -> tuple[list[str], tuple[str, ...], str]:
    """The current generation's part paths, its feature columns and its label column."""
    from dpstream.pipelines.shuffle.generations import GenerationStore

    manifest = GenerationStore(str(shuffled)).current()
    spec = manifest.spec()
    return manifest.paths(), tuple(spec.features), spec.label


def _read_group(
    path: str, group: int, features: tuple[str, ...], label: str
) -> tuple[np.ndarray, np.ndarray]:
    table = pq.ParquetFile(path).read_row_group(group, columns=[*features, label], use_threads=False)
    matrix = np.empty((table.num_rows, len(features)), dtype=np.float64)
    for j, name in enumerate(features):
        matrix[:, j] = table.column(name).to_numpy()
    labels = table.column(label).to_numpy().astype(np.float64)
    del table
    pa.default_memory_pool().release_unused()  # as dpstream's whole-file tasks do (pipelines/memory.py)
    return matrix, labels


def peer_fit(client, paths: list[str], features: tuple[str, ...], label: str, task: str, iterations: int):
    """dask-ml's non-private GLM on the training parts (the held-out last part left out), one delayed
    pyarrow read per row group as the array's chunks (no DataFrame layer: the fastest way to feed it);
    (fitted estimator, seconds)."""
    import dask
    import dask.array as da
    from dask_ml.linear_model import LinearRegression, LogisticRegression

    groups = [
        (path, group, metadata.row_group(group).num_rows)
        for path in paths
        for metadata in [pq.read_metadata(path)]
        for group in range(metadata.num_row_groups)
    ]
    rows = [count for *_, count in groups]
    reads = [
        dask.delayed(_read_group, nout=2, pure=True)(path, group, features, label)
        for path, group, _ in groups
    ]
    X = da.concatenate(
        [
            da.from_delayed(read[0], (count, len(features)), np.float64)
            for read, count in zip(reads, rows, strict=True)
        ]
    )
    y = da.concatenate(
        [da.from_delayed(read[1], (count,), np.float64) for read, count in zip(reads, rows, strict=True)]
    )
    kind = LinearRegression if task == "regression" else LogisticRegression
    # The prepared lake carries its own intercept column.
    estimator = kind(solver="lbfgs", max_iter=iterations, fit_intercept=False)
    start = time.perf_counter()
    estimator.fit(X, y)
    return estimator, time.perf_counter() - start


def prepared_holdout(config: Path, holdout: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """The held-out lake prepared by the config's own preprocessing (``LakeSpec.present``): what the
    shuffled lake holds for its rows, for the peer's predictions."""
    from dpstream.flows.assembly.loading import load_inputs

    spec = load_inputs(config).lake
    path = str(next(holdout.glob("*.parquet")))
    table = spec.present(pq.read_table(path, columns=spec.read_columns), path)
    features = tuple(name for name in table.column_names if name != spec.label)
    X = np.column_stack([table.column(name).to_numpy().astype(np.float64) for name in features])
    return X, table.column(spec.label).to_numpy().astype(np.float64), features


def holdout_labels(holdout: Path, label: str) -> np.ndarray:
    return pq.read_table(str(next(holdout.glob("*.parquet"))), columns=[label]).column(label).to_numpy()


def dpstream_holdout_predictions(run: Path, holdout: Path, out: Path, scheduler: str) -> np.ndarray:
    if out.exists():
        shutil.rmtree(out)
    subprocess.run(
        [str(DPSTREAM), "predict", str(run), str(holdout), str(out), "--scheduler", scheduler],
        check=True,
        capture_output=True,
        text=True,
    )
    table = pq.read_table(str(out))
    return table.column(table.column_names[0]).to_numpy()


def _fresh(*folders: Path) -> None:
    """Remove this benchmark's own outputs of an earlier run (only ever folders under a .bench folder)."""
    for folder in folders:
        assert ".bench" in folder.parts, folder
        if folder.exists():
            shutil.rmtree(folder)


def lake_run(args, cluster: Cluster, task: str, rows: int, stamp: str) -> dict:
    """Every stage of one lake (``task``: "regression" or "classification"); a dict of measurements."""
    base = args.root / task
    raw, holdout, work = base / "raw", base / "holdout", base / "work"
    generate_seconds = write_lake(raw, rows, task, seed=1, processes=args.processes)
    write_lake(holdout, HOLDOUT_ROWS, task, seed=2, processes=1)
    _fresh(work)
    work.mkdir(parents=True)
    shuffled, log = work / "shuffled", work / "commands.log"
    algorithms = ("ssp", "ambssgd") if task == "regression" else ("ambssgd",)
    configs = {
        name: write_config(work / f"{name}.toml", raw, shuffled, task, name, cluster.address)
        for name in algorithms
    }
    first = configs[algorithms[0]]
    label = "y" if task == "regression" else "churned"
    raw_paths = sorted(str(path) for path in raw.glob("*.parquet"))
    stages = [run_stage("validate", [str(DPSTREAM), "validate", str(first)], cluster, log)]
    with DiskSampler(base) as disk:
        stages.append(run_stage("shuffle", [str(DPSTREAM), "shuffle", str(first)], cluster, log))
    stages[-1]["disk_peak"] = disk.peaks[0]
    runs = {}
    for name, config in configs.items():
        run_id = f"scale-{name}-{stamp}"
        stages.append(
            run_stage(
                f"train {name}", [str(DPSTREAM), "train", str(config), "--run-id", run_id], cluster, log
            )
        )
        runs[name] = next(work.rglob(f"{run_id}/model.json")).parent
    if task == "regression":
        predictions = work / "predictions"
        command = [
            str(DPSTREAM),
            "predict",
            str(runs["ambssgd"]),
            str(raw),
            str(predictions),
            "--scheduler",
            cluster.address,
        ]
        stages.append(run_stage("predict", command, cluster, log))
    paths, features, prepared_label = shuffled_parts(shuffled)
    references = {
        "raw": plain_decode_seconds(raw_paths, (*FEATURES, label), args.processes, repeats=1),
        "shuffled": plain_decode_seconds(paths, (*features, prepared_label), args.processes, repeats=1),
    }
    peer = None
    if not args.skip_peer:
        with RssSampler(cluster.worker_pids()) as sampler:
            peer, peer_seconds = peer_fit(
                cluster.client, paths[:-1], features, prepared_label, task, args.peer_iterations
            )
        stages.append(
            {
                "stage": f"dask-ml {type(peer).__name__} (non-private, lbfgs ≤ {args.peer_iterations} iterations)",
                "seconds": peer_seconds,
                "peak_rss": sampler.peaks,
            }
        )
    X_holdout, prepared_y, holdout_features = prepared_holdout(first, holdout)
    assert holdout_features == features, (holdout_features, features)
    truth = holdout_labels(holdout, label)
    train_labels = np.concatenate(
        [pq.read_table(path, columns=[label]).column(label).to_numpy() for path in raw_paths[:4]]
    )
    quality = {}
    if task == "regression":
        low, high = bounds()["y"]

        def rmse(predicted):
            return float(np.sqrt(np.mean((np.asarray(predicted, dtype=np.float64) - truth) ** 2)))

        quality["constant (training labels' mean)"] = rmse(np.full_like(truth, train_labels.mean()))
        for name, run in runs.items():
            quality[f"dpstream {name}, ε = 1"] = rmse(
                dpstream_holdout_predictions(run, holdout, work / f"holdout-{name}", cluster.address)
            )
        if peer is not None:
            quality["dask-ml LinearRegression (non-private)"] = rmse(
                low + (X_holdout @ peer.coef_ + 1) * (high - low) / 2
            )
    else:

        def accuracy(predicted):
            return float(np.mean(np.asarray(predicted).astype(np.int64) == truth))

        majority = int(train_labels.mean() >= 0.5)
        quality["constant (majority class)"] = accuracy(np.full_like(truth, majority))
        for name, run in runs.items():
            quality[f"dpstream {name}, ε = 1"] = accuracy(
                dpstream_holdout_predictions(run, holdout, work / f"holdout-{name}", cluster.address)
            )
        if peer is not None:
            quality["dask-ml LogisticRegression (non-private)"] = accuracy(X_holdout @ peer.coef_ > 0)
    reads = {"validate": "raw", "shuffle": "raw", "predict": "raw"}
    for stage in stages:
        reference = reads.get(stage["stage"], "shuffled")
        stage["rows_per_second"] = rows / stage["seconds"]
        stage["ratio_to_plain_decode"] = references[reference] / stage["seconds"]
        stage["reference"] = reference
    return {
        "task": task,
        "rows": rows,
        "generate_seconds": generate_seconds,
        "stages": stages,
        "plain_decode_seconds": references,
        "quality": quality,
        "disk": {
            "raw": folder_bytes(raw),
            "shuffled": folder_bytes(shuffled),
            **({"predictions": folder_bytes(work / "predictions")} if task == "regression" else {}),
        },
    }


def print_results(results: dict) -> None:
    total_memory = results["memory_limit_bytes"] * results["workers"]
    for lake in results["lakes"]:
        rows = lake["rows"]
        print(
            f"\n### {lake['task']} lake: {rows:,} rows × 16 features, {lake['disk']['raw'] / 1e9:.1f} GB raw, "
            f"{lake['disk']['shuffled'] / 1e9:.1f} GB shuffled; workers {results['workers']} × "
            f"{results['memory_limit']} ({lake['disk']['raw'] / total_memory:.1f}× their memory)\n"
        )
        table = []
        for reference, seconds in lake["plain_decode_seconds"].items():
            table.append(
                [
                    f"plain decode of the {reference} lake (reference)",
                    f"{seconds:.1f}",
                    f"{rows / seconds / 1e6:.2f}",
                    "1.00",
                    "—",
                ]
            )
        for stage in lake["stages"]:
            peaks = " / ".join(f"{peak / 2**20:.0f}" for peak in stage["peak_rss"])
            table.append(
                [
                    stage["stage"],
                    f"{stage['seconds']:.1f}",
                    f"{stage['rows_per_second'] / 1e6:.2f}",
                    f"{stage['ratio_to_plain_decode']:.2f} ({stage['reference']})",
                    peaks,
                ]
            )
        print(
            markdown_table(
                ["stage", "seconds", "M rows/s", "speed / plain decode", "peak RSS per worker MiB"], table
            )
        )
        shuffle = next(stage for stage in lake["stages"] if stage["stage"] == "shuffle")
        print(
            f"\nshuffle's peak extra disk: {shuffle['disk_peak'] / 1e9:.1f} GB; generation {lake['generate_seconds']:.0f} s "
            f"(skipped when the lake exists)"
        )
        print(
            "\n"
            + markdown_table(
                ["held-out (1,000,000 rows)", "RMSE" if lake["task"] == "regression" else "accuracy"],
                [[name, f"{value:.4g}"] for name, value in lake["quality"].items()],
            )
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="340MiB")
    parser.add_argument(
        "--processes", type=int, default=2, help="processes writing the lake and for the plain decode"
    )
    parser.add_argument("--peer-iterations", type=int, default=10)
    parser.add_argument("--skip-classification", action="store_true")
    parser.add_argument(
        "--skip-peer", action="store_true", help="leave out dask-ml (our stages only: a re-measurement)"
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the benchmark's folder (under a .bench folder)"
    )
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    from dask.utils import parse_bytes

    stamp = time.strftime("%Y%m%d%H%M%S")
    results = {
        "workers": args.workers,
        "memory_limit": args.memory_limit,
        "memory_limit_bytes": parse_bytes(args.memory_limit),
        "peer": "skipped (--skip-peer)" if args.skip_peer else "dask-ml",
        "lakes": [],
    }
    with (
        PrefectApi(args.root / "prefect") as prefect,
        Cluster(args.workers, args.memory_limit, args.root / "logs") as cluster,
    ):
        cluster.env = prefect.env
        results["lakes"].append(lake_run(args, cluster, "regression", args.rows, stamp))
        (args.root / "results.json").write_text(json.dumps(results, indent=1))
        if not args.skip_classification:
            results["lakes"].append(lake_run(args, cluster, "classification", args.rows // 4, stamp))
    (args.root / "results.json").write_text(json.dumps(results, indent=1))
    print_results(results)


if __name__ == "__main__":
    main()
