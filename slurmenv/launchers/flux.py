"""Flux tasks (``flux run``, ``flux submit``): documented variables only, Flux is not installed
here (``tests/fixtures/beyond/flux.json`` cites flux-core's ``src/shell/task.c`` and
flux-coral2's ``cray_pals.c``).

Every task gets ``FLUX_TASK_RANK``, ``FLUX_TASK_LOCAL_ID``, ``FLUX_JOB_SIZE``,
``FLUX_JOB_NNODES`` and ``FLUX_JOB_ID`` (and ``PMI_RANK``/``PMI_SIZE`` for Flux's simple PMI,
checked). They tell neither the node list, nor which node a task is on, nor how many tasks a
node runs, so:

* with Flux's ``cray-pals`` shell plugin (``flux run -o pmi=cray-pals``) the apinfo file it
  writes (``PALS_APINFO``, format version 1) gives the layout and rank 0's host;
* otherwise the layout is known only when it can be one way (a single node, or one task per
  node); ``MASTER_ADDR`` must be given (``--master-addr``), never guessed. Anything else is
  refused, naming the way out.

``FLUX_JOB_ID``, hashed (``ports.stable_hash``: its low bits are a per-millisecond sequence),
seeds the port, anywhere in the range (``ports.launch_ports``); it is the launch key, so rank 0
refuses a port that the rank 0 of another live Flux job on its node holds (``rivals.py``). Registry: before ``slurm``: a Flux instance started inside a Slurm allocation
(``srun flux start``) hands its jobs the broker's ``SLURM_*``, which are not the task's.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError, require
from .base import Task, Topology, agree, hashed_id, node_sources, optional_int, read_int

NAME = "flux"
VARIABLES = (
    "FLUX_TASK_RANK", "FLUX_TASK_LOCAL_ID", "FLUX_JOB_SIZE", "FLUX_JOB_NNODES", "FLUX_JOB_ID",
    "PMI_RANK", "PMI_SIZE", "PALS_RANKID", "PALS_NODEID", "PALS_APINFO", "PMI_CONTROL_PORT",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
#: Set only in a task a Flux job shell started (local.py refuses the single-process default).
TASK_VARIABLES = ("FLUX_TASK_RANK", "FLUX_TASK_LOCAL_ID")
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "FLUX_TASK_RANK"), ("world_size", "FLUX_JOB_SIZE"),
         ("local_rank", "FLUX_TASK_LOCAL_ID"), ("nnodes", "FLUX_JOB_NNODES"))
#: A Flux instance started by srun (srun flux start) hands its jobs the broker's SLURM_*.
ENCLOSED_BY: tuple[str, ...] = ("het", "slurm")
#: Flux's processes above a task: its job shell (under the broker); the enclosure is believed
#: only with one of them among the task's ancestors (``worldguard.py``, ``evidence.py``).
AGENTS = ("flux-shell", "flux-broker")
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}
FIX = "run slurmenv inside a task that flux run/submit started; Flux sets this in every task"
SAME_JOB = "these come from the same Flux job: do not set them by hand"
LAYOUT_FIX = (
    "run with flux run -o pmi=cray-pals (its apinfo file tells every task's node), or one "
    "task per node, or a single node"
)


def detect(environ: Mapping[str, str]) -> bool:
    """A task that a Flux job shell started."""
    return bool(environ.get("FLUX_TASK_RANK") and environ.get("FLUX_JOB_SIZE"))


def _agree(environ: Mapping[str, str], name: str, other: str, value: int) -> None:
    agree(name, optional_int(environ, name, SAME_JOB), other, value, SAME_JOB)


def read(environ: Mapping[str, str]) -> Task:
    """One Flux task; the layout from the cray-pals apinfo file or the two one-way cases."""
    rank = read_int(environ, "FLUX_TASK_RANK", FIX)
    local = read_int(environ, "FLUX_TASK_LOCAL_ID", FIX)
    world = read_int(environ, "FLUX_JOB_SIZE", FIX, minimum=1)
    nnodes = read_int(environ, "FLUX_JOB_NNODES", FIX, minimum=1)
    job = require(environ, "FLUX_JOB_ID", FIX)
    if rank >= world or nnodes > world:
        raise SlurmEnvError(
            f"FLUX_TASK_RANK={rank}, FLUX_JOB_SIZE={world}, FLUX_JOB_NNODES={nnodes} do not fit",
            variable="FLUX_TASK_RANK", value=str(rank), fix=FIX,
        )
    _agree(environ, "PMI_RANK", "FLUX_TASK_RANK", rank)
    _agree(environ, "PMI_SIZE", "FLUX_JOB_SIZE", world)
    hashed, seed_source = hashed_id("FLUX_JOB_ID", job)
    seed = (hashed, hashed)
    key = ("FLUX_JOB_ID", job)
    sources = {
        "RANK": f"FLUX_TASK_RANK={rank}", "LOCAL_RANK": f"FLUX_TASK_LOCAL_ID={local}",
        "WORLD_SIZE": f"FLUX_JOB_SIZE={world}", "NNODES": f"FLUX_JOB_NNODES={nnodes}",
    }
    origin = f"a task of Flux job {job}"
    if environ.get("PALS_APINFO"):
        _agree(environ, "PALS_RANKID", "FLUX_TASK_RANK", rank)
        from . import pals

        task = pals.apinfo_task(environ, rank, environ["PALS_APINFO"])
        told = "the apinfo file (PALS_APINFO)"
        for name, value, what, mine in (
            ("FLUX_JOB_SIZE", world, f"the rank count of {told}", task.world_size),
            ("FLUX_JOB_NNODES", nnodes, f"the node count of {told}", task.nnodes),
            ("FLUX_TASK_LOCAL_ID", local, f"the local index of rank {rank} in {told}",
             task.local_rank),
        ):  # fmt: skip
            agree(name, value, what, mine,
                  "PALS_APINFO must be the file Flux's cray-pals plugin wrote for this job")
        return task._replace(
            launcher=NAME, sources={**task.sources, **sources}, port_seed=seed,
            port_seed_source=seed_source, job_id=job, step_id=None, origin=origin,
            label=f"Flux job {job}", launch_key=key,
        )
    if nnodes == 1:
        local_world, node, why = world, 0, "FLUX_JOB_NNODES=1: every task on one node"
    elif world == nnodes:
        local_world, node, why = 1, rank, f"FLUX_JOB_SIZE=FLUX_JOB_NNODES={world}: one task per node"
    else:
        raise SlurmEnvError(
            f"Flux does not tell which of the {nnodes} nodes runs this task, nor how many "
            f"tasks each runs ({world} tasks)",
            variable="FLUX_JOB_NNODES", value=str(nnodes), fix=LAYOUT_FIX,
        )
    if local >= local_world:
        raise SlurmEnvError(
            f"FLUX_TASK_LOCAL_ID={local} but {why}", variable="FLUX_TASK_LOCAL_ID",
            value=str(local), fix=FIX,
        )
    sources["LOCAL_WORLD_SIZE"] = f"{local_world}: {why}"
    sources.update(node_sources(f"{node}: {why}", sources["NNODES"]))
    return Task(
        launcher=NAME, rank=rank, local_rank=local, world_size=world,
        local_world_size=local_world, node_rank=node, nnodes=nnodes, hostname="",
        sources=sources, master_host=None,
        master_source="Flux tasks carry no host list (without -o pmi=cray-pals)",
        port_seed=seed, port_seed_source=seed_source, reserved_ports=None, topology=Topology(),
        job_id=job, origin=origin, label=f"Flux job {job}", launch_key=key,
    )
