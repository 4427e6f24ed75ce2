"""torchrun's workers: torchrun (``TORCHELASTIC_RUN_ID``) numbered its processes and set RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT itself; its values win, even inside an srun task.

(Not the ``slurmenv torchrun`` command, which is ``slurmenv/torchrun.py``.) It reads the
variables as ``preset.py`` does, which is imported only for a worker: this module is first in
the registry, so every Slurm task imports it, and it stays small.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..lean import TYPE_CHECKING
from . import NO_WORLD, REGISTRY

if TYPE_CHECKING:
    from .base import Task

NAME = "torchrun"
MARKER = "TORCHELASTIC_RUN_ID"
#: torchrun's own variables for each worker (preset.VARIABLES and the marker).
VARIABLES = (
    MARKER, "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "NNODES", "TF_CONFIG", "HOSTNAME",
    "SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
#: Set only in a process torchrun started (local.py refuses the single-process default then).
TASK_VARIABLES = (MARKER, "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                  "ROLE_RANK", "ROLE_WORLD_SIZE")
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK"),
         ("local_world_size", "LOCAL_WORLD_SIZE"))
#: torchrun numbered its workers itself: the task of any launcher after it in the registry
#: (srun task, Flux job, MPI rank, pod) describes its agent, not the worker; derived from the
#: registry, so a launcher added there is one too. Not preset: its variables are torchrun's own.
ENCLOSED_BY: tuple[str, ...] = tuple(
    name for name in REGISTRY[REGISTRY.index(NAME) + 1:] if name not in (*NO_WORLD, "preset"))
#: torchrun's agent, the process that starts the workers (``torchrun``, ``python -m
#: torch.distributed.run``, the older ``torch.distributed.launch``): the enclosure is believed
#: only with one of them among the task's ancestors (``worldguard.py``, ``evidence.py``).
AGENTS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}


def detect(environ: Mapping[str, str]) -> bool:
    """torchrun's marker with any of the rank variables it sets for every worker."""
    return bool(environ.get(MARKER)) and any(
        environ.get(name) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK", "GROUP_WORLD_SIZE")
    )


def read(environ: Mapping[str, str]) -> Task:
    """The worker's variables, as torchrun set them (all of them, or refused)."""
    from . import preset

    return preset.read_set(environ, NAME, "torchrun", "torchrun")
