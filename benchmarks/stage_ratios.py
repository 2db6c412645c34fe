"""AdaSSP's train task and ``predict`` against the plain decode, on one lake and the same workers, in rounds.

``python -m benchmarks.stage_ratios``: 12 files of the scale benchmark's lake (1,000,000 rows ×
16 float32 features in their own units each, prepared with public ranges; ``benchmarks.scale``),
validated and shuffled once through the CLI; then, per round, the plain 2-process decode of the shuffled
and of the raw lake (``benchmarks.data_plane.plain_decode_seconds``), AdaSSP's pass over the shuffled
lake (``train_on_lake``, scatter mode, on a LocalCluster of 2 single-threaded workers) and
``predict_lake`` of the raw lake on the same workers. Each reference decodes what its stage reads: the
shuffled lake's prepared columns, the raw lake's 16 feature columns (``predict`` reads no label). Prints
each round's ratios and their medians, and writes them to ``.bench/stage_ratios/results.json``.
``--cold`` empties the page cache before each timed stage (needs write access to
/proc/sys/vm/drop_caches, e.g. root in a container); the references' process pool decodes its first two
files once before its timer, so those start cached and the cold ratios are conservative. Without
``--cold`` the lake is read from the page cache.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.data_plane import plain_decode_seconds
from benchmarks.scale import FEATURES, write_config, write_lake

ROOT = Path(__file__).resolve().parent.parent / ".bench" / "stage_ratios"
DPSTREAM = Path(sys.executable).parent / "dpstream"


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("1\n")


def prepare(files: int) -> tuple[Path, Path]:
    """The raw lake (kept between runs), its config, and a fresh shuffle and model; (config, run folder)."""
    raw = ROOT / "raw"
    write_lake(raw, files * 1_000_000, "regression", seed=1, processes=2)
    extra = sorted(raw.glob("*.parquet"))[files:]
    if extra:
        raise SystemExit(f"{raw} holds {files + len(extra)} files from an earlier --files; remove it first")
    work = ROOT / "work"
    shutil.rmtree(work, ignore_errors=True)  # this benchmark's own folder: shuffle, ledger, model
    work.mkdir(parents=True)
    config = write_config(work / "ssp.toml", raw, work / "shuffled", "regression", "ssp", "unused")
    text = config.read_text().replace('address = "unused"\n', "")
    config.write_text(text + 'memory_limit = "1GiB"\n')
    for command in (["validate", str(config)], ["shuffle", str(config)]):
        subprocess.run([str(DPSTREAM), *command], check=True, capture_output=True)
    subprocess.run(
        [str(DPSTREAM), "train", str(config), "--run-id", "stage-ratios", "--quiet"],
        check=True,
        capture_output=True,
    )
    return config, next(work.rglob("stage-ratios/model.json")).parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3, choices=range(1, 100), metavar="ROUNDS")
    parser.add_argument("--cold", action="store_true", help="empty the page cache before each timed read")
    args = parser.parse_args(argv)
    from dpstream.export import read_model
    from dpstream.flows.assembly.inputs import RunInputs
    from dpstream.flows.assembly.loading import load_config
    from dpstream.flows.assembly.planning import plan_run
    from dpstream.pipelines import connect, read_manifest, train_on_lake
    from dpstream.pipelines.execution.predict import predict_lake

    config_path, run = prepare(args.files)
    config = load_config(config_path)
    manifest = read_manifest(config.lake.shuffled_url)
    plan = plan_run(RunInputs.of(config), manifest, None, None)
    model = read_model(str(run))
    shuffled = sorted({path for _, path, _, _ in manifest.blocks(None)})
    raw = sorted(str(path) for path in (ROOT / "raw").glob("*.parquet"))
    columns = tuple(manifest.spec(None).read_columns)
    cold = drop_page_cache if args.cold else (lambda: None)
    client = connect(None, n_workers=2, memory_limit="1GiB")
    modules = (
        "dpstream.pipelines.execution.executor",
        "dpstream.pipelines.execution.predict",
        "dpstream.models.moments",
    )
    client.run(lambda: [__import__(name) for name in modules])  # imports outside the timings
    rounds = []
    try:
        for index in range(args.rounds):
            cold()
            plain_shuffled = plain_decode_seconds(shuffled, columns, 2, repeats=1)
            cold()
            start = time.perf_counter()
            train_on_lake(manifest, plan, client, mode="scatter")
            train = time.perf_counter() - start
            cold()
            plain_raw = plain_decode_seconds(raw, tuple(FEATURES), 2, repeats=1)
            out = ROOT / "work" / f"predictions-{index}"
            cold()
            start = time.perf_counter()
            predict_lake(model, str(ROOT / "raw"), str(out), client=client)
            predict = time.perf_counter() - start
            shutil.rmtree(out)
            rounds.append({"train_ratio": plain_shuffled / train, "predict_ratio": plain_raw / predict})
            print(
                f"round {index + 1}: plain decode shuffled {plain_shuffled:.2f} s, AdaSSP pass {train:.2f} s "
                f"(ratio {plain_shuffled / train:.2f}); plain decode raw {plain_raw:.2f} s, predict "
                f"{predict:.2f} s (ratio {plain_raw / predict:.2f})",
                flush=True,
            )
    finally:
        client.close()
    medians = {key: float(np.median([r[key] for r in rounds])) for key in rounds[0]}
    where = "cold" if args.cold else "page cache"
    print(f"medians ({where}): {json.dumps(medians)}")
    record = ROOT / "results.json"
    results = json.loads(record.read_text()) if record.exists() else []
    results.append(
        {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "reads": where, "rounds": rounds, "medians": medians}
    )
    record.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
