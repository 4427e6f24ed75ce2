"""Thread counts for OpenMP, MKL and OpenBLAS, when the user has not chosen them.

Slurm never sets ``OMP_NUM_THREADS``. Left unset, OpenMP, MKL and OpenBLAS each start one
thread per CPU of the machine in every task, so tasks sharing a node oversubscribe it. slurmenv
sets them (on by default; ``--no-threads`` or ``SLURMENV_THREADS=0`` turns it off) to:

1. ``SLURM_CPUS_PER_TASK`` when set (``srun -c N`` / ``--cpus-per-task=N``), else
2. the number of CPUs this task may run on (its CPU affinity, which Slurm's task/affinity or
   task/cgroup plugins narrow to the task's own CPUs).

A value the user set is never replaced. When ``OMP_NUM_THREADS`` is set, nothing is set at all:
MKL and OpenBLAS follow ``OMP_NUM_THREADS`` when their own variable is unset, so setting them
would override the user's choice.
"""

from __future__ import annotations

import os

from .errors import parse_int, to_int
from .lean import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: Variables set, in output order.
VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: What a user who sets the thread count by hand should write (the rule of ``plan``).
FROM_CPUS_PER_TASK = "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK"


class Threads(NamedTuple):
    """``env``: variables to set (only unset ones); ``number``: the thread count (None when
    nothing is set); ``source``: where it came from; ``notes``: what was left alone."""

    env: dict[str, str]
    number: int | None
    source: str
    notes: tuple[str, ...] = ()


def affinity_count() -> int:
    """How many CPUs this process may run on.

    ``os.sched_getaffinity(0)`` where the OS has it (Linux): the same set psutil's
    ``Process().cpu_affinity()`` returns, without importing psutil (12 ms) on the export path.
    Elsewhere psutil's answer (imported here, lazily), and where psutil has none either (macOS)
    the number of CPUs of the machine.
    """
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        return len(getaffinity(0))
    import psutil

    cpus = getattr(psutil.Process(), "cpu_affinity", None)
    if cpus is not None:
        return len(cpus())
    return psutil.cpu_count() or 1


def cpus_per_task(environ: Mapping[str, str]) -> int | None:
    """``SLURM_CPUS_PER_TASK`` (``srun -c N``), None when unset; a bad value is refused."""
    per_task = environ.get("SLURM_CPUS_PER_TASK")
    if not per_task:
        return None
    return parse_int(
        "SLURM_CPUS_PER_TASK", per_task, minimum=1,
        fix="SLURM_CPUS_PER_TASK is set by srun -c N; do not set it by hand")


def omp_threads(value: str) -> int | None:
    """The thread count OpenMP takes from ``OMP_NUM_THREADS`` (the first level of a nested
    list such as ``4,2``), None when it is not a number."""
    first = value.split(",")[0].strip()
    return to_int(first)


def plan(environ: Mapping[str, str], affinity: Callable[[], int] = affinity_count) -> Threads:
    """The thread variables to set for a task with environment ``environ``.

    ``affinity`` (called only when ``SLURM_CPUS_PER_TASK`` is unset) counts the task's CPUs.
    """
    omp = environ.get("OMP_NUM_THREADS")
    if omp:
        return Threads({}, None, f"OMP_NUM_THREADS={omp} already set",
                       (f"OMP_NUM_THREADS={omp} was already set: kept, and MKL/OpenBLAS follow it",))
    per_task = environ.get("SLURM_CPUS_PER_TASK")
    count = cpus_per_task(environ)
    if count is not None:
        source = f"SLURM_CPUS_PER_TASK={per_task}"
    else:
        count = max(1, affinity())
        source = f"CPU affinity of this task ({count} CPUs; SLURM_CPUS_PER_TASK unset)"
    env, kept = {}, []
    for name in VARIABLES:
        if environ.get(name):
            kept.append(f"{name}={environ[name]} was already set: kept")
        else:
            env[name] = str(count)
    return Threads(env, count, source, tuple(kept))
