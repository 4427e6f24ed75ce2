"""One torchrun per node on a real Slurm cluster (tests/slurm_harness.py; needs root).

Nodes are network namespaces of this machine; node names resolve (through each namespace's
hosts file) to the node's own address, which gloo uses, so no GLOO_SOCKET_IFNAME is needed.
Every run is 2 nodes x 2 workers: ranks 0-3 each add rank + 1 with an all_reduce, so a sum of
10 on every rank proves that all four joined the same group.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster, SrunResult, parse_labels

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "`slurmenv torchrun`: one torchrun a node": ("debian", [
        "test_options_filled_from_the_real_step",
        "test_slurmenv_torchrun_two_nodes_two_workers",
        "test_plain_torchrun_with_exported_pet_variables",
        "test_refuses_two_tasks_per_node",
        "test_two_concurrent_steps_of_one_job",
        "test_readme_sbatch_example_on_gpu_nodes",
        "test_a_failed_node_ends_the_step_with_kill_on_bad_exit",
    ]),
    "a torchrun worker in an srun task is torchrun's (its agent an ancestor); leftovers are "
    "refused": ("every", [
        "test_workers_in_srun_tasks_resolve_torchruns_world",
        "test_leftover_torchrun_variables_in_a_step_are_refused",
    ]),
}

CHECK = str(Path(__file__).parent / "programs" / "torchrun_check.py")
TIMEOUT = 240


# The checks name the nodes: ask for them, or a busy node (a previous job still completing)
# sends the step to r2n09/r2n10.
TWO_NODES = ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=1"]


def results_by_task(per_task: dict[int, list[str]]) -> dict[int, list[dict[str, Any]]]:
    """Slurm task (= node) -> the RESULT lines its torchrun's workers printed."""
    return {
        task: [json.loads(line[7:]) for line in lines if line.startswith("RESULT ")]
        for task, lines in per_task.items()
    }


def check_two_nodes_four_ranks(per_task: dict[int, list[str]], nodes: list[str]) -> None:
    by_task = results_by_task(per_task)
    assert sorted(by_task) == [0, 1]
    everything = [r for results in by_task.values() for r in results]
    assert sorted(r["rank"] for r in everything) == [0, 1, 2, 3]
    assert {r["sum"] for r in everything} == {10.0}
    assert {r["world_size"] for r in everything} == {4}
    for task, results in by_task.items():
        # Slurm task `task` ran on nodes[task]; its torchrun started two workers there.
        assert [r["host"] for r in results] == [nodes[task]] * 2
        assert sorted(r["env"]["LOCAL_RANK"] for r in results) == ["0", "1"]
        assert len({r["env"]["GROUP_RANK"] for r in results}) == 1
    run_ids = {r["env"]["TORCHELASTIC_RUN_ID"] for r in everything}
    assert len(run_ids) == 1 and re.fullmatch(r"\d+\.\d+", run_ids.pop())


def ok(res: SrunResult) -> SrunResult:
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    return res


def test_options_filled_from_the_real_step(slurm_cluster: SlurmCluster) -> None:
    script = ('echo "PORTS=$SLURM_STEP_RESV_PORTS JOB=$SLURM_JOB_ID.$SLURM_STEP_ID"; '
              "slurmenv torchrun --dry-run train.py")
    cmd = ["bash", "-c", script]
    res = ok(slurm_cluster.srun(TWO_NODES, cmd))
    for task, lines in res.per_task.items():
        facts = dict(word.split("=", 1) for word in lines[0].split())
        command = lines[1]
        first_port = facts["PORTS"].split("-")[0]  # MpiParams=ports: Slurm reserved them
        assert f"--rdzv-endpoint=r1n09:{first_port} " in command
        assert f"--rdzv-id={facts['JOB']} " in command
        assert "--nnodes=2 " in command and "--rdzv-backend=c10d " in command
        assert f"--rdzv-conf=is_host={int(task == 0)} " in command
        assert "--nproc-per-node=1 " in command  # CPU nodes: no GPU variable
        assert command.endswith(" train.py")


def test_slurmenv_torchrun_two_nodes_two_workers(slurm_cluster: SlurmCluster) -> None:
    res = ok(slurm_cluster.srun(
        TWO_NODES,
        ["slurmenv", "torchrun", "--nproc-per-node=2", CHECK],
        timeout=TIMEOUT,
    ))
    check_two_nodes_four_ranks(res.per_task, ["r1n09", "r1n10"])


def test_plain_torchrun_with_exported_pet_variables(slurm_cluster: SlurmCluster) -> None:
    script = f"eval $(slurmenv export --for torchrun); exec torchrun --nproc-per-node=2 {CHECK}"
    res = ok(slurm_cluster.srun(TWO_NODES, ["bash", "-c", script],
                                timeout=TIMEOUT))
    check_two_nodes_four_ranks(res.per_task, ["r1n09", "r1n10"])


