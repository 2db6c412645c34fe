"""`dpstream train` against a scheduler without workers stops within `[cluster] worker_timeout`
with one line naming the scheduler and the fix, instead of waiting for ever with one task queued; the
lake's ledger holds no charge for it (nothing was released)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.flows.test_schedule import free_port
from tests.flows.test_single_pass_cli import dpstream, ledger_runs, one_line, write_config
from tests.pipelines.conftest import local_put, write_lake


@pytest.mark.slow
def test_train_against_a_scheduler_without_workers_stops_with_one_line(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw), files=2, rows=4000)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        config = write_config(tmp_path / "project", raw, cluster=f'address = "{address}"\nworker_timeout = 5')
        started = time.monotonic()
        result = dpstream("train", config, "--run-id", "no-workers", "--quiet", timeout=240)
        elapsed = time.monotonic() - started
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)
    line = one_line(result, 1, f"no Dask worker was connected to {address} for 5 s", f"dask worker {address}")
    assert "cluster.worker_timeout" in line
    assert elapsed < 120, elapsed  # the timeout, plus the command's start, validation and the shuffle
    ledger = tmp_path / "project" / "ledger"
    assert ledger_runs(ledger) == {} and not list(ledger.glob("lake-*/runs/*"))  # nothing charged
