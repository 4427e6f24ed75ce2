"""The Slurm releases the real-cluster tests run on, and what each test module proves on them.

The releases: Debian's own (the ``debian slurmd`` line of tests/versions.txt, 22.05.8, from
``apt-get``) and every ``source slurm`` line (a release tests/build_slurm.sh builds from
``../shared/slurm-src/`` into ``/opt/slurmenv-slurm/VERSION``; tests/run.sh does it).

What runs where is declared by each real-cluster test module, in a module-level literal::

    FEATURES = {  # what these tests prove -> (on which releases, which tests)
        "the batch script": ("every", ["test_batch_script_is_refused"]),
        "torch meets": ("every", ["test_torch_all_reduce[default-N4-n8]"]),
        "MPI builds": ("debian", ["test_torch_all_reduce_under_every_build"]),
        "topology/tree": ("26.05.3", ["test_tree_steps"]),
    }

The releases are ``every`` (Debian's and every built one), ``debian`` (Debian's only),
``debian+newest`` (Debian's and the newest built one) or versions separated by commas. A test is
named bare (all its cases) or with one case's id (``name[id]``, the id without the release).
tests/conftest.py runs each test that takes the ``slurm_release`` fixture (every cluster
fixture does) on exactly the releases its entries name, Debian's only when none does; the
release × feature table of docs/releases.md is rendered from the same declarations (read with
``ast``, nothing imported), so it lists what the suite runs. A module whose fixtures start
clusters of their own (a topology, say) takes ``slurm_release`` in them too
(``SlurmCluster(release=slurm_release, topology=...)``) and declares its tests with that
release (``("26.05.3", [...])``); without the fixture, a test declared for one release is still
counted under it.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable
from typing import NamedTuple

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
VERSIONS = TESTS / "versions.txt"
SPECS = ("every", "debian", "debian+newest")


def _pins(kind: str, package: str) -> list[str]:
    found = []
    for line in VERSIONS.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if fields[:2] == [kind, package] and not line.startswith("#"):
            found.append(fields[2])
    return found


def key(version: str) -> tuple[int, ...]:
    """``"26.05.3"`` -> (26, 5, 3), for sorting."""
    return tuple(int(part) for part in version.split("."))


DEBIAN = _pins("debian", "slurmd")[0]  # Debian 12's Slurm: the harness's release=None
BUILT = tuple(sorted(_pins("source", "slurm"), key=key))  # built from ../shared/slurm-src
ALL = (DEBIAN, *BUILT)
NEWEST = BUILT[-1] if BUILT else DEBIAN


def harness_release(version: str) -> str | None:
    """What SlurmCluster(release=...) takes for ``version``: None is Debian's."""
    return None if version == DEBIAN else version


def label(version: str) -> str:
    return f"{version} (Debian)" if version == DEBIAN else version


def case_id(version: str) -> str:
    """The id a test carries for the release it ran on: ``slurm-26.05.3``."""
    return f"slurm-{version}"


def releases(spec: str) -> tuple[str, ...]:
    """The releases a FEATURES entry names; ValueError for anything else."""
    if spec == "every":
        return ALL
    if spec == "debian":
        return (DEBIAN,)
    if spec == "debian+newest":
        return tuple(dict.fromkeys((DEBIAN, NEWEST)))
    named = tuple(part.strip() for part in spec.split(","))
    unknown = [v for v in named if v not in ALL]
    if unknown or not named:
        raise ValueError(f"releases {spec!r}: use one of {', '.join(SPECS)} or versions of "
                         f"tests/versions.txt ({', '.join(ALL)}); unknown: {unknown}")
    return named


#: slurmenv bugs a release reveals, to be fixed elsewhere: (test file, test function) -> (the
#: first release it fails on, why). tests/conftest.py marks each case there xfail(strict=True)
#: (an unexpected pass fails: remove the entry then), and docs/releases.md's table says so.
#: Empty: 26.05's signed step ids (issue 33 item 4), the last entries, are handled.
KNOWN_FAILURES: dict[tuple[str, str], tuple[str, str]] = {}


def known_failure(module: str, function: str, version: str) -> str | None:
    """Why ``function`` of ``module`` is known to fail on ``version``, or None."""
    since, reason = KNOWN_FAILURES.get((module, function), ("", ""))
    return reason if since and key(version) >= key(since) else None


def xfail_known(item: pytest.Item, module: str, function: str, version: str) -> None:
    """Mark this case ``xfail(strict=True)`` where it is a known failure on its release."""
    reason = known_failure(module, function, version)
    if reason:
        item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


class Feature(NamedTuple):
    name: str  # what the tests prove, as the table's row says it
    spec: str  # on which releases (see releases())
    tests: tuple[str, ...]  # test function names, or name[case id]
    module: str  # the test file's name


