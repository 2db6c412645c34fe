"""The pipeline's defaults on the California lake exactly as ``dpstream convert`` writes it.

``examples.california.SPEC`` converts ``housing.csv`` (numeric columns and the label clipped to public
ranges and mapped onto [−1, 1], ``ocean_proximity`` one-hot in {0, 1}); the train flow's default for the
linear and logistic models is AdaSSP with no separate intercept (the one-hot columns sum to 1). Compared:
the row-norm bound sqrt(13) (sqrt of the feature count, the default before the lake's schema was read)
against 3, the bound the conversion record implies (``ConvertSpec.row_norm_bound``: eight columns on
[−1, 1] and one one-hot group). Regression: held-out RMSE in dollars; classification of value > $200k:
held-out accuracy, with diffprivlib's ``LogisticRegression`` (objective perturbation, pure ε-DP, many
passes over the data in memory) on the same rows as the peer. Each fit draws a fresh random 80/20 split
and a fresh noise key; ε = 1, δ = 1e-6, replace-one.

Run: ``python -m benchmarks.lake_defaults`` (about 40 s on 2 cores).
"""

from __future__ import annotations

import math
import tempfile
import time
import warnings

import numpy as np
import pyarrow.parquet as pq

from benchmarks.common import import_diffprivlib, markdown_table
from examples.data import CALIFORNIA_HOUSING as HOUSING

FITS = 60
EPSILON, DELTA = 1.0, 1e-6
THRESHOLD = 200_000.0  # dollars: the public class boundary


def california_lake() -> tuple[np.ndarray, np.ndarray, float]:
    """(features, label on [−1, 1], schema row-norm bound) of the converted California lake."""
    from dpstream.pipelines.conversion.convert import csv_to_parquet, read_convert_record
    from dpstream.pipelines.preprocessing.spec import ConvertSpec
    from examples.california import SPEC

    with tempfile.TemporaryDirectory() as folder:
        csv_to_parquet(str(HOUSING), f"{folder}/lake", SPEC)
        spec = ConvertSpec.from_record(read_convert_record(f"{folder}/lake"))
        table = pq.read_table(f"{folder}/lake")
    features = spec.output_columns()
    X = np.column_stack([table.column(name).to_numpy() for name in features])
    return X, table.column(spec.label).to_numpy(), spec.row_norm_bound(features)


def adassp_params(X: np.ndarray, y: np.ndarray, link: str, row_norm_bound: float) -> np.ndarray:
    from dpstream.algorithms import AdaSSP
    from dpstream.coordinator import InMemoryExecutor, run
    from dpstream.models import LinearRegressionModel, LogisticRegressionModel

    model = LogisticRegressionModel() if link == "logistic" else LinearRegressionModel()
    algorithm = AdaSSP(EPSILON, DELTA, row_norm_bound=row_norm_bound, link=link)
    return run(
        algorithm,
        InMemoryExecutor(model, [(X, y)]),
        num_rows=len(y),
        num_params=X.shape[1],
        initial_params=np.zeros(X.shape[1]),
    ).params


def main() -> None:
    from examples.california import LABEL_RANGE

    start = time.perf_counter()
    X, label, schema_bound = california_lake()
    dollars = (LABEL_RANGE[1] - LABEL_RANGE[0]) / 2.0
    cut = 2.0 * (THRESHOLD - LABEL_RANGE[0]) / (LABEL_RANGE[1] - LABEL_RANGE[0]) - 1.0
    classes = np.where(label > cut, 1.0, -1.0)
    bounds = {"sqrt(13) (feature count)": math.sqrt(X.shape[1]), "3 (lake schema)": schema_bound}
    rmse = {name: [] for name in bounds}
    accuracy = {name: [] for name in bounds}
    reference = {"least squares": [], "training mean": [], "diffprivlib": [], "majority": []}
    dpl = import_diffprivlib()
    for fit in range(FITS):
        order = np.random.default_rng(fit).permutation(len(label))
        train, test = order[: int(0.8 * len(order))], order[int(0.8 * len(order)) :]
        for name, bound in bounds.items():
            w = adassp_params(X[train], label[train], "identity", bound)
            rmse[name].append(dollars * np.sqrt(np.mean((X[test] @ w - label[test]) ** 2)))
            w = adassp_params(X[train], classes[train], "logistic", bound)
            accuracy[name].append(np.mean(np.where(X[test] @ w > 0, 1.0, -1.0) == classes[test]))
        w = np.linalg.lstsq(X[train], label[train], rcond=None)[0]
        reference["least squares"].append(dollars * np.sqrt(np.mean((X[test] @ w - label[test]) ** 2)))
        reference["training mean"].append(dollars * np.std(label[test] - label[train].mean()))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peer = dpl.LogisticRegression(epsilon=EPSILON, data_norm=schema_bound)
            reference["diffprivlib"].append(peer.fit(X[train], classes[train]).score(X[test], classes[test]))
        reference["majority"].append(max(np.mean(classes[test] > 0), np.mean(classes[test] < 0)))
    rows = [
        [
            f"AdaSSP, ‖x‖ ≤ {name}",
            f"${np.median(rmse[name]):,.0f} / ${np.quantile(rmse[name], 0.9):,.0f}",
            f"{np.median(accuracy[name]):.3f} / {np.quantile(accuracy[name], 0.1):.3f}",
        ]
        for name in bounds
    ]
    rows += [
        [
            "least squares / training mean (non-private)",
            f"${np.median(reference['least squares']):,.0f} / ${np.median(reference['training mean']):,.0f}",
            "–",
        ],
        [
            "diffprivlib LogisticRegression (ε-DP) / majority class",
            "–",
            f"{np.median(reference['diffprivlib']):.3f} / {np.median(reference['majority']):.3f}",
        ],
    ]
    print(
        markdown_table(
            ["model (ε = 1)", "RMSE: median / 90th percentile", "accuracy: median / 10th percentile"], rows
        )
    )
    print(f"\n{FITS} fits, fresh 80/20 splits and noise keys; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
