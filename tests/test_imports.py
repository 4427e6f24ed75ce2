"""No import cycles among slurmenv's modules, and every module imports on its own.

The graph counts every import a module makes, at the top or inside a function (a lazy import
is still a dependency), except those under ``if TYPE_CHECKING:`` (never executed).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "slurmenv"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str) -> set[str]:
    """The slurmenv modules that module ``name`` imports."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in found if m in MODULES and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_graph_sees_imports() -> None:
    # The checker itself: known edges of each kind (top level, relative from a package,
    # lazy inside a function) are found, and TYPE_CHECKING-only imports are not.
    assert "slurmenv.resolution" in imports_of("slurmenv.cli")  # top level
    assert "slurmenv.doctor.probe" in imports_of("slurmenv.dump")  # inside a function
    assert "slurmenv.launchers.base" in imports_of("slurmenv.launchers.slurm")  # from .base
    assert "slurmenv.resolution" not in imports_of("slurmenv.gpus")  # TYPE_CHECKING only
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    assert cycles(graph) == []


@pytest.mark.parametrize("name", sorted(set(MODULES) - {"slurmenv.__main__"}))  # runs the CLI
def test_each_module_imports_in_a_fresh_interpreter(name: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT, check=True, timeout=120)


def test_every_package_is_installed() -> None:
    # pyproject lists the packages by hand: a new subpackage missing there works in the
    # editable checkout but is absent from the wheel.
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert sorted(listed) == sorted(packages)


def test_launcher_modules_never_import_derive() -> None:
    """Layers: a launcher module reads its task; the shared port rules it needs live in
    ports.py, below it. Only the registry's resolve() (launchers/__init__.py) drives derive."""
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "slurmenv" / "launchers"
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        assert not re.search(r"^\s*(from \.\.derive import|from \.\. import .*\bderive\b|"
                             r"import slurmenv\.derive)", text, re.MULTILINE), path.name
