"""No import cycles among slurmenv's modules, layers that do not reach back, and every module
imports on its own.

Which imports count (the edges of the graph ``import_edges`` builds from each module's ``ast``):

* module level: ``import x`` / ``from . import x`` at the top of a module;
* ``if TYPE_CHECKING:``: never executed, but a type names the module it comes from: a loop of
  types is a loop of layers all the same (a lower module names a higher one's type only with
  its reason in :data:`ALLOWED_LOOPS`);
* inside a function: lazy imports are how ``slurmenv export`` stays lean (a module is loaded
  only on the path that needs it), not a way around the layers: they count too.

* a package's ``__init__``: ``import slurmenv.doctor.checks`` runs
  ``slurmenv/doctor/__init__.py`` first, so importing a module of a subpackage is an edge to
  the subpackage's ``__init__`` too (``launchers/__init__.py`` therefore imports none of its
  own modules but by name). Not the top package's: ``slurmenv/__init__.py`` is the public API
  above everything, and Python runs it before any module of the package, so every module
  would depend on the top (its own imports count like any module's).

Not counted: modules loaded by name at run time (``cli.EXTERNAL``, the launcher registry's
``launchers.load``, the ``__getattr__`` that ``lean.lazy`` gives the doctor, step check and dump
packages), which is dispatch from above. A
loop that remains needs its reason written in :data:`ALLOWED_LOOPS`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest
import synth

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "slurmenv"
HOSTS = ["n1", "n2"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TOP, TYPES, LAZY = "module level", "TYPE_CHECKING", "in a function"
_SHOWN_FIRST = (TOP, LAZY, TYPES)  # how an edge is described when a module imports it twice


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _packages_run(target: str) -> list[str]:
    """The subpackage ``__init__`` modules Python runs before ``target`` (not the top one's,
    see the module docstring): ``slurmenv.launchers`` for ``slurmenv.launchers.base``."""
    parts = target.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def import_edges(name: str) -> dict[str, str]:
    """The slurmenv modules that module ``name`` imports, each with how: TOP, TYPES or LAZY
    (a module imported several ways: the first of TOP, LAZY, TYPES)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, str] = {}

    def visit(node: ast.AST, how: str) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, TYPES if how == TOP else how)
            for child in node.orelse:
                visit(child, how)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            how = LAZY if how == TOP else how
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in MODULES else base)
        for target in [*targets, *(p for t in targets for p in _packages_run(t))]:
            if target not in MODULES or target == name:
                continue
            if target not in found or _SHOWN_FIRST.index(how) < _SHOWN_FIRST.index(found[target]):
                found[target] = how
        for child in ast.iter_child_nodes(node):
            visit(child, how)

    visit(ast.parse(path.read_text(), str(path)), TOP)
    return found


def imports_of(name: str) -> set[str]:
    """The slurmenv modules that module ``name`` imports, in any of the ways that count."""
    return set(import_edges(name))


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


