"""slurmenv asking the step itself through Slurm's PMI (``srun --mpi=pmi2``, ``SLURMENV_PMI=1``;
slurmenv/launchers/pmi.py), on real clusters of every release (issue 44).

Each task of a step puts its node's ranks (the lowest rank of each node), fences and reads one
key per node from its node's ``slurmstepd``. Proven here: torch (gloo) meets through
``slurmenv exec`` with the layout read that way on block, cyclic and uneven steps; on 26.05
with a topology whose files slurmenv cannot read, the step's answer is used and rank 0 is where
Slurm put it; a step where only some tasks run slurmenv is refused within
``SLURMENV_PMI_TIMEOUT``; and what it does to an MPI program started after it in the same task
(MPICH's ``MPI_Init`` through the same ``PMI_FD``): it initialises after a plain
``slurmenv exec``, and never gets an answer after the exchange, since Slurm's server answers
one ``cmd=init`` per task (``agent.c``) — which is why the exchange is opt-in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster, SlurmUnavailable, release_built

pytestmark = pytest.mark.slurm

#: what each test proves, on which release (tests/slurm_releases.py: docs/releases.md's table)
FEATURES = {
    "srun --mpi=pmi2 with SLURMENV_PMI=1: the layout read through Slurm's PMI; torch meets on "
    "block, cyclic and uneven steps": ("every", ["test_torch_meets_through_pmi"]),
    "SLURMENV_PMI=1 in a step where only some tasks run slurmenv: refused within "
    "SLURMENV_PMI_TIMEOUT, naming PMI_FD": ("every", ["test_a_step_not_every_task_joins_is_refused"]),
    "an MPI program after slurmenv in the same task: MPICH initialises after slurmenv exec, not "
    "after the PMI exchange (one PMI init per task)": ("every", ["test_mpi_after_slurmenv"]),
    "26.05, a topology slurmenv cannot read: through PMI torch meets with rank 0 where Slurm "
    "put it": ("26.05.3", ["test_a_topology_the_files_cannot_tell_is_read_through_pmi"]),
}
ROOT = Path(__file__).resolve().parent.parent
CHECK_TORCH = ROOT / "tests" / "programs" / "check_torch.py"
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
       "SLURMENV_PMI": "1"}
HELLO = r"""#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("MPI %d %d %d\n", rank, size, sum);
  MPI_Finalize(); return 0;
}
"""
#: (srun arguments, ranks per node in node-list order) of the steps trained through PMI
STEPS = {
    "block": (["-N2", "-n4", "-m", "block"], None),
    "cyclic": (["-N3", "-n5", "-m", "cyclic"], None),
    "uneven": (["-N3", "-n4"], None),
}


def checks(stdout: str, per_task: dict[int, list[str]]) -> dict[int, dict[str, Any]]:
    got = {}
    for rank, lines in per_task.items():
        found = [json.loads(line[6:]) for line in lines if line.startswith("CHECK ")]
        assert len(found) == 1, stdout
        got[rank] = found[0]
    return got


@pytest.mark.parametrize("shape", sorted(STEPS))
def test_torch_meets_through_pmi(slurm_cluster: SlurmCluster, shape: str) -> None:
    pytest.importorskip("torch")
    args, _ = STEPS[shape]
    res = slurm_cluster.srun(["--mpi=pmi2", "-K", *args],
                             ["slurmenv", "exec", "--", sys.executable, str(CHECK_TORCH)],
                             env=ENV, timeout=240)
    assert res.returncode == 0, res.stderr + res.stdout
    got = checks(res.stdout, res.per_task)
    n = len(got)
    assert sorted(got) == list(range(n))
    assert all(rec["sum"] == rec["expected"] == n * (n + 1) // 2 for rec in got.values())
    assert {rec["env"]["MASTER_ADDR"] for rec in got.values()} == {got[0]["host"]}
    for rank, rec in got.items():  # each task's local rank: its place among its node's ranks
        mates = sorted(r for r, other in got.items() if other["host"] == rec["host"])
        assert rec["env"]["LOCAL_RANK"] == str(mates.index(rank))
        assert rec["env"]["LOCAL_WORLD_SIZE"] == str(len(mates))
    # the layout came from the step: show says so in every task
    shown = slurm_cluster.srun(["--mpi=pmi2", *args], ["slurmenv", "show"], env=ENV, timeout=60)
    assert shown.returncode == 0, shown.stderr + shown.stdout
    assert shown.stdout.count("Slurm's PMI") >= n, shown.stdout


def test_a_step_not_every_task_joins_is_refused(slurm_cluster: SlurmCluster) -> None:
    script = ('if [ "$SLURM_PROCID" = 0 ]; then t=$(date +%s%N); slurmenv export >/dev/null; '
              'echo "rc=$? ms=$(( ($(date +%s%N) - t) / 1000000 ))"; else sleep 6; fi')
    res = slurm_cluster.srun(["--mpi=pmi2", "-N2", "-n4"], ["sh", "-c", script],
                             env={**ENV, "SLURMENV_PMI_TIMEOUT": "3"}, timeout=60)
    line = res.per_task[0][-1]
    found = re.fullmatch(r"rc=(\d+) ms=(\d+)", line)
    assert found, res.stdout + res.stderr
    assert found.group(1) == "1"
    assert 2900 <= int(found.group(2)) < 6000, line  # the bound, not the others' sleep
    assert "PMI_FD" in res.stderr and "within 3 s" in res.stderr, res.stderr
    assert "not every task of the step asked it" in res.stderr


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mpicc = shutil.which("mpicc.mpich")
    if mpicc is None:
        pytest.skip("no mpicc.mpich (apt-get install libmpich-dev)")
    folder = tmp_path_factory.mktemp("hello")
    (folder / "hello.c").write_text(HELLO)
    subprocess.run([mpicc, "-o", str(folder / "hello"), str(folder / "hello.c")], check=True)
    return folder / "hello"


def test_mpi_after_slurmenv(slurm_cluster: SlurmCluster, hello: Path) -> None:
    """Without the exchange, MPICH initialises through PMI_FD after slurmenv exec; after it,
    Slurm's server refuses the second ``cmd=init`` of the task and MPI_Init never returns."""
    plain = slurm_cluster.srun(["--mpi=pmi2", "-N2", "-n4"],
                               ["slurmenv", "exec", "--", str(hello)],
                               env={**ENV, "SLURMENV_PMI": "0"}, timeout=60)
    assert plain.returncode == 0, plain.stderr + plain.stdout
    assert {lines[-1] for lines in plain.per_task.values()} == \
        {f"MPI {r} 4 6" for r in range(4)}
    after = slurm_cluster.srun(["--mpi=pmi2", "-N2", "-n4"],
                               ["slurmenv", "exec", "--", "timeout", "8", str(hello)],
                               env=ENV, timeout=60)
    assert after.returncode != 0
    assert "MPI " not in after.stdout, after.stdout
    assert "invalid pmi1 command received: 'init'" in after.stderr, after.stderr


