"""slurmenv.lightning.Environment with real Lightning (CPU, gloo) on the real Slurm cluster.

Lightning's own ``SLURMEnvironment`` reads the job's ``SLURM_NTASKS_PER_NODE`` and refuses
steps started with ``-n`` alone; the plugin takes everything from ``slurmenv.resolve()``.
Proven here, every rank's result checked:

1. a full step ``srun -N2 --ntasks-per-node=2 -m cyclic`` (ranks 0 and 2 on the first node:
   Lightning's own ``node_rank * devices + local_rank`` would give rank 1 the number 2): Fabric
   joins and all-gathers every rank; Trainer fits one epoch, each rank on its own quarter of
   the data;
2. the sub-step of the issue: in a job of 2 nodes x ``--ntasks-per-node=2``, ``srun -N2 -n2``
   with ``Fabric(devices=1, num_nodes=2)`` fails with Lightning's own environment ("does not
   match") and works with the plugin; Trainer fits in the same kind of sub-step;
3. an uneven step (``srun -N2 -n3``: 2 and 1 tasks) is refused in every task with the
   SlurmEnvError naming ``SLURM_STEP_TASKS_PER_NODE``, before Lightning starts anything;
4. what Lightning's own environment does where ``slurmenv doctor`` warns (and that it warns):
   a step started with ``-n`` alone is refused; in a job named ``bash`` (what ``srun bash -c``
   names it) Lightning ignores Slurm and, after ``eval $(slurmenv export)``, numbers a cyclic
   step's ranks ``NODE_RANK * devices + LOCAL_RANK``, not as Slurm did.
"""

from __future__ import annotations

from typing import Any, Union

import pytest
from slurm_harness import BatchResult, SlurmCluster, SrunResult, parse_labels
from test_real_cluster import ENV, PROGRAMS, explain, per_rank, records

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "Lightning (`slurmenv.lightning.Environment`)": ("debian", [
        "test_fabric_full_step_cyclic",
        "test_trainer_full_step_cyclic",
        "test_sub_step_of_a_larger_job",
        "test_uneven_step_is_refused",
        "test_lightning_own_environment_refuses_srun_n",
        "test_job_named_bash_lightning_numbers_ranks_itself",
        "test_fabric_and_trainer_under_slurmenv_torchrun",
    ]),
}

LIGHTNING = PROGRAMS / "fw_lightning.py"
Records = dict[int, dict[str, Any]]
Result = Union[SrunResult, BatchResult]
TIMEOUT = 300.0  # importing Lightning takes ~6 s of CPU per task on 2 shared cores


@pytest.fixture(autouse=True)
def _lightning() -> None:
    pytest.importorskip("lightning")


def lightning_step(cluster: SlurmCluster, args: list[str], *program_args: str) -> SrunResult:
    return cluster.srun(
        args, ["python", str(LIGHTNING), *program_args], env=ENV, timeout=TIMEOUT
    )


def check_fabric(got: Records, ntasks: int, res: Result) -> None:
    assert sorted(got) == list(range(ntasks)), explain(res)
    for rank, rec in got.items():
        assert (rec["rank"], rec["procid"], rec["world"]) == (rank, rank, ntasks), explain(res)
        assert rec["gathered"] == list(range(ntasks)), explain(res)
        assert rec["environment"] == "slurmenv.lightning", explain(res)


def check_trainer(got: Records, ntasks: int, res: Result) -> None:
    assert sorted(got) == list(range(ntasks)), explain(res)
    per = 24 // ntasks
    seen = [got[rank]["seen"] for rank in range(ntasks)]
    # the DistributedSampler split all 24 samples into disjoint shares by the real rank
    assert sorted(i for share in seen for i in share) == list(range(24))
    assert all(len(share) == per for share in seen)
    for rank, rec in got.items():
        assert (rec["rank"], rec["procid"], rec["world"]) == (rank, rank, ntasks)
        assert rec["steps"] == per // 2  # batch size 2
    # DDP averaged the gradients: every rank ends with the same weights
    assert len({tuple(rec["weights"]) for rec in got.values()}) == 1


