"""Shared fixtures: real Slurm clusters started on this machine (see slurm_harness).

Also, for the whole session:

* this interpreter's script directories go first on PATH, and the session stops with an
  error unless ``import slurmenv`` and the ``slurmenv`` on PATH both come from this checkout
  (tests/checkout.py);
* with ``SLURMENV_REQUIRE_CLUSTER=1`` (set by .ci/run) every skip is a failure: CI must prove
  what the suite tests (the real cluster, the frameworks, scontrol), not skip it. Without it a
  skip stays a skip, with its reason;
* every real-cluster test runs on the Slurm releases its module's ``FEATURES`` name
  (tests/slurm_releases.py): the ``slurm_release`` fixture, which every cluster fixture takes,
  is parametrized per test (ids ``[slurm-26.05.3]``); ``--slurm-releases=V,V`` keeps only those
  releases' cases. A release not built here skips (fails with ``SLURMENV_REQUIRE_CLUSTER=1``);
* the terminal summary says how many real-cluster tests ran, in all and on each release.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator, Iterator

import checkout
import pytest
import slurm_releases

# tests/ is on sys.path with pytest's default ("prepend") import mode
from slurm_harness import SlurmCluster, SlurmUnavailable

GPU_NODES = ("g1n1", "g1n2")
GPUS_PER_NODE = 4
REQUIRE_VAR = "SLURMENV_REQUIRE_CLUSTER"
CLUSTER_FIXTURES = ("slurm_cluster", "slurm_gpu_cluster", "slurm_prolog_cluster", "slurm_release",
                    "slurm_topology_cluster")
SKIPPED_IN_CI = "skipped, a failure in CI"


def required() -> bool:
    """Must every test run (CI), rather than skip where this machine cannot run it?"""
    return os.environ.get(REQUIRE_VAR, "") not in ("", "0")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slurm-releases", default="", metavar="V,V",
        help="run the real-cluster tests only on these Slurm releases (default: each one its "
             f"module's FEATURES names; known: {', '.join(slurm_releases.ALL)})")


def _chosen_releases(config: pytest.Config) -> set[str]:
    value = str(config.getoption("--slurm-releases") or "")
    if not value:
        return set(slurm_releases.ALL)
    chosen = {v.strip() for v in value.split(",") if v.strip()}
    unknown = chosen - set(slurm_releases.ALL)
    if unknown:
        raise pytest.UsageError(f"--slurm-releases: unknown {sorted(unknown)}; known: "
                                f"{', '.join(slurm_releases.ALL)} (tests/versions.txt)")
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``slurm_release`` (every cluster fixture does) runs on the releases its
    module's FEATURES name for it: Debian's only when none does."""
    if "slurm_release" not in metafunc.fixturenames:
        return
    declared = _declared(metafunc.module)
    wanted = slurm_releases.releases_of(declared, metafunc.function.__name__, None)
    versions = [v for v in slurm_releases.ALL if v in wanted]
    metafunc.parametrize("slurm_release", versions, indirect=True, scope="session",
                         ids=slurm_releases.case_id)


_FEATURES: dict[str, list[slurm_releases.Feature]] = {}  # test module file -> its FEATURES


def _declared(module: object) -> list[slurm_releases.Feature]:
    from pathlib import Path

    path = str(getattr(module, "__file__", ""))
    if path not in _FEATURES:
        _FEATURES[path] = slurm_releases.features(Path(path)) if path else []
    return _FEATURES[path]


def _release_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "slurm_release" not in callspec.params:
        return None
    return str(callspec.params["slurm_release"])


def _runs_here(item: pytest.Item, chosen: set[str]) -> bool:
    """Whether this case of a test runs on its release: declared there (a case named by its id
    may run on more releases than the test's other cases), and chosen by --slurm-releases."""
    version = _release_of(item)
    if version is None:
        return True
    function = getattr(item, "originalname", item.name)
    case = slurm_releases.case_without_release(item.callspec.id, version)  # type: ignore[attr-defined]
    wanted = slurm_releases.releases_of(_declared(getattr(item, "module", None)), function, case)
    return version in wanted and version in chosen


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm: needs a real Slurm cluster (root, network namespaces)"
    )
    checkout.put_first_on_path(os.environ)


def pytest_sessionstart(session: pytest.Session) -> None:
    found = checkout.problems()
    if found:
        pytest.exit("not testing this checkout:\n  " + "\n  ".join(found), returncode=1)


