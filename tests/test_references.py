"""Every dotted name (``dpstream.pipelines.shuffle.once.shuffle_once``) and every repository path
(``pipelines/lake/blocks.py``) that the README, docs/, BENCHMARKS.md and the code's own docstrings and
comments mention still exists: a reader who follows one lands on it, after any move or rename."""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"\bdpstream(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PATH = re.compile(
    r"(?<![\w/.-])((?:dpstream|pipelines|flows|tests|benchmarks|examples|infra|docs)/[\w/.-]+\.(?:py|md|toml|yaml|sh))"
)
FILE_SUFFIXES = (".py", ".md", ".toml", ".json", ".yaml", ".sh", ".txt")


def _texts() -> list[Path]:
    documents = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources = [
        path
        for folder in ("dpstream", "pipelines", "flows", "benchmarks", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "__pycache__" not in path.parts
    ]
    return documents + sources


@cache
def _resolves(reference: str) -> bool:
    """Whether the longest importable prefix of the name is a module whose attributes lead to the rest."""
    parts = reference.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def _unresolved() -> list[str]:
    wrong = []
    for path in _texts():
        shown = path.relative_to(ROOT)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in DOTTED.finditer(line):
                reference = match.group(0)
                if not reference.endswith(FILE_SUFFIXES) and not _resolves(reference):
                    wrong.append(f"{shown}:{number}: {reference}")
            for match in PATH.finditer(line):
                if not (ROOT / match.group(1)).exists():
                    wrong.append(f"{shown}:{number}: {match.group(1)} (no such file)")
    return wrong


def test_names_and_paths_the_text_mentions_exist():
    wrong = _unresolved()
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_a_stale_reference(tmp_path):
    """Not vacuous: a moved module and a missing file are both reported."""
    assert not _resolves("dpstream.pipelines.shuffle_io")
    assert not _resolves("dpstream.pipelines.shuffle.once.no_such_function")
    assert _resolves("dpstream.pipelines.shuffle.once.shuffle_once")
    assert PATH.search("see pipelines/lake/blocks.py for the reader").group(1) == "pipelines/lake/blocks.py"
    assert not (ROOT / "pipelines/lake.py").exists()