@pytest.fixture(scope="module")
def topology_cluster(slurm_release: str | None) -> Iterator[SlurmCluster]:
    """26.05.3 with topology/tree whose first leaf switch lists n2 (rank 0 on n2)."""
    assert slurm_release == "26.05.3", slurm_release
    if not release_built(slurm_release):
        pytest.skip(f"Slurm {slurm_release} is not built")
    cluster = SlurmCluster(nodes=("n1", "n2", "n3", "n4"), release=slurm_release,
                           extra_conf="TopologyPlugin=topology/tree",
                           topology="SwitchName=sa Nodes=n2\nSwitchName=sb Nodes=n1\n"
                           "SwitchName=sc Nodes=n[3-4]\nSwitchName=top Switches=sa,sb,sc\n")
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"real Slurm cluster unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_topology_the_files_cannot_tell_is_read_through_pmi(
        topology_cluster: SlurmCluster) -> None:
    """topology.conf gone from beside SLURM_CONF after slurmctld read it: without the
    exchange every task refuses, naming srun --mpi=pmi2 as a fix; with it torch meets, rank 0
    on n2 where Slurm put it."""
    pytest.importorskip("torch")
    path = topology_cluster.conf.parent / "topology.conf"
    hidden = path.with_name("topology.conf.hidden")
    path.rename(hidden)
    try:
        step = ["--mpi=pmi2", "-K", "-N4", "--ntasks-per-node=2"]
        refused = topology_cluster.srun(step, ["slurmenv", "export"],
                                        env={**ENV, "SLURMENV_PMI": "0"})
        assert refused.returncode != 0
        assert "srun --mpi=pmi2 with SLURMENV_PMI=1" in refused.stderr, refused.stderr
        res = topology_cluster.srun(step, ["slurmenv", "exec", "--", sys.executable,
                                           str(CHECK_TORCH)], env=ENV, timeout=240)
        assert res.returncode == 0, res.stderr + res.stdout
        got = checks(res.stdout, res.per_task)
        assert sorted(got) == list(range(8))
        assert all(rec["sum"] == rec["expected"] == 36 for rec in got.values())
        assert got[0]["host"] == "n2"
        assert {rec["env"]["MASTER_ADDR"] for rec in got.values()} == {"n2"}
    finally:
        hidden.rename(path)
