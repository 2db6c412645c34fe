"""The distribution installs one top-level package, ``dpstream``; the data plane and the orchestration are
``dpstream.pipelines`` and ``dpstream.flows``, mapped from their folders by pyproject.toml, and the DP core
imports neither (docs/design.md's layers)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
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


def _build_wheel(folder: Path) -> Path:
    source = folder / "source"  # a copy: setuptools writes build/ beside the sources it builds
    for name in ("dpstream", "pipelines", "flows"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
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
            str(folder),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = folder.glob("dpstream-*.whl")
    return wheel


def test_the_wheel_holds_dpstream_only_and_the_image_loads_the_deployment_entrypoint(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"dpstream"}, tops
    assert {
        "dpstream/pipelines/execution/train.py",
        "dpstream/flows/cli/main.py",
        "dpstream/models/kinds/kan.py",
    } <= set(names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "dpstream = dpstream.flows.cli.main:run" in zipfile.ZipFile(wheel).read(entry_points).decode()

    # The image (infra/docker/Dockerfile) installs the wheel and keeps flows/ in /app, where the Docker and
    # Kubernetes deployments load `flows/flows.py:train_flow` with /app first on sys.path; the package's
    # own folders are removed there, or `import dpstream` would find the bare source folder.
    dockerfile = (ROOT / "infra" / "docker" / "Dockerfile").read_text()
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    assert re.findall(r"^COPY (?!--from)(\S+)", final_stage, re.M) == ["flows", "examples"]
    installed, app = tmp_path / "site", tmp_path / "app"
    zipfile.ZipFile(wheel).extractall(installed)
    shutil.copytree(ROOT / "flows", app / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    loader = (
        "from prefect.utilities.importtools import load_script_as_module\n"
        "module = load_script_as_module('flows/flows.py')\n"
        "import dpstream\n"
        f"assert dpstream.__file__.startswith({str(installed)!r}), dpstream.__file__\n"
        "print(module.train_flow.name)"
    )
    # -S: no .pth files, so this checkout's editable install cannot rescue a broken layout, as in the image
    libraries = sysconfig.get_paths()["purelib"]
    loaded = subprocess.run(
        [sys.executable, "-S", "-c", loader],
        cwd=app,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), libraries])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0 and loaded.stdout.strip() == "train", loaded.stderr[-3000:]


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


def test_a_missing_extra_is_named_with_the_command_that_installs_it():
    """The runtime (``make demo``) has no S3, Delta, Iceberg, Kubernetes, GPU or PLD library: a feature that
    needs one names its extra, in Python and on the command line."""
    from dpstream.extras import EXTRAS, MissingExtra, missing_extra

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {extra for extra, _ in EXTRAS.values()} <= set(declared)
    error = missing_extra(ModuleNotFoundError("No module named 'deltalake'", name="deltalake"))
    assert isinstance(error, MissingExtra) and "pip install 'dpstream[delta]'" in str(error)
    assert missing_extra(ImportError("Install s3fs to access S3"), "s3fs").name == "s3fs"
    assert missing_extra(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
    runtime = {line.split("==")[0] for line in (ROOT / "requirements-runtime.lock").read_text().splitlines()}
    assert not runtime & {
        "s3fs",
        "deltalake",
        "pyiceberg",
        "dask-kubernetes",
        "dp-accounting",
        "moto",
        "pytest",
    }


def test_the_cli_names_the_extra_for_an_s3_location_without_s3fs(tmp_path):
    """A process where s3fs cannot be imported: `dpstream validate` of an s3:// lake says which extra."""
    config = tmp_path / "pipeline.toml"
    config.write_text(
        '[lake]\nurl = "s3://bucket/raw"\nfeatures = ["x"]\nlabel = "y"\nshuffled_url = "'
        + str(tmp_path / "s")
        + '"\n'
        '[budget]\nepsilon = 1.0\ndelta = 1e-6\nlifetime_epsilon = 4.0\nledger_url = "'
        + str(tmp_path / "l")
        + '"\n'
    )
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "s3fs.py").write_text("raise ImportError('s3fs is blocked here')\n")
    result = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", "validate", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"},
    )
    assert result.returncode == 2, result.stderr
    assert "needs the 's3' extra" in result.stderr and "pip install 'dpstream[s3]'" in result.stderr
