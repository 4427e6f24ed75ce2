"""Fail closed on the real cluster (issue 10): a one-task job's batch script, an inherited
MASTER_PORT, and a scrubbed environment inside srun tasks. Every refusal goes through the
README's form, ``eval $(slurmenv export); cmd``, and ``cmd`` must not run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from slurm_harness import BatchResult, SlurmCluster, SrunResult, parse_labels

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "the batch script: a one-task job resolves, others are refused": ("every", [
        "test_one_task_batch_script_resolves_and_cannot_mislead_later_steps",
        "test_other_jobs_are_still_refused_in_the_batch_script",
        "test_inherited_master_port_is_kept", "test_scrubbed_batch_script_is_a_single_process"]),
    "fail closed in srun tasks: a scrubbed environment (the `slurmstepd` ancestor)": ("every", [
        "test_scrubbed_environment_in_srun_tasks_is_refused"]),
    "fail closed in srun tasks: a partial environment, a launcher chosen": ("debian", [
        "test_a_partial_step_environment_is_refused_naming_a_stray_variable",
        "test_an_explicit_launcher_choice_in_srun_tasks"]),
}

ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
TIMEOUT = 120.0
GUARD = "SHOULD-NOT-RUN"


def explain(res: SrunResult | BatchResult) -> str:
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


def values(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[1:])


# -- a job of exactly one task (item 7) --------------------------------------------------------
ONE_TASK = """#!/bin/bash
eval $(slurmenv export)
echo "BATCH RANK=$RANK WORLD_SIZE=$WORLD_SIZE NNODES=$NNODES MASTER_ADDR=$MASTER_ADDR \
MASTER_PORT=$MASTER_PORT"
# a later step inherits the exported values: the agreeing ones stay, MASTER_ADDR is replaced,
# MASTER_PORT stays the (now the user's) choice
srun bash -c 'eval $(slurmenv export); echo "STEP RANK=$RANK WORLD_SIZE=$WORLD_SIZE \
MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"'
# a bigger step (overcommitted) would get a wrong rank from them: refused, cmd not run
srun --label -O -n2 bash -c 'eval $(slurmenv export); echo "{guard} $RANK"'
echo "BIGGER-STEP status $?"
"""


def test_one_task_batch_script_resolves_and_cannot_mislead_later_steps(
    slurm_cluster: SlurmCluster,
) -> None:
    res = slurm_cluster.sbatch(ONE_TASK.replace("{guard}", GUARD), ["-N1", "-n1", "-w", "r1n09"], env=ENV,
                               timeout=TIMEOUT)
    lines = res.stdout.splitlines()
    batch = values(next(line for line in lines if line.startswith("BATCH ")))
    assert (batch["RANK"], batch["WORLD_SIZE"], batch["NNODES"], batch["MASTER_ADDR"]) == (
        "0", "1", "1", "127.0.0.1"), explain(res)
    step = values(next(line for line in lines if line.startswith("STEP ")))
    assert (step["RANK"], step["WORLD_SIZE"]) == ("0", "1"), explain(res)
    assert step["MASTER_ADDR"] == "r1n09", explain(res)  # the step's node, not loopback
    assert step["MASTER_PORT"] == batch["MASTER_PORT"], explain(res)
    # the bigger step's tasks inherited RANK=0, WORLD_SIZE=1: refused, the command did not run
    assert not [line for line in lines if GUARD in line], explain(res)
    assert "1:   variable: RANK='0'" in res.stderr, explain(res)
    assert "0:   variable: WORLD_SIZE='1'" in res.stderr, explain(res)
    assert "BIGGER-STEP status 0" not in res.stdout, explain(res)


@pytest.mark.parametrize("args", [["-N1"], ["-N1", "-n2"], ["-N2", "--ntasks-per-node=1"]],
                         ids=["no-task-count", "two-tasks", "two-nodes"])
def test_other_jobs_are_still_refused_in_the_batch_script(
    slurm_cluster: SlurmCluster, args: list[str]
) -> None:
    script = f"#!/bin/bash\neval $(slurmenv export); echo {GUARD}\n"
    res = slurm_cluster.sbatch(script, args, env=ENV, timeout=TIMEOUT)
    assert GUARD not in res.stdout and res.returncode != 0, explain(res)
    assert "outside any job step" in res.stderr, explain(res)
    if args == ["-N1"]:  # SLURM_NTASKS is unset without -n: say how to tell Slurm
        assert "sbatch -n 1" in res.stderr, explain(res)


# -- an inherited MASTER_PORT (item 8) stays the user's choice --------------------------------
def test_inherited_master_port_is_kept(slurm_cluster: SlurmCluster) -> None:
    script = """#!/bin/bash
