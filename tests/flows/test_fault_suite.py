"""Real storage faults under `dpstream train`, on small tmpfs mounts made for each test: a publish folder
that fills up, a read-only ledger, a shuffle that runs out of space.

After each fault the invariants hold: every failure is one line naming the file and the fix (no
traceback); charges equal releases (a run that released values is charged once, one that did not is
charged nothing); every committed release is, or after the fix is, published; the source is unchanged.
Mounting needs root (as on the project's machines and CI); elsewhere the tests say so and skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.flows.test_release_safety import dpstream, tree, write_config
from tests.pipelines.conftest import local_put, make_table

pytestmark = pytest.mark.usefixtures("cli_prefect_api")


class Mount:
    """A tmpfs of ``size`` at ``path``: resized, or made read-only, as a test needs."""

    def __init__(self, path: Path, size: str):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._mount("-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path))

    @staticmethod
    def _mount(*args: str) -> None:
        done = subprocess.run(["mount", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"mount {' '.join(args)}: {done.stderr.strip()}")

    def remount(self, options: str) -> None:
        self._mount("-o", f"remount,{options}", str(self.path))

    def release(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture()
def mounts(tmp_path) -> Iterator:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the project's machines and CI run as root)")
    made: list[Mount] = []

    def mount(name: str, size: str) -> Mount:
        made.append(Mount(tmp_path / f"mnt-{name}-{uuid.uuid4().hex[:6]}", size))
        return made[-1]

    yield mount
    for each in made:
        each.release()


def _lake(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    for index in range(3):  # 9,000 rows: two training files and one held out at 4,000 rows per file
        local_put(str(raw / f"part-{index}.parquet"), make_table(3000, index, start_id=index * 3000))
    return raw


def _charges(ledger: Path) -> dict[str, str]:
    return {p.stem: json.loads(p.read_text())["status"] for p in ledger.glob("*/runs/*.json")}


def _one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[0]


@pytest.mark.slow
def test_a_full_publish_folder_names_the_file_and_the_release_follows_the_fix(tmp_path, mounts):
    raw = _lake(tmp_path)
    source = tree(raw)
    config = write_config(tmp_path / "project", raw, lifetime=4.0)
    tiny = mounts("out", "24k")  # the claim and model.json fit; the plots do not
    run = ("train", config, "--run-id", "full", "--output", tiny.path / "full", "--quiet")
    failed = dpstream(*run)
    assert failed.returncode != 0
    line = _one_line(failed)
    assert str(tiny.path / "full") in line and "space" in line.lower(), line
    # The values were released (the run trained to its end): charged, once, and kept for the resume.
    assert _charges(tmp_path / "ledger") == {"full": "committed"}
    partial = dpstream("report", tiny.path / "full")  # what did land is no release yet
    assert partial.returncode == 2 and "holds an incomplete release" in partial.stderr, partial.stderr
    tiny.remount("size=4m")
    again = dpstream(*run)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((tiny.path / "full" / "model.json").read_text())["run_id"] == "full"
    assert dpstream("report", tiny.path / "full").returncode == 0
    assert _charges(tmp_path / "ledger") == {"full": "committed"}
    assert tree(raw) == source


def test_a_read_only_ledger_names_it_and_charges_nothing(tmp_path, mounts):
    raw = _lake(tmp_path)
    source = tree(raw)
    config = write_config(tmp_path / "project", raw, lifetime=4.0)
    ledger = mounts("ledger", "4m")
    text = config.read_text().replace(f'"{tmp_path / "ledger"}"', f'"{ledger.path}"')
    config.write_text(text)
    ledger.remount("ro")
    failed = dpstream("train", config, "--run-id", "ro", "--quiet")
    assert failed.returncode != 0
    line = _one_line(failed)
    assert str(ledger.path) in line and "read-only" in line, line
    assert not list((tmp_path / "project").glob("runs/ro/model.json"))  # nothing published
    ledger.remount("rw")
    assert _charges(ledger.path) == {}
    assert tree(raw) == source


@pytest.mark.slow
def test_a_shuffle_that_runs_out_of_space_names_the_file(tmp_path, mounts):
    raw = _lake(tmp_path)
    source = tree(raw)
    config = write_config(tmp_path / "project", raw, lifetime=4.0)
    shuffled = mounts("shuffled", "64k")  # the lake's 9,000 rows take ~400 kB
    text = config.read_text().replace(f'"{tmp_path / "project" / "shuffled"}"', f'"{shuffled.path}"')
    config.write_text(text)
    failed = dpstream("train", config, "--run-id", "space", "--quiet")
    assert failed.returncode != 0
    line = _one_line(failed)
    assert str(shuffled.path) in line and "space" in line.lower(), line
    assert _charges(tmp_path / "ledger") == {}
    assert tree(raw) == source