def local_layout(got: Records) -> dict[int, tuple[str, int, int]]:
    return {rank: (rec["host"], rec["node_rank"], rec["local_rank"]) for rank, rec in got.items()}


CYCLIC_ARGS = ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-m", "cyclic"]  # pinned: asserts hosts
CYCLIC = {0: ("r1n09", 0, 0), 1: ("r1n10", 1, 0), 2: ("r1n09", 0, 1), 3: ("r1n10", 1, 1)}


def test_fabric_full_step_cyclic(slurm_cluster: SlurmCluster) -> None:
    res = lightning_step(slurm_cluster, CYCLIC_ARGS, "fabric")
    assert res.returncode == 0, explain(res)
    got = per_rank(res, "LIGHTNING")
    check_fabric(got, 4, res)
    assert local_layout(got) == CYCLIC


def test_trainer_full_step_cyclic(slurm_cluster: SlurmCluster) -> None:
    res = lightning_step(slurm_cluster, CYCLIC_ARGS, "trainer")
    assert res.returncode == 0, explain(res)
    got = per_rank(res, "LIGHTNING")
    check_trainer(got, 4, res)
    assert local_layout(got) == CYCLIC


SUB_STEPS = """#!/bin/bash
# the job has 2 nodes x 2 tasks; each step uses one task per node
echo "== doctor"
srun -N2 -n2 --label slurmenv doctor -q
for mode in "builtin 1 2" "fabric 1 2" "trainer"; do
  echo "== $mode"
  srun -N2 -n2 --label python {program} $mode 2>&1
  echo "EXIT $?"
done
"""


def test_sub_step_of_a_larger_job(slurm_cluster: SlurmCluster) -> None:
    script = SUB_STEPS.format(program=LIGHTNING)
    res = slurm_cluster.sbatch(script, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2"], env=ENV,
                               timeout=2 * TIMEOUT)
    assert res.returncode == 0, explain(res)
    sections = {}
    for section in res.stdout.split("== ")[1:]:
        head, _, body = section.partition("\n")
        sections[head] = body
    assert sorted(sections) == ["builtin 1 2", "doctor", "fabric 1 2", "trainer"], explain(res)
    doctor = parse_labels(sections["doctor"])
    assert sorted(doctor) == [0, 1], explain(res)
    for rank, lines in doctor.items():
        host = ("r1n09", "r1n10")[rank]
        assert lines[0] == (
            "warning  Lightning    if this step runs Lightning: SLURM_NTASKS_PER_NODE=2 (set for "
            f"the job) but this step runs 1 task(s) on {host}: Lightning's SLURMEnvironment "
            "refuses devices=1"
        ), explain(res)
        assert "plugins=[slurmenv.lightning.Environment()]" in lines[1], explain(res)
    assert "EXIT 0" not in sections["builtin 1 2"], explain(res)
    # Lightning's own SLURMEnvironment reads the job's --ntasks-per-node=2 and refuses
    assert "does not match" in sections["builtin 1 2"], explain(res)
    assert "--ntasks-per-node=2" in sections["builtin 1 2"], explain(res)
    for mode, check in (("fabric 1 2", check_fabric), ("trainer", check_trainer)):
        body = sections[mode]
        assert "EXIT 0" in body, explain(res)
        step = SrunResult(0, body, "", parse_labels(body))
        got = per_rank(step, "LIGHTNING", f"step {mode}\n")
        check(got, 2, res)
        assert local_layout(got) == {0: ("r1n09", 0, 0), 1: ("r1n10", 1, 0)}, explain(res)


