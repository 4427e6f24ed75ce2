"""slurmenv: the environment distributed training expects, from a Slurm job step.

>>> import slurmenv
>>> r = slurmenv.resolve()          # a pure function of os.environ (or a mapping you pass)
>>> r.rank, r.world_size, r.master_addr, r.master_port
>>> r.apply()                       # set RANK, ..., TF_CONFIG in os.environ (keeps user values)

Command line: ``srun -K slurmenv exec -- python train.py`` (it starts nothing when slurmenv
refuses or is missing on the node; docs/README.md lists the pages).
"""

from __future__ import annotations

import os

from .errors import SlurmEnvError
from .lean import TYPE_CHECKING
from .options import Options
from .render import OUTPUTS
from .resolution import Resolution

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["OUTPUTS", "Options", "Resolution", "SlurmEnvError", "__version__", "resolve"]
__version__ = "0.5.0"

_AUTO = object()


def resolve(
    environ: Mapping[str, str] | None = None, *, port: int | None = None,
    port_range: tuple[int, int] | str | None = None, addr_template: str | None = None,
    resolve_addr: bool | None = None, tf_chief: bool | None = None,
    bind_gpus: bool | None = None, threads: bool | None = None, master_addr: str | None = None,
    tf_jobs: str | None = None, launcher: str | None = None, pmi: bool | None = None,
    ephemeral_range: tuple[int, int] | None | object = _AUTO, cpus: int | None = None,
    step_evidence: str | None | object = _AUTO,
    rivals: Iterable[Mapping[str, str]] | None | object = _AUTO,
    enclosure: str | None | object = _AUTO,
) -> Resolution:
    """Resolve this task's distributed environment from ``environ`` (default ``os.environ``).

    Nothing is changed: the result is an immutable :class:`Resolution`. The keywords from
    ``port`` to ``pmi`` are the options table's (:class:`Options`, ``docs/options.md``);
    each one given (not None) overrides its ``SLURMENV_*`` variable. ``ephemeral_range`` is this
    node's ephemeral port range, read from ``/proc`` unless given (``None`` skips the check).
    ``cpus`` is how many CPUs the task may run on, for the thread counts when
    ``SLURM_CPUS_PER_TASK`` is unset: read from the task's CPU affinity unless given.
    ``step_evidence`` is local evidence of a Slurm task step (a ``slurmstepd`` ancestor, a
    ``job_N/step_M`` cgroup) for an environment without any launcher variable: read from
    ``/proc`` unless given (``None``: no evidence); with evidence, the single-process default
    is refused (the environment was scrubbed). ``rivals`` are the environments of the other
    processes of this node, for rank 0 of a launch that is not a Slurm step (Open MPI's
    ``mpirun``, PBS PALS ``mpiexec``, a Flux job): one that is rank 0 of another launch with
    the same ``MASTER_PORT`` refuses the resolution; read from ``/proc`` unless given
    (``None``: not looked at). ``enclosure`` is local evidence that the task's launcher
    runs inside the one whose variables it carries (torchrun's agent among the ancestors of a
    worker in an srun task, a Flux job shell inside ``srun flux start``), looked for in
    ``/proc`` unless given (``None``: none) and only when the two worlds disagree; without
    it, the task is refused.

    Raises :class:`SlurmEnvError` naming the variable at fault when the environment is wrong
    (for example in a batch script outside ``srun``, where every task would get rank 0).
    """
    from . import options, pipeline, ports

    given = {name: value for name, value in locals().items() if name in options.Options._fields}
    env = os.environ if environ is None else environ
    opts = options.from_environ(env, **given)
    ephemeral = ports.ephemeral_range() if ephemeral_range is _AUTO else ephemeral_range
    evidence = pipeline.FIND if step_evidence is _AUTO else step_evidence
    if rivals is not _AUTO and rivals is not None:
        from .errors import require_list

        require_list(rivals, "rivals", "a list of environments (mappings), one per process "
                     "of this node, or None")
    others = pipeline.FIND if rivals is _AUTO else (
        None if rivals is None else [(None, other) for other in rivals]  # type: ignore[attr-defined]
    )
    enclosed = pipeline.FIND if enclosure is _AUTO else enclosure
    return pipeline.resolve(env, opts, ephemeral, cpus, evidence, others,  # type: ignore[arg-type]
                            enclosed)  # type: ignore[arg-type]
