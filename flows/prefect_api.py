"""The Prefect API a CLI command's flow reports to, and a temporary one that cannot outlive the command.

With ``PREFECT_API_URL`` set, flows report to that server and nothing is started. Without it Prefect
would start its own temporary server (``SubprocessASGIServer``) and stop it at exit; a ``dpstream
train`` killed with SIGKILL, or by SIGTERM's default action, runs no exit handler, and that server
(~240 MB) was left running. So the CLI starts the same server itself, as a child that the kernel kills
when the CLI dies (``PR_SET_PDEATHSIG``, Linux), points Prefect at it for the command, and stops it when
the command ends.

``PR_SET_PDEATHSIG`` follows the *thread* that started the child: the server dies when that thread
ends. ``prefect_api`` is entered on the main thread, which ends only with the process. Prefect's
settings live in a context variable that new threads do not inherit, and a Prefect client made in such
a thread with no API URL starts a server of its own, from that thread and without the death signal;
so the block also makes the server's URL the process-wide default (``_everywhere``).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

__all__ = ["prefect_api", "server_home", "flow_run_url", "mark_flow_run_crashed", "command_owns_sigterm"]

STARTUP_ATTEMPTS = 3

# Run as `python -c _BOOTSTRAP PARENT_PID -m uvicorn ...`: the child asks the kernel for SIGKILL when its
# parent dies (PR_SET_PDEATHSIG = 1, kept across exec), checks the parent did not die first, then becomes
# the server. SIGKILL, not SIGTERM: uvicorn answers SIGTERM with a graceful shutdown that first finishes
# its start-up (measured: 5 s on 2 cores), and nobody is left to report to. Done in the child's own
# interpreter rather than in a preexec_fn, which is unsafe in a process that has threads.
_BOOTSTRAP = """
import ctypes, os, signal, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    sys.exit(1)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _drain_prefect_workers(timeout: float = 10.0) -> None:
    """Send the log records and events Prefect still queues for the API before the server stops: its
    background workers would otherwise retry a server that is gone for a minute at exit."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=timeout, at_exit=False)


def flow_run_url(flow_run_id: str | None, user_api: bool) -> str | None:
    """The flow run's page in the Prefect UI, where the user's own server has one (``user_api``: the
    command reported to ``PREFECT_API_URL``); None on dpstream's temporary server, which has no UI and
    stops with the command."""
    if flow_run_id is None or not user_api:
        return None
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value()
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}" if ui else None


def server_home() -> Path:
    """Where dpstream's temporary Prefect servers keep their database: ``DPSTREAM_PREFECT_HOME``, else
    ``$XDG_CACHE_HOME/dpstream/prefect`` (``~/.cache/dpstream/prefect``). Never the user's Prefect home
    (``~/.prefect``): a database there belongs to the user's own server, which another Prefect version
    may have migrated, and the records of dpstream's commands do not belong in it."""
    explicit = os.environ.get("DPSTREAM_PREFECT_HOME")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "dpstream" / "prefect"


