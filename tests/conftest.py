"""Shared fixtures: real Slurm clusters started on this machine (see slurm_harness)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# tests/ is on sys.path with pytest's default ("prepend") import mode
from slurm_harness import SlurmCluster, SlurmUnavailable

GPU_NODES = ("g1n1", "g1n2")
GPUS_PER_NODE = 4


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm: needs a real Slurm cluster (root, network namespaces)"
    )


def _start(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """Start ``cluster`` for the session; skip (visibly) where it cannot run."""
    try:
        cluster.start()
    except SlurmUnavailable as exc:
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
def slurm_gpu_cluster() -> Iterator[SlurmCluster]:
    """Two nodes g1n1 g1n2 with 4 fake GPUs each; started only when requested."""
    yield from _start(SlurmCluster(nodes=GPU_NODES, gpus_per_node=GPUS_PER_NODE))
