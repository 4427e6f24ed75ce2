"""The launcher registry: which launcher started this task, tried in order.

Each entry names a module of this package (the interface is in ``base.py``). The signals
overlap, so the order decides; the comment on each line says why it is there. Modules are
imported in order only until one detects the task, and a module listed in :data:`SIGNALS` only
when one of its signal variables is set: a Slurm step task imports ``slurm`` and no other
launcher (start-up cost: ``docs/design.md``).
"""

from __future__ import annotations

from collections.abc import Mapping

from .._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    from ..options import Options
    from ..resolution import Resolution

REGISTRY = (
    # torchrun's workers (TORCHELASTIC_RUN_ID with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
    # torchrun numbered its processes itself, so its values win, even inside an srun task
    # whose SLURM_* describe the agent's task, not the worker.
    "torchrun",
    # A step task of a heterogeneous job (SLURM_HET_SIZE): a Slurm step whose node order is
    # component order when it spans components; the same tasks "slurm" detects, so before it.
    "het",
    # A real Slurm step task whose SLURM_* are its own (base.slurm_step_is_own): srun tasks,
    # and srun --mpi=pmi2/cray_shasta ranks whose PMI_*/PALS_* agree with SLURM_PROCID.
    # Before the MPI launchers: those signals are also present in such tasks.
    "slurm",
    # MPI launchers (mpirun, mpiexec) go here: their ranks inherit a daemon step's or the batch
    # script's SLURM_* (never their own), so they come after "slurm" and before the job-level
    # fallback below, which would refuse them.
    # Inside a Slurm job but in no step of srun tasks (batch script, salloc shell, extern
    # step; salloc's interactive step is one process): after every launcher that can run
    # inside a job, before the hand-set variables, which a batch script often exports.
    "outside_step",
    # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by hand outside Slurm: after every
    # launcher, whose own variables describe the task better than inherited ones.
    "preset",
    # Nothing else matched: a single process on this machine.
    "local",
)

#: Variables of which at least one must be set for a launcher's ``detect`` to be true: the
#: module is not even imported otherwise (tests/test_registry.py checks the implication).
#: Only worth it for launchers before ``slurm`` in the registry, which every step task tries.
SIGNALS = {
    "torchrun": ("TORCHELASTIC_RUN_ID",),
    "het": ("SLURM_HET_SIZE", "SLURM_PACK_SIZE"),
}


def load(name: str) -> ModuleType:
    """The launcher module ``name`` of the registry (imported on first use)."""
    import sys

    full = f"{__name__}.{name}"
    module = sys.modules.get(full)
    if module is None:
        __import__(full)
        module = sys.modules[full]
    return module


def modules() -> list[ModuleType]:
    """Every registered launcher module, in registry order (imports them all)."""
    return [load(name) for name in REGISTRY]


def detect(environ: Mapping[str, str]) -> ModuleType:
    """The first launcher module of the registry that detects this task."""
    for name in REGISTRY:
        signals = SIGNALS.get(name)
        if signals is not None and not any(environ.get(signal) for signal in signals):
            continue
        module = load(name)
        if module.detect(environ):
            return module
    raise AssertionError("the last launcher of the registry detects every task")


def resolve(
    environ: Mapping[str, str],
    options: Options,
    ephemeral: tuple[int, int] | None,
    cpus: int | None = None,
) -> Resolution:
    """Resolve with the first launcher that detects the task, through ``derive``."""
    from .. import derive

    task = detect(environ).read(environ, options)
    return derive.resolution(task, environ, options, ephemeral, cpus)
