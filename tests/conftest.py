"""Shared fixtures: real Slurm clusters started on this machine (see slurm_harness).

Also, for the whole session:

* this interpreter's script directories go first on PATH, and the session stops with an
  error unless ``import slurmenv`` and the ``slurmenv`` on PATH both come from this checkout
  (tests/checkout.py);
* with ``SLURMENV_REQUIRE_CLUSTER=1`` (set by .ci/run) every skip is a failure: CI must prove
  what the suite tests (the real cluster, the frameworks, scontrol), not skip it. Without it a
  skip stays a skip, with its reason;
* the terminal summary says how many real-cluster tests ran.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator, Iterator

import checkout
import pytest

# tests/ is on sys.path with pytest's default ("prepend") import mode
from slurm_harness import SlurmCluster, SlurmUnavailable

GPU_NODES = ("g1n1", "g1n2")
GPUS_PER_NODE = 4
REQUIRE_VAR = "SLURMENV_REQUIRE_CLUSTER"
CLUSTER_FIXTURES = ("slurm_cluster", "slurm_gpu_cluster", "slurm_prolog_cluster",
                    "slurm_topology_cluster")
SKIPPED_IN_CI = "skipped, a failure in CI"


def required() -> bool:
    """Must every test run (CI), rather than skip where this machine cannot run it?"""
    return os.environ.get(REQUIRE_VAR, "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm: needs a real Slurm cluster (root, network namespaces)"
    )
    checkout.put_first_on_path(os.environ)


def pytest_sessionstart(session: pytest.Session) -> None:
    found = checkout.problems()
    if found:
        pytest.exit("not testing this checkout:\n  " + "\n  ".join(found), returncode=1)


_REAL: set[str] = set()  # node ids of the real-cluster tests selected
_OUTCOMES: Counter[str] = Counter()  # what became of them


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses a cluster is a real-cluster test (marked ``slurm``)."""
    for item in items:
        uses = getattr(item, "fixturenames", ())
        if any(name in uses for name in CLUSTER_FIXTURES):
            item.add_marker(pytest.mark.slurm)


def pytest_collection_finish(session: pytest.Session) -> None:
    _REAL.update(item.nodeid for item in session.items if item.get_closest_marker("slurm"))


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
    counts = _OUTCOMES
    if report.skipped or any(name == SKIPPED_IN_CI for name, _ in report.user_properties):
        counts["skipped"] += 1
    elif report.failed:
        counts["failed" if report.when == "call" else "errors"] += 1
    elif report.when == "call":
        counts["passed"] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = _OUTCOMES
    selected = len(_REAL)
    ran = counts["passed"] + counts["failed"]
    line = (f"real Slurm cluster: {ran} of {selected} selected real-cluster tests ran "
            f"({counts['passed']} passed, {counts['failed']} failed), {counts['skipped']} "
            f"skipped{' (each a failure: ' + REQUIRE_VAR + '=1)' if required() else ''}, "
            f"{counts['errors']} errors in setup/teardown")
    terminalreporter.write_sep("-", "real-cluster tests")
    terminalreporter.write_line(line)
    if counts["skipped"] and not required():
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
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Four nodes r1n09 r1n10 r2n09 r2n10 (= r1n[09-10],r2n[09-10]), 8 CPUs each."""
    yield from _start(SlurmCluster())


@pytest.fixture(scope="session")
def slurm_prolog_cluster() -> Iterator[SlurmCluster]:
    """Three nodes whose slurm.conf runs slurmenv's site-wide task prolog for every task
    (``TaskProlog=`` the installed ``slurmenv-site-prolog``); started only when requested."""
    import sys
    from pathlib import Path

    prolog = Path(sys.executable).parent / "slurmenv-site-prolog"
    yield from _start(SlurmCluster(nodes=("r1n09", "r1n10", "r2n09"),
                                   extra_conf=f"TaskProlog={prolog}"))


@pytest.fixture(scope="session")
def slurm_gpu_cluster() -> Iterator[SlurmCluster]:
    """Two nodes g1n1 g1n2 with 4 fake GPUs each; started only when requested."""
    yield from _start(SlurmCluster(nodes=GPU_NODES, gpus_per_node=GPUS_PER_NODE))
