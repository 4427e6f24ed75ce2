"""What runs on which Slurm release is declared once, by each real-cluster test module's
``FEATURES`` (tests/slurm_releases.py): every real-cluster test is declared, every declared test
exists, the suite runs each one on exactly its releases, and docs/releases.md's table says so."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import slurm_releases

ROOT = Path(__file__).resolve().parent.parent
REAL = sorted((ROOT / "tests").glob("test_real_*.py"))
CLUSTERS = {"slurm_cluster", "slurm_gpu_cluster", "slurm_prolog_cluster", "slurm_release"}


def functions_in(path: Path) -> dict[str, set[str]]:
    """Test function name -> the names of its arguments."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: {a.arg for a in node.args.args} for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_every_real_cluster_test_is_declared_and_every_declared_test_exists(path: Path) -> None:
    functions = functions_in(path)
    declared = {slurm_releases.split_case(t)[0]
                for f in slurm_releases.features(path) for t in f.tests}
    real = {name for name, args in functions.items() if args & CLUSTERS}
    assert real <= declared, f"{path.name}: not in FEATURES: {sorted(real - declared)}"
    assert declared <= set(functions), f"{path.name}: no such tests: {declared - set(functions)}"


def collected(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return [line.strip() for line in out.stdout.splitlines() if "::" in line]


def test_each_test_is_collected_on_exactly_its_releases() -> None:
    """The suite's cases are the declarations: a case named by its id runs on its releases,
    the test's other cases on Debian's; a module that declares nothing more runs on Debian's."""
    nodes = collected(*(str(p) for p in REAL))
    declared = {(f.module, *slurm_releases.split_case(t)): slurm_releases.releases(f.spec)
                for path in REAL for f in slurm_releases.features(path) for t in f.tests}
    for (module, name, case), releases in declared.items():
        if case is None:
            continue  # checked through its cases below
        for version in slurm_releases.ALL:
            node = f"tests/{module}::{name}[{slurm_releases.case_id(version)}-{case}]"
            assert (node in nodes) == (version in releases or version == slurm_releases.DEBIAN), node
    # one of each kind, spelled out
    assert "tests/test_real_cluster.py::test_tensorflow_multi_worker[slurm-24.11.7-two-per-node]" \
        in nodes
    assert not [n for n in nodes if "test_tensorflow_multi_worker[slurm-24.11.7-cyclic" in n]
    mpi = [n for n in nodes if n.startswith("tests/test_real_mpi.py::")]
    assert mpi and all("[slurm-22.05.8" in n for n in mpi)
    assert "tests/test_real_slurm_harness.py::test_batch_script_outside_srun[slurm-23.11.11]" \
        in nodes


def test_the_releases_option_keeps_only_those_releases() -> None:
    nodes = collected("tests/test_real_slurm_harness.py", "--slurm-releases=26.05.3")
    assert nodes and all("slurm-26.05.3" in n for n in nodes)
    bad = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/test_real_slurm_harness.py", "--slurm-releases=99.1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode != 0 and "unknown ['99.1']" in bad.stderr, bad.stdout + bad.stderr


def test_the_table_has_a_column_per_release_and_a_row_per_feature(tmp_path: Path) -> None:
    """A module of another topology plugs in by declaring FEATURES: its rows say yes only under
    the releases it names."""
    module = tmp_path / "test_real_example.py"
    module.write_text('FEATURES = {\n    "topology/tree": ("26.05.3", ["test_tree"]),\n'
                      '    "layouts": ("every", ["test_a", "test_b[x]"]),\n}\n')
    table = slurm_releases.markdown(slurm_releases.all_features([module])).splitlines()
    assert table[0] == ("| proven | Slurm 22.05.8 (Debian) | Slurm 23.11.11 | Slurm 24.11.7 | "
                        "Slurm 25.11.7 | Slurm 26.05.3 | tests |")
    assert table[2] == ("| layouts | yes | yes | yes | yes | yes | `test_real_example.py`: "
                        "`test_a`, `test_b[x]` |")
    assert table[3] == "| topology/tree | – | – | – | – | yes | `test_real_example.py`: `test_tree` |"


@pytest.mark.parametrize(("text", "error"), [
    ('FEATURES = {"x": ("sometimes", ["test_a"])}', "releases 'sometimes'"),
    ('FEATURES = {"x": ("21.08.1", ["test_a"])}', "unknown: ['21.08.1']"),
    ('FEATURES = {"x": ("every", ["a"])}', "must be (releases, [test names])"),
    ('FEATURES = {"x": "every"}', "must be (releases, [test names])"),
    ('FEATURES = ["x"]', "must be a dict"),
])
def test_a_malformed_declaration_is_an_error(tmp_path: Path, text: str, error: str) -> None:
    module = tmp_path / "test_real_bad.py"
    module.write_text(text + "\n")
    with pytest.raises((ValueError, TypeError), match=error.replace("[", r"\[").replace(
            "(", r"\(").replace(")", r"\)")):
        slurm_releases.features(module)


def test_a_case_id_loses_only_its_release() -> None:
    assert slurm_releases.case_without_release("slurm-26.05.3-N4-n8", "26.05.3") == "N4-n8"
    assert slurm_releases.case_without_release("slurm-22.05.8", "22.05.8") == ""
    assert slurm_releases.without_release("t.py::f[slurm-24.11.7-a-b]") == "t.py::f[a-b]"
    assert slurm_releases.without_release("t.py::f[slurm-24.11.7]") == "t.py::f"
    assert slurm_releases.without_release("t.py::f[slurm-x]") == "t.py::f[slurm-x]"


def test_every_known_failure_is_a_declared_test_on_a_release_it_runs_on() -> None:
    """A known failure (xfail, strict, from its release on) names a real-cluster test that runs
    there: an entry left over after its test moved or was renamed fails here."""
    for (module, function), (since, reason) in slurm_releases.KNOWN_FAILURES.items():
        runs = slurm_releases.releases_of(
            slurm_releases.features(ROOT / "tests" / module), function, None)
        later = [v for v in runs if slurm_releases.key(v) >= slurm_releases.key(since)]
        assert later and reason, (module, function)
        assert slurm_releases.known_failure(module, function, later[0]) == reason
        assert slurm_releases.known_failure(module, function, slurm_releases.DEBIAN) is None
