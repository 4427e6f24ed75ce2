"""The docs' launcher and doctor tables are the code's own declarations (tests/doc_tables.py
renders them), every test they name exists, and the README claims no launcher the code does
not declare proven.

Each launcher's rows are declared in ``tests/launcher_claims.py`` (checked by
``tests/launcher_table.py``);
a doctor check says what it looks at where it is registered (``@check``). A page whose
generated block differs from the code fails here, with the command that rewrites it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import doc_tables
import launcher_claims
import launcher_table as table
import pytest
import slurm_releases

from slurmenv import launchers
from slurmenv.doctor import registry

ROOT = Path(__file__).resolve().parent.parent
CLAIMS = table.claims()


# -- the pages are the declarations -----------------------------------------------------------
@pytest.mark.parametrize("page", doc_tables.pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_blocks_are_what_the_code_declares(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert text == doc_tables.regenerated(text), (
        f"{page.relative_to(ROOT)} differs from the code's declarations; "
        f"regenerate it: {doc_tables.REGENERATE}"
    )


def test_every_table_is_on_a_page() -> None:
    """A generated table removed from its page (or never placed) fails: each is somewhere."""
    placed = {name for page in doc_tables.pages()
              for name, _, _ in doc_tables.blocks(page.read_text(encoding="utf-8"))}
    assert placed == set(doc_tables.BLOCKS)
    launchers_page = (ROOT / "docs" / "launchers.md").read_text(encoding="utf-8")
    assert {name for name, _, _ in doc_tables.blocks(launchers_page)} == {
        "launchers", "launcher-tests", "mpi-versions"}


def test_a_stale_block_is_rewritten_and_nothing_else() -> None:
    stale = (f"# Page\n\ntext before\n\n{doc_tables.start_marker('doctor-checks')}\n\n"
             "| check | what it looks at |\n|---|---|\n| `old` | gone |\n\n"
             f"{doc_tables.END}\n\ntext after\n")
    new = doc_tables.regenerated(stale)
    assert new != stale and "`old`" not in new
    assert new.startswith("# Page\n\ntext before\n\n") and new.endswith("\n\ntext after\n")
    assert doc_tables._doctor_checks() in new
    assert doc_tables.regenerated(new) == new


@pytest.mark.parametrize("text", [
    "<!-- generated: launchers -->\n| a |\n",
    "| a |\n<!-- end generated -->\n",
    "<!-- generated: no-such-table -->\n<!-- end generated -->\n",
    "<!-- generated: launchers -->\n<!-- generated: launchers -->\n<!-- end generated -->\n",
])
def test_broken_markers_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        doc_tables.blocks(text)


# -- a new launcher or check reaches the pages without a hand edit -----------------------------
def test_a_new_launcher_appears_in_every_launcher_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(launcher_claims.CLAIMS, "fake", ({
        "name": "Fake MPI", "started_by": "`fakerun`", "signal": "`FAKE_RANK`",
        "status": table.DOCUMENTED, "source": "its manual", "mpi": True,
        "page": table.BEYOND,
    },))
    monkeypatch.setattr(launchers, "REGISTRY", (*launchers.REGISTRY[:-1], "fake", "local"))
    found = table.claims()
    for render in (table.launchers, table.mpi_versions, table.beyond_slurm):
        assert "`fakerun`" in render(found) or "Fake MPI" in render(found), render.__name__
    for name in ("launchers.md", "launchers-beyond-slurm.md"):
        text = (ROOT / "docs" / name).read_text(encoding="utf-8")
        assert doc_tables.regenerated(text) != text, f"docs/{name} would not show it"


def test_a_launcher_without_claims_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launchers, "REGISTRY", ("fake", *launchers.REGISTRY))
    with pytest.raises(ValueError, match="declares no claims of launcher 'fake'"):
        table.claims()
    monkeypatch.setattr(launchers, "REGISTRY", launchers.REGISTRY[1:-1])
    with pytest.raises(ValueError, match=r"\['local'\] not in the registry"):
        table.claims()


def test_a_new_doctor_check_appears_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ENTRIES", list(registry.ENTRIES))
    registry.check("new", "new check", "what the new check looks at")(lambda ctx: None)
    last = doc_tables._doctor_checks().splitlines()[-1]
    assert last == "| `new check` | what the new check looks at |"
    text = (ROOT / "docs" / "doctor.md").read_text(encoding="utf-8")
    assert doc_tables.regenerated(text) != text


def test_every_doctor_check_says_what_it_looks_at() -> None:
    from slurmenv.doctor import checks

    assert list(registry.CHECKS) == list(checks.ORDER)
    assert all(entry.looks_at.strip() for entry in registry.ENTRIES)
    with pytest.raises(ValueError, match="one line"):
        registry.check("other", "other", "two\nlines")


# -- the declarations are checked ------------------------------------------------------------
GOOD = {"name": "X", "started_by": "x", "signal": "`X`", "status": table.PROVEN,
        "what": "ran", "version": "1.0", "tests": ("tests/test_x.py::test_x",)}


@pytest.mark.parametrize(("change", "message"), [
    ({"status": "proven"}, "a status among"),  # a typo is no status
    ({"tests": ()}, "version, tests and what"),
    ({"version": ""}, "version, tests and what"),
    ({"status": table.DOCUMENTED}, "the source"),
    ({"status": table.UNIT, "tests": ()}, "tests"),
    ({"tests": ("test_x.py::test_x",)}, "is not 'tests/FILE.py"),
    ({"tests": "tests/test_x.py"}, "tests a tuple"),
    ({"signal": ""}, "missing \\['signal'\\]"),
    ({"colour": "red"}, "unknown keys \\['colour'\\]"),
    ({"what": "a | b"}, "without '\\|'"),
])
def test_a_wrong_claim_is_refused(change: dict[str, object], message: str) -> None:
    table.check("x", GOOD)  # the base claim is good
    with pytest.raises((ValueError, TypeError), match=message):
        table.check("x", {**GOOD, **change})


def test_every_registered_launcher_declares_claims() -> None:
    assert [m for m in launchers.REGISTRY if m not in {c.module for c in CLAIMS}] == []
    assert {c.status for c in CLAIMS} <= set(table.STATUSES)


def test_signals_name_variables_the_launchers_read() -> None:
    """The signal column names only variables a launcher reads, and a launcher imported only
    on its SIGNALS (launchers/__init__.py) names one of them in each of its rows."""
    read = {name for module in launchers.modules()
            for name in (*module.VARIABLES, *getattr(module, "TASK_VARIABLES", ()))}
    for claim in CLAIMS:
        named = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", claim.signal))
        assert named <= read, f"{claim.module}: {claim.signal}"
        signals = launchers.SIGNALS.get(claim.module, ())
        assert not signals or any(s in claim.signal for s in signals), claim


def _collected(files: list[str], marker: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", marker, *files],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode in (0, 5), out.stdout + out.stderr  # 5: none selected in a file
    # a claim names a test as it runs on Debian's Slurm: its id without the release's part
    return {slurm_releases.without_release(line.strip()) for line in out.stdout.splitlines()
            if "::" in line}


def _matches(node: str, collected: set[str]) -> bool:
    if "::" not in node:
        return any(c.startswith(node + "::") for c in collected)
    if node.endswith("…]"):
        return any(c.startswith(node[:-2]) for c in collected)
    return node in collected or any(c.startswith(node + "[") for c in collected)


def test_every_test_a_claim_names_is_collected() -> None:
    """The node ids in the launcher tables are real tests (pytest collects them), and a claim
    proven on the real cluster names at least one real-cluster test (marked ``slurm``)."""
    nodes = sorted({node for claim in CLAIMS for node in table.node_ids(claim)})
    assert len(nodes) >= 30
    files = sorted({node.partition("::")[0] for node in nodes})
    real = _collected(files, "slurm")
    collected = real | _collected(files, "not slurm")
    assert [node for node in nodes if not _matches(node, collected)] == [], "no such tests"
    for claim in CLAIMS:
        if claim.status == table.PROVEN:
            assert any(_matches(node, real) for node in table.node_ids(claim)), (
                f"{claim.module}: {claim.name} {claim.version} is proven by no real-cluster test")


# -- the README's launchers ------------------------------------------------------------------
#: Launchers and schedulers a page might name; the README may name only those a launcher
#: module declares (in a claim's name, started_by or signal).
LAUNCHER_WORDS = (
    "Open MPI", "MPICH", "Intel MPI", "MVAPICH", "Spectrum MPI", "Hydra", "Cray PALS", "PALS",
    "PBS", "OpenPBS", "Torque", "Flux", "LSF", "jsrun", "Kubernetes", "Kubeflow", "Volcano",
    "JobSet", "torchrun", "srun", "mpirun", "mpiexec", "prterun", "orterun", "mpirun_rsh",
    "aprun", "ALPS", "PMIx", "SGE", "Grid Engine", "HTCondor", "Cobalt", "OAR", "Ray",
    "Dask", "Horovod", "horovodrun", "deepspeed launcher",
)


def readme_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Other launchers and frameworks", 1)[1].split("\n## ", 1)[0]
    assert "mpirun" in section
    return section


def proven_in_readme(section: str) -> list[tuple[str, str | None]]:
    """(launcher, major version or None) for each "(proven here)" comment: ``Open MPI 4 and
    5`` gives Open MPI 4 and Open MPI 5; ``Hydra: MPICH 4, Intel MPI`` gives MPICH 4 and
    Intel MPI (and Hydra, the family, alone)."""
    found: list[tuple[str, str | None]] = []
    for comment in re.findall(r"#\s*([^#\n]+?)\s*\(proven here\)", section):
        family, _, names = comment.rpartition(":")
        if family:
            found.append((family.strip(), None))
        product = ""
        for part in re.split(r",\s*|\s+and\s+", names.strip()):
            match = re.fullmatch(r"(.*?)\s*(\d+)?", part.strip())
            assert match is not None
            product = match.group(1) or product
            found.append((product, match.group(2)))
    return found


def test_what_the_readme_calls_proven_is_declared_proven() -> None:
    claimed = proven_in_readme(readme_section())
    assert ("Open MPI", "5") in claimed and ("Intel MPI", None) in claimed
    proven = [c for c in CLAIMS if c.status == table.PROVEN]
    for product, major in claimed:
        assert any(
            (c.name == product or c.name.startswith(product + " ") or f"({product})" in c.name)
            and (major is None or c.version.startswith(major + "."))
            for c in proven
        ), f"README.md calls {product} {major or ''} proven; no launcher declares it proven"


def test_the_readme_checker_catches_an_unproven_claim() -> None:
    claimed = proven_in_readme("x  # Flux 1 and MPICH 9, LSF (proven here)\n")
    assert claimed == [("Flux", "1"), ("MPICH", "9"), ("LSF", None)]


def test_the_readme_names_no_launcher_the_code_does_not_declare() -> None:
    section = readme_section()
    declared = " ".join(f"{c.name} {c.started_by} {c.signal}" for c in CLAIMS)
    named = [w for w in LAUNCHER_WORDS if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", section)]
    assert {"Open MPI", "Flux", "LSF", "Kubernetes"} <= set(named)
    assert [w for w in named if w not in declared] == []


def test_the_readme_names_every_launcher_that_never_ran_here() -> None:
    """The README's sentence on the launchers that rest on documented variables only is
    checked against the claims: each such claim's product (the first word of its name) is
    named there, so a launcher added with documented variables only reaches the README."""
    section = " ".join(readme_section().split())
    products = {c.name.replace("`", "").split()[0] for c in CLAIMS if c.status == table.DOCUMENTED}
    assert {"Flux", "LSF", "PBS", "Kubernetes", "MVAPICH2"} <= products
    assert sorted(p for p in products if p not in section) == [], (
        "README.md, '## Other launchers and frameworks': name each launcher resting on "
        "documented variables only")
