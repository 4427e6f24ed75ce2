"""Heterogeneous steps (``srun A : B``), from environments real Slurm 22.05 gave tasks.

The values below were printed by the tasks of real heterogeneous steps on the test cluster
(``tests/test_real_cluster.py`` runs such steps end to end); here each task's environment is
fed to the resolver directly, to pin the model of ``slurmenv/launchers/het.py``.
"""

from __future__ import annotations

import json

import pytest

import slurmenv

# srun -w r2n10 -n1 : -w r1n09 -n2   (SLURM_NODEID follows the components, the list is sorted)
REORDERED = {
    "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "r1n09,r2n10",
    "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "2,1",
    "SLURM_DISTRIBUTION": "block", "SLURM_STEP_RESV_PORTS": "12025-12029",
    "SLURM_HET_SIZE": "2", "SLURM_PACK_SIZE": "2", "SLURM_JOB_ID_PACK_GROUP_0": "9",
    "SLURM_JOB_ID_PACK_GROUP_1": "10", "SLURM_JOB_NODELIST_PACK_GROUP_0": "r2n10",
    "SLURM_JOB_NODELIST_PACK_GROUP_1": "r1n09",
}
REORDERED_TASKS = [  # SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID, SLURM_GTIDS, SLURMD_NODENAME
    (0, 0, 0, "0", "r2n10"), (1, 1, 0, "1,2", "r1n09"), (2, 1, 1, "1,2", "r1n09"),
]
# srun -N1 -n2 : -N2 -n4 -m cyclic   (component 1: 3 tasks on r1n10, 1 on r2n09, cyclic)
SEVERAL = {
    "SLURM_JOB_ID": "3", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "r1n[09-10],r2n09",
    "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NUM_TASKS": "6",
    "SLURM_STEP_TASKS_PER_NODE": "2,3,1", "SLURM_DISTRIBUTION": "cyclic",
    "SLURM_STEP_RESV_PORTS": "12008-12014", "SLURM_HET_SIZE": "2",
    "SLURM_JOB_NODELIST_PACK_GROUP_0": "r1n09", "SLURM_JOB_NODELIST_PACK_GROUP_1": "r1n10,r2n09",
}
SEVERAL_TASKS = [
    (0, 0, 0, "0,1", "r1n09"), (1, 0, 1, "0,1", "r1n09"), (2, 1, 0, "2,4,5", "r1n10"),
    (3, 2, 0, "3", "r2n09"), (4, 1, 1, "2,4,5", "r1n10"), (5, 1, 2, "2,4,5", "r1n10"),
]
# sbatch -N1 -n2 : -N2 -n2, then srun --het-group=1: an ordinary step of one component
ONE_COMPONENT = {
    "SLURM_JOB_ID": "20", "SLURM_STEP_ID": "1", "SLURM_STEP_NODELIST": "r1n10,r2n09",
    "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_DISTRIBUTION": "cyclic", "SLURM_STEP_RESV_PORTS": "12061-12062", "SLURM_HET_SIZE": "2",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "r1n09", "SLURM_JOB_NODELIST_HET_GROUP_1": "r1n10,r2n09",
    "SLURM_JOB_NODELIST_PACK_GROUP_0": "r1n09", "SLURM_JOB_NODELIST_PACK_GROUP_1": "r1n10,r2n09",
}
ONE_COMPONENT_TASKS = [(0, 0, 0, "0", "r1n10"), (1, 1, 0, "1", "r2n09")]


def task_env(common: dict[str, str], task: tuple[int, int, int, str, str]) -> dict[str, str]:
    procid, nodeid, localid, gtids, name = task
    return {
        **common, "SLURM_PROCID": str(procid), "SLURM_NODEID": str(nodeid),
        "SLURM_LOCALID": str(localid), "SLURM_GTIDS": gtids, "SLURMD_NODENAME": name,
    }


def resolve(env: dict[str, str], **options: object) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=None, **options)  # type: ignore[arg-type]


