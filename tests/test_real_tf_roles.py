"""TensorFlow job roles (``--tf-jobs``) on a real Slurm cluster, through
``slurmenv.tf.cluster_resolver()`` (no ``TF_CONFIG`` variable):

1. ParameterServerStrategy over 3 nodes, ``chief=1,ps=1,worker=2``: the chief's
   ClusterCoordinator trains a linear model whose variables live on the ps task while the
   workers run the steps; ps and workers serve through ``slurmenv.tf.serve()``, which returns
   once the chief has ended, so the step ends by itself with status 0.
2. MultiWorkerMirroredStrategy with a chief, ``chief=1,worker=2`` over 3 nodes (block layout):
   TensorFlow's own ``SlurmClusterResolver(jobs=...)`` gives the same roles and hosts and
   trains on the same step.
3. The same with ``-n4 -m cyclic``: slurmenv's cluster puts every task on its own node and
   trains; TensorFlow's puts rank 1 on a node it does not run on.
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
    "TensorFlow job roles (`--tf-jobs`)": ("debian", [
        "test_parameter_server_training_ends_with_the_chief",
        "test_multi_worker_with_a_chief_matches_tensorflows_resolver",
        "test_multi_worker_with_a_chief_cyclic",
    ]),
}

PROGRAMS = Path(__file__).parent / "programs"
TIMEOUT = 400  # TensorFlow's start-up is slow on a loaded machine: 50-90 s measured
NODES = ["-N3", "-w", "r1n[09-10],r2n09"]


def run(
    cluster: SlurmCluster, args: list[str], program: str, **env: str
) -> dict[int, dict[str, Any]]:
    """Every task's JSON line, the step ended with status 0."""
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1", **env,
    }
    res = cluster.srun([*NODES, "--kill-on-bad-exit=1", *args],
                       ["python3", str(PROGRAMS / program)], env=env, timeout=TIMEOUT)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr[-3000:]}"
    out = {}
    for task, lines in res.per_task.items():
        found = [json.loads(line) for line in lines if line.startswith("{")]
        assert len(found) == 1, lines
        out[task] = found[0]
    return out


def test_parameter_server_training_ends_with_the_chief(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("tensorflow")
    out = run(slurm_cluster, ["-n4"], "fw_tf_ps.py", SLURMENV_TF_JOBS="chief=1,ps=1,worker=2")
    assert sorted(out) == [0, 1, 2, 3]
    hosts = {rank: rec["host"] for rank, rec in out.items()}
    assert hosts == {0: "r1n09", 1: "r1n09", 2: "r1n10", 3: "r2n09"}  # block: 2,1,1
    assert [(out[r]["task_type"], out[r]["task_id"]) for r in range(4)] == [
        ("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    cluster = out[0]["cluster"]
    assert all(rec["cluster"] == cluster for rec in out.values())
    for rank, rec in out.items():  # each task is listed at its own node
        assert cluster[rec["task_type"]][rec["task_id"]].split(":")[0] == rec["host"]
    chief = out[0]
    assert chief["devices"] == {"w": "/job:ps/replica:0/task:0/device:CPU:0",
                                "b": "/job:ps/replica:0/task:0/device:CPU:0"}
    assert len(chief["step_losses"]) == 20
    assert chief["loss_after"] < chief["loss_before"] / 10
    # the servers returned after the chief ended (serve() polls every second)
    for rank in (1, 2, 3):
        assert out[rank]["ended_at"] >= chief["ended_at"]
        assert out[rank]["ended_at"] - chief["ended_at"] < 60, out[rank]


def test_multi_worker_with_a_chief_matches_tensorflows_resolver(
    slurm_cluster: SlurmCluster,
) -> None:
    """Block layout, one task per node: TensorFlow's SlurmClusterResolver agrees on roles and
    hosts (its ports are port_base), and training with it works on the same step."""
    pytest.importorskip("tensorflow")
    out = run(slurm_cluster, ["-n3"], "fw_tf_chief.py", SLURMENV_TF_JOBS="chief=1,worker=2",
              RESOLVER="tensorflow")
    assert sorted(out) == [0, 1, 2]
    for rank, rec in out.items():
        ours, theirs = rec["ours"], rec["theirs"]
        assert ours["task"] == theirs["task"] == (["chief", 0] if rank == 0 else ["worker", rank - 1])
        strip = {job: [a.split(":")[0] for a in tasks] for job, tasks in ours["cluster"].items()}
        assert strip == {job: [a.split(":")[0] for a in tasks]
                         for job, tasks in theirs["cluster"].items()}
        assert strip == {"chief": ["r1n09"], "worker": ["r1n10", "r2n09"]}
        assert rec["resolver"].startswith("tensorflow.")
        assert rec["replicas"] == 3 and rec["loss_after"] < rec["loss_before"] / 10
    assert len({json.dumps(rec["step_losses"]) for rec in out.values()}) == 1


def test_multi_worker_with_a_chief_cyclic(slurm_cluster: SlurmCluster) -> None:
    """-n4 -m cyclic on 3 nodes: ranks 0 and 3 on r1n09. slurmenv's cluster lists each task
    at its node and trains; TensorFlow's lists worker 0 (rank 1, on r1n10) on r1n09."""
    pytest.importorskip("tensorflow")
    out = run(slurm_cluster, ["-n4", "-m", "cyclic"], "fw_tf_chief.py",
              SLURMENV_TF_JOBS="chief=1,worker=3")
    assert sorted(out) == [0, 1, 2, 3]
    assert [out[r]["host"] for r in range(4)] == ["r1n09", "r1n10", "r2n09", "r1n09"]
    cluster = out[0]["ours"]["cluster"]
    addresses = cluster["chief"] + cluster["worker"]
    assert len(set(addresses)) == 4
    for rank, rec in out.items():
        assert rec["ours"]["cluster"] == cluster
        assert rec["ours"]["task"] == (["chief", 0] if rank == 0 else ["worker", rank - 1])
        assert addresses[rank].split(":")[0] == rec["host"]
        assert rec["replicas"] == 4 and rec["loss_after"] < rec["loss_before"] / 10
    theirs = out[1]["theirs"]
    assert theirs["task"] == ["worker", 0]
    assert theirs["cluster"]["worker"][0].split(":")[0] == "r1n09" != out[1]["host"]
