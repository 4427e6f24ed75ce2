"""slurmenv under the MPI builds clusters run today, on the real cluster (issue 18): Open MPI 5
(PRRTE ``mpirun``), Intel MPI (``mpiexec.hydra``) and MPICH 5 (``mpiexec``), each a PyPI wheel
that tests/run.sh installs into a virtual environment of its own (tests/mpi_builds.py).

Each test submits one batch job of 3 nodes x 2 slots (``-w r1n[09-10],r2n09``, batch node
r1n09) and runs the user's command line in it: a torch ``gloo`` all_reduce over every rank
through ``eval $(slurmenv export --for torch)``, each rank's values checked against the node it
really ran on. Two launches of one build at the same time get different ports and both train.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mpi_builds
import pytest
from slurm_harness import BatchResult, SlurmCluster
from test_real_mpi import CHECK_TORCH, JOB, PAIR, explain, launches

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "MPI builds: Open MPI 5, Intel MPI, MPICH 5": ("debian", [
        "test_torch_all_reduce_under_every_build",
        "test_open_mpi_5_rank_0_elsewhere_is_refused_then_master_addr_trains",
        "test_two_concurrent_launches_of_a_build",
        "test_open_mpi_5_outside_slurm_on_one_machine_needs_a_port",
        "test_the_builds_are_the_ones_named",
    ]),
}

ROOT = Path(__file__).resolve().parent.parent
# this Python by its path: Open MPI 5's mpirun puts its own bin (a virtual environment with a
# python of its own, without torch) first on the ranks' PATH
PYTHON = sys.executable
EXPORT = f"bash -c 'eval $(slurmenv export --for torch); exec {PYTHON} {CHECK_TORCH}'"
PAIR_5 = PAIR.replace("exec python", f"exec {PYTHON}")
TIMEOUT = 300.0
LAUNCH = 'launch() { echo "== LAUNCH $1"; shift; "$@"; echo "== RC $?"; }\n'


def sbatch(cluster: SlurmCluster, build: str, body: str) -> BatchResult:
    why = mpi_builds.missing(build)
    if why is not None:
        pytest.skip(why)
    script = "#!/bin/bash\n" + mpi_builds.preamble(build) + LAUNCH + body
    return cluster.sbatch(script, JOB, env=mpi_builds.environ(build), timeout=TIMEOUT)


def check(got: list[dict[str, Any]], world: int, nnodes: int, node_values: bool, where: str) -> None:
    """One world with the right sum; every rank's values where it really ran; rank 0 on the
    batch node. ``node_values``: NODE_RANK/NNODES exported (Hydra) or left out (Open MPI 5)."""
    by_rank = {rec["rank"]: rec for rec in got}
    assert sorted(by_rank) == list(range(world)) and len(got) == world, where
    assert len({rec["host"] for rec in got}) == nnodes, where
    assert by_rank[0]["host"] == "r1n09", where
    node_rank_of: dict[str, str | None] = {}
    for rank, rec in by_rank.items():
        env = rec["env"]
        assert (rec["world"], rec["sum"]) == (world, world * (world + 1) // 2), where
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == str(world), where
        assert env["MASTER_ADDR"] == "r1n09", where
        on_host = sorted(r for r, other in by_rank.items() if other["host"] == rec["host"])
        assert env["LOCAL_WORLD_SIZE"] == str(len(on_host)), where
        assert env["LOCAL_RANK"] == str(on_host.index(rank)), where
        if node_values:
            assert env["NNODES"] == str(nnodes), where
            assert node_rank_of.setdefault(rec["host"], env["NODE_RANK"]) == env["NODE_RANK"]
        else:
            assert env.get("NNODES") is None and env.get("NODE_RANK") is None, where
    if node_values:
        assert node_rank_of["r1n09"] == "0", where
        assert sorted(int(str(v)) for v in node_rank_of.values()) == list(range(nnodes)), where
    assert len({rec["env"]["MASTER_PORT"] for rec in got}) == 1, where


RUNS = {  # name: (build, command, ranks, nodes holding them, node values exported)
    "openmpi5-default": ("openmpi5", "mpirun -np 5", 5, 3, False),
    "openmpi5-map-by-node": ("openmpi5", "mpirun --map-by node -np 4", 4, 3, False),
    "openmpi5-ppr": ("openmpi5", "mpirun --map-by ppr:1:node -np 3", 3, 3, False),
    "openmpi5-npernode": ("openmpi5", "mpirun --npernode 1 -np 3", 3, 3, False),
    "openmpi5-uneven": ("openmpi5", "mpirun -np 3", 3, 2, False),
    "openmpi5-host": ("openmpi5", "mpirun --host r1n09:2,r2n09:2 -np 4", 4, 2, False),
    "impi-ppn": ("impi", "mpiexec.hydra -ppn 2 -n 4", 4, 2, True),
    "impi-uneven": ("impi", "mpiexec.hydra -n 5 -ppn 2", 5, 3, True),
    "impi-rr": ("impi", "mpiexec.hydra -rr -n 4", 4, 3, True),
    "mpich5-default": ("mpich5", "mpiexec -n 5", 5, 3, True),
    "mpich5-ppn": ("mpich5", "mpiexec -ppn 1 -n 3", 3, 3, True),
}


@pytest.mark.parametrize("build", sorted(mpi_builds.BUILDS))
def test_torch_all_reduce_under_every_build(slurm_cluster: SlurmCluster, build: str) -> None:
    """Every mapping of the build in one job, one launch after the other."""
    runs = {name: run for name, run in RUNS.items() if run[0] == build}
    body = "".join(f"launch {name} {run[1]} {EXPORT}\n" for name, run in runs.items())
    res = sbatch(slurm_cluster, build, body)
    got = launches(res)
    for name, (_, command, world, nnodes, node_values) in runs.items():
        assert name in got, f"{name}\n{explain(res)}"
        rc, checks, _ = got[name]
        assert rc == 0, f"{name}: {command}\n{explain(res)}"
        check(checks, world, nnodes, node_values, f"{name}: {command}\n{explain(res)}")


def test_open_mpi_5_rank_0_elsewhere_is_refused_then_master_addr_trains(
    slurm_cluster: SlurmCluster,
) -> None:
    """``mpirun --host r1n10:2,r2n09:2`` from the batch node: rank 0 runs on r1n10, refuses
    with the fix --master-addr, and mpirun aborts every rank before any all_reduce; the same
    launch with ``SLURMENV_MASTER_ADDR=r1n10`` trains."""
    command = "mpirun --host r1n10:2,r2n09:2 -np 4"
    body = (f"launch refused {command} {EXPORT}\n"
            f"launch fixed {command} -x SLURMENV_MASTER_ADDR=r1n10 {EXPORT}\n")
    res = sbatch(slurm_cluster, "openmpi5", body)
    got = launches(res)
    rc, checks, _ = got["refused"]
    assert rc != 0 and checks == [], explain(res)
    assert "not on r1n09" in res.stderr + res.stdout and "--master-addr" in res.stderr + res.stdout
    rc, checks, _ = got["fixed"]
    assert rc == 0, explain(res)
    assert sorted(rec["rank"] for rec in checks) == [0, 1, 2, 3], explain(res)
    assert all(rec["sum"] == 10 and rec["env"]["MASTER_ADDR"] == "r1n10" for rec in checks)


@pytest.mark.parametrize(
    ("build", "a", "b"),
    [("openmpi5", "mpirun -np 3", "mpirun --map-by node -np 3"),
     ("impi", "mpiexec.hydra -n 3", "mpiexec.hydra -n 3"),
     ("mpich5", "mpiexec -n 3", "mpiexec -n 3")],
)
def test_two_concurrent_launches_of_a_build(
    slurm_cluster: SlurmCluster, build: str, a: str, b: str
) -> None:
    res = sbatch(slurm_cluster, build, PAIR_5.format(a=a, b=b, check=CHECK_TORCH))
    got = launches(res)
    ports = [{line.split()[1] for line in got[x][2] if line.startswith("PORT ")} for x in "ab"]
    assert len(ports[0]) == len(ports[1]) == 1 and ports[0] != ports[1], explain(res)
    for x in "ab":
        rc, checks, _ = got[x]
        assert rc == 0, explain(res)
        assert sorted(rec["rank"] for rec in checks) == [0, 1, 2], explain(res)
        assert all(rec["sum"] == 6 for rec in checks), explain(res)
        rank0 = next(rec for rec in checks if rec["rank"] == 0)
        assert rank0["met"] == ["a", "b"], explain(res)
        assert {rec["env"]["MASTER_ADDR"] for rec in checks} == {rank0["host"]}, explain(res)


def test_open_mpi_5_outside_slurm_on_one_machine_needs_a_port(slurm_cluster: SlurmCluster) -> None:
    """In the controller's namespace (no Slurm job, one machine): refused without a port,
    trains with one; the node values are told there (every rank on one node)."""
    why = mpi_builds.missing("openmpi5")
    if why is not None:
        pytest.skip(why)
    env = {**mpi_builds.environ("openmpi5"), "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    mpirun = ["mpirun", "--oversubscribe", "-np", "3"]
    refused = slurm_cluster.run([*mpirun, "slurmenv", "exec", "--for", "torch", "--", "true"],
                                env=env, timeout=TIMEOUT)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "MASTER_PORT cannot be derived" in refused.stderr and "--port" in refused.stderr
    ok = slurm_cluster.run([*mpirun, "-x", "SLURMENV_PORT=23457", "slurmenv", "exec", "--for",
                            "torch", "--", PYTHON, str(CHECK_TORCH)], env=env, timeout=TIMEOUT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    checks = [json.loads(line[6:]) for line in ok.stdout.splitlines() if line.startswith("CHECK ")]
    assert sorted(rec["rank"] for rec in checks) == [0, 1, 2], ok.stdout
    for rec in checks:
        assert rec["sum"] == 6 and rec["env"]["MASTER_ADDR"] == "127.0.0.1"
        assert rec["env"]["MASTER_PORT"] == "23457" and rec["env"]["NNODES"] == "1"


def test_the_builds_are_the_ones_named(slurm_cluster: SlurmCluster) -> None:
    """The wheels really are Open MPI 5, Intel MPI and MPICH 5 (not Debian's 4.x), and the
    launcher each job runs is the version tests/versions.txt lists (the docs' proven one)."""
    import test_versions

    listed = {p.package: p.version for p in test_versions.PINS if p.kind == "wheel"}
    body = ("mpirun --version | head -1; mpiexec.hydra --version 2>&1 | head -3; "
            "echo; mpiexec --version | head -3\n")
    for build in mpi_builds.BUILDS:
        res = sbatch(slurm_cluster, build, body if build == "openmpi5" else (
            "mpiexec.hydra --version 2>&1 | head -2\n" if build == "impi" else
            "mpiexec --version | head -2\n"))
        text = res.stdout
        want = {"openmpi5": "(Open MPI) 5.", "impi": "Intel(R) MPI Library", "mpich5": "Version:"}
        assert want[build] in text, f"{build}\n{explain(res)}"
        if build == "mpich5":
            assert "Version:                                 5." in text or " 5." in text, text
        version = listed[mpi_builds.BUILDS[build][1]]
        shown = {"openmpi5": f"(Open MPI) {version}\n", "impi": f", Version {version} ",
                 "mpich5": f"Version:                                 {version}\n"}
        assert shown[build] in text, f"{build}: not {version}\n{explain(res)}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