def a_loop(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest loop through the first module of ``component`` (a strongly connected
    component of ``graph``): ``[a, b, ..., a]``."""
    start = component[0]
    inside = set(component)
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & inside):
            if w == start:  # back at the start: the path to v, then start again
                path = [v]
                while (before := parent[path[-1]]) is not None:
                    path.append(before)
                return [*reversed(path), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"{component} is not a cycle of the graph")


def describe(loop: list[str], edges: dict[str, dict[str, str]]) -> str:
    """``a -> b (TYPE_CHECKING) -> a (module level)``: each step with how it is imported."""
    steps = [loop[0]] + [f"{b} ({edges[a][b]})" for a, b in zip(loop, loop[1:])]
    return " -> ".join(steps)


def test_the_graph_sees_imports() -> None:
    # The checker itself: known edges of each kind (top level, relative from a package,
    # lazy inside a function, TYPE_CHECKING only) are found, and a loop is named.
    assert import_edges("slurmenv.commands.main")["slurmenv.render"] == TOP
    assert import_edges("slurmenv.dump.capture")["slurmenv.nodes"] == LAZY
    assert import_edges("slurmenv.launchers.slurm")["slurmenv.launchers.base"] == TOP  # from .base
    assert import_edges("slurmenv.rivals")["slurmenv.resolution"] == TYPES
    # a subpackage's __init__ runs first: an edge of the same kind; never the top package's
    assert import_edges("slurmenv.resolution")["slurmenv.launchers"] == TOP  # .launchers.base
    assert import_edges("slurmenv.doctor.checks")["slurmenv.dump"] == TOP  # ..dump.probe
    assert "slurmenv" not in import_edges("slurmenv.pipeline")
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert a_loop(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert a_loop({"a": {"b"}, "b": {"a"}}, ["a", "b"]) == ["a", "b", "a"]
    edges = {"a": {"b": TOP}, "b": {"a": TYPES}}
    assert describe(["a", "b", "a"], edges) == "a -> b (module level) -> a (TYPE_CHECKING)"


#: Loops left, each with its reason: a loop is allowed when all of its modules lie in the
#: packages of one key.
ALLOWED_LOOPS: dict[tuple[str, ...], str] = {}


def test_rendering_names_no_resolution() -> None:
    # A Resolution is data with its values (env, apply) in resolution.py; the output sets'
    # names, the formats (render.py) and GPU binding (gpus.py) lie below it and never name it.
    for name in ("slurmenv.render", "slurmenv.gpus"):
        assert "slurmenv.resolution" not in import_edges(name), name
    assert import_edges("slurmenv.resolution")["slurmenv.render"] == TOP


def allowed(component: list[str]) -> bool:
    """Whether ``component`` (a loop's modules) lies in the packages of an ALLOWED_LOOPS key."""
    def inside(name: str, key: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in key)

    return any(all(inside(name, key) for name in component) for key in ALLOWED_LOOPS)


def test_no_import_cycles() -> None:
    edges = {name: import_edges(name) for name in MODULES}
    graph = {name: set(targets) for name, targets in edges.items()}
    loops = [describe(a_loop(graph, component), edges) for component in cycles(graph)
             if not allowed(component)]
    assert loops == [], "import loops (break them: see this file's docstring):\n" + "\n".join(loops)
    assert all(reason.strip() for reason in ALLOWED_LOOPS.values())


# -- layers ---------------------------------------------------------------------------------
COMMANDS = ("slurmenv.commands.show", "slurmenv.commands.torchrun", "slurmenv.commands.doctor",
            "slurmenv.commands.dump")


def test_no_module_reaches_back_to_the_command_line() -> None:
    """cli sits above every command (it loads them by name); what they share is in
    commandline.py, below them all. ``completion`` describes the whole command line, so it sits
    above cli (which loads it by name): it reads cli's parser and commands."""
    for name in MODULES:
        if name not in ("slurmenv.commands.main", "slurmenv.__main__", "slurmenv.commands.completion"):
            assert "slurmenv.commands.main" not in imports_of(name), name


def test_the_shared_command_line_imports_no_command() -> None:
    below = imports_of("slurmenv.commands.console")
    assert not below & {"slurmenv.commands.main", *COMMANDS}, below
    assert not any(m.startswith(("slurmenv.doctor", "slurmenv.dump")) for m in below), below


def loaded_after(code: str, env: dict[str, str]) -> list[str]:
    """The slurmenv modules a fresh interpreter has loaded after running ``code``."""
    script = code + "\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith('slurmenv')))"
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    return list(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


# What every task of a step loads for `slurmenv export`: each module costs every task a part of
# a millisecond (docs/performance.md), so one more is a decision, not an accident.
EXPORT_PATH = {
    "slurmenv", "slurmenv.lean", "slurmenv.commands", "slurmenv.commands.main", "slurmenv.commands.console", "slurmenv.pipeline",
    "slurmenv.errors", "slurmenv.gpus", "slurmenv.launchers", "slurmenv.launchers.base",
    "slurmenv.launchers.slurm", "slurmenv.layout", "slurmenv.nodes", "slurmenv.options",
    "slurmenv.ports", "slurmenv.render", "slurmenv.resolution", "slurmenv.tfconfig",
    "slurmenv.threads", "slurmenv.worldguard",
}


def test_export_loads_the_pipeline_and_no_command() -> None:
    env = {**synth.clean_env(PYTHONPATH=str(ROOT)), **synth.step_env(HOSTS, [1, 1], 1)}
    loaded = loaded_after("from slurmenv.commands.main import main\nmain(['export'])", env)
    assert set(loaded) == EXPORT_PATH


def test_dump_with_probe_loads_none_of_the_doctor() -> None:
    # the probe lives in dump/ (below the doctor, which replays dumps): no arrow back up
    env = synth.clean_env(PYTHONPATH=str(ROOT))
    loaded = loaded_after(
        "from slurmenv import dump\n"
        "assert 'cpus' in dump.collect({}, probe=True)['probe']",
        env,
    )
    assert "slurmenv.dump.probe" in loaded
    assert not [m for m in loaded if m.startswith("slurmenv.doctor")], loaded
    for name in MODULES:
        if name.startswith("slurmenv.dump"):
            assert not any(m.startswith("slurmenv.doctor") for m in imports_of(name)), name


def test_the_step_check_loads_none_of_the_doctors_checks() -> None:
    # doctor/__init__ imports nothing: exec --preflight loads the step check alone
    env = synth.clean_env(PYTHONPATH=str(ROOT))
    env.update(synth.step_env(["n1"], [1], 0))
    code = ("import os, slurmenv\nfrom slurmenv.doctor import stepcheck\n"
            "assert stepcheck.run(slurmenv.resolve(), os.environ, {}, 1)[0]")
    loaded = loaded_after(code, env)
    doctor = {m for m in loaded if m.startswith(("slurmenv.doctor", "slurmenv.dump"))}
    assert doctor == {"slurmenv.doctor", *(m for m in MODULES if ".stepcheck" in m)}, doctor


def test_the_doctor_and_dump_packages_keep_their_public_names() -> None:
    # doctor's __init__ loads its checks and command line on first use: every public name
    # is there, and main and probe stay the functions even once their modules are imported.
    code = (
        "import slurmenv.commands.doctor, slurmenv.dump.probe, slurmenv.commands.dump\n"
        "from slurmenv import doctor, dump\n"
        "from slurmenv.doctor import *\n"
        "assert callable(doctor.replay) and callable(doctor.probe) and callable(dump.load)\n"
        "assert doctor.probe is slurmenv.dump.probe.probe\n"
        "assert len(doctor.CHECKS) == len(doctor.diagnose({}).checks) > 5\n"
        "assert set(doctor.__all__) <= set(dir(doctor))\n"
        "for name in ('load', 'collect', 'Dump', 'VARIABLES', 'is_read', 'select', "
        "'expand_output', 'replay_report', 'same_values', 'differences', "
        "'NOT_RECORDED', 'DEFAULT_OUTPUT', 'redact_proxy', 'write_new'):\n"
        "    assert hasattr(dump, name), name\n"
    )
    env = synth.clean_env(PYTHONPATH=str(ROOT))
    assert "slurmenv.doctor.checks" in loaded_after(code, env)


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


#: The layers, lowest first: a module imports (in any way that counts) only its own layer and
#: those below. The rules below the launchers; the launchers (one module each, ``launchers/``);
#: the resolver core above them (pipeline, resolution, render, options, ...; the package's
#: ``__init__``: the public API); the framework helpers (public import paths); the command line
#: the commands share (``commands/console.py``); dump; the doctor (the step check inside it);
#: the commands (``commands/``, which load doctor and dump by name, and ``__main__``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rules", ("slurmenv.lean", "slurmenv.errors", "slurmenv.ports", "slurmenv.layout",
               "slurmenv.nodes", "slurmenv.readfile")),
    ("launchers", ("slurmenv.launchers",)),
    ("core", ("slurmenv",)),
    ("frameworks", ("slurmenv.torch", "slurmenv.tf", "slurmenv.jax", "slurmenv.lightning",
                    "slurmenv.notebook")),
    ("command line", ("slurmenv.commands", "slurmenv.commands.console")),
    ("dump", ("slurmenv.dump",)),
    ("doctor", ("slurmenv.doctor",)),
    ("commands", ("slurmenv.commands.", "slurmenv.__main__")),
)
#: The arrows allowed back up (importer, imported package), each with its reason: ONE at most.
UP_ALLOWED: dict[tuple[str, str], str] = {}
BELOW_LAUNCHERS = set(LAYERS[0][1])


