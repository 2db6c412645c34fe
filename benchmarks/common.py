"""Shared benchmark helpers: timing medians, synthetic data, one-call training, excess risk."""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np

from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import GLM, LinearRegressionModel
from dpstream.noise import NoiseKey

FIGURES = __file__.rsplit("/", 1)[0] + "/figures"


def median_time(function: Callable[[], object], repeats: int = 7, warmup: bool = False) -> float:
    """Median seconds of ``repeats`` calls (after one untimed call with ``warmup``: caches, JIT)."""
    if warmup:
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gaussian_regression(
    rows: int, dim: int, sigma: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w_star = rng.standard_normal(dim)
    w_star /= np.linalg.norm(w_star)
    X = rng.standard_normal((rows, dim))
    return X, X @ w_star + sigma * rng.standard_normal(rows), w_star


def train(algorithm, X, y, model: GLM | None = None, blocks=None, num_rows=None, on_step=None):
    model = model or LinearRegressionModel()
    dim = X.shape[1] if X is not None else model.num_params(0)
    return run(
        algorithm,
        InMemoryExecutor(model, blocks if blocks is not None else [(X, y)]),
        num_rows=num_rows if num_rows is not None else X.shape[0],
        num_params=dim,
        initial_params=model.init_params(dim),
        key=NoiseKey.generate(),
        on_step=on_step,
    )


def excess(params: np.ndarray, w_star: np.ndarray) -> float:
    """Excess squared-loss risk under x ~ N(0, I): ‖w − w*‖²/2."""
    return 0.5 * float(np.sum((params - w_star) ** 2))


def import_diffprivlib():
    """diffprivlib 0.6.6 with two shims for scikit-learn 1.9, benchmark processes only:

    * its package import pulls its random forest, which imports two dtype aliases scikit-learn 1.9
      dropped from ``sklearn.tree._tree``: alias them;
    * its ``LogisticRegression.__init__`` passes ``multi_class`` to scikit-learn's, which 1.9 removed:
      accept and store it (diffprivlib's own solver reads it; binary problems only here).

    Returns the module ``diffprivlib.models``.
    """
    import sklearn.tree._tree as tree
    from sklearn.linear_model import _logistic

    for name in ("DOUBLE", "DTYPE"):
        if not hasattr(tree, name):
            setattr(tree, name, np.float64 if name == "DOUBLE" else np.float32)
    original = _logistic.LogisticRegression.__init__
    if not getattr(original, "_dpstream_shim", False):

        @functools.wraps(original)  # keeps the signature scikit-learn's get_params reads
        def accepting_multi_class(self, *args, multi_class="ovr", **kwargs):
            original(self, *args, **kwargs)
            self.multi_class = multi_class

        accepting_multi_class._dpstream_shim = True
        _logistic.LogisticRegression.__init__ = accepting_multi_class
    import diffprivlib.models

    return diffprivlib.models


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


class RssSampler:
    """Peak resident memory of each process in ``pids`` (e.g. Dask workers), sampled every ``interval`` s
    in a background thread while the ``with`` block runs; ``peaks`` in bytes, in ``pids`` order."""

    def __init__(self, pids, interval: float = 0.2):
        import psutil

        self.interval = interval
        self.processes = [psutil.Process(pid) for pid in pids]
        self.peaks = [0] * len(pids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for i, process in enumerate(self.processes):
                try:
                    self.peaks[i] = max(self.peaks[i], process.memory_info().rss)
                except Exception:  # noqa: BLE001 - a process that exited has no RSS left to sample
                    pass
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
