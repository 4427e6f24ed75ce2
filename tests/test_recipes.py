"""docs/design.md's recipes (add a launcher, an option, a doctor check) are held to the code:
each is performed here, in a copy of the repository, by a maintainer who touches only the files
the recipe lists ("Every file it touches", parsed from the page) and then runs
``python tests/regen.py``. The change is a small one of each kind (``RECIPES``).

* Following the recipe: every edit the change needs is in a file the recipe lists, regen
  rewrites no file the recipe leaves out, and the checks that guard the hand-kept lists (the
  ``checks`` of each recipe, run with pytest in the copy) pass.
* Leaving out one step (a file the recipe lists, one of ``LEFT_OUT``): the checks fail, so a
  recipe that forgot that file would fail above, naming it.

A file the recipe should list but does not is named in the failure ("the recipe leaves out"),
as is a file regen rewrote outside the list.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
SKIP = {"__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", ".git"}

Edit = Callable[[Path], None]


def insert(before: str, text: str) -> Edit:
    """An edit putting ``text`` just before the first ``before`` in the file."""

    def edit(path: Path) -> None:
        old = path.read_text(encoding="utf-8")
        assert before in old, f"tests/test_recipes.py: {before!r} not found in {path.name}"
        path.write_text(old.replace(before, text + before, 1), encoding="utf-8")

    return edit


def write(text: str) -> Edit:
    def edit(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    return edit


def append(text: str) -> Edit:
    def edit(path: Path) -> None:
        path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")

    return edit


@dataclass
class Recipe:
    heading: str  # of its section of docs/design.md
    names: dict[str, str]  # what the recipe's placeholders (<name>) stand for here
    edits: dict[str, Edit]  # file -> the edit this change makes there (before regen)
    checks: list[str]  # pytest arguments: the checks that guard the lists it touches
    #: steps shown to be guarded: left out, the checks fail or regen rewrites the file anyway
    #: (the tests of its own, tests/test_<name>.py and the like, no check can ask for)
    left_out: list[str] = field(default_factory=list)


# -- a launcher: "demo", a two-variable launcher ------------------------------------------------
DEMO_LAUNCHER = '''"""A launcher for the recipe test: DEMO_RANK of DEMO_SIZE, one per node."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError
from .base import Task, Topology, node_sources, read_int

NAME = "demo"
VARIABLES = ("DEMO_RANK", "DEMO_SIZE", "DEMO_MASTER")
PREFIXES: tuple[str, ...] = ()
TASK_VARIABLES = ("DEMO_RANK", "DEMO_SIZE")
FALLBACK = False
WORLD = (("rank", "DEMO_RANK"), ("world_size", "DEMO_SIZE"))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}
FIX = "run it under the demo launcher"


def detect(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("DEMO_RANK") and environ.get("DEMO_SIZE"))


def read(environ: Mapping[str, str]) -> Task:
    size = read_int(environ, "DEMO_SIZE", FIX, minimum=1)
    rank = read_int(environ, "DEMO_RANK", FIX)
    if rank >= size:
        raise SlurmEnvError(f"DEMO_RANK={rank} is not below DEMO_SIZE={size}",
                            variable="DEMO_RANK", value=str(rank), fix=FIX)
    return Task(
        launcher=NAME, rank=rank, local_rank=0, world_size=size, local_world_size=1,
        node_rank=rank, nnodes=size, hostname=f"d{rank}",
        sources={"RANK": "DEMO_RANK", "LOCAL_RANK": "one per node", "WORLD_SIZE": "DEMO_SIZE",
                 "LOCAL_WORLD_SIZE": "one per node", **node_sources("DEMO_RANK", "DEMO_SIZE")},
        master_host=environ.get("DEMO_MASTER"), master_source="DEMO_MASTER",
        port_seed=None, port_seed_source="no job number", reserved_ports=None,
        topology=Topology(),
    )
'''
DEMO_TEST = '''import pytest

import slurmenv
from slurmenv.errors import SlurmEnvError


def test_demo_reads_its_variables() -> None:
    env = {"DEMO_RANK": "1", "DEMO_SIZE": "2", "DEMO_MASTER": "d0", "SLURMENV_PORT": "29500"}
    res = slurmenv.resolve(env, ephemeral_range=None, step_evidence=None, rivals=None)
    assert (res.launcher, res.rank, res.world_size, res.master_addr) == ("demo", 1, 2, "d0")
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve({**env, "DEMO_RANK": "2"}, ephemeral_range=None, step_evidence=None)
    assert info.value.variable == "DEMO_RANK"


