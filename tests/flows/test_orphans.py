"""No process outlives a `dpstream train` that is stopped, however it is stopped.

`train` starts a temporary Prefect API server (uvicorn) and a Dask LocalCluster (nanny, workers, the
multiprocessing resource tracker). A tester saw the server still running, adopted by init, minutes after
`timeout 300 dpstream train` had sent SIGTERM. Here each of SIGTERM, SIGINT, SIGHUP and SIGKILL is sent to
the command alone (not its process group: its children get no signal of their own) once the server and a
Dask worker run, and every descendant seen while it ran must be gone shortly after. A signal that can be
handled ends the command with one line and 128 + the signal's number.

A signal during the imports or Prefect's start-up, before the command's own handling begins, gives one
line too, not a traceback (the console script answers signals from its first moment). `serve` keeps no
process either, its Prefect runner included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from tests.flows.test_release_safety import write_config
from tests.pipelines.conftest import local_put, write_lake
from tests.terminal import as_terminal_job

ROOT = Path(__file__).resolve().parents[2]
SERVER = "prefect.server.api.server:create_app"
WORKER = "multiprocessing.spawn"  # a Dask nanny's worker process
GONE_WITHIN = 30.0  # seconds after the command ended


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A small lake and a config whose training takes longer than the test waits (tiny batches)."""
    folder = tmp_path_factory.mktemp("orphans")
    write_lake(local_put, str(folder / "raw"), files=4, rows=5000)
    config = write_config(folder / "project", folder / "raw", lifetime=100.0)
    config.write_text(config.read_text().replace("batch_size = 500", "batch_size = 8"))
    return config


def start_command(config: Path, logs: Path, *command: str) -> subprocess.Popen:
    """`dpstream train CONFIG` (or ``command``) as the console script runs it (``run()``), with a temporary
    Prefect server of its own (no PREFECT_API_URL), in a session of its own as a terminal job would be."""
    environment = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    environment["DPSTREAM_LOG_DIR"] = str(logs)
    return subprocess.Popen(
        [sys.executable, "-m", "dpstream.flows.cli.main", *(command or ("train", str(config), "--quiet"))],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_terminal_job,
    )


class Descendants:
    """Every process seen below ``pid`` while it runs, with its command line."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, tuple[psutil.Process, str]] = {}

    def scan(self) -> None:
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            # Read again at every scan: a child seen between its fork and its exec shows its parent's
            # command line, and a Dask worker would never be recognised as one.
            try:
                self.seen[child.pid] = (self.seen.get(child.pid, (child,))[0], " ".join(child.cmdline()))
            except psutil.Error:
                pass

    def running(self, what: str) -> bool:
        return any(what in line and alive(process) for process, line in self.seen.values())

    def api(self) -> str | None:
        """The URL of the temporary Prefect API among them, from the server's command line."""
        for _, line in self.seen.values():
            if SERVER in line:
                words = line.split()
                return f"http://127.0.0.1:{words[words.index('--port') + 1]}/api"
        return None

    def survivors(self) -> list[str]:
        return [f"{p.pid}: {line[:160]}" for p, line in self.seen.values() if alive(p)]


def alive(process: psutil.Process) -> bool:
    """Running, as opposed to gone or a zombie (init in a container does not always reap)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop(
    command: subprocess.Popen, signum: int, ready: Callable[[Descendants], bool], group: bool = False
) -> tuple[int, str]:
    """Once ``ready(tree)``, send ``signum`` to the command alone (``group``: to its whole process group,
    as a closed terminal or ``timeout`` does) and wait for it to end; then every process seen below it
    must be gone within ``GONE_WITHIN`` seconds. Returns (exit code, stderr). Whatever happens, nothing
    started here is left running."""
    tree = Descendants(command.pid)
    try:
        deadline = time.monotonic() + 240
        while not ready(tree):
            assert command.poll() is None and time.monotonic() < deadline, command.communicate()[1][-3000:]
            tree.scan()
            time.sleep(0.05)
        if group:
            os.killpg(command.pid, signum)  # the command leads its own session and group
        else:
            os.kill(command.pid, signum)
        deadline = time.monotonic() + 120
        while command.poll() is None and time.monotonic() < deadline:
            tree.scan()  # what it starts while it stops counts too
            time.sleep(0.05)
        assert command.poll() is not None, "the command did not end within 120 s of the signal"
        deadline = time.monotonic() + GONE_WITHIN
        while (survivors := tree.survivors()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert survivors == [], survivors
        return command.returncode, command.communicate(timeout=30)[1]
    finally:
        for process, _ in [(command, ""), *tree.seen.values()]:
            try:
                process.kill()
            except (psutil.Error, ProcessLookupError):
                pass


@pytest.mark.parametrize(
    ("signum", "group"),
    [
        (signal.SIGTERM, False),
        (signal.SIGINT, False),
        (signal.SIGHUP, False),
        (signal.SIGKILL, False),
        (signal.SIGHUP, True),  # a closed terminal, `timeout -s HUP`: the resource tracker must survive it
        (signal.SIGTERM, True),  # `timeout`
    ],
)
def test_a_stopped_train_leaves_no_process_behind(project, tmp_path, signum, group):
    train = start_command(project, tmp_path / "logs")
    code, stderr = stop(train, signum, lambda tree: tree.running(SERVER) and tree.running(WORKER), group)
    if signum == signal.SIGKILL:
        assert code == -signal.SIGKILL
        return
    assert code == 128 + signum, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("dpstream: interrupted"), lines[0]
    assert "--run-id" in lines[0]  # how to resume the run


def handles_signals(pid: int) -> bool:
    """Whether the process catches SIGTERM and SIGHUP: the console script's first act (a Python process
    catches only SIGINT by default)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    except OSError:  # it ended: the caller says how
        return False
    return all(caught & (1 << (s - 1)) for s in (signal.SIGTERM, signal.SIGHUP))