_REAL: dict[str, str] = {}  # node id of each real-cluster test selected -> its release
_OUTCOMES: dict[str, Counter[str]] = {}  # release -> what became of its tests
NO_RELEASE = "no cluster"  # marked slurm (its module's pytestmark), takes no cluster fixture


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses a cluster is a real-cluster test (marked ``slurm``); the cases of a
    release their module does not declare them for, or not chosen, are deselected."""
    chosen = _chosen_releases(config)
    kept, dropped = [], []
    for item in items:
        uses = getattr(item, "fixturenames", ())
        if any(name in uses for name in CLUSTER_FIXTURES):
            item.add_marker(pytest.mark.slurm)
        (kept if _runs_here(item, chosen) else dropped).append(item)
        version = _release_of(item)
        if version is not None:  # a slurmenv bug this release reveals: xfail(strict=True)
            slurm_releases.xfail_known(item, item.path.name, getattr(item, "originalname",
                                                                     item.name), version)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        if item.get_closest_marker("slurm"):
            _REAL[item.nodeid] = _release_of(item) or _declared_release(item) or NO_RELEASE


def _declared_release(item: pytest.Item) -> str | None:
    """The one release FEATURES names for a real-cluster test that starts its own cluster (no
    slurm_release fixture): its count goes there."""
    function = getattr(item, "originalname", item.name)
    declared = _declared(getattr(item, "module", None))
    named = [f for f in declared if any(slurm_releases.split_case(t)[0] == function
                                        for t in f.tests)]
    found = {v for f in named for v in slurm_releases.releases(f.spec)}
    return found.pop() if len(found) == 1 else None


def _must_not_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (report.skipped and required()) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    report.outcome = "failed"
    report.user_properties.append((SKIPPED_IN_CI, reason))
    report.longrepr = (
        f"{REQUIRE_VAR}=1 (CI): this must run here, and it was skipped: {reason}\n"
        "CI proves what the suite tests; make this machine able to run it (root, network "
        "namespaces, Slurm, the frameworks: tests/run.sh installs them)."
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    _must_not_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, None]:
    outcome = yield
    _must_not_skip(outcome.get_result())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid not in _REAL:
        return
    counts = _OUTCOMES.setdefault(_REAL[report.nodeid], Counter())
    if report.skipped and hasattr(report, "wasxfail"):
        counts["xfailed"] += 1  # a known failure (xfail, strict): it ran, and failed as known
    elif report.skipped or any(name == SKIPPED_IN_CI for name, _ in report.user_properties):
        counts["skipped"] += 1
    elif report.failed:
        counts["failed" if report.when == "call" else "errors"] += 1
    elif report.when == "call":
        counts["passed"] += 1


def _counts(counts: Counter[str], selected: int, what: str = "real-cluster tests") -> str:
    ran = counts["passed"] + counts["failed"] + counts["xfailed"]
    known = f", {counts['xfailed']} known failures (xfail)" if counts["xfailed"] else ""
    return (f"{ran} of {selected} selected {what} ran ({counts['passed']} passed, "
            f"{counts['failed']} failed{known}), {counts['skipped']} skipped"
            f"{' (each a failure: ' + REQUIRE_VAR + '=1)' if required() else ''}, "
            f"{counts['errors']} errors in setup/teardown")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total: Counter[str] = Counter()
    for counts in _OUTCOMES.values():
        total.update(counts)
    terminalreporter.write_sep("-", "real-cluster tests")
    terminalreporter.write_line(f"real Slurm cluster: {_counts(total, len(_REAL))}")
    order = [*slurm_releases.ALL, NO_RELEASE]
    for release in sorted(set(_REAL.values()), key=order.index):
        selected = sum(1 for r in _REAL.values() if r == release)
        name = release if release == NO_RELEASE else f"Slurm {slurm_releases.label(release)}"
        terminalreporter.write_line(
            f"  {name}: {_counts(_OUTCOMES.get(release, Counter()), selected, 'tests')}")
    if total["skipped"] and not required():
        terminalreporter.write_line(
            f"skipped real-cluster tests prove nothing: set {REQUIRE_VAR}=1 (CI does) to make "
            "every skip a failure"
        )


def _start(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """Start ``cluster`` for the session; skip (visibly) where it cannot run, fail where the
    run must prove it (``SLURMENV_REQUIRE_CLUSTER=1``)."""
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        if required():
            pytest.fail(f"real Slurm cluster unavailable, and {REQUIRE_VAR}=1: {exc}")
        pytest.skip(f"real Slurm cluster unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def slurm_release(request: pytest.FixtureRequest) -> str | None:
    """The Slurm release this case runs on, as SlurmCluster(release=...) takes it (None:
    Debian's 22.05); parametrized from the module's FEATURES (pytest_generate_tests)."""
    version = getattr(request, "param", slurm_releases.DEBIAN)
    return slurm_releases.harness_release(version)


@pytest.fixture(scope="session")
def slurm_cluster(slurm_release: str | None) -> Iterator[SlurmCluster]:
    """Four nodes r1n09 r1n10 r2n09 r2n10 (= r1n[09-10],r2n[09-10]), 8 CPUs each."""
    yield from _start(SlurmCluster(release=slurm_release))


@pytest.fixture(scope="session")
def slurm_prolog_cluster(slurm_release: str | None) -> Iterator[SlurmCluster]:
    """Three nodes whose slurm.conf runs slurmenv's site-wide task prolog for every task
    (``TaskProlog=`` the installed ``slurmenv-site-prolog``); started only when requested."""
    import sys
    from pathlib import Path

    prolog = Path(sys.executable).parent / "slurmenv-site-prolog"
    yield from _start(SlurmCluster(nodes=("r1n09", "r1n10", "r2n09"),
                                   extra_conf=f"TaskProlog={prolog}", release=slurm_release))


@pytest.fixture(scope="session")
def slurm_gpu_cluster(slurm_release: str | None) -> Iterator[SlurmCluster]:
    """Two nodes g1n1 g1n2 with 4 fake GPUs each; started only when requested."""
    yield from _start(SlurmCluster(nodes=GPU_NODES, gpus_per_node=GPUS_PER_NODE,
                                   release=slurm_release))