def test_a_torchrun_worker_in_a_demo_task_is_torchruns() -> None:
    worker = {"TORCHELASTIC_RUN_ID": "7", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
              "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": "d0",
              "MASTER_PORT": "29500"}
    env = {"DEMO_RANK": "1", "DEMO_SIZE": "2", "DEMO_MASTER": "d0", **worker}
    agent = "torchrun (pid 7) is an ancestor of this process"  # the worker shows its agent
    res = slurmenv.resolve(env, ephemeral_range=None, step_evidence=None, rivals=None,
                           enclosure=agent)
    assert (res.launcher, res.rank, res.world_size) == ("torchrun", 3, 4)
    with pytest.raises(SlurmEnvError) as info:  # else a leftover copy: the demo task's world
        slurmenv.resolve(env, ephemeral_range=None, step_evidence=None, enclosure=None)
    assert info.value.variable == "DEMO_RANK"
'''
LAUNCHER = Recipe(
    "Recipe: add a launcher", {"name": "demo"},
    {
        "slurmenv/launchers/demo.py": write(DEMO_LAUNCHER),
        "slurmenv/launchers/__init__.py": lambda path: (
            insert('    # Any rank-like variable set by hand', (
                "    # The recipe test's demo launcher (DEMO_RANK with DEMO_SIZE): no other\n"
                "    # launcher sets them.\n    \"demo\",\n"))(path),
            insert('    "k8s": ("KUBERNETES_SERVICE_HOST",),', '    "demo": ("DEMO_RANK",),\n')(path),
        ),
        "docs/design.md": insert("  │   batch.py ", "  │   demo.py                  the recipe test's demo launcher\n"),
        "tests/launcher_claims.py": insert('    "local": (', (
            '    "demo": ({"name": "demo", "started_by": "the recipe test", "signal": "`DEMO_RANK`",\n'
            '              "status": "unit tests", "tests": ("tests/test_demo.py",)},),\n')),
        "tests/test_invariants.py": lambda path: (
            insert('    "local": lambda tmp:', (
                '    "demo": lambda tmp: [("2 nodes", [{"DEMO_RANK": str(r), "DEMO_SIZE": "2",\n'
                '                                      "DEMO_MASTER": "d0"} for r in (0, 1)])],\n'))(path),
            insert('    "mvapich": {"port": 29500},', '    "demo": {"port": 29500},\n')(path),
        ),
        "tests/test_demo.py": write(DEMO_TEST),
        "tests/test_registry.py": insert('    assert launcher_of({}) == "local"\n',
                                         '    assert launcher_of({"DEMO_RANK": "0", "DEMO_SIZE": "1"}) == "demo"\n'),
    },
    ["tests/test_demo.py", "tests/test_registry.py", "tests/test_world_guard.py",
     "tests/test_invariants.py::test_every_registered_launcher_has_launches",
     "tests/test_docs_examples.py::test_the_design_page_names_every_launcher_and_module",
     "tests/test_doc_tables.py::test_the_readme_names_every_launcher_that_never_ran_here",
     "-k", ("not random and (registry or signals or demo or contract or world or design or "
            "readme or launches or launcher_module)")],
    ["slurmenv/launchers/__init__.py", "docs/design.md"],
)

# -- an option: --demo-flag ----------------------------------------------------------------
OPTION = Recipe(
    "Recipe: add an option", {"module": "pipeline"},
    {
        "slurmenv/options.py": insert("\n\nif len(_ROWS) != len(Options._fields)", (
            '    demo_flag: bool = option(\n'
            '        "SLURMENV_DEMO_FLAG", "--demo-flag", FLAG, False, "the recipe test\'s option",\n'
            '    )')),
        "slurmenv/__init__.py": insert("    ephemeral_range: tuple[int, int] | None | object = _AUTO,",
                                       "    demo_flag: bool | None = None,\n"),
        "README.md": insert(" and `--pmi`; `slurmenv torchrun`", ", `--demo-flag`"),
    },
    ["tests/test_options.py", "tests/test_doc_claims.py::test_the_readme_says_which_command_takes_which_option"],
    ["README.md"],
)

# -- a doctor check: "demo" ----------------------------------------------------------------
DEMO_CHECK = '''

@check("demo", "Demo", "nothing: the recipe test's check")
def _check_demo(ctx: Context) -> Check:
    return Check("demo", OK, "nothing to see")
'''
DEMO_CHECK_TEST = '''

def test_the_demo_check() -> None:
    report = doctor.diagnose({})
    assert [c.verdict for c in report.checks if c.name == "demo"] == ["ok"]