@pytest.mark.parametrize("after", [0.0, 1.5, 4.5])
def test_ctrl_c_during_start_up_prints_one_line(project, tmp_path, after):
    """Ctrl-C while `train` imports, loads its config or starts Prefect: one line, exit 130, no child
    left. ``after`` counts from the moment the console script handles signals (before it, the Python
    interpreter itself is still starting)."""
    train = start_command(project, tmp_path / "logs")
    since: list[float] = []

    def ready(tree: Descendants) -> bool:
        if not since and handles_signals(train.pid):
            since.append(time.monotonic())
        return bool(since) and time.monotonic() - since[0] >= after

    code, stderr = stop(train, signal.SIGINT, ready)
    assert code == 130, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("dpstream: interrupted; "), lines[0]


def deployments(api: str) -> list[str]:
    try:
        response = httpx.post(f"{api}/deployments/filter", json={"limit": 10}, timeout=5)
        return [deployment["name"] for deployment in response.json()] if response.is_success else []
    except httpx.HTTPError:
        return []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_serve_leaves_no_process_behind(project, tmp_path, signum):
    """`serve` runs Prefect's runner, which installs a SIGTERM handler of its own once it starts (it exited
    0 after a stop it did not wait for): the signal is sent once the runner's deployment exists."""
    serve = start_command(project, tmp_path / "logs", "serve", str(project), "--cron", "0 2 * * *")
    created: list[float] = []

    def ready(tree: Descendants) -> bool:
        api = tree.api()
        if not created and api is not None and "nightly" in deployments(api):
            created.append(time.monotonic())
        return bool(created) and time.monotonic() - created[0] >= 1.0  # the runner starts right after

    code, stderr = stop(serve, signum, ready)
    if signum == signal.SIGKILL:
        assert code == -signal.SIGKILL
        return
    assert code == 128 + signum, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and lines[-1] == (
        "dpstream: interrupted (SIGTERM); serving 'nightly' stopped, with any flow run it had started; run the "
        "same command to serve again"
    ), stderr[-3000:]


def test_sigterm_during_predict_unwinds_as_ctrl_c_does(tmp_path):
    """`predict` cleans up as it unwinds (its unfinished parts removed): SIGTERM takes that path too, under
    the console script, and ends with one line and 143."""
    import json

    from tests.flows.test_predict_interrupt import INTERRUPTING
    from tests.pipelines.test_predict import document

    terminating = INTERRUPTING.replace(
        "        raise KeyboardInterrupt",
        "        os.kill(os.getpid(), signal.SIGTERM)\n        time.sleep(30)",
    ).replace(
        "from dpstream.flows.cli.main import main\nsys.exit(main(sys.argv[1:]))",
        "from dpstream.flows.cli.main import run\nrun()",
    )
    assert "SIGTERM" in terminating and "run()" in terminating
    lake, run, out = tmp_path / "lake", tmp_path / "run", tmp_path / "scored"
    write_lake(local_put, str(lake), files=2, rows=500)
    run.mkdir()
    (run / "model.json").write_text(json.dumps(document()))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, time\n" + terminating,
            "predict",
            str(run),
            str(lake),
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DPSTREAM_LOG_DIR": str(tmp_path / "logs")},
        timeout=300,
    )
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(
        f"dpstream: interrupted (SIGTERM); scoring stopped and nothing was written to {out}"
    )
    assert not out.exists()
