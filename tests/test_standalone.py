"""The repository stands alone: nothing in it reads or cites a folder beside it, and a fresh clone with
nothing next to it converts the California CSV it ships and validates the config that conversion writes.

The clone's own code must run, not this checkout's: the package is installed in editable mode, and its
import hook (appended to ``sys.meta_path``) maps ``dpstream.flows`` and ``dpstream.pipelines`` to this
checkout's folders whatever ``PYTHONPATH`` says. So the clone's commands run with a ``sitecustomize``
module on ``PYTHONPATH`` that puts a finder for the clone's three folders first; every Python process
started from there (the CLI, its Dask workers) imports the clone's files, which the test checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_newcomer import readme_path

ROOT = Path(__file__).resolve().parents[1]
CSV = Path("examples", "data", "california_housing", "housing.csv")

# What a file beside the repository would be reached by; spelled in parts so this file does not match.
SIBLING = "shared"
FORBIDDEN = ("../" + SIBLING, *(f"{SIBLING}/{folder}" for folder in ("spec", "data", "seeds")))
# Citations that only made sense with that folder at hand: the papers by their file numbers there, and
# the design document under its old name (it is docs/design.md).
STALE_CITATIONS = re.compile("|".join([r"\bseeds? 00\d", r"\bspec" + " §", r"\bDESIGN" + r"\.md"]))

# Installed first on sys.meta_path by every Python process of the clone's walk (see the module doc).
SITECUSTOMIZE = """
import importlib.util
import sys

_FOLDERS = {{"dpstream": "dpstream", "dpstream.flows": "flows", "dpstream.pipelines": "pipelines"}}


class _CloneFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in _FOLDERS:
            return None
        folder = {clone!r} + "/" + _FOLDERS[name]
        return importlib.util.spec_from_file_location(
            name, folder + "/__init__.py", submodule_search_locations=[folder]
        )


sys.meta_path.insert(0, _CloneFinder)
"""


def tracked_text_files(root: Path) -> dict[str, str]:
    """Every file git tracks under ``root`` (as it is in the working tree), by path, that reads as UTF-8 text."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    texts = {}
    for name in filter(None, listed.split("\0")):
        path = root / name
        if not path.is_file():  # deleted in the working tree, or a submodule
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to list")
    return tracked_text_files(ROOT)


def test_no_tracked_file_reads_or_cites_a_folder_beside_the_repository(texts):
    found = [
        f"{name}:{number}: {line.strip()[:120]}"
        for name, text in texts.items()
        for number, line in enumerate(text.splitlines(), 1)
        if any(pattern in line for pattern in FORBIDDEN)
    ]
    assert not found, "files that read or cite a folder beside the repository:\n" + "\n".join(found)


def test_no_tracked_file_cites_the_papers_or_the_design_by_their_old_names(texts):
    found = [
        f"{name}:{number}: {line.strip()[:120]}"
        for name, text in texts.items()
        for number, line in enumerate(text.splitlines(), 1)
        if STALE_CITATIONS.search(line)
    ]
    assert not found, (
        "cite papers by authors, title and arXiv id, and the design as docs/design.md:\n" + "\n".join(found)
    )


def test_the_shipped_data_is_tracked(texts):
    assert CSV.as_posix() in texts and CSV.with_name("README.md").as_posix() in texts


def clone_walk(source: Path, folder: Path) -> dict[str, subprocess.CompletedProcess]:
    """Clone ``source`` into ``folder / "alone" / "clone"`` (nothing beside it) and run the README's
    convert command on the clone's CSV, then ``validate`` on the config it writes, from the clone's files.
    Returns the three runs: the import check, convert and validate."""
    clone = folder / "alone" / "clone"
    subprocess.run(["git", "clone", "--quiet", str(source), str(clone)], check=True, timeout=300)
    assert sorted(p.name for p in clone.parent.iterdir()) == ["clone"]
    boot = folder / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(SITECUSTOMIZE.format(clone=str(clone)))
    scratch = {name: folder / name for name in ("tmp", "logs", "prefect", "dask")}
    for path in scratch.values():
        path.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "PYTHONPATH": os.pathsep.join([str(boot), str(clone)]),
        "TMPDIR": str(scratch["tmp"]),
        "DPSTREAM_LOG_DIR": str(scratch["logs"]),
        "PREFECT_HOME": str(scratch["prefect"]),
        "DPSTREAM_PREFECT_HOME": str(scratch["prefect"] / "dpstream"),
        "DASK_TEMPORARY_DIRECTORY": str(scratch["dask"]),
    }

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=clone, env=env, capture_output=True, text=True, timeout=600
        )

    imports = python(
        "-c",
        "import dpstream, dpstream.flows.cli.main, dpstream.pipelines.conversion.convert as c; "
        "print(dpstream.__file__); print(dpstream.flows.cli.main.__file__); print(c.__file__)",
    )
    commands, _ = readme_path(clone)
    convert = commands[0]
    assert convert[:4] == ["dpstream", "convert", "housing.csv", "lake/raw"], convert
    lake = folder / "lake" / "raw"
    ran = {"imports": imports}
    ran["convert"] = python(
        "-m", "dpstream.flows.cli.main", "convert", str(clone / CSV), str(lake), *convert[4:]
    )
    ran["validate"] = python("-m", "dpstream.flows.cli.main", "validate", str(lake.parent / "pipeline.toml"))
    return ran


def test_a_clone_with_nothing_beside_it_converts_and_validates_the_readme_csv(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    ran = clone_walk(ROOT, tmp_path)
    clone = tmp_path / "alone" / "clone"
    imports = ran["imports"]
    assert imports.returncode == 0, imports.stderr[-3000:]
    for path in imports.stdout.split():
        assert Path(path).resolve().is_relative_to(clone.resolve()), imports.stdout
    convert, validate = ran["convert"], ran["validate"]
    assert convert.returncode == 0, convert.stderr[-3000:]
    assert (tmp_path / "lake" / "pipeline.toml").is_file()
    assert validate.returncode == 0, validate.stderr[-3000:]
    # The README's numbers for its own config hold for the one convert writes: the same lake and split.
    assert "20,640 rows in 1 file" in validate.stdout, validate.stdout
    assert "Training will use 16,512 rows and hold out 4,128" in validate.stdout, validate.stdout
