"""GPU binding and thread counts in real Slurm tasks (tests/slurm_harness.py; needs root).

The GPU cluster: nodes g1n1 g1n2 with 4 fake GPUs each (gres/gpu on character devices), so
Slurm sets CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, ZE_AFFINITY_MASK,
SLURM_STEP_GPUS and SLURM_GPUS_ON_NODE exactly as it does with real GPUs.
"""

from __future__ import annotations

import os
import sys
import sysconfig

import pytest
from slurm_harness import SlurmCluster, SrunResult

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "GPU binding and thread counts": ("debian", [
        "test_each_task_gets_its_half",
        "test_two_nodes_every_list_narrowed",
        "test_four_tasks_one_gpu_each_and_variable_from_the_batch_script",
        "test_not_divisible_leaves_the_last_gpu_unused",
        "test_off_by_default",
        "test_left_alone_when_slurm_bound_per_task",
        "test_exec_binds_too",
        "test_binding_twice_is_binding_once",
        "test_fewer_gpus_than_tasks_is_a_clear_error",
        "test_no_gpus_with_binding_is_a_clear_error",
        "test_show_all_ranks_reports_the_shares",
        "test_sbatch_example",
        "test_threads_from_cpus_per_task",
        "test_torch_uses_the_thread_count",
        "test_threads_from_affinity_without_cpus_per_task",
        "test_user_values_win_and_switch_off",
        "test_other_shells_in_real_tasks",
    ]),
}

GPU_VARS = "$CUDA_VISIBLE_DEVICES $ROCR_VISIBLE_DEVICES $GPU_DEVICE_ORDINAL $ZE_AFFINITY_MASK"
# slurmenv and this python first on the tasks' PATH (tasks inherit the caller's environment)
ENV = {"PATH": os.pathsep.join([sysconfig.get_path("scripts"), os.path.dirname(sys.executable),
                                os.environ.get("PATH", "/usr/bin:/bin")])}


def srun(cluster: SlurmCluster, args: list[str], script: str, **env: str) -> SrunResult:
    return cluster.srun(args, ["bash", "-c", script], env={**ENV, **env})


def ok(res: SrunResult) -> SrunResult:
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    return res


def test_each_task_gets_its_half(slurm_gpu_cluster: SlurmCluster) -> None:
    # the README's example, as written
    res = ok(srun(slurm_gpu_cluster, ["--gres=gpu:4", "--ntasks-per-node=2"],
                  "eval $(slurmenv export --bind-gpus); echo $CUDA_VISIBLE_DEVICES"))
    assert res.per_task_first == {0: "0,1", 1: "2,3"}


def test_two_nodes_every_list_narrowed(slurm_gpu_cluster: SlurmCluster) -> None:
    script = f'eval $(slurmenv export --bind-gpus); echo "$(hostname) {GPU_VARS}"'
    res = ok(srun(slurm_gpu_cluster, ["-N2", "--gres=gpu:4", "--ntasks-per-node=2"], script))
    assert res.per_task_first == {
        0: "g1n1 0,1 0,1 0,1 0,1", 1: "g1n1 2,3 2,3 2,3 2,3",
        2: "g1n2 0,1 0,1 0,1 0,1", 3: "g1n2 2,3 2,3 2,3 2,3",
    }


def test_four_tasks_one_gpu_each_and_variable_from_the_batch_script(
    slurm_gpu_cluster: SlurmCluster,
) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:4", "--ntasks-per-node=4"],
                  "eval $(slurmenv export); echo $CUDA_VISIBLE_DEVICES",
                  SLURMENV_BIND_GPUS="1"))
    assert res.per_task_first == {0: "0", 1: "1", 2: "2", 3: "3"}


def test_not_divisible_leaves_the_last_gpu_unused(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:3", "--ntasks-per-node=2"],
                  "slurmenv show --bind-gpus --for torch | grep '^note: GPU'; "
                  "eval $(slurmenv export --bind-gpus); echo $CUDA_VISIBLE_DEVICES"))
    assert {r: lines[1] for r, lines in res.per_task.items()} == {0: "0", 1: "1"}
    assert all("2 left unused" in lines[0] for lines in res.per_task.values())


