"""Inside a Slurm job but in no step of srun tasks (``base.in_job_outside_steps``): the batch
script, an salloc shell, the extern step. Evaluated there, every task of a later ``srun`` would
get rank 0: refused. (The registry's ``batch``; its NAME, shown to users, is
``slurm-outside-step``.)

salloc's interactive step (``LaunchParameters=use_interactive_step``) runs one process: it
resolves as a single process when the job says no larger world (:data:`JOB_WORLD`, checked by
the world guard with every other single-process result).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError
from . import local
from .base import Task, foreign_mpi, in_job_outside_steps, interactive_step, job_id, step_id

NAME = "slurm-outside-step"
#: The task is in the batch script or an salloc shell: doctor's "step" check reports this
#: module's refusals as such (and not those of a launcher that claims a task there, such as
#: an MPI rank on mpirun's node).
OUTSIDE_STEP = True
VARIABLES = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NTASKS",
    "SLURM_NPROCS", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES", "SLURM_TASKS_PER_NODE",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
TASK_VARIABLES: tuple[str, ...] = ()
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = ()
ENCLOSED_BY: tuple[str, ...] = ()
#: The job's sizes, facts of the world only where the task runs in no step of srun tasks of
#: its own (the batch script, an salloc shell, the interactive step; in a step, srun sets
#: SLURM_NTASKS/SLURM_NNODES to the step's, except with srun -E, and SLURM_JOB_NUM_NODES stays
#: the job's): a world of one there must agree with them (``worldguard.py``), so the
#: interactive step of an 8-task job is refused as its batch script is.
JOB_WORLD: tuple[tuple[str, str], ...] = (
    ("world_size", "SLURM_NTASKS"), ("world_size", "SLURM_NPROCS"),
    ("nnodes", "SLURM_JOB_NUM_NODES"), ("nnodes", "SLURM_NNODES"))
WHY_EMPTY = {
    "PREFIXES": "every variable read is named in VARIABLES",
    "TASK_VARIABLES": "the variables of a Slurm job: slurm.py declares them",
    "WORLD": (
        "the job's variables describe the allocation, not a task: a step's tasks differ from "
        "them on purpose (a chosen launcher must still agree with this module's reading)"
    ),
}
OUTSIDE_STEP_FIX = (
    "evaluate slurmenv inside the job step, in every task: srun -K slurmenv exec -- python "
    "train.py, or in a shell: srun -K sh -c 'env=$(slurmenv export) && eval \"$env\" && exec "
    "python train.py' (single quotes, so the batch script does not expand it)"
)


def detect(environ: Mapping[str, str]) -> bool:
    """Inside a Slurm job (no launcher before this one claimed the task)."""
    return job_id(environ) is not None


def refuse(environ: Mapping[str, str]) -> SlurmEnvError:
    """The error for the batch script / salloc shell: the bug that gives every task rank 0."""
    step = step_id(environ)
    outside = in_job_outside_steps(environ) or interactive_step(environ)
    foreign = None if outside else foreign_mpi(environ)
    if foreign is not None:
        name, value, against = foreign
        return SlurmEnvError(
            f"{name}={value} disagrees with {against} of Slurm step {job_id(environ)}.{step}: "
            "this process is not that step's task (an MPI rank that inherited its variables?)",
            variable=name,
            value=value,
            fix="start each rank with srun (srun --mpi=pmi2 for MPI programs), or unset the "
            f"{name.partition('_')[0]}_* variables that leaked into this srun task",
        )
    fix = OUTSIDE_STEP_FIX
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    if nodes == "1" and not (environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS")):
        fix += (
            "; for a job of exactly one task, say so with sbatch -n 1 (SLURM_NTASKS is unset "
            "without -n): its batch script then resolves as one process"
        )
    return SlurmEnvError(
        f"inside Slurm job {job_id(environ)} but outside any job step (the batch script or an "
        "salloc shell): evaluated here, every task would get rank 0",
        variable="SLURM_STEP_ID",
        value=step,
        fix=fix,
    )


def one_task_job(environ: Mapping[str, str]) -> str | None:
    """The evidence that the job has exactly one task on one node, or None.

    ``SLURM_NTASKS``/``SLURM_NPROCS`` are set in the batch script only when ``-n`` or
    ``--ntasks-per-node`` was given (``sbatch -N1`` alone leaves them unset: no evidence), so
    the count must be explicit; ``SLURM_JOB_NUM_NODES``/``SLURM_NNODES`` must say one node.
    """
    if not in_job_outside_steps(environ):
        return None
    tasks = next((n for n in ("SLURM_NTASKS", "SLURM_NPROCS") if environ.get(n)), None)
    nodes = next((n for n in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES") if environ.get(n)), None)
    if tasks is None or nodes is None:
        return None
    if environ[tasks] != "1" or environ[nodes] != "1":
        return None
    return f"{tasks}=1 and {nodes}=1"


def read(environ: Mapping[str, str]) -> Task:
    """salloc's interactive step and a job of exactly one task: one process; anywhere else
    in the job: refused."""
    one = one_task_job(environ)
    if one is not None:
        job = job_id(environ)
        return local.single_process(
            environ, "slurm-one-task-job", f"Slurm job {job} of one task ({one})",
            origin=f"the batch script (or salloc shell) of job {job}, which has exactly one task "
            f"({one}): one process",
            origin_fix=None,
        )
    if interactive_step(environ):
        return local.single_process(
            environ, "slurm-interactive-step", "Slurm interactive step",
            origin=f"interactive step of job {job_id(environ)} (salloc with "
            "use_interactive_step): one process; the training runs as a single process here",
            origin_fix="start the training tasks with srun from this shell: srun -K slurmenv "
            "exec -- python train.py",
        )
    raise refuse(environ)
