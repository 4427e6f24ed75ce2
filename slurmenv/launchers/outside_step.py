"""Inside a Slurm job but in no step of srun tasks: the batch script, an salloc shell, the
extern step. Evaluated there, every task of a later ``srun`` would get rank 0: refused.

salloc's interactive step (``LaunchParameters=use_interactive_step``) runs one process: it
resolves as a single process.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError
from ..options import Options
from . import local
from .base import Task, foreign_mpi, interactive_step, job_id, outside_step, step_id

NAME = "slurm-outside-step"
VARIABLES = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NTASKS",
    "SLURM_NPROCS", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES", "SLURM_TASKS_PER_NODE",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
OUTSIDE_STEP_FIX = (
    "evaluate slurmenv inside the job step, in every task: "
    "srun bash -c 'eval $(slurmenv export); python train.py' (single quotes, so the batch "
    "script does not expand it) or srun slurmenv exec -- python train.py"
)


def detect(environ: Mapping[str, str]) -> bool:
    """Inside a Slurm job (no launcher before this one claimed the task)."""
    return job_id(environ) is not None


def refuse(environ: Mapping[str, str]) -> SlurmEnvError:
    """The error for the batch script / salloc shell: the bug that gives every task rank 0."""
    step = step_id(environ)
    foreign = None if outside_step(environ) or interactive_step(environ) else foreign_mpi(environ)
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
    return SlurmEnvError(
        f"inside Slurm job {job_id(environ)} but outside any job step (the batch script or an "
        "salloc shell): evaluated here, every task would get rank 0",
        variable="SLURM_STEP_ID",
        value=step,
        fix=OUTSIDE_STEP_FIX,
    )


def read(environ: Mapping[str, str], options: Options) -> Task:
    """salloc's interactive step: one process; anywhere else in the job: refused."""
    if interactive_step(environ):
        return local.single_process(
            environ, "slurm-interactive-step", "Slurm interactive step",
            origin=f"interactive step of job {job_id(environ)} (salloc with "
            "use_interactive_step): one process; the training runs as a single process here",
            origin_fix="start the training tasks with srun from this shell: srun slurmenv exec "
            "-- python train.py",
        )
    raise refuse(environ)