def layer_of(name: str) -> int:
    """The index in :data:`LAYERS` of module ``name``: its longest matching entry (an entry
    ending in ``.`` matches the modules below it but not the package itself)."""
    best, found = -1, 0
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            match = name == entry or name.startswith(entry if entry.endswith(".") else entry + ".")
            if match and len(entry) > best:
                best, found = len(entry), index
    assert best >= 0, name
    return found


def test_the_layers_are_declared() -> None:
    assert layer_of("slurmenv.pipeline") == layer_of("slurmenv") == 2
    assert layer_of("slurmenv.ports") == 0 and layer_of("slurmenv.launchers.slurm") == 1
    assert layer_of("slurmenv.commands") == layer_of("slurmenv.commands.console") == 4
    assert layer_of("slurmenv.commands.main") == layer_of("slurmenv.__main__") == 7
    assert layer_of("slurmenv.doctor.stepcheck.rank0") == 6


def test_nothing_imports_a_higher_layer() -> None:
    """Each arrow back up is named in :data:`UP_ALLOWED` with its reason (one at most), and
    every one named is still there."""
    assert len(UP_ALLOWED) <= 1 and all(reason.strip() for reason in UP_ALLOWED.values())
    up = set()
    for name in MODULES:
        for target, how in import_edges(name).items():
            if layer_of(target) > layer_of(name):
                up.add((name, target, how))
    allowed = {(a, t) for a, t, _ in up for (b, package) in UP_ALLOWED
               if a == b and (t == package or t.startswith(package + "."))}
    back = sorted(f"{a} -> {t} ({how}): {LAYERS[layer_of(a)][0]} -> {LAYERS[layer_of(t)][0]}"
                  for a, t, how in up if (a, t) not in allowed)
    assert back == [], "arrows back up (see LAYERS):\n" + "\n".join(back)
    stale = [key for key in UP_ALLOWED if not any(a == key[0] for a, _ in allowed)]
    assert stale == [], f"no longer imported: remove them from UP_ALLOWED: {stale}"