def test_uneven_step_is_refused(slurm_cluster: SlurmCluster) -> None:
    res = lightning_step(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "-n3"], "fabric")
    assert res.returncode != 0, explain(res)
    errors = [line for line in res.stderr.splitlines() if "SlurmEnvError:" in line]
    assert sorted(line.split(":")[0] for line in errors) == ["0", "1", "2"], explain(res)
    assert all("(2,1 tasks per node)" in line for line in errors), explain(res)
    assert res.stderr.count("variable: SLURM_STEP_TASKS_PER_NODE='2,1'") == 3, explain(res)
    assert "LIGHTNING" not in res.stdout, explain(res)


def test_lightning_own_environment_refuses_srun_n(slurm_cluster: SlurmCluster) -> None:
    res = lightning_step(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "-n2"], "builtin", "1", "2")
    assert res.returncode != 0, explain(res)
    assert res.stderr.count("You set `--ntasks=2` in your SLURM bash script") == 2, explain(res)
    assert "LIGHTNING" not in res.stdout, explain(res)


def test_job_named_bash_lightning_numbers_ranks_itself(slurm_cluster: SlurmCluster) -> None:
    script = (
        "slurmenv doctor -q | grep -A1 'Lightning '; "
        f"eval $(slurmenv export); exec python {LIGHTNING} builtin 2 2"
    )
    args = [*CYCLIC_ARGS, "--job-name=bash"]
    res = slurm_cluster.srun(args, ["bash", "-c", script], env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    got = per_rank(res, "LIGHTNING")
    assert sorted(got) == [0, 1, 2, 3], explain(res)
    assert local_layout(got) == CYCLIC, explain(res)
    for task, rec in got.items():
        node, local = CYCLIC[task][1:]
        assert rec["procid"] == task
        assert rec["rank"] == node * 2 + local, explain(res)  # Lightning's number, not Slurm's
        assert rec["environment"] == "lightning.fabric.plugins.environments.lightning"
        assert "the job is named 'bash', so Lightning ignores Slurm" in res.per_task[task][0]
        assert "not Slurm's rank in this cyclic layout" in res.per_task[task][0]
    assert [got[t]["rank"] for t in range(4)] == [0, 2, 1, 3]


def test_fabric_and_trainer_under_slurmenv_torchrun(slurm_cluster: SlurmCluster) -> None:
    """One ``slurmenv torchrun`` per node (2 nodes x 2 workers), in the docs' form
    (``srun --kill-on-bad-exit=1``): the plugin resolves torchrun's workers (launcher torchrun,
    not the Slurm task whose SLURM_PROCID is the node's), Fabric all-gathers and Trainer fits
    over all four ranks, and every worker shuts down cleanly (destroy_process_group)."""
    for mode in ("fabric", "trainer"):
        res = slurm_cluster.srun(
            ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=1", "--kill-on-bad-exit=1"],
            ["slurmenv", "torchrun", "--nproc-per-node=2", str(LIGHTNING), mode],
            env=ENV, timeout=TIMEOUT,
        )
        assert res.returncode == 0, explain(res)
        got: Records = {}
        for task, lines in res.per_task.items():
            for rec in records(lines, "LIGHTNING"):
                assert rec["procid"] == task and rec["host"] == ("r1n09", "r1n10")[task], \
                    explain(res)
                got[rec["rank"]] = rec
        assert sorted(got) == [0, 1, 2, 3], explain(res)
        assert {rank: (rec["node_rank"], rec["local_rank"]) for rank, rec in got.items()} == {
            0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}, explain(res)
        assert all(rec["world"] == 4 for rec in got.values()), explain(res)
        if mode == "fabric":
            assert all(rec["gathered"] == [0, 1, 2, 3] for rec in got.values()), explain(res)
            assert {rec["environment"] for rec in got.values()} == {"slurmenv.lightning"}
        else:
            seen = [got[rank]["seen"] for rank in range(4)]
            assert sorted(i for share in seen for i in share) == list(range(24)), explain(res)
            assert len({tuple(rec["weights"]) for rec in got.values()}) == 1, explain(res)