def test_off_by_default(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:4", "--ntasks-per-node=2"],
                  "eval $(slurmenv export); echo $CUDA_VISIBLE_DEVICES"))
    assert res.per_task_first == {0: "0,1,2,3", 1: "0,1,2,3"}


@pytest.mark.parametrize(("args", "expected"), [
    (["--gpus-per-task=1"], {0: "0", 1: "1"}),
    (["--gres=gpu:4", "--gpu-bind=map_gpu:2,3"], {0: "2", 1: "3"}),
    (["--gres=gpu:4", "--gpu-bind=single:1"], {0: "0", 1: "1"}),
], ids=["gpus-per-task", "gpu-bind-map", "gpu-bind-single"])
def test_left_alone_when_slurm_bound_per_task(
    slurm_gpu_cluster: SlurmCluster, args: list[str], expected: dict[int, str]
) -> None:
    script = ("before=$CUDA_VISIBLE_DEVICES; eval $(slurmenv export --bind-gpus); "
              'echo "$before $CUDA_VISIBLE_DEVICES"; slurmenv show --bind-gpus --for torch')
    res = ok(srun(slurm_gpu_cluster, ["-N1", "--ntasks-per-node=2", *args], script))
    for rank, lines in res.per_task.items():
        assert lines[0] == f"{expected[rank]} {expected[rank]}"
        assert f"GPUs: {expected[rank]}" in lines
        assert any(line.startswith("note: GPU binding: left alone") for line in lines)


def test_exec_binds_too(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:4", "--ntasks-per-node=2"],
                  "slurmenv exec --bind-gpus -- sh -c 'echo $CUDA_VISIBLE_DEVICES'"))
    assert res.per_task_first == {0: "0,1", 1: "2,3"}


def test_binding_twice_is_binding_once(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:4", "--ntasks-per-node=2"],
                  "eval $(slurmenv export --bind-gpus); eval $(slurmenv export --bind-gpus); "
                  "echo $CUDA_VISIBLE_DEVICES"))
    assert res.per_task_first == {0: "0,1", 1: "2,3"}


def test_fewer_gpus_than_tasks_is_a_clear_error(slurm_gpu_cluster: SlurmCluster) -> None:
    res = srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:1", "--ntasks-per-node=2"],
               "eval $(slurmenv export --bind-gpus); echo NEXT-COMMAND-RAN")
    assert res.returncode != 0
    assert "NEXT-COMMAND-RAN" not in res.stdout
    assert res.stderr.count("slurmenv: error: 2 tasks on this node share 1 GPU(s)") == 2
    assert "variable: CUDA_VISIBLE_DEVICES='0'" in res.stderr


def test_no_gpus_with_binding_is_a_clear_error(slurm_gpu_cluster: SlurmCluster) -> None:
    res = srun(slurm_gpu_cluster, ["-N1", "--gres=gpu:4", "--gpu-bind=none",
                                   "--ntasks-per-node=2"],
               "eval $(slurmenv export --bind-gpus); echo NEXT-COMMAND-RAN")
    assert res.returncode != 0 and "NEXT-COMMAND-RAN" not in res.stdout
    assert "no GPU list" in res.stderr and "SLURM_GPUS_ON_NODE=4" in res.stderr


def test_show_all_ranks_reports_the_shares(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N2", "--gres=gpu:4", "--ntasks-per-node=2"],
                  'if [ "$SLURM_PROCID" = 0 ]; then slurmenv show --bind-gpus --all-ranks; fi'))
    rows = [line.split()[:6] for line in res.per_task[0] if line.lstrip()[:1].isdigit()]
    # ranks 0 and 1 share node g1n1 with the task that reports: their shares are known;
    # g1n2's list is not in this task's environment
    assert [(row[1], row[5]) for row in rows] == [
        ("g1n1", "0,1"), ("g1n1", "2,3"), ("g1n2", "?"), ("g1n2", "?")]


def test_sbatch_example(slurm_gpu_cluster: SlurmCluster) -> None:
    script = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=2
