"""Concurrent shuffles, reshuffles, trains and predicts on one lake, as separate processes.

Each schedule is drawn from a fixed seed: four operations started at the same moment on one lake, local
or on the moto S3 server (the seeds are chosen so that the schedules include two first shuffles at
once, a reshuffle beside running trains, and two trains started with one run id). The lake's feature
``x0`` is each row's id, so after every schedule the test can check what was read. Invariants:

- every committed shuffle generation verifies and holds each source row exactly once (no row lost);
- every training run read one committed generation, and no row twice (its recorded ids are unique and
  are rows of the source);
- the ledger's charges are exactly the runs that released, each recorded with the generation it read;
  two runs started with one run id released at most one model;
- the source lake is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.models import LinearRegressionModel
from dpstream.pipelines import LakeSpec, lake_blocks, read_manifest, verify_parts

FILES, ROWS, RPF = 6, 1500, 2000
FEATURES = ("x0", "x1", "x2")
OPERATIONS = ("shuffle", "reshuffle", "train", "train", "predict")


@dataclass(frozen=True)
class RecordingModel(LinearRegressionModel):
    """Linear regression that also records the id (column x0) of every row it computes statistics of."""

    seen: ClassVar[list[float]] = []

    def block_stats(self, X, y, request, role="gradient"):
        RecordingModel.seen.extend(np.asarray(X[:, 0], dtype=np.float64).tolist())
        return super().block_stats(X, y, request, role)


def _table(index: int) -> pa.Table:
    rng = np.random.default_rng(index)
    ids = np.arange(index * ROWS, (index + 1) * ROWS, dtype=np.float64)
    x = rng.standard_normal((ROWS, 2))
    return pa.table(
        {"x0": ids, "x1": x[:, 0], "x2": x[:, 1], "y": x @ [0.5, -0.5] + 0.1 * rng.standard_normal(ROWS)}
    )


def _operation(
    kind: str, spec: LakeSpec, out: str, ledger_url: str, run_id: str, target: str, result: str
) -> None:
    """One operation of a schedule, in its own process; what it did goes to the JSON file ``result``."""
    from dpstream.algorithms import DPSGD
    from dpstream.checkpoint import CheckpointPolicy
    from dpstream.coordinator import InMemoryExecutor, run
    from dpstream.pipelines import shuffle_once
    from dpstream.privacy import Ledger, LifetimeBudget
    from dpstream.storage import open_url, write_json_atomic

    options = spec.storage_options
    outcome: dict = {"kind": kind, "run_id": run_id}
    try:
        if kind in ("shuffle", "reshuffle"):
            manifest = shuffle_once(spec, out, rows_per_file=RPF, reshuffle=kind == "reshuffle")
            outcome["generation"] = manifest.generation
        elif kind == "train":
            manifest = shuffle_once(spec, out, rows_per_file=RPF)  # the current generation, pinned here
            training, _ = manifest.split_last_file()
            verify_parts(training, options)  # as train_on_lake does, before anything is charged
            ledger = Ledger(ledger_url, options).lake(
                manifest.fingerprint, LifetimeBudget(50.0, 1e-6), files=manifest.source_files
            )
            algorithm = DPSGD(4.0, 1e-6, clip_norm=1.0, learning_rate=1e-4, batch_size=500)
            fit = run(
                algorithm,
                InMemoryExecutor(RecordingModel(), lake_blocks(training, options)),
                num_rows=training.num_rows,
                num_params=len(FEATURES),
                initial_params=np.zeros(len(FEATURES)),
                checkpoint=CheckpointPolicy(f"{ledger_url}/_checkpoints", storage_options=options),
                run_id=run_id,
                ledger=ledger,
                lake=training.row_order,
            )
            outcome.update(
                generation=manifest.generation,
                row_order=training.row_order,
                rows=algorithm.plan(training.num_rows, len(FEATURES)).rows_used,
                ids=RecordingModel.seen,
                params=fit.params.tolist(),
                mu=fit.report.mu,
            )
        else:
            from dpstream.algorithms import AdaSSP
            from dpstream.export import ModelDocument
            from dpstream.pipelines.execution.predict import predict_lake

            report = AdaSSP(1.0, 1e-6).report(AdaSSP(1.0, 1e-6).plan(1000, 3))
            document = {
                "format": "dpstream-model/1",
                "run_id": "scorer",
                "model": {"kind": "linear"},
                "features": list(FEATURES),
                "label": "y",
                "algorithm": "ssp",
                "lake_fingerprint": "f",
                "preprocessing": None,
                "params": [0.0, 0.5, -0.5],
                "privacy": report.to_dict(),
            }
            summary = predict_lake(
                ModelDocument.from_dict(document), spec.url, target, storage_options=options
            )
            outcome["rows"] = summary.rows
        outcome["status"] = "ok"
    except Exception as error:  # noqa: BLE001 - the parent checks every outcome
        outcome.update(status="error", error=type(error).__name__, message=str(error)[:500])
    fs, path = open_url(result)
    write_json_atomic(fs, path, outcome)


def _checksums(spec: LakeSpec) -> dict[str, str]:
    fs, root = spec.filesystem()
    return {path: hashlib.sha256(fs.cat_file(path)).hexdigest() for path in sorted(fs.find(root))}


def _schedule(
    seed: int, spec: LakeSpec, out: str, ledger_url: str, predictions: str, results: str
) -> list[dict]:
    rng = np.random.default_rng(seed)
    kinds = list(rng.choice(OPERATIONS, size=4))
    run_ids = [f"r{seed}-{int(rng.integers(0, 2))}" for _ in kinds]  # one id twice, now and then
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_operation,
            args=(
                kind,
                spec,
                out,
                ledger_url,
                run_id,
                f"{predictions}/{seed}-{i}",
                f"{results}/{seed}-{i}.json",
            ),
        )
        for i, (kind, run_id) in enumerate(zip(kinds, run_ids, strict=True))
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
        assert process.exitcode == 0, f"an operation process died ({process.exitcode})"
    return [json.load(open(f"{results}/{seed}-{i}.json")) for i in range(len(processes))]


def _check_invariants(outcomes: list[dict], spec: LakeSpec, out: str, ledger_url: str, source: dict) -> None:
    from dpstream.pipelines.shuffle.generations import GenerationStore
    from dpstream.privacy import Ledger

    options = spec.storage_options
    ids = np.arange(FILES * ROWS, dtype=np.float64)
    store = GenerationStore(out, options)
    committed = {store.read(number).generation: store.read(number) for number in store.numbers()}
    for manifest in committed.values():  # every generation: verified, every source row exactly once
        verify_parts(manifest, options)
        np.testing.assert_array_equal(
            np.sort(np.concatenate([X[:, 0] for X, _ in lake_blocks(manifest, options)])), ids
        )
    trains = [o for o in outcomes if o["kind"] == "train"]
    released = {}
    for outcome in outcomes:
        if outcome["status"] != "ok":
            # Only a second run started with one run id may be refused; everything else must succeed.
            # CheckpointMismatchError (a CheckpointError): the second found the first's checkpoint, written
            # on another shuffle generation than the one it validated, and refuses to resume it.
            assert outcome["kind"] == "train" and outcome["error"] in (
                "RunIdReusedError",
                "CheckpointError",
                "CheckpointMismatchError",
            ), outcome
            assert sum(o["run_id"] == outcome["run_id"] for o in trains) > 1, outcome
            continue
        if outcome["kind"] == "predict":
            assert outcome["rows"] == FILES * ROWS
            continue
        if outcome["kind"] != "train":
            assert outcome["generation"] in committed
            continue
        used = np.asarray(outcome["ids"])
        assert outcome["generation"] in committed  # it read a committed generation ...
        assert len(used) == len(set(used.tolist())) == outcome["rows"]  # ... and no row twice
        assert np.isin(used, ids).all()
        earlier = released.setdefault(outcome["run_id"], outcome)
        assert earlier["params"] == outcome["params"]  # one run id, one model (a replay, bit for bit)
    fingerprints = {m.fingerprint for m in committed.values()}
    charged = {}
    for fingerprint in fingerprints:
        for entry in Ledger(ledger_url, options).lake(fingerprint).entries():
            charged[entry.run_id] = entry
    assert set(charged) == set(released)  # the ledger's charges are the releases
    for run_id, outcome in released.items():
        entry = charged[run_id]
        assert entry.status == "committed" and entry.data_version == outcome["row_order"]
        assert entry.mu == pytest.approx(outcome["mu"])
    assert _checksums(spec) == source  # the source is never modified


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["local", "s3"])
def test_random_concurrent_schedules_keep_every_invariant(tmp_path, storage, request):
    if storage == "local":
        from .conftest import local_put

        raw, root, options = str(tmp_path / "raw"), str(tmp_path), {}
        for i in range(FILES):
            local_put(f"{raw}/part-{i}.parquet", _table(i))
        seeds = (
            11,
            12,
            6,
        )  # two first shuffles and two trains at once; a reshuffle under a train; one run id twice
    else:
        import s3fs

        url, options = request.getfixturevalue("s3_bucket")
        fs = s3fs.S3FileSystem(**options)
        for i in range(FILES):
            sink = pa.BufferOutputStream()
            pq.write_table(_table(i), sink, row_group_size=700)
            fs.pipe_file(f"{url[5:]}/raw/part-{i}.parquet", sink.getvalue().to_pybytes())
        raw, root = f"{url}/raw", url
        seeds = (30, 22)
    spec = LakeSpec(raw, FEATURES, "y", options)
    source = _checksums(spec)
    results = str(tmp_path / "results")
    os.makedirs(results)
    outcomes = []  # every schedule's, so far: the ledger and the generations accumulate
    for seed in seeds:
        outcomes += _schedule(
            seed, spec, f"{root}/shuffled", f"{root}/ledger", f"{root}/predictions", results
        )
        _check_invariants(outcomes, spec, f"{root}/shuffled", f"{root}/ledger", source)
    kinds = {o["kind"] for o in outcomes}
    assert {"train", "reshuffle", "shuffle"} <= kinds
    assert read_manifest(f"{root}/shuffled", options) is not None
