"""The distribution installs one top-level package, ``dpstream``; the data plane and the orchestration are
``dpstream.pipelines`` and ``dpstream.flows``, mapped from their folders by pyproject.toml, and the DP core
imports neither (DESIGN.md's layers)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Every package the repository holds, by the dotted name it installs under."""
    mapped = {folder: name for name, folder in _setuptools()["package-dir"].items()}
    found = {}
    for init in sorted(ROOT.glob("*/**/__init__.py")):
        folder = init.parent.relative_to(ROOT)
        top, *rest = folder.parts
        if top in mapped:
            found[".".join([mapped[top], *rest])] = init.parent
        elif top == "dpstream":
            found[".".join(folder.parts)] = init.parent
    return found


def test_the_package_list_covers_every_folder_and_installs_one_top_level_name():
    listed = set(_setuptools()["packages"])
    assert listed == set(_package_folders()), (
        "pyproject.toml's [tool.setuptools] packages and the folders differ"
    )
    assert {name.split(".")[0] for name in listed} == {"dpstream"}


def test_the_wheel_holds_dpstream_only(tmp_path):
    source = tmp_path / "source"  # a copy: setuptools writes build/ beside the sources it builds
    for folder in ("dpstream", "pipelines", "flows"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("dpstream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"dpstream"}, tops
    assert {"dpstream/pipelines/train.py", "dpstream/flows/cli.py", "dpstream/models/kinds/kan.py"} <= set(
        names
    )
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "dpstream = dpstream.flows.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_layers_import_downwards_only():
    """dpstream (the DP core) imports neither the data plane nor the flows; the data plane not the flows."""
    forbidden = {
        ROOT / "dpstream": ("dpstream.pipelines", "dpstream.flows", "pipelines", "flows", "prefect", "dask"),
        ROOT / "pipelines": ("dpstream.flows", "flows", "prefect"),
    }
    crossings = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder, names in forbidden.items()
        for path in folder.rglob("*.py")
        for name in _imports(path)
        if any(name == prefix or name.startswith(prefix + ".") for prefix in names)
    ]
    assert not crossings, crossings
