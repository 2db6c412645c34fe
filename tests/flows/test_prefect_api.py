"""The temporary Prefect API server a CLI command starts (dpstream.flows.prefect_api)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
from dpstream.flows.prefect_api import prefect_api
import httpx
with prefect_api() as url:
    assert httpx.get(url + "/health", timeout=10).status_code == 200
print("up")
"""


def test_commands_started_together_each_get_their_temporary_server(tmp_path):
    """Servers starting at once on a fresh database race to register Prefect's block schemas and the
    loser exits (measured: 1 of 4 commands started together failed with "exited with code 3"); each
    command now retries on a new port, so all of them run."""
    environment = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    environment["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # a fresh database, as on a first run
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
