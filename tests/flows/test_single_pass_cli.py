"""A single pass stays a single pass, through the CLI: each way a careless operator could read rows twice
or release twice, as they would meet it, refused with one line.

The CLI runs in subprocesses that share one Prefect API server (``cli_prefect_api``: ``PREFECT_API_URL``),
so no command waits for a temporary server of its own; the killed-train test starts its own on purpose.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from dpstream.checkpoint import CheckpointPolicy, CheckpointStore
from dpstream.coordinator import InMemoryExecutor, execute
from dpstream.pipelines import lake_blocks, read_manifest
from dpstream.pipelines.shuffle.generations import COMMITS, GenerationStore
from dpstream.privacy import Ledger
from tests.pipelines.conftest import DIM, local_put, make_table, write_lake

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("cli_prefect_api")  # one Prefect API for the module's CLI runs
FEATURES = [f"x{j}" for j in range(DIM)]


def dpstream(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def start(*args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "dpstream.flows.cli.main", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def write_config(
    folder: Path, raw: Path, *, algorithm: str = "", cluster: str = "", lifetime: float = 8.0
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{f}"' for f in FEATURES)
    path = folder / "pipeline.toml"
    path.write_text(f"""
[lake]
url = "{raw}"
features = [{listed}]
label = "y"
shuffled_url = "{folder / "shuffled"}"
rows_per_file = 4000

[algorithm]
{algorithm or 'name = "auto"'}

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = {lifetime}
ledger_url = "{folder / "ledger"}"

[checkpoint]
url = "{folder / "ledger" / "_checkpoints"}"
every_steps = 1