def test_no_module_is_over_500_lines() -> None:
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}, f"split them by what they hold: {long}"


def test_launchers_import_nothing_above_them() -> None:
    """Layers: a launcher module reads its task; the pipeline (pipeline.py) drives detect,
    read, derive and rivals from above. No module of launchers/ (its __init__ included)
    imports pipeline, resolution, rivals, options or anything else above it, in any way that
    counts (module level, lazily, under TYPE_CHECKING), and what it imports imports no
    launcher back."""
    inside = {name for name in MODULES if name.startswith("slurmenv.launchers")}
    for name in sorted(inside):
        outside = set(import_edges(name)) - inside
        assert outside <= BELOW_LAUNCHERS, (name, sorted(outside - BELOW_LAUNCHERS))
    for name in BELOW_LAUNCHERS:
        assert not set(import_edges(name)) & inside, name


def test_resolve_from_many_threads_at_first_use() -> None:
    # launchers.load read sys.modules while another thread was still importing the module
    # ("partially initialized module ... has no attribute 'detect'"): fresh interpreters, so
    # that the first use is the threads'
    env = {**synth.clean_env(PYTHONPATH=str(ROOT))}
    code = (
        "import threading, slurmenv, synth\n"
        "envs = [synth.step_env(['a', 'b'], [2, 2], r) for r in range(4)]\n"
        "envs += [{**e, 'TORCHELASTIC_RUN_ID': '1', 'RANK': str(r), 'WORLD_SIZE': '4'}\n"
        "         for r, e in enumerate(envs)]\n"
        "errors = []\n"
        "def one(env):\n"
        "    try:\n"
        "        slurmenv.resolve(env, ephemeral_range=None, step_evidence=None)\n"
        "    except slurmenv.SlurmEnvError:\n"
        "        pass\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=one, args=(e,)) for e in envs * 4]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(errors)\n"
    )
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT / "tests",
                             capture_output=True, text=True, timeout=120, check=True)
        assert out.stdout.strip() == "[]", out.stdout + out.stderr