def _server_environment(home: Path) -> dict[str, str]:
    """The server's environment: the user's Prefect settings, but dpstream's own home and database,
    no UI and no analytics."""
    from prefect.settings import get_current_settings

    environment = {
        **os.environ,
        **get_current_settings().to_environment_variables(exclude_unset=True),
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    for name in [name for name in environment if name.endswith("DATABASE_CONNECTION_URL")]:
        del environment[name]
    environment["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{home / DATABASE}"
    environment.pop("PREFECT_API_URL", None)
    return environment


DATABASE = "prefect.db"
MAX_DATABASE_BYTES = 256 << 20  # past commands' flow runs, logs and events accumulate there
# What alembic says when the database holds a revision this Prefect does not know: another (newer)
# Prefect version migrated it.
OTHER_VERSION = b"Can't locate revision"


@contextlib.contextmanager
def prefect_api(log_file: Path | None = None) -> Iterator[str]:
    """Within the block, Prefect reports to ``PREFECT_API_URL`` or to a temporary server of this process
    (module docstring), its database under ``server_home()``; yields the API URL. The server's own
    output goes to ``log_file``."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = server_home()
    home.mkdir(parents=True, exist_ok=True)
    database = home / DATABASE
    if database.exists() and database.stat().st_size > MAX_DATABASE_BYTES:
        for suffix in ("", "-wal", "-shm"):  # only past commands' records: a new one is created (~4 s)
            Path(f"{database}{suffix}").unlink(missing_ok=True)
    # The output is read back when a start fails (``_start``); a temporary file when no log is kept.
    sink = open(log_file, "a+b") if log_file is not None else tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    try:
        server, url = _start(_server_environment(home), sink, home)
        try:
            with temporary_settings(updates={PREFECT_API_URL: url}), _everywhere():
                try:
                    yield url
                finally:
                    _drain_prefect_workers()
        finally:
            _stop(server)
    finally:
        sink.close()


def _start(environment: dict[str, str], sink, home: Path) -> tuple[subprocess.Popen, str]:
    """A healthy server, in up to ``STARTUP_ATTEMPTS`` starts. Servers starting at once on one database
    race to register Prefect's block schemas and the loser exits ("UNIQUE constraint failed:
    block_schema.checksum", measured with 4 commands started together); the winner has registered them
    by then, so a new server on a new port starts. A database another Prefect version migrated holds
    only the records of dpstream's earlier commands: it is moved aside (one line in the log) and the
    next start creates a new one."""
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    startup_timeout = float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        written = sink.seek(0, os.SEEK_END)
        server, url = _start_server(environment, sink)
        if _healthy(server, url, time.monotonic() + startup_timeout):
            return server, url
        if server.poll() is None:
            _stop(server)
            raise RuntimeError(
                f"the temporary Prefect API server did not answer within {startup_timeout:g} s; raise "
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS or set PREFECT_API_URL"
            )
        sink.seek(written)
        if OTHER_VERSION in sink.read() and (home / DATABASE).exists():
            aside = home / f"{DATABASE}.other-version-{int(time.time())}"
            for suffix in ("", "-wal", "-shm"):  # SQLite's write-ahead log belongs to that database
                if (home / f"{DATABASE}{suffix}").exists():
                    (home / f"{DATABASE}{suffix}").rename(f"{aside}{suffix}")
            sink.write(
                f"dpstream: {home / DATABASE} was migrated by another Prefect version; moved to {aside}\n".encode()
            )
            continue
        if attempt < STARTUP_ATTEMPTS:
            time.sleep(random.uniform(0.5, 2.0))
    raise RuntimeError(
        f"the temporary Prefect API server exited with code {server.returncode} while starting "
        f"({STARTUP_ATTEMPTS} tries); its output is in the log file. Set PREFECT_API_URL to use a running "
        f"server, or remove {home} (dpstream's own Prefect database) if it is damaged"
    )


def _everywhere() -> contextlib.AbstractContextManager[None]:
    """The current settings (the temporary server's URL) as the default of every thread and context
    that holds none of its own, as Prefect's test harness does for its server; without it a client made
    in a new thread starts another server (module docstring). A Prefect without the hook keeps the
    per-context settings."""
    import prefect.context

    replace_global = getattr(prefect.context, "_temporary_global_settings_context", None)
    if replace_global is None:
        return contextlib.nullcontext()
    return replace_global(prefect.context.get_settings_context())


@contextlib.contextmanager
def command_owns_sigterm(runner: bool = False) -> Iterator[None]:
    """Within the block SIGTERM is answered by the handler the command set before it
    (``dpstream.flows.cli.interrupt.exit_on_interrupt``), not by Prefect's.

    For a flow run Prefect's engine swaps in a handler that raises ``TerminationSignal`` and lets the run
    unwind (report Crashed, close the cluster) before the default handler kills the process. That
    exception can be swallowed where the signal lands (measured: inside Dask's garbage-collector callback
    it was only printed, and the run went on to finish), and the unwinding outlives a ``timeout``. The
    CLI stops its tree at once instead and reports the flow run Crashed itself (``mark_flow_run_crashed``).
    With ``runner`` (``serve``), the handler Prefect's runner installs when it starts calls the command's
    too: its own exits 0 after a stop it does not wait for."""
    import prefect.flow_engine as engine

    patched: list[tuple[object, str, object]] = []
    if hasattr(engine, "capture_sigterm"):  # another Prefect keeps its own handling
        patched.append((engine, "capture_sigterm", contextlib.nullcontext))
    if runner:
        from prefect.runner.runner import Runner

        ours = signal.getsignal(signal.SIGTERM)
        if callable(ours) and hasattr(Runner, "handle_sigterm"):
            patched.append((Runner, "handle_sigterm", lambda self, *args: ours(signal.SIGTERM, None)))
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patched]
    for owner, name, replacement in patched:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def _start_server(environment: dict[str, str], sink) -> tuple[subprocess.Popen, str]:
    """Prefect's API server (uvicorn) on a free loopback port, as a child the kernel stops with us."""
    import prefect

    port = _free_port()
    # Its own session: a terminal's Ctrl-C reaches the command's process group but not the server, which
    # then still takes the interrupted flow run's Crashed state (mark_flow_run_crashed) before it stops.
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _BOOTSTRAP,
            str(os.getpid()),
            "-m",
            "uvicorn",
            "--app-dir",
            str(prefect.__module_path__.parent),
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ],
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=sink,
        stderr=sink,
        start_new_session=True,
    )
    return server, f"http://127.0.0.1:{port}/api"


def _healthy(server: subprocess.Popen, url: str, deadline: float) -> bool:
    """Whether the server answers its health check before ``deadline``; False once it has exited or
    the deadline passed."""
    with httpx.Client() as client:
        while server.poll() is None and time.monotonic() < deadline:
            try:
                if client.get(f"{url}/health", timeout=2.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def mark_flow_run_crashed(message: str, cause: str = "Ctrl-C", timeout: float = 5.0) -> None:
    """Report the flow run this process is running as Crashed, with ``message``, to the Prefect API.

    A command stopped by a signal (``cause``: Ctrl-C, SIGTERM, SIGHUP) exits without unwinding
    (``dpstream.flows.cli.interrupt``), so Prefect's engine never reports it and the server would show the
    run RUNNING for ever. Crashed is the state Prefect's engine gives a flow stopped by an interrupt
    signal. Called from the signal handler: the report runs in a thread of its own with a client of its
    own (the engine's client may be mid-request, holding its connection pool's lock, in the very frame
    the signal interrupted), told this command's API URL (a new thread does not inherit Prefect's
    settings), and is waited for at most ``timeout`` seconds; an API that does not answer by then is
    left as it is."""
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_API_URL

    context = FlowRunContext.get()
    flow_run = getattr(context, "flow_run", None)
    if flow_run is None:  # interrupted before the flow run began, or after it ended
        return
    api_url = PREFECT_API_URL.value()

    def report() -> None:
        from prefect.client.orchestration import get_client
        from prefect.settings import (
            PREFECT_API_REQUEST_TIMEOUT,
            PREFECT_API_URL,
            PREFECT_CLIENT_MAX_RETRIES,
            temporary_settings,
        )
        from prefect.states import Crashed

        try:
            with (
                temporary_settings(
                    {
                        PREFECT_API_URL: api_url,
                        PREFECT_API_REQUEST_TIMEOUT: timeout,
                        PREFECT_CLIENT_MAX_RETRIES: 0,
                    }
                ),
                get_client(sync_client=True) as client,
            ):
                client.set_flow_run_state(
                    flow_run.id, Crashed(message=f"interrupted ({cause}): {message}"), force=True
                )
        except Exception:  # noqa: BLE001 - any failure to report leaves the server's record as it was
            pass

    reporter = threading.Thread(target=report, name="dpstream-report-interrupt", daemon=True)
    reporter.start()
    reporter.join(timeout)