def test_node_order_follows_the_components() -> None:
    results = [resolve(task_env(REORDERED, t)) for t in REORDERED_TASKS]
    for r, (procid, nodeid, localid, _, name) in zip(results, REORDERED_TASKS):
        assert (r.rank, r.node_rank, r.local_rank, r.world_size) == (procid, nodeid, localid, 3)
        assert r.local_world_size == (1 if name == "r2n10" else 2)
        assert (r.master_addr, r.master_port) == ("r2n10", 12025)  # rank 0's node, 1st port
        assert r.hosts == ("r2n10", "r1n09")
        assert (r.node_of, r.local_of) == ((0, 1, 1), (0, 0, 1))
        # each component's TF ports come from its own reservation: 2 ports, then 3
        assert r.tf_config["cluster"]["worker"] == ["r2n10:12026", "r1n09:12028", "r1n09:12029"]
        assert r.tf_config["task"] == {"type": "worker", "index": procid}
        assert r.env()["NNODES"] == "2"


def test_formula_ports_when_nothing_is_reserved() -> None:
    env = {k: v for k, v in REORDERED.items() if k != "SLURM_STEP_RESV_PORTS"}
    results = [resolve(task_env(env, t)) for t in REORDERED_TASKS]
    assert len({(r.master_addr, r.master_port) for r in results}) == 1
    workers = results[0].tf_config["cluster"]["worker"]
    assert [w.split(":")[0] for w in workers] == ["r2n10", "r1n09", "r1n09"]
    assert len(set(workers)) == 3 and str(results[0].master_port) not in {
        w.split(":")[1] for w in workers
    }
    assert all(r.tf_config["cluster"]["worker"] == workers for r in results)


def test_component_with_unknown_layout_refuses_only_tf_config() -> None:
    for task in SEVERAL_TASKS:
        r = resolve(task_env(SEVERAL, task))
        procid, nodeid, localid, gtids, _ = task
        assert (r.rank, r.local_rank, r.node_rank) == (procid, localid, nodeid)
        assert r.local_world_size == len(gtids.split(","))
        assert (r.master_addr, r.master_port) == ("r1n09", 12008)
        assert r.env("torch")["WORLD_SIZE"] == "6"
        with pytest.raises(slurmenv.SlurmEnvError) as err:
            r.env()
        assert "component 1 of this heterogeneous step runs 4 tasks on 2 nodes" in str(err.value)
        assert err.value.fix is not None and "--for torch" in err.value.fix


def test_step_of_one_component_is_an_ordinary_step() -> None:
    results = [resolve(task_env(ONE_COMPONENT, t)) for t in ONE_COMPONENT_TASKS]
    assert [r.master_addr for r in results] == ["r1n10", "r1n10"]
    assert "heterogeneous" not in results[0].sources["MASTER_ADDR"]
    assert results[0].tf_config["cluster"]["worker"] == ["r1n10:12062", "r2n09:12062"]


@pytest.mark.parametrize(
    ("change", "task", "words"),
    [
        ({"SLURM_GTIDS": "1"}, 1, "heterogeneous step: this node"),  # r1n09 holds 1 and 2
        ({"SLURMD_NODENAME": "r2n10"}, 1, "in component order"),
        ({"SLURM_LOCALID": "0"}, 2, "heterogeneous step: this node"),
        ({"SLURM_JOB_NODELIST_PACK_GROUP_1": "r1n10"}, 0, "in no component"),
        ({"SLURM_JOB_NODELIST_PACK_GROUP_1": ""}, 0, "SLURM_JOB_NODELIST_HET_GROUP_1"),
        ({"SLURM_HET_SIZE": "two"}, 0, "SLURM_HET_SIZE"),
    ],
)
def test_inconsistent_environment_is_refused(
    change: dict[str, str], task: int, words: str
) -> None:
    env = {**task_env(REORDERED, REORDERED_TASKS[task]), **change}
    with pytest.raises(slurmenv.SlurmEnvError) as err:
        resolve(env).env()
    assert words in str(err.value)


def test_components_sharing_a_node_are_refused() -> None:
    env = {**task_env(SEVERAL, SEVERAL_TASKS[0]), "SLURM_JOB_NODELIST_PACK_GROUP_0": "r1n09,r2n09"}
    with pytest.raises(slurmenv.SlurmEnvError) as err:
        resolve(env)
    assert "components share node r2n09" in str(err.value)


def test_json_round_trip_of_a_heterogeneous_resolution() -> None:
    r = resolve(task_env(REORDERED, REORDERED_TASKS[2]))
    data = json.loads(json.dumps(r.to_dict()))
    assert data["rank"] == 2 and data["tf_config"]["task"]["index"] == 2
