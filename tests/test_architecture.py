"""The house rules that keep the code navigable, read from the source itself (docs/design.md, "Rooms").

* Layers: ``dpstream`` (the DP core) imports neither the data plane nor the orchestration;
  ``dpstream.pipelines`` never imports ``dpstream.flows`` nor Prefect; the config schema
  (``dpstream.flows.config``) imports no data-plane module.
* No import cycle between the project's modules (an import inside a function counts).
* An import inside a function only for an optional or heavy dependency that a fast path must not pay
  for (``DEFERRED_OK``); anything else is imported at the top of its module.
* No module over 400 lines; no function over 80 lines unless its docstring says why
  (a paragraph starting ``Long because``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The installed package maps these folders to these dotted names (pyproject.toml, package-dir).
PACKAGES = {
    "dpstream": ROOT / "dpstream",
    "dpstream.pipelines": ROOT / "pipelines",
    "dpstream.flows": ROOT / "flows",
}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# Third-party modules a function may import where it needs them, each for a stated reason.
DEFERRED_OK = {
    "cupy": "optional GPU backend (the gpu extra)",
    "cupyx": "optional GPU backend (the gpu extra)",
    "deltalake": "optional table format, imported when a Delta table is read",
    "pyiceberg": "optional table format, imported when an Iceberg table is read",
    "dask_kubernetes": "the kubernetes extra",
    "kubernetes": "the kubernetes extra",
    "prefect": "Prefect costs seconds to import; the CLI's fast paths (--help, validate, budget) skip it",
    "matplotlib": "plots are drawn only when a run publishes",
    "dp_accounting": "PLD accounting only where an event is not Gaussian, and in comparisons",
    "sklearn": "`import dpstream` must not import scikit-learn (the estimators load lazily)",
    "numba": "loads LLVM (~0.4 s): `import dpstream` and the CLI's fast paths skip it until a kernel runs",
    "scipy": "special functions and root finding load only where used (~0.3 s at import)",
    "pandas": "read only when a caller passes a DataFrame or Series",
}
# Project modules a module may import inside a function: (importer prefix, imported prefix) -> reason.
DEFERRED_PROJECT_OK = {
    ("dpstream", "dpstream.estimators"): (
        "the estimators import scikit-learn (~3 s): `import dpstream` (module __getattr__) and "
        "`ModelDocument.to_estimator` load them only when asked, so predict and the flows never pay for them"
    ),
    (
        "dpstream.flows.cli",
        "dpstream.flows.flows",
    ): "the Prefect flows import Prefect: only commands that run one",
    ("dpstream.flows.cli", "dpstream.flows.prefect_api"): "imports Prefect: only commands that run a flow",
    ("dpstream.flows.cli.ledger", "dpstream.flows.cli.validate"): (
        "`budget show CONFIG` validates the config's lake (pyarrow, the sources); with a fingerprint the "
        "command reads only the ledger"
    ),
    ("dpstream", "dpstream.privacy.budget"): (
        "the budget imports the accountant (scipy.special, ~0.3 s): `import dpstream` (module __getattr__) "
        "loads it only when `dpstream.PrivacyBudget` is asked for"
    ),
}


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    imports: set[str] = field(default_factory=set)  # project modules, anywhere in the file
    deferred: list[tuple[int, str]] = field(default_factory=list)  # (line, module) imported in a function


def _module_names() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if package == "dpstream" and parts[:1] in (["pipelines"], ["flows"]):
                continue
            found[name] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, module: Module, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
    # `from package import submodule` imports the submodule (and the package, which the import system
    # loads first for any submodule; it is not a dependency of its own).
    return submodules if len(submodules) == len(node.names) else [target, *submodules]


def _load() -> dict[str, Module]:
    known = _module_names()
    modules: dict[str, Module] = {}
    for name, path in known.items():
        module = Module(name, path, ast.parse(path.read_text()), path.name == "__init__.py")
        in_function: set[int] = set()
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                in_function.update(id(sub) for sub in ast.walk(node) if sub is not node)
        for node in ast.walk(module.tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = _imported(node, module, known)
            module.imports.update(t for t in targets if t in known and t != name)
            if id(node) in in_function:
                module.deferred.extend((node.lineno, t) for t in targets)
        modules[name] = module
    return modules


MODULES = _load()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_layers_import_downwards_only():
    wrong = []
    for module in MODULES.values():
        for target in module.imports:
            core_up = _within(module.name, "dpstream") and not _within(module.name, "dpstream.pipelines")
            core_up = core_up and not _within(module.name, "dpstream.flows")
            if core_up and (_within(target, "dpstream.pipelines") or _within(target, "dpstream.flows")):
                wrong.append(f"{module.name} -> {target}")
            if _within(module.name, "dpstream.pipelines") and _within(target, "dpstream.flows"):
                wrong.append(f"{module.name} -> {target}")
            if _within(module.name, "dpstream.flows.config") and _within(target, "dpstream.pipelines"):
                wrong.append(f"{module.name} -> {target} (the config schema builds no data-plane objects)")
    assert not wrong, "\n".join(sorted(wrong))


def test_data_plane_never_imports_prefect():
    wrong = [
        f"{module.name}:{line}"
        for module in MODULES.values()
        if _within(module.name, "dpstream.pipelines")
        for node in ast.walk(module.tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for line, target in [(node.lineno, getattr(node, "module", None) or node.names[0].name)]
        if target.split(".")[0] == "prefect"
    ]
    assert not wrong, wrong


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(MODULES):
        if root in index:
            continue
        work = [(root, iter(sorted(MODULES[root].imports)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(MODULES[child].imports))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert not _cycles(), "\n".join(" <-> ".join(cycle) for cycle in _cycles())


def _deferred_allowed(importer: str, target: str) -> bool:
    if target.split(".")[0] in DEFERRED_OK:
        return True
    return any(
        _within(importer, source) and _within(target, imported) for source, imported in DEFERRED_PROJECT_OK
    )


def test_imports_inside_functions_only_for_optional_dependencies():
    wrong = [
        f"{module.path.relative_to(ROOT)}:{line} imports {target}"
        for module in MODULES.values()
        for line, target in module.deferred
        if not _deferred_allowed(module.name, target)
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    lines = len(MODULES[name].path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{MODULES[name].path.relative_to(ROOT)} has {lines} lines"


def test_long_functions_say_why():
    wrong = []
    for module in MODULES.values():
        for node in ast.walk(module.tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            reason = "Long because" in (ast.get_docstring(node) or "")
            if length > MAX_FUNCTION_LINES and not reason:
                wrong.append(f"{module.path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_the_code():
    """The scan is not vacuous: it finds the packages, their imports and the deferred imports it allows."""
    assert {"dpstream.coordinator", "dpstream.pipelines.execution.executor", "dpstream.flows.flows"} <= set(
        MODULES
    )
    assert "dpstream.privacy.accountant" in MODULES["dpstream.coordinator"].imports or any(
        _within(t, "dpstream.privacy") for t in MODULES["dpstream.coordinator"].imports
    )
    assert any(target.startswith("cupy") for line, target in MODULES["dpstream.backend"].deferred)