def test_workers_in_srun_tasks_resolve_torchruns_world(slurm_cluster: SlurmCluster) -> None:
    # each worker (a child of torchrun's agent, in task 0 or 1 of a 2-task step) resolves
    # itself: torchrun's world of 4, which the step's (2 tasks) does not agree with; believed
    # because the agent is among its ancestors (issue 42, worldguard.py)
    script = ("eval $(slurmenv export --for torchrun); exec torchrun --nproc-per-node=2 "
              "--no-python slurmenv show --one-line")
    res = ok(slurm_cluster.srun(TWO_NODES, ["bash", "-c", script], timeout=TIMEOUT))
    seen = {task: sorted(line.split()[0] for line in lines if line.startswith("rank="))
            for task, lines in res.per_task.items()}
    assert seen == {0: ["rank=0/4", "rank=1/4"], 1: ["rank=2/4", "rank=3/4"]}, res.stdout
    masters = {line.split()[4].partition(":")[0] for lines in res.per_task.values()
               for line in lines if line.startswith("rank=")}
    assert masters == {"master=r1n09"}, res.stdout


def test_leftover_torchrun_variables_in_a_step_are_refused(slurm_cluster: SlurmCluster) -> None:
    # the case: every task of a 4-task step carries a worker's RANK=0 WORLD_SIZE=1
    leftovers = ("export TORCHELASTIC_RUN_ID=1.0 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "
                 "LOCAL_WORLD_SIZE=1 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500; "
                 "slurmenv export --for torch")
    res = slurm_cluster.srun(["-N2", "--ntasks-per-node=2"], ["bash", "-c", leftovers],
                             timeout=TIMEOUT)
    assert res.returncode != 0
    assert "export RANK" not in res.stdout, res.stdout
    assert res.stderr.count("variable: SLURM_") == 4, res.stderr  # every task says why


def test_refuses_two_tasks_per_node(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(
        ["-N2", "--ntasks-per-node=2"], ["slurmenv", "torchrun", "--nproc-per-node=2", CHECK],
        timeout=TIMEOUT,
    )
    assert res.returncode != 0
    assert res.stderr.count("SLURM_STEP_TASKS_PER_NODE='2(x2)'") == 4  # every task says why
    assert "srun -K --ntasks-per-node=1" in res.stderr
    assert "RESULT" not in res.stdout


def test_two_concurrent_steps_of_one_job(slurm_cluster: SlurmCluster) -> None:
    step = f"srun --overlap --label slurmenv torchrun --nproc-per-node=2 {CHECK} > step$1.out"
    script = f"#!/bin/sh\nrun() {{ {step}; }}\nrun 0 & run 1 & wait\ncat step0.out\necho ==\ncat step1.out\n"
    job = slurm_cluster.sbatch(script, TWO_NODES, timeout=TIMEOUT)
    assert job.returncode == 0, job.stderr
    first, second = job.stdout.split("==\n")
    ids = set()
    for out in (first, second):
        per_task = parse_labels(out)
        check_two_nodes_four_ranks(per_task, ["r1n09", "r1n10"])
        ids |= {r["env"]["TORCHELASTIC_RUN_ID"] for rs in results_by_task(per_task).values()
                for r in rs}
    assert ids == {f"{job.job_id}.0", f"{job.job_id}.1"}


README_SBATCH = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2

srun slurmenv torchrun {check}
"""


def test_readme_sbatch_example_on_gpu_nodes(slurm_gpu_cluster: SlurmCluster) -> None:
    # Fake GPUs (character devices): Slurm sets CUDA_VISIBLE_DEVICES=0,1 on each node, and
    # torchrun starts one worker per GPU without --nproc-per-node; the CPU build of torch
    # then trains with gloo.
    job = slurm_gpu_cluster.sbatch(
        README_SBATCH.format(check=CHECK).replace("srun ", "srun --label "), timeout=TIMEOUT
    )
    assert job.returncode == 0, job.stderr
    nodes = slurm_gpu_cluster.nodes
    check_two_nodes_four_ranks(parse_labels(job.stdout), nodes[:2])


FAIL_ON_NODE_1 = (
    "import os, sys, time\n"
    "if os.environ['GROUP_RANK'] == '1':\n"
    "    sys.exit(3)  # a worker of the second node fails\n"
    "time.sleep(150)  # the first node's worker would wait for it, then say so\n"
    "print('SURVIVED', flush=True)\n"
)


def test_a_failed_node_ends_the_step_with_kill_on_bad_exit(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The docs' form, ``srun --kill-on-bad-exit=1 slurmenv torchrun …``: a worker that exits
    non-zero on one node ends the whole step: the other node's worker is killed before it
    finishes its sleep (without -K it would print SURVIVED, or the step would hang past the
    timeout; not run here)."""
    script = tmp_path / "fail_on_node_1.py"
    script.write_text(FAIL_ON_NODE_1)
    res = slurm_cluster.srun([*TWO_NODES, "--kill-on-bad-exit=1"],
                             ["slurmenv", "torchrun", "--nproc-per-node", "1", str(script)],
                             timeout=TIMEOUT)
    assert res.returncode != 0, f"{res.stdout}\n{res.stderr}"
    assert "SURVIVED" not in res.stdout, f"{res.stdout}\n{res.stderr}"
