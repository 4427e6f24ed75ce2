"""The README's claims about a compute node where ``slurmenv`` is not on ``PATH``, on the real
Slurm cluster (tests/slurm_harness.py; needs root).

README, "When slurmenv cannot run: use exec": ``eval $(slurmenv export)`` cannot stop the
program then, ``srun slurmenv exec -- ...`` fails closed, and so does
``env=$(slurmenv export) && eval "$env" && exec ...``. ``PATH`` is cut to ``/usr/bin:/bin`` for
srun and its tasks, so that ``slurmenv`` is missing exactly as on a node without the install.
"""

from __future__ import annotations

import pytest
from slurm_harness import SlurmCluster

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "the README's claims where `slurmenv` is not on `PATH`": ("debian", [
        "test_the_missing_command_is_really_missing",
        "test_eval_cannot_stop_the_program_when_slurmenv_is_missing",
        "test_exec_fails_closed_when_slurmenv_is_missing",
        "test_taking_the_output_first_fails_closed",
        "test_kill_on_bad_exit_reaches_no_task",
        "test_slurm_kill_bad_exit_in_the_environment_ends_the_step",
    ]),
}

NO_SLURMENV = {"PATH": "/usr/bin:/bin"}
STEP = ["-N2", "-n2"]


def test_the_missing_command_is_really_missing(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(STEP, ["sh", "-c", "command -v slurmenv || echo absent"],
                             env=NO_SLURMENV)
    assert res.returncode == 0, res.stderr
    assert res.per_task == {0: ["absent"], 1: ["absent"]}


def test_eval_cannot_stop_the_program_when_slurmenv_is_missing(
    slurm_cluster: SlurmCluster,
) -> None:
    script = 'eval $(slurmenv export); echo "ran RANK=$RANK"'
    res = slurm_cluster.srun(STEP, ["bash", "-c", script], env=NO_SLURMENV)
    assert res.per_task == {0: ["ran RANK="], 1: ["ran RANK="]}  # started, without a rank
    assert "slurmenv: command not found" in res.stderr


def test_exec_fails_closed_when_slurmenv_is_missing(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(STEP, ["slurmenv", "exec", "--", "echo", "ran"], env=NO_SLURMENV)
    assert res.returncode != 0
    assert "ran" not in res.stdout
    # "No such file or directory", or "Permission denied" where the working directory holds
    # a directory named slurmenv (as this checkout does): either way the task cannot start
    assert "error: execve(): slurmenv: " in res.stderr


def test_taking_the_output_first_fails_closed(slurm_cluster: SlurmCluster) -> None:
    script = 'env=$(slurmenv export) && eval "$env" && exec echo ran'
    res = slurm_cluster.srun(STEP, ["sh", "-c", script], env=NO_SLURMENV)
    assert res.returncode == 127, res.stderr  # README: the missing command's status
    assert "ran" not in res.stdout


# docs/torchrun.md: "slurmenv cannot ... see it (srun passes no variable for it to the tasks),
# ... exporting SLURM_KILL_BAD_EXIT=1 in the batch script does the same for every srun of the
# job". Why slurmenv doctor does not warn about a missing -K: a task cannot tell.
FAIL_ONE = 'if [ "$SLURM_PROCID" = 1 ]; then exit 3; fi; sleep 40; echo SURVIVED'


def test_kill_on_bad_exit_reaches_no_task(slurm_cluster: SlurmCluster) -> None:
    # every variable name in the task, one a line (values differ from step to step, names not)
    probe = ["sh", "-c", "env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p' | sort -u"]
    with_k = slurm_cluster.srun([*STEP, "--kill-on-bad-exit=1"], probe)
    without = slurm_cluster.srun(STEP, probe)
    assert with_k.returncode == 0 and without.returncode == 0, with_k.stderr + without.stderr
    # the same variables either way: nothing in a task says whether -K was given
    assert with_k.per_task == without.per_task, (with_k.per_task, without.per_task)
    assert "SLURM_PROCID" in with_k.per_task[0]
    assert not [name for name in with_k.per_task[0] if "KILL" in name.upper()]


def test_slurm_kill_bad_exit_in_the_environment_ends_the_step(
    slurm_cluster: SlurmCluster,
) -> None:
    res = slurm_cluster.srun(STEP, ["sh", "-c", FAIL_ONE], env={"SLURM_KILL_BAD_EXIT": "1"},
                             timeout=100)
    assert res.returncode != 0, res.stderr
    # the other task was killed before it finished its sleep
    assert "SURVIVED" not in res.stdout, f"the step was not ended\n{res.stdout}\n{res.stderr}"