def features(path: pathlib.Path) -> list[Feature]:
    """The FEATURES a test module declares ([] without); ValueError for a malformed one."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            else node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "FEATURES" and node.value is not None:
            return _checked(ast.literal_eval(node.value), path.name)
    return []


def _checked(value: object, module: str) -> list[Feature]:
    if not isinstance(value, dict):
        raise TypeError(f"{module}: FEATURES must be a dict")
    found = []
    for name, entry in value.items():
        if not (isinstance(name, str) and isinstance(entry, tuple) and len(entry) == 2
                and isinstance(entry[0], str) and isinstance(entry[1], (list, tuple))
                and all(isinstance(t, str) and t.startswith("test_") for t in entry[1])):
            raise ValueError(f"{module}: FEATURES[{name!r}] must be (releases, [test names])")
        releases(entry[0])  # ValueError names the entry's spec
        found.append(Feature(name, entry[0], tuple(entry[1]), module))
    return found


def all_features(paths: Iterable[pathlib.Path] | None = None) -> list[Feature]:
    """Every test module's FEATURES, in file order."""
    chosen = sorted(TESTS.glob("test_*.py")) if paths is None else paths
    return [f for path in chosen for f in features(path)]


def split_case(test: str) -> tuple[str, str | None]:
    """``"name[id]"`` -> ("name", "id"); ``"name"`` -> ("name", None)."""
    if test.endswith("]") and "[" in test:
        name, _, case = test[:-1].partition("[")
        return name, case
    return test, None


def releases_of(declared: Iterable[Feature], function: str, case: str | None) -> set[str]:
    """The releases ``function`` (its case ``case``, None for all of them) runs on."""
    found: set[str] = set()
    for feature in declared:
        for test in feature.tests:
            name, only = split_case(test)
            if name == function and (only is None or case is None or only == case):
                found.update(releases(feature.spec))
    return found or {DEBIAN}


def case_without_release(callspec_id: str, version: str) -> str:
    """A case's id with the release's part taken out (``slurm-26.05.3-N4-n8`` -> ``N4-n8``)."""
    part = case_id(version)
    if callspec_id == part:
        return ""
    if callspec_id.startswith(part + "-"):
        return callspec_id[len(part) + 1:]
    if callspec_id.endswith("-" + part):
        return callspec_id[: -len(part) - 1]
    return callspec_id.replace(f"-{part}-", "-")


def without_release(nodeid: str) -> str:
    """A test's node id as if it had no release: ``t.py::f[slurm-26.05.3-N4-n8]`` ->
    ``t.py::f[N4-n8]``, ``t.py::f[slurm-22.05.8]`` -> ``t.py::f``."""
    name, bracket, case = nodeid.partition("[")
    if not bracket:
        return nodeid
    for version in ALL:
        rest = case_without_release(case[:-1], version)
        if rest != case[:-1]:
            return f"{name}[{rest}]" if rest else name
    return nodeid


# -- the table of docs/releases.md ------------------------------------------------------------
def markdown(declared: list[Feature] | None = None) -> str:
    """One row a feature (merged across modules), one column a release, and the tests."""
    declared = all_features() if declared is None else declared
    rows: dict[str, tuple[set[str], list[str]]] = {}
    for feature in declared:
        where, tests = rows.setdefault(feature.name, (set(), []))
        where.update(releases(feature.spec))
        tests.append(f"`{feature.module}`: " + ", ".join(f"`{t}`" for t in feature.tests))
    known: dict[str, set[str]] = {}  # feature -> releases where one of its tests fails
    notes: dict[str, None] = {}
    for feature in declared:
        for test in feature.tests:
            for version in releases(feature.spec):
                reason = known_failure(feature.module, split_case(test)[0], version)
                if reason:
                    known.setdefault(feature.name, set()).add(version)
                    notes[f"`{feature.module}::{split_case(test)[0]}` on Slurm {version}: "
                          f"{reason}"] = None
    head = "| proven | " + " | ".join(f"Slurm {label(v)}" for v in ALL) + " | tests |"
    lines = [head, "|---|" + "---|" * len(ALL) + "---|"]
    for name in sorted(rows, key=lambda n: (-len(rows[n][0]), n.lower())):
        where, tests = rows[name]
        cells = " | ".join("known failure" if v in known.get(name, ()) else
                           "yes" if v in where else "–" for v in ALL)
        lines.append(f"| {name} | {cells} | {'; '.join(tests)} |")
    if notes:
        lines += ["", ("Known failures (the tests run there, marked xfail: an unexpected pass "
                  "fails the run):"), ""]
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines)