export SLURMENV_BIND_GPUS=1
srun bash -c 'eval $(slurmenv export); echo "$RANK $LOCAL_RANK $CUDA_VISIBLE_DEVICES $OMP_NUM_THREADS"'
"""
    job = slurm_gpu_cluster.sbatch(script, env=ENV)
    assert job.returncode == 0, job.stderr
    assert sorted(job.stdout.split("\n")[:-1]) == [
        "0 0 0,1 2", "1 1 2,3 2", "2 0 0,1 2", "3 1 2,3 2"]


# --- threads ------------------------------------------------------------------------------------

def test_threads_from_cpus_per_task(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(srun(slurm_gpu_cluster, ["-N2", "--ntasks-per-node=2", "-c", "2"],
                  "eval $(slurmenv export); echo $OMP_NUM_THREADS $MKL_NUM_THREADS "
                  "$OPENBLAS_NUM_THREADS $SLURM_CPUS_PER_TASK"))
    assert res.per_task_first == dict.fromkeys(range(4), "2 2 2 2")


def test_torch_uses_the_thread_count(slurm_gpu_cluster: SlurmCluster) -> None:
    # torch starts one thread per CPU it may use (2 here) unless OMP_NUM_THREADS says otherwise
    torch_threads = f"{sys.executable} -c 'import torch; print(torch.get_num_threads())'"
    res = ok(srun(slurm_gpu_cluster, ["-N1", "-n1", "-c", "1"],
                  f"{torch_threads}; eval $(slurmenv export); {torch_threads}"))
    assert res.per_task[0] == [str(len(os.sched_getaffinity(0))), "1"]
    assert len(os.sched_getaffinity(0)) > 1, "needs 2 CPUs to tell the difference"


def test_threads_from_affinity_without_cpus_per_task(slurm_gpu_cluster: SlurmCluster) -> None:
    affinity = f"{sys.executable} -c 'import os; print(len(os.sched_getaffinity(0)))'"
    res = ok(srun(slurm_gpu_cluster, ["-N1", "-n2"],
                  "slurmenv show | grep -A1 ^OMP_NUM_THREADS; "
                  f'eval $(slurmenv export); echo "$OMP_NUM_THREADS $({affinity}) '
                  '${SLURM_CPUS_PER_TASK-unset}"'))
    for lines in res.per_task.values():
        omp, cpus, per_task = lines[2].split()
        assert (omp, per_task) == (cpus, "unset")
        assert "from CPU affinity of this task" in lines[1]


def test_user_values_win_and_switch_off(slurm_gpu_cluster: SlurmCluster) -> None:
    show = 'echo "${OMP_NUM_THREADS-unset} ${MKL_NUM_THREADS-unset} ${OPENBLAS_NUM_THREADS-unset}"'
    res = ok(srun(slurm_gpu_cluster, ["-N1", "-n1", "-c", "2", "--export=ALL,OMP_NUM_THREADS=1"],
                  f"eval $(slurmenv export); {show}"))
    assert res.per_task_first == {0: "1 unset unset"}
    res = ok(srun(slurm_gpu_cluster, ["-N1", "-n1", "-c", "2"], f"eval $(slurmenv export); {show}",
                  SLURMENV_THREADS="0"))
    assert res.per_task_first == {0: "unset unset unset"}
    res = ok(srun(slurm_gpu_cluster, ["-N1", "-n1", "-c", "2"],
                  f"eval $(slurmenv export --no-threads); {show}"))
    assert res.per_task_first == {0: "unset unset unset"}


# --- other shells in real tasks (the README's srun lines) ---------------------------------------

@pytest.mark.parametrize("line", [
    "srun fish -c 'eval (slurmenv export --shell fish); echo $RANK $OMP_NUM_THREADS'",
    "srun tcsh -c 'eval `slurmenv export --shell tcsh`; echo $RANK $OMP_NUM_THREADS'",
    "srun zsh -c 'eval $(slurmenv export --shell zsh); echo $RANK $OMP_NUM_THREADS'",
], ids=["fish", "tcsh", "zsh"])
def test_other_shells_in_real_tasks(slurm_gpu_cluster: SlurmCluster, line: str) -> None:
    job = slurm_gpu_cluster.sbatch(f"#!/bin/sh\n{line}\n", args=["-N2", "--ntasks-per-node=2",
                                                                  "-c", "2"], env=ENV)
    assert job.returncode == 0, job.stderr
    assert sorted(job.stdout.split("\n")[:-1]) == ["0 2", "1 2", "2 2", "3 2"]
