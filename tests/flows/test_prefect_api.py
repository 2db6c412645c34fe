"""The temporary Prefect API server a CLI command starts (dpstream.flows.prefect_api)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
from dpstream.flows.prefect_api import prefect_api
import httpx
with prefect_api() as url:
    assert httpx.get(url + "/health", timeout=10).status_code == 200
print("up")
"""


@pytest.mark.slow
def test_the_server_keeps_its_own_database_and_moves_aside_one_another_prefect_migrated(tmp_path):
    """A user's ~/.prefect database is never the temporary server's; dpstream's own (under
    ~/.cache/dpstream/prefect) that another Prefect version migrated is moved aside with one log line."""
    import sqlite3

    home = tmp_path / "home"
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "DO_NOT_TRACK": "1",
    }
    log = tmp_path / "server.log"
    probe = PROBE.replace("prefect_api()", f"prefect_api(__import__('pathlib').Path({str(log)!r}))")

    def start() -> None:
        done = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == "up", done.stderr[-2000:]

    start()
    ours = home / ".cache" / "dpstream" / "prefect"
    assert (ours / "prefect.db").is_file() and not (home / ".prefect" / "prefect.db").exists()
    with sqlite3.connect(ours / "prefect.db") as database:  # as a newer Prefect would leave it
        database.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    start()
    moved = sorted(path.name for path in ours.glob("prefect.db.other-version-*"))
    assert [name.rsplit("-", 1)[-1] for name in moved[1:]] == ["shm", "wal"]  # its write-ahead log too
    aside = ours / moved[0]
    assert (ours / "prefect.db").is_file() and aside.stat().st_size > 0
    assert f"was migrated by another Prefect version; moved to {aside}" in log.read_text()


def test_a_flow_run_page_only_on_the_users_own_server():
    from dpstream.flows.prefect_api import flow_run_url

    assert flow_run_url("8f0c7b1e-0000-4000-8000-000000000000", user_api=False) is None  # no UI, gone
    assert flow_run_url(None, user_api=True) is None


@pytest.mark.slow
def test_commands_started_together_each_get_their_temporary_server(tmp_path):
    """Servers starting at once on a fresh database race to register Prefect's block schemas and the
    loser exits (measured: 1 of 4 commands started together failed with "exited with code 3"); each
    command now retries on a new port, so all of them run."""
    environment = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    environment["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    environment["DPSTREAM_PREFECT_HOME"] = str(
        tmp_path / "dpstream-prefect"
    )  # a fresh database, as on a first run
    probes = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [probe.communicate(timeout=600) for probe in probes]
    for probe, (stdout, stderr) in zip(probes, results, strict=True):
        assert probe.returncode == 0 and stdout.strip() == "up", stderr[-2000:]
