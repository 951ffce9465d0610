"""The package's shape: no import cycles, layers import only downwards, no private reach-through.

Imports are read from the source (``ast``), so the test sees function-level imports too (a late
import is still a dependency); imports under ``if TYPE_CHECKING:`` are annotations only and are
left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "alance"

#: The dataset layer's parts, lowest first: a part may import only parts before it.
DATASET_LAYERS = [
    "versions", "fragments", "query", "commit", "dml", "maintenance", "evolution", "api",
    "group_insert", "distributed", "fragment", "manual_commit", "compaction_tasks", "sharding",
    "drop",
]

#: The layers of the whole package, lowest first (a name imports only names before it; names on
#: one row are peers that must not import each other).
PACKAGE_LAYERS = [
    ["errors", "_proto", "_loop", "_version"],
    ["format", "io", "filter", "vector"],
    ["transaction", "commit", "file"],
    ["dataset"],
    ["sync"],
    ["spark", "cli", "testing"],
]

#: Deferred (function-level) imports allowed to point back up, and why. The objects users hold
#: refer to each other the way pylance's do; each such reference is listed here.
BACK_REFERENCES = {
    ("alance.dataset.api", "alance.dataset.fragment"):
        "LanceDataset.get_fragments returns LanceFragment objects, which hold their dataset",
    ("alance.dataset.api", "alance.dataset.manual_commit"):
        "LanceDataset.commit / commit_batch are pylance's entry points to manual commits",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py") if "_proto" not in p.parts}


def _imports(name: str, path: Path) -> dict[str, list[str]]:
    """Every alance module ``name`` imports, with the names it takes from each."""
    tree = ast.parse(path.read_text())
    found: dict[str, list[str]] = {}

    def note(module: str, names: list[str]) -> None:
        found.setdefault(module, []).extend(names)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("alance"):
                        note(alias.name, [])
                continue
            if (isinstance(child, ast.ImportFrom) and child.module is not None
                    and child.level == 0 and child.module.startswith("alance")):
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    if sub in MODULES:
                        note(sub, [])
                    else:
                        note(child.module, [alias.name])
                continue
            visit(child)

    visit(tree)
    # A module's own package is imported before it anyway: not a dependency.
    return {m: n for m, n in found.items() if not name.startswith(m + ".") and m != name
            and (name, m) not in BACK_REFERENCES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_no_import_cycles() -> None:
    """No module reaches itself through its imports (function-level imports included)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in GRAPH:
                continue
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            connect(v)
    assert cycles == []


def _dataset_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "dataset" else None


def test_dataset_parts_import_downwards() -> None:
    wrong = []
    for module, deps in GRAPH.items():
        part = _dataset_part(module)
        if part is None:
            continue
        for dep in deps:
            other = _dataset_part(dep)
            if other is None or other == part:
                continue
            if DATASET_LAYERS.index(other) > DATASET_LAYERS.index(part):
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def _package(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


@pytest.mark.parametrize("rows", [PACKAGE_LAYERS])
def test_packages_import_downwards(rows: list[list[str]]) -> None:
    level = {name: i for i, row in enumerate(rows) for name in row}
    wrong = []
    for module, deps in GRAPH.items():
        mine = _package(module)
        for dep in deps:
            theirs = _package(dep)
            if theirs in ("", mine) or mine == "":
                continue
            assert mine in level and theirs in level, f"{module} or {dep} has no layer"
            if level[theirs] >= level[mine]:
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def test_no_private_names_across_packages() -> None:
    """The CLI, Spark and the sync facade use the dataset layer's public names only."""
    wrong = []
    for module, deps in GRAPH.items():
        if _package(module) not in ("cli", "spark", "sync"):
            continue
        for dep, names in deps.items():
            if _package(dep) == _package(module):
                continue
            wrong += [f"{module}: {dep}.{n}" for n in names if n.startswith("_")]
            private = [p for p in dep.split(".")[1:] if p.startswith("_")]
            if private and not dep.startswith(("alance._loop", "alance._proto")):
                wrong.append(f"{module}: {dep}")
    assert wrong == []


def test_no_private_attributes_of_the_dataset_layer_from_outside() -> None:
    """The CLI, Spark and the sync facade do not read the dataset layer's private attributes
    (``ds._snapshot``...): they use its public properties (``ds.snapshot``...)."""
    private: set[str] = set()
    for name, path in MODULES.items():
        if _package(name) != "dataset":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "self" and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                private.add(node.attr)
    wrong = []
    for name, path in MODULES.items():
        if _package(name) not in ("cli", "spark", "sync"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and ast.unparse(node.value) not in ("self", "cls")):
                wrong.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert wrong == []
