"""slurmenv.torch, slurmenv.tf and slurmenv.jax across two nodes of a real Slurm cluster.

One process per Slurm task (plain ``srun``, no torchrun); each task resolves its own step
and joins the group through the helper; a collective over all tasks proves they met.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster

pytestmark = pytest.mark.slurm

PROGRAMS = Path(__file__).parent / "programs"
TIMEOUT = 240


def run(cluster: SlurmCluster, args: list[str], program: str) -> dict[int, dict[str, Any]]:
    res = cluster.srun(args, ["python3", str(PROGRAMS / program)], timeout=TIMEOUT)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr[-3000:]}"
    out = {}
    for task, lines in res.per_task.items():
        found = [json.loads(line) for line in lines if line.startswith("{")]
        assert len(found) == 1, lines
        out[task] = found[0]
    return out


def test_torch_init_process_group_on_two_nodes(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("torch")
    out = run(slurm_cluster, ["-N2", "--ntasks-per-node=2"], "fw_torch_allreduce.py")
    assert sorted(out) == [0, 1, 2, 3]
    for task, result in out.items():
        assert (result["rank"], result["world_size"], result["backend"]) == (task, 4, "gloo")
        assert result["sum"] == 10.0
    assert [out[t]["host"] for t in range(4)] == ["r1n09", "r1n09", "r1n10", "r1n10"]
    assert [out[t]["local_rank"] for t in range(4)] == [0, 1, 0, 1]


def test_tf_cluster_resolver_on_two_nodes(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("tensorflow")
    out = run(slurm_cluster, ["-N2", "--ntasks-per-node=1"], "fw_tf_mwms.py")
    assert sorted(out) == [0, 1]
    for task, result in out.items():
        assert (result["task_type"], result["task_id"]) == ("worker", task)
        assert [w.split(":")[0] for w in result["workers"]] == ["r1n09", "r1n10"]
        assert (result["replicas"], result["sum"], result["tf_config_set"]) == (2, 3.0, False)


def test_jax_initialize_on_two_nodes(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("jax")
    out = run(slurm_cluster, ["-N2", "--ntasks-per-node=1"], "fw_jax_init.py")
    assert sorted(out) == [0, 1]
    addresses = {r["args"]["coordinator_address"] for r in out.values()}
    assert len(addresses) == 1 and addresses.pop().startswith("r1n09:")
    for task, result in out.items():
        assert (result["process_index"], result["process_count"]) == (task, 2)
        assert result["gathered"] == [1.0, 2.0]
