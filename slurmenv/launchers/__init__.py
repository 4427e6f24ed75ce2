"""The launcher registry: which launcher started this task, tried in order.

``REGISTRY`` is the one list of launchers: everything else that lists them (the docs, the
contract check, the tests' launches) is generated from it or checked against it. Each entry
names a module of this package (the interface every one meets: ``tests/launcher_contract.py``;
what they share is in ``base.py``). The signals
overlap, so the order decides; the comment on each line says why it is there. Modules are
imported in order only until one detects the task, and a module listed in :data:`SIGNALS` only
when one of its signal variables is set: a Slurm step task imports ``slurm`` and no other
launcher (start-up cost: ``docs/design.md``).

This package is below the pipeline (``slurmenv/pipeline.py``), which drives detect, read,
derive and the rival check: nothing here imports ``pipeline``, ``resolution`` or ``rivals``,
and this ``__init__`` imports none of its own modules but by name (``load``), since each of
them runs it first (``tests/test_imports.py``).
"""

from __future__ import annotations

from ..lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

REGISTRY = (
    # torchrun's workers (TORCHELASTIC_RUN_ID with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
    # torchrun numbered its processes itself, so its values win, even inside an srun task
    # whose SLURM_* describe the agent's task, not the worker.
    "torchrun",
    # A task that a Flux job shell started (FLUX_TASK_RANK): a Flux instance inside a Slurm
    # allocation (srun flux start) hands its jobs the broker's SLURM_*, which describe the
    # broker, not the task; and Flux's cray-pals plugin sets PALS_* too ("pals" below).
    "flux",
    # A step task of a heterogeneous job (SLURM_HET_SIZE): a Slurm step whose node order is
    # component order when it spans components; the same tasks "slurm" detects, so before it
    # (it reads them with slurm.task: slurm.py never imports het.py).
    "het",
    # A real Slurm step task whose SLURM_* are its own (base.slurm_step_is_own): srun tasks,
    # and srun --mpi=pmi2/cray_shasta ranks whose PMI_*/PALS_* agree with SLURM_PROCID.
    # Before the MPI launchers: those signals are also present in such tasks.
    "slurm",
    # LSF jsrun tasks (JSM_NAMESPACE_RANK/SIZE): before the MPI launchers, since jsrun starts
    # Spectrum MPI ranks that carry OMPI_COMM_WORLD_* too, while JSM_NAMESPACE_* and LSB_*
    # tell the job's hosts. LSF jobs carry no SLURM_*.
    "lsf",
    # Cray PALS ranks (PBS Pro's HPE mpiexec; srun --mpi=cray_shasta tasks whose SLURM_* are
    # hidden): PALS_RANKID. After "slurm": a cray_shasta task carries PALS_RANKID equal to
    # SLURM_PROCID and Slurm's own variables stay its truth. Before the MPI launchers: PALS
    # ranks carry PMI_RANK/PMI_SIZE too. Never PBS_JOBID alone, which Slurm's spank_pbs plugin
    # also sets. Before "batch": a PALS rank is its launcher's, even inside a job.
    "pals",
    # MPI launchers: their ranks inherit a daemon step's or the batch script's SLURM_* (never
    # their own), so they come after "slurm" (which keeps srun --mpi=pmi2 tasks, whose PMI_*
    # agree with SLURM_PROCID) and before the job-level fallback below, which would refuse them
    # (docs/launchers.md).
    # Open MPI (OMPI_COMM_WORLD_RANK). LSF's jsrun sets OMPI_COMM_WORLD_* too: its module (with
    # its own JSM_*/LSB_* signal) must come before this line.
    "openmpi",
    # Hydra: MPICH/Intel MPI mpiexec (MPI_LOCALRANKID, which only Hydra sets; PMI_RANK alone is
    # also srun --mpi=pmi2's and Cray PALS's, whose module must detect PALS_* and come before).
    "hydra",
    # MVAPICH2 mpirun_rsh (MV2_COMM_WORLD_RANK): after hydra, since MVAPICH2's Hydra mpiexec
    # sets both and Hydra's variables say more.
    "mvapich",
    # Inside a Slurm job but in no step of srun tasks (batch script, salloc shell, extern
    # step): refused, except a job of exactly one task and salloc's interactive step of a job
    # no larger (one process each). After every launcher that can run inside a job, before the hand-set
    # variables, which a batch script often exports.
    "batch",
    # A pod of a Kubernetes training operator (KUBERNETES_SERVICE_HOST with RANK/WORLD_SIZE or
    # PET_NNODES): before "preset", which would take the operator's RANK (a pod index) as a
    # process rank on trust; after everything that runs inside a pod on its own (torchrun's
    # workers, a Slurm step), whose variables describe the process.
    "k8s",
    # Any rank-like variable set by hand outside Slurm: complete or refused. After every
    # launcher, whose own variables describe the task better than inherited ones.
    "preset",
    # No launcher variable at all: a single process on this machine (FALLBACK), refused when
    # a variable another launcher declares in TASK_VARIABLES is set or /proc shows a Slurm
    # task step whose variables were scrubbed (evidence.py): no other launcher pays for either.
    "local",
)

#: Variables of which at least one must be set for a launcher's ``detect`` to be true: the
#: module is not even imported otherwise (tests/test_registry.py checks the implication).
#: Worth it for launchers before ``slurm`` in the registry, which every step task tries, and for
#: those after it that the world guard would otherwise import in every task.
SIGNALS = {
    "torchrun": ("TORCHELASTIC_RUN_ID",),
    "flux": ("FLUX_TASK_RANK",),
    # not imported in a batch script or salloc shell that no MPI launcher started
    "openmpi": ("OMPI_COMM_WORLD_RANK",),
    "hydra": ("MPI_LOCALRANKID",),
    "mvapich": ("MV2_COMM_WORLD_RANK",),
    "het": ("SLURM_HET_SIZE", "SLURM_PACK_SIZE"),
    # and for the world guard (slurmenv/worldguard.py), which looks at every launcher that
    # detects the task: an srun task imports none of these for it
    "lsf": ("JSM_NAMESPACE_RANK",),
    "pals": ("PALS_RANKID",),
    "k8s": ("KUBERNETES_SERVICE_HOST",),
    "preset": ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
               "NNODES", "GROUP_WORLD_SIZE"),
}
#: The launchers that declare no WORLD fact (tests/test_registry.py checks it): the world
#: guard does not import them.
NO_WORLD = ("batch", "local")


def load(name: str) -> ModuleType:
    """The launcher module ``name`` of the registry (imported on first use)."""
    import sys

    full = f"{__name__}.{name}"
    module = sys.modules.get(full)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        # absent, or another thread is still importing it (its functions not defined yet):
        # the import system waits for that thread's import to finish
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
