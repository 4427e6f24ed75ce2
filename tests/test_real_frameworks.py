"""slurmenv.torch, slurmenv.tf and slurmenv.jax across two nodes of a real Slurm cluster, and
Accelerate and DeepSpeed through ``slurmenv export`` (the closed shell form).

One process per Slurm task (plain ``srun``, no torchrun); each task resolves its own step
and joins the group through the helper (or reads what ``slurmenv export`` set); a collective
over all tasks proves they met. Lightning: tests/test_real_lightning.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "the torch, TensorFlow and JAX helpers; Accelerate and DeepSpeed": ("debian", [
        "test_torch_init_process_group_on_two_nodes",
        "test_tf_cluster_resolver_on_two_nodes",
        "test_jax_initialize_on_two_nodes",
        "test_jax_several_tasks_per_node_cyclic",
        "test_accelerate_through_export_cyclic",
        "test_deepspeed_init_distributed_through_export_cyclic",
    ]),
}

PROGRAMS = Path(__file__).parent / "programs"
TIMEOUT = 240
# this interpreter's python and slurmenv first on PATH, as an activated environment would
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def run(
    cluster: SlurmCluster, args: list[str], program: str, exported: bool = False
) -> dict[int, dict[str, Any]]:
    """Every task's JSON line, from ``srun -K``; ``exported``: the documented
    ``env=$(slurmenv export) && eval "$env"`` first."""
    command = ["python3", str(PROGRAMS / program)]
    if exported:
        command = ["bash", "-c",
                   f'env=$(slurmenv export) && eval "$env" && exec python {PROGRAMS / program}']
    res = cluster.srun(["--kill-on-bad-exit=1", *args], command, env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr[-3000:]}"
    out = {}
    for task, lines in res.per_task.items():
        found = [json.loads(line) for line in lines if line.startswith("{")]
        assert len(found) == 1, lines
        out[task] = found[0]
    return out


def test_torch_init_process_group_on_two_nodes(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("torch")
    out = run(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2"], "fw_torch_allreduce.py")
    assert sorted(out) == [0, 1, 2, 3]
    for task, result in out.items():
        assert (result["rank"], result["world_size"], result["backend"]) == (task, 4, "gloo")
        assert result["sum"] == 10.0
    assert [out[t]["host"] for t in range(4)] == ["r1n09", "r1n09", "r1n10", "r1n10"]
    assert [out[t]["local_rank"] for t in range(4)] == [0, 1, 0, 1]


def test_tf_cluster_resolver_on_two_nodes(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("tensorflow")
    out = run(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=1"], "fw_tf_mwms.py")
    assert sorted(out) == [0, 1]
    for task, result in out.items():
        assert (result["task_type"], result["task_id"]) == ("worker", task)
        assert [w.split(":")[0] for w in result["workers"]] == ["r1n09", "r1n10"]
        assert (result["replicas"], result["sum"], result["tf_config_set"]) == (2, 3.0, False)


def test_jax_initialize_on_two_nodes(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("jax")
    out = run(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=1"], "fw_jax_init.py")
    assert sorted(out) == [0, 1]
    addresses = {r["args"]["coordinator_address"] for r in out.values()}
    assert len(addresses) == 1 and addresses.pop().startswith("r1n09:")
    for task, result in out.items():
        assert (result["process_index"], result["process_count"]) == (task, 2)
        assert result["gathered"] == [1.0, 2.0]


def test_jax_several_tasks_per_node_cyclic(slurm_cluster: SlurmCluster) -> None:
    """-N2 -n3 -m cyclic: ranks 0 and 2 on r1n09, rank 1 on r1n10 (uneven and cyclic)."""
    pytest.importorskip("jax")
    out = run(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "-n3", "-m", "cyclic"], "fw_jax_init.py")
    assert sorted(out) == [0, 1, 2]
    addresses = {r["args"]["coordinator_address"] for r in out.values()}
    assert len(addresses) == 1 and addresses.pop().startswith("r1n09:")
    for task, result in out.items():
        assert (result["process_index"], result["process_count"]) == (task, 3)
        assert result["args"]["process_id"] == task
        assert result["gathered"] == [1.0, 2.0, 3.0]


def test_accelerate_through_export_cyclic(slurm_cluster: SlurmCluster) -> None:
    """Accelerator(cpu=True) reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* as exported."""
    pytest.importorskip("accelerate")
    out = run(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "-n3", "-m", "cyclic"], "fw_accelerate.py", exported=True)
    assert sorted(out) == [0, 1, 2]
    hosts = {0: "r1n09", 1: "r1n10", 2: "r1n09"}
    for task, result in out.items():
        assert (result["process_index"], result["num_processes"]) == (task, 3)
        assert result["distributed_type"] == "DistributedType.MULTI_CPU"
        assert result["host"] == hosts[task]
        assert result["local_process_index"] == {0: 0, 1: 0, 2: 1}[task]
        assert result["gathered"] == [1.0, 2.0, 3.0]


def test_deepspeed_init_distributed_through_export_cyclic(slurm_cluster: SlurmCluster) -> None:
    """deepspeed.init_distributed(dist_backend="gloo") on CPU reads the exported variables."""
    pytest.importorskip("deepspeed")
    out = run(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "-n3", "-m", "cyclic"], "fw_deepspeed.py", exported=True)
    assert sorted(out) == [0, 1, 2]
    for task, result in out.items():
        assert (result["rank"], result["world_size"], result["backend"]) == (task, 3, "gloo")
        assert result["host"] == ("r1n10" if task == 1 else "r1n09")
        assert result["sum"] == 6.0