'''
CHECK = Recipe(
    "Recipe: add a doctor check", {"topic": "resources"},
    {
        "slurmenv/doctor/checks_resources.py": append(DEMO_CHECK),
        "slurmenv/doctor/checks.py": insert('\n         "threads", "tf-config"', ' "demo",'),
        "tests/test_doctor.py": append(DEMO_CHECK_TEST),
    },
    ["tests/test_doctor.py", "-k", "demo or healthy or table or order or label"],
    ["slurmenv/doctor/checks.py"],
)

RECIPES = {"launcher": LAUNCHER, "option": OPTION, "check": CHECK}


def listed_files(recipe: Recipe, page: str) -> list[str]:
    """The files the recipe's section of docs/design.md lists, placeholders filled in."""
    section = page.split(f"## {recipe.heading}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("Every file it touches", 1)
    assert len(block) == 2, f"docs/design.md, {recipe.heading}: no 'Every file it touches' list"
    files = re.findall(r"^- `([^`]+)`", block[1].split("\n\n", 2)[1], re.MULTILINE)
    assert files, f"docs/design.md, {recipe.heading}: the list names no file"
    return [re.sub(r"<(\w+)>", lambda m: recipe.names.get(m.group(1), m.group(0)), f)
            for f in files]


def tree(root: Path) -> dict[str, bytes]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not SKIP & set(path.relative_to(root).parts):
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


ORIGINAL: dict[str, bytes] = {}


@dataclass
class Outcome:
    left_out_of_recipe: list[str]  # files the change edits that the recipe does not list
    rewritten_outside: list[str]  # files regen rewrote that the recipe does not list
    status: int  # of regen, then of the checks
    output: str


#: regen without the example outputs (they run slurmenv once per example): for the runs with
#: a step left out, which the checks must refuse whatever the examples say
REGEN_BLOCKS = ("import sys; sys.path[:0] = ['tests']; import regen\n"
                "for page, text in regen.stale(examples=False).items(): page.write_text(text)")


def perform(recipe: Recipe, listed: list[str], base: Path, examples: bool = True) -> Outcome:
    """Follow the recipe in a copy of the repository, editing only the ``listed`` files, then
    regenerate the docs (``examples``: the example outputs too) and run the checks."""
    copy = base / "repo"
    for name, data in ORIGINAL.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(data)
        shutil.copymode(ROOT / name, copy / name)
    for name, edit in recipe.edits.items():
        if name in listed:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            if not (copy / name).exists():
                (copy / name).write_text("", encoding="utf-8")
            edit(copy / name)
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    regen = ["tests/regen.py"] if examples else ["-c", REGEN_BLOCKS]
    run = subprocess.run([sys.executable, *regen], cwd=copy, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    output, status = run.stdout + run.stderr, run.returncode
    if status == 0:
        checks = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *recipe.checks],
            cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False)
        output, status = output + checks.stdout[-3000:] + checks.stderr[-2000:], checks.returncode
    changed = {n for n, data in tree(copy).items() if ORIGINAL.get(n) != data}
    return Outcome(sorted(set(recipe.edits) - set(listed)), sorted(changed - set(listed)),
                   status, output)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    """Every run: each recipe as the page says (left out: ""), and each with one step left
    out; run side by side (each is a regen and a pytest in its own copy)."""
    ORIGINAL.update(tree(ROOT))
    page = DESIGN.read_text(encoding="utf-8")
    runs = {}
    for key, recipe in RECIPES.items():
        listed = listed_files(recipe, page)
        runs[key, ""] = listed
        for step in recipe.left_out:
            runs[key, step] = [f for f in listed if f != step]
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {run: pool.submit(perform, RECIPES[run[0]], listed,
                                    tmp_path_factory.mktemp(run[0]), not run[1])
                   for run, listed in runs.items()}
        return {run: future.result() for run, future in futures.items()}


@pytest.mark.parametrize("key", sorted(RECIPES))
def test_following_the_recipe_passes_the_checks(key: str,
                                                 outcomes: dict[tuple[str, str], Outcome]) -> None:
    done = outcomes[key, ""]
    heading = RECIPES[key].heading
    assert done.left_out_of_recipe == [], (
        f"docs/design.md, {heading}: the recipe leaves out {done.left_out_of_recipe}")
    assert done.rewritten_outside == [], (
        f"docs/design.md, {heading}: python tests/regen.py rewrote {done.rewritten_outside}, "
        "which the recipe does not list")
    assert done.status == 0, f"docs/design.md, {heading}: the checks fail:\n{done.output}"


@pytest.mark.parametrize("key, step", [(k, s) for k, r in sorted(RECIPES.items())
                                       for s in r.left_out])
def test_leaving_out_a_step_fails_the_checks(key: str, step: str,
                                              outcomes: dict[tuple[str, str], Outcome]) -> None:
    done = outcomes[key, step]
    assert done.left_out_of_recipe == [step]
    assert done.status != 0 or done.rewritten_outside, (
        f"{RECIPES[key].heading} without {step} passes the checks: nothing guards that step")


def test_the_recipes_list_files_that_exist() -> None:
    """Each listed file without a placeholder in its name exists."""
    page = DESIGN.read_text(encoding="utf-8")
    for recipe in RECIPES.values():
        unfilled = Recipe(recipe.heading, {}, {}, [])
        for name in listed_files(unfilled, page):
            assert "<" in name or (ROOT / name).exists(), (
                f"docs/design.md, {recipe.heading}: {name} does not exist")