export MASTER_PORT=29555
srun --label bash -c 'eval $(slurmenv export); echo PORT=$MASTER_PORT RANK=$RANK'
"""
    res = slurm_cluster.sbatch(script, ["-N2", "-n4"], env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    lines = parse_labels(res.stdout)
    assert lines == {r: [f"PORT=29555 RANK={r}"] for r in range(4)}, explain(res)


# -- a scrubbed environment inside srun tasks (item 6) ----------------------------------------
def test_scrubbed_environment_in_srun_tasks_is_refused(slurm_cluster: SlurmCluster) -> None:
    command = ["env", "-i", f"PATH={ENV['PATH']}", "bash", "-c",
               f"eval $(slurmenv export); echo {GUARD}"]
    res = slurm_cluster.srun(["-N2", "-n4"], command, env=ENV, timeout=TIMEOUT)
    assert GUARD not in res.stdout and res.returncode != 0, explain(res)
    refusals = [line for line in res.stderr.splitlines() if "slurmenv: error:" in line]
    assert len(refusals) == 4, explain(res)
    assert all("slurmstepd: [" in line and "is an ancestor" in line for line in refusals), \
        explain(res)
    assert res.stderr.count("variable: SLURM_JOB_ID=(unset)") == 4, explain(res)
    # exec fails closed the same way
    exec_ = slurm_cluster.srun(["-N1", "-n1"], ["env", "-i", f"PATH={ENV['PATH']}", "slurmenv",
                                                "exec", "--", "echo", GUARD],
                               env=ENV, timeout=TIMEOUT)
    assert GUARD not in exec_.stdout and exec_.returncode != 0, explain(exec_)


def test_scrubbed_batch_script_is_a_single_process(slurm_cluster: SlurmCluster) -> None:
    # the batch step's slurmstepd ([N.batch]) is exempt: outside any Slurm variable, the batch
    # script is a process like any other
    script = f"""#!/bin/bash
env -i PATH="{ENV['PATH']}" bash -c 'eval $(slurmenv export --for torch); echo RANK=$RANK \
WORLD_SIZE=$WORLD_SIZE'
"""
    res = slurm_cluster.sbatch(script, ["-N2", "-n4"], env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0 and "RANK=0 WORLD_SIZE=1" in res.stdout, explain(res)


# -- a partial environment inside srun tasks (issue 19) ---------------------------------------
@pytest.mark.parametrize(
    ("unset", "variable"),
    [(["SLURM_JOB_ID", "SLURM_JOBID"], "SLURM_STEP_ID"),
     (["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID"], "SLURM_PROCID")],
    ids=["no-job-id", "no-job-or-step-id"],
)
def test_a_partial_step_environment_is_refused_naming_a_stray_variable(
    slurm_cluster: SlurmCluster, unset: list[str], variable: str
) -> None:
    """A container that passes only part of a task's variables (here env -u): the Slurm
    variables left behind refuse the single-process default, in the batch step's exemption
    too, before any evidence from /proc is needed."""
    dropped = [arg for name in unset for arg in ("-u", name)]
    command = ["env", *dropped, "bash", "-c", f"eval $(slurmenv export --for torch); echo {GUARD}"]
    res = slurm_cluster.srun(["-N2", "-n4"], command, env=ENV, timeout=TIMEOUT)
    assert GUARD not in res.stdout and res.returncode != 0, explain(res)
    assert res.stderr.count(f"variable: {variable}=") == 4, explain(res)
    assert res.stderr.count("train alone") == 4, explain(res)


# -- the explicit launcher choice (issue 27) ---------------------------------------------------
def test_an_explicit_launcher_choice_in_srun_tasks(slurm_cluster: SlurmCluster) -> None:
    """--launcher slurm in real srun tasks resolves as detected; SLURMENV_LAUNCHER naming a
    launcher that does not detect them (set once, it reaches every task through srun) is
    refused in every task, and the command after the eval never runs."""
    chosen = slurm_cluster.srun(
        ["-N2", "-n4"],
        ["bash", "-c", ("eval $(slurmenv export --for torch --launcher slurm); "
                        "echo CHOSEN RANK=$RANK WORLD_SIZE=$WORLD_SIZE")],
        env=ENV, timeout=TIMEOUT)
    assert chosen.returncode == 0, explain(chosen)
    assert chosen.per_task == {r: [f"CHOSEN RANK={r} WORLD_SIZE=4"] for r in range(4)}, \
        explain(chosen)
    refused = slurm_cluster.srun(
        ["-N2", "-n4"], ["bash", "-c", f"eval $(slurmenv export --for torch); echo {GUARD}"],
        env={**ENV, "SLURMENV_LAUNCHER": "lsf"}, timeout=TIMEOUT)
    assert GUARD not in refused.stdout and refused.returncode != 0, explain(refused)
    assert refused.stderr.count("variable: SLURMENV_LAUNCHER='lsf'") == 4, explain(refused)
    assert refused.stderr.count("slurmenv detects slurm") == 4, explain(refused)
