"""JAX and Lightning through slurmenv's in-process helpers under Open MPI ``mpirun`` on the
real cluster (a batch job of 2 nodes x 2 tasks, ``mpirun -np 4`` with the default mapping:
ranks 0,1 on the batch node r1n09, ranks 2,3 on r1n10).

1. ``slurmenv.jax.initialize()``: every rank's JAX process index is its Open MPI rank, the
   count is 4, the coordinator is on rank 0's node, and a cross-process all-gather meets.
2. Lightning Fabric with ``plugins=[slurmenv.lightning.Environment()]``: inside a Slurm job
   Lightning's own ``SLURMEnvironment`` would read the batch step's ``SLURM_*`` variables;
   the plugin wins (it is the strategy's cluster environment), every global rank is the
   ``OMPI_COMM_WORLD_RANK`` and an all_gather over all ranks meets.

The ranks resolve themselves (no ``slurmenv export``): the MPI launcher is recognised in the
process. One run each: importing JAX or Lightning takes seconds per rank on 2 shared cores.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from slurm_harness import BatchResult, SlurmCluster
from test_real_cluster import PROGRAMS
from test_real_mpi import explain, sbatch

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "JAX and Lightning under `mpirun`": ("debian", [
        "test_jax_initialize_under_mpirun",
        "test_lightning_fabric_under_mpirun",
    ]),
}

JOB = ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2"]  # named: the checks name the nodes
HOSTS = {0: "r1n09", 1: "r1n09", 2: "r1n10", 3: "r1n10"}  # Open MPI's default: by slot


def records(res: BatchResult, prefix: str, text: str | None = None) -> dict[int, dict[str, Any]]:
    """Open MPI rank -> that rank's single JSON record (the line from its ``{``, after
    ``prefix``) in ``text`` (default: the job's output)."""
    lines = (res.stdout if text is None else text).splitlines()
    found = [json.loads(line[line.index("{"):]) for line in lines if line.startswith(prefix)]
    by_rank = {rec["ompi_rank"]: rec for rec in found}
    assert len(by_rank) == len(found), explain(res)
    return by_rank


JAX = PROGRAMS / "fw_jax_init.py"


def test_jax_initialize_under_mpirun(slurm_cluster: SlurmCluster) -> None:
    """In-process (``python train.py``) and after ``slurmenv exec --for torch`` (the
    documented MPI command form: TF_CONFIG is refused under MPI, ``--for torch`` skips it)."""
    pytest.importorskip("jax")
    res = sbatch(
        slurm_cluster,
        f"launch inprocess mpirun -np 4 python {JAX}\n"
        f"launch exec mpirun -np 4 slurmenv exec --for torch -- python {JAX}\n",
        JOB,
    )
    assert res.returncode == 0, explain(res)
    for form in ("inprocess", "exec"):
        section = res.stdout.split(f"== LAUNCH {form}\n", 1)[-1].split("== RC ", 1)
        assert len(section) == 2 and section[1].startswith("0\n"), f"{form}\n{explain(res)}"
        got = records(res, "{", section[0])
        assert sorted(got) == [0, 1, 2, 3], f"{form}\n{explain(res)}"
        for rank, rec in got.items():
            assert rec["host"] == HOSTS[rank], explain(res)
            assert (rec["process_index"], rec["process_count"]) == (rank, 4), explain(res)
            assert rec["args"]["process_id"] == rank, explain(res)
            assert rec["gathered"] == [1.0, 2.0, 3.0, 4.0], explain(res)
        addresses = {rec["args"]["coordinator_address"] for rec in got.values()}
        assert len(addresses) == 1 and addresses.pop().startswith("r1n09:"), explain(res)


def test_lightning_fabric_under_mpirun(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("lightning")
    res = sbatch(
        slurm_cluster, f"mpirun -np 4 python {PROGRAMS / 'fw_lightning.py'} fabric\n", JOB
    )
    assert res.returncode == 0, explain(res)
    got = records(res, "LIGHTNING ")
    assert sorted(got) == [0, 1, 2, 3], explain(res)
    for rank, rec in got.items():
        assert rec["host"] == HOSTS[rank], explain(res)
        assert (rec["rank"], rec["world"]) == (rank, 4), explain(res)
        assert (rec["node_rank"], rec["local_rank"]) == (rank // 2, rank % 2), explain(res)
        assert rec["gathered"] == [0, 1, 2, 3], explain(res)
        # the plugin, not Lightning's SLURMEnvironment (which the job's variables would pick)
        assert rec["environment"] == "slurmenv.lightning", explain(res)
    # every rank inherits SLURM_PROCID=0 (the batch script's, or its orted's task): Lightning's
    # SLURMEnvironment, which reads it, would have made every rank global rank 0
    assert [got[rank]["procid"] for rank in range(4)] == [0, 0, 0, 0], explain(res)
