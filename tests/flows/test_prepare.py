"""Validate and shuffle are one pair of functions (``dpstream.flows.assembly.prepare``) for the flows and the CLI:
the same refusals, the same warnings and one rule for the locations a shuffle protects."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.flows.test_flows import write_config
from tests.pipelines.conftest import local_put, write_lake

ROOT = Path(__file__).resolve().parents[2]


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            function = node.func
            names.add(function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", ""))
    return names


def test_only_prepare_calls_the_data_plane_validation_and_shuffle():
    flows = ROOT / "flows"
    callers = {
        path.relative_to(flows).as_posix()
        for path in flows.rglob("*.py")
        if {"validate_lake", "shuffle_once"} & _calls(path)
    }
    assert callers == {"assembly/prepare.py"}
    for entry_point in ("cli/shuffle.py", "flows.py"):
        assert {"validate", "shuffle"} <= _calls(flows / entry_point), entry_point
    assert "validate" in _calls(flows / "cli" / "validate.py")


def test_validate_and_shuffle_commands_warn_as_the_flow_does(tmp_path):
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    (raw / "notes.csv").write_text("a,b\n1,2\n")  # a stray file the lake does not read
    config = write_config(tmp_path, raw)
    for command in ("validate", "shuffle"):
        done = subprocess.run(
            [sys.executable, "-m", "dpstream.flows.cli.main", command, str(config)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "dpstream: warning: 1 file(s) in" in done.stderr and "notes.csv" in done.stderr, command
    assert (raw / "notes.csv").read_text() == "a,b\n1,2\n"  # the source is never modified


def test_validate_refuses_what_train_would_refuse(tmp_path):
    """`validate` says "valid" only for a config `train` accepts: a hyperparameter the chosen algorithm
    ignores is refused by both, with the same line (a `validate` that passed it would send the operator into a
    failing `train`)."""
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw, algorithm="auto")
    text = config.read_text()
    config.write_text(text.replace(text[text.index("learning_rate = ") :].splitlines()[0], "clip_norm = 0.5"))
    done = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", "validate", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    assert "clip_norm is not used by algorithm 'ssp'" in done.stderr.strip().splitlines()[-1]
    assert "valid" not in done.stdout