[cluster]
n_workers = 1
{cluster or 'prepare_on = "flow"'}
""")
    return path


LONG_DPSGD = 'name = "dpsgd"\nbatch_size = 40\nclip_norm = 4.0'  # 400 small steps on 16,000 rows


def one_line(result, code: int, *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def ledger_runs(ledger: Path) -> dict[str, str]:
    return {p.stem: json.loads(p.read_text())["status"] for p in ledger.glob("lake-*/runs/*.json")}


def wait_for_step(folder: Path, run_id: str, step: int, process, timeout: float = 240) -> None:
    store = CheckpointStore(CheckpointPolicy(str(folder / "ledger" / "_checkpoints")))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        try:
            saved = store.load(run_id)
        except Exception:  # noqa: BLE001 - a checkpoint being replaced: look again
            saved = None
        if saved is not None and saved.step >= step:
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not reach step {step}")


def replay(config_path: Path, run_id: str, generation: str):
    """The run's model recomputed in process from its checkpoint's key on the given generation, from the
    run plan the flow builds (``plan_run``)."""
    from dpstream.flows.assembly.loading import load_inputs
    from dpstream.flows.assembly.planning import plan_run
    from dpstream.pipelines.conversion.convert import read_convert_record

    inputs = load_inputs(config_path)
    config = inputs.config
    store = CheckpointStore(CheckpointPolicy(config.checkpoint.url))
    key = store.load(run_id).key
    manifest = read_manifest(config.lake.shuffled_url, generation=generation)
    training, _ = manifest.split_last_file()
    record = read_convert_record(config.lake.url, config.lake.storage_options)
    plan = plan_run(inputs, training, None, record)
    return execute(
        plan,
        InMemoryExecutor(plan.model, lake_blocks(training)),
        initial_params=plan.model.init_params(training.num_features),
        key=key,
    ).params


def pinned(folder: Path, run_id: str) -> str:
    (entry,) = [
        e
        for lake in (folder / "ledger").glob("lake-*")
        for e in Ledger(str(folder / "ledger")).lake(lake.name).entries()
        if e.run_id == run_id
    ]
    return entry.data_version.rsplit("/", 1)[-1]


@pytest.mark.slow
def test_finding_1_a_reshuffle_under_a_running_train_changes_nothing_it_reads(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    project = tmp_path / "project"
    config = write_config(project, raw, algorithm=LONG_DPSGD, cluster='mode = "streaming"')
    train = start("train", config, "--run-id", "long", "--quiet")
    wait_for_step(project, "long", 50, train)
    os.kill(train.pid, signal.SIGSTOP)  # hold the run mid-pass while the lake is reshuffled under it
    try:
        reshuffled = dpstream("shuffle", config, "--reshuffle", "--quiet")
    finally:
        os.kill(train.pid, signal.SIGCONT)
    assert reshuffled.returncode == 0, reshuffled.stderr[-3000:]
    _, stderr = train.communicate(timeout=300)
    assert train.returncode == 0, stderr[-3000:]
    store = GenerationStore(str(project / "shuffled"))
    first, second = (store.read(n).generation for n in store.numbers())
    assert pinned(project, "long") == first  # the ledger records the generation the run read
    model = json.loads((project / "runs" / "long" / "model.json").read_text())
    assert replay(config, "long", first).tolist() == model["params"]  # every step read the pinned shuffle
    assert replay(config, "long", second).tolist() != model["params"]  # (the new one would differ)


def test_finding_2_two_shuffles_at_once_commit_one_generation_with_every_row(tmp_path):
    raw = tmp_path / "raw"
    for i in range(100):
        local_put(str(raw / f"part-{i:03d}.parquet"), make_table(200, i, start_id=200 * i))
    config = write_config(tmp_path / "project", raw)
    racers = [start("shuffle", config, "--quiet") for _ in range(2)]
    for racer in racers:
        _, stderr = racer.communicate(timeout=300)
        assert racer.returncode == 0, stderr[-3000:]
    store = GenerationStore(str(tmp_path / "project" / "shuffled"))
    assert store.numbers() == [1] and store.uncommitted() == []
    manifest = store.current()
    assert manifest.num_rows == 20_000
    ids = np.sort(np.concatenate([y for _, y in lake_blocks(manifest)]))
    assert np.array_equal(
        ids, np.sort(np.concatenate([make_table(200, i).column("y").to_numpy() for i in range(100)]))
    )


@pytest.mark.parametrize("how", ["copy", "symlink"])
def test_finding_3_a_duplicated_source_file_is_refused_before_anything_is_charged(tmp_path, how):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=3, rows=3000)
    copy = raw / "day=99.parquet"
    shutil.copyfile(raw / "day=01.parquet", copy) if how == "copy" else os.symlink(
        raw / "day=01.parquet", copy
    )
    config = write_config(tmp_path / "project", raw)
    one_line(dpstream("validate", config), 2, "day=01.parquet and day=99.parquet have the same content")
    one_line(
        dpstream("train", config, "--quiet"), 2, "day=01.parquet and day=99.parquet have the same content"
    )
    assert not (tmp_path / "project" / "ledger").exists() and not (tmp_path / "project" / "shuffled").exists()


@pytest.mark.slow
def test_findings_4_5_6_a_changed_shuffle_and_careless_outputs_are_refused(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    project = tmp_path / "project"
    config = write_config(project, raw)
    first = dpstream("train", config, "--run-id", "r1", "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    ledger = project / "ledger"
    manifest = read_manifest(str(project / "shuffled"))
    parts = manifest.paths()
    before = {p: Path(p).read_bytes() for p in parts}
    # A part copied over another, and a manifest that lists a part twice.
    shutil.copyfile(parts[1], parts[0])
    one_line(dpstream("train", config, "--run-id", "r2", "--quiet"), 2, "part-00000.parquet", "--reshuffle")
    Path(parts[0]).write_bytes(before[parts[0]])
    record = project / "shuffled" / COMMITS / "000001.json"
    original = record.read_text()
    document = json.loads(original)
    document["parts"][1] = dict(document["parts"][0])
    record.write_text(json.dumps(document))
    one_line(dpstream("train", config, "--run-id", "r3", "--quiet"), 2, "listed twice", "--reshuffle")
    record.write_text(original)
    assert ledger_runs(ledger) == {"r1": "committed"}  # nothing was charged for the refused runs ...
    assert sorted(os.listdir(ledger / "_checkpoints")) == ["r1"]  # ... and no key of theirs is left
    # Predictions inside the training lake, or inside the lake being scored.
    rows_before = dpstream("validate", config).stdout
    for out in (raw / "scored", raw / "a" / "b"):
        one_line(dpstream("predict", project / "runs" / "r1", raw, out), 2, "nothing was written")
        assert not out.exists()
    other = tmp_path / "new-batch"
    write_lake(local_put, str(other), files=1, rows=100)
    one_line(
        dpstream("predict", project / "runs" / "r1", other, raw / "p"), 2, "holds Parquet files (a lake)"
    )
    assert dpstream("validate", config).stdout == rows_before
    # The publish folder inside the checkpoints or the ledger: refused before anything is written.
    fingerprint = manifest.fingerprint
    for output in (ledger / "_checkpoints" / "r4", ledger / fingerprint / "runs"):
        one_line(
            dpstream("train", config, "--run-id", "r4", "--output", output, "--quiet"), 2, "privacy ledger"
        )
    assert (
        not (ledger / "_checkpoints" / "r4").exists()
        and not (ledger / fingerprint / "runs" / "model.json").exists()
    )
    assert dpstream("budget", "show", fingerprint, "--ledger", ledger).returncode == 0


def test_finding_7_the_only_worker_killed_mid_run_is_replaced_and_the_run_completes(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    project = tmp_path / "project"
    config = write_config(project, raw, algorithm=LONG_DPSGD, cluster='mode = "scatter"\nworker_timeout = 60')
    train = start("train", config, "--run-id", "kill", "--quiet")
    wait_for_step(project, "kill", 20, train)
    os.kill(train.pid, signal.SIGSTOP)
    workers = [
        p for p in psutil.Process(train.pid).children(recursive=True) if "spawn_main" in " ".join(p.cmdline())
    ]
    assert len(workers) == 1, [p.cmdline() for p in workers]
    workers[0].kill()
    os.kill(train.pid, signal.SIGCONT)
    _, stderr = train.communicate(timeout=240)
    assert train.returncode == 0, stderr[-3000:]
    model = json.loads((project / "runs" / "kill" / "model.json").read_text())
    assert replay(config, "kill", pinned(project, "kill")).tolist() == model["params"]


def test_finding_8_run_ids_are_never_paths(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=2, rows=4000)
    project = tmp_path / "project"
    config = write_config(project, raw)
    # A log folder of its own: tests on other xdist workers write theirs into the shared one meanwhile.
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, "DPSTREAM_LOG_DIR": str(logs)}
    before = set(logs.iterdir())
    for run_id in ("../../../outside/pwn", "nl\n", "x" * 300, ".hidden"):
        one_line(
            dpstream("train", config, "--run-id", run_id, "--quiet", env=env),
            2,
            "--run-id must be 1-64 characters",
        )
    assert set(logs.iterdir()) == before and not (tmp_path / "outside").exists()
    assert not (project / "ledger").exists() and not (project / "runs").exists()
    # A model.json whose run id is a path (edited by hand) is refused by predict before any log is written.
    trained = dpstream("train", config, "--run-id", "ok", "--quiet", env=env)
    assert trained.returncode == 0, trained.stderr[-3000:]
    edited = tmp_path / "edited"
    edited.mkdir()
    document = json.loads((project / "runs" / "ok" / "model.json").read_text())
    (edited / "model.json").write_text(json.dumps({**document, "run_id": "../../escape"}))
    before = set(logs.iterdir())
    one_line(
        dpstream("predict", edited, raw, tmp_path / "scored", env=env), 2, "run_id must be 1-64 characters"
    )
    assert len(before) == 1 and set(logs.iterdir()) == before and not (tmp_path / "scored").exists()
    # report refuses an edited privacy statement with one line instead of printing it.
    (edited / "model.json").write_text(
        json.dumps({**document, "privacy": {**document["privacy"], "epsilon": 0.1}})
    )
    one_line(dpstream("report", edited), 2, "the report was edited")


@pytest.mark.slow
def test_absurd_budgets_are_refused_and_the_operator_has_a_command_to_change_one(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=2, rows=4000)
    project = tmp_path / "project"
    config = write_config(project, raw, lifetime=1.0)
    text = config.read_text()
    config.write_text(text.replace("lifetime_epsilon = 1.0", "lifetime_epsilon = 1e300"))
    one_line(dpstream("validate", config), 2, "budget.lifetime_epsilon: must be at most 100")
    config.write_text(text.replace("epsilon = 1.0\n", "epsilon = true\n", 1))
    one_line(dpstream("validate", config), 2, "budget.epsilon: Input should be a valid number")
    config.write_text(text)
    assert not (project / "ledger").exists()
    first = dpstream("train", config, "--run-id", "a", "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    refused = dpstream("train", config, "--run-id", "b", "--quiet")
    assert refused.returncode == 3 and "budget set-lifetime" in refused.stderr.strip().splitlines()[-1]
    fingerprint = read_manifest(str(project / "shuffled")).fingerprint
    ledger = project / "ledger"
    asked = dpstream("budget", "set-lifetime", fingerprint, "--ledger", ledger, "--epsilon", "4")
    one_line(asked, 2, "lifetime budget epsilon=1, delta=1e-06 -> epsilon=4", "--confirm")
    one_line(
        dpstream(
            "budget", "set-lifetime", fingerprint, "--ledger", ledger, "--epsilon", "1e300", "--confirm"
        ),
        2,
        "at most 100",
    )
    done = dpstream("budget", "set-lifetime", fingerprint, "--ledger", ledger, "--epsilon", "4", "--confirm")
    assert done.returncode == 0, done.stderr
    # One lifetime budget: the ledger's record wins over the config's lifetime_epsilon = 1, and says so.
    again = dpstream("train", config, "--run-id", "b", "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        "budget.lifetime_epsilon = 1, delta = 1e-06) is not lake" in again.stderr
        and "records epsilon = 4" in again.stderr
    )
    assert ledger_runs(ledger) == {"a": "committed", "b": "committed"}
    shown = dpstream("budget", "show", config)  # the config names the lake and its ledger
    assert shown.returncode == 0 and fingerprint in shown.stdout and "b: mu=" in shown.stdout, shown.stderr
    one_line(dpstream("budget", "show", fingerprint), 2, "needs --ledger URL")


def test_a_killed_train_leaves_no_prefect_server_and_no_worker_behind(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    project = tmp_path / "project"
    config = write_config(project, raw, algorithm=LONG_DPSGD, cluster='mode = "streaming"')
    environment = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # its own temporary server
    train = start("train", config, "--run-id", "orphan", "--quiet", env=environment)
    wait_for_step(project, "orphan", 5, train)
    children = psutil.Process(train.pid).children(recursive=True)
    servers = [p for p in children if "prefect.server.api.server:create_app" in " ".join(p.cmdline())]
    assert len(servers) == 1 and children
    train.kill()  # SIGKILL: no exit handler runs
    train.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while (
        alive := [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == [], [" ".join(p.cmdline())[:120] for p in alive]
