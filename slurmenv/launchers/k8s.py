"""Kubernetes training operators: Kubeflow's PyTorchJob, Kubeflow Trainer v2 (TrainJob on
JobSet) and Volcano's pytorch plugin. Documented variables only: no Kubernetes runs here
(``tests/fixtures/beyond/``, each value citing the operator's source).

The operators number **pods**, not processes:

* PyTorchJob (training-operator ``envvar.go``): ``RANK`` = the pod's replica index (workers
  +1), ``WORLD_SIZE`` = replicas x ``nprocPerNode`` (a process count when that is a number >
  1), ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` = ``RANK``, ``PET_NNODES``, ``MASTER_ADDR``
  (``<job>-master-0``), ``MASTER_PORT``. Before nprocPerNode existed: no ``PET_*``.
* Trainer v2 (trainer ``torch.go``): ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` only: torchrun's arguments.
* Volcano (``pytorch.go``): ``RANK`` (master 0, workers index + 1), ``WORLD_SIZE`` (pods),
  ``MASTER_ADDR``, ``MASTER_PORT``, no ``LOCAL_RANK``.

So a pod index is a process rank only with one process per pod. When the operator says a pod
runs several (``PET_NPROC_PER_NODE`` other than ``1``; ``WORLD_SIZE`` larger than the pod count;
``LOCAL_RANK`` set to more than 0), slurmenv refuses and says how to fix it: one process per
pod, or torchrun in each pod (it reads the ``PET_*`` variables as its arguments and gives each
worker its own ``RANK``; slurmenv then reads the worker as a torchrun worker). Every value is
checked against the others the operator set; ``MASTER_ADDR``/``MASTER_PORT`` are the
operator's and win as they are.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError, is_number
from .base import Task, Topology, agree, below, node_sources, optional_int, read_int

NAME = "k8s"
VARIABLES = (
    "KUBERNETES_SERVICE_HOST", "HOSTNAME", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
    "MASTER_PORT", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
    "PET_MASTER_PORT", "JOB_COMPLETION_INDEX", "VC_TASK_INDEX", "VK_TASK_INDEX",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
#: A pod's index, set only in a pod of an indexed Job or a Volcano job: without RANK and
#: WORLD_SIZE each such pod would train alone (local.py refuses). KUBERNETES_SERVICE_HOST is in
#: every pod, and PET_* are torchrun's arguments, which slurmenv itself exports.
TASK_VARIABLES = ("JOB_COMPLETION_INDEX", "VC_TASK_INDEX", "VK_TASK_INDEX")
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("rank", "PET_NODE_RANK"),
         ("world_size", "PET_NNODES"))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}
TORCHRUN_FIX = (
    "run one process per pod (PyTorchJob nprocPerNode: 1, TrainJob numProcPerNode: 1), or "
    "start torchrun in each pod (it reads the PET_* variables as its arguments and gives every "
    "worker its own RANK; slurmenv then reads the workers) instead of the training script"
)
SAME_POD = "these come from the operator for the same pod: do not set them by hand"


def detect(environ: Mapping[str, str]) -> bool:
    """A pod (KUBERNETES_SERVICE_HOST) whose operator set torch's variables or torchrun's."""
    if not environ.get("KUBERNETES_SERVICE_HOST"):
        return False
    return bool(environ.get("PET_NNODES") or (environ.get("RANK") and environ.get("WORLD_SIZE")))


def _operator(environ: Mapping[str, str]) -> str:
    if environ.get("VC_TASK_INDEX") or environ.get("VK_TASK_INDEX"):
        return "Volcano"
    if environ.get("PET_MASTER_ADDR"):
        return "Kubeflow Trainer (TrainJob)"
    if environ.get("PET_NNODES") or environ.get("PET_NPROC_PER_NODE"):
        return "Kubeflow PyTorchJob"
    return "a Kubernetes operator"


def _several(message: str, variable: str, value: str | None) -> SlurmEnvError:
    return SlurmEnvError(
        f"{message}: the operator's rank numbers pods, and this pod runs several processes",
        variable=variable, value=value, fix=TORCHRUN_FIX,
    )


def read(environ: Mapping[str, str]) -> Task:
    """One pod = one process, checked; several processes per pod: refused with the fix."""
    who = _operator(environ)
    nproc = environ.get("PET_NPROC_PER_NODE")
    if nproc is not None and nproc != "1":
        raise _several(
            f"PET_NPROC_PER_NODE={nproc} ({who})", "PET_NPROC_PER_NODE", nproc
        )
    local = optional_int(environ, "LOCAL_RANK", SAME_POD)
    if local:
        raise _several(f"LOCAL_RANK={local} in a pod of {who}", "LOCAL_RANK", str(local))
    nnodes_text = environ.get("PET_NNODES")
    if nnodes_text is not None and ":" in nnodes_text:
        raise SlurmEnvError(
            f"PET_NNODES={nnodes_text} is a range: an elastic job, whose size only torchrun's "
            "rendezvous knows",
            variable="PET_NNODES", value=nnodes_text, fix=TORCHRUN_FIX,
        )
    pods = optional_int(environ, "PET_NNODES", SAME_POD)
    if environ.get("RANK"):
        return _ranked(environ, who, pods)
    return _pet_only(environ, who, pods)


def _ranked(environ: Mapping[str, str], who: str, pods: int | None) -> Task:
    """RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (PyTorchJob, Volcano)."""
    rank = read_int(environ, "RANK", SAME_POD)
    world = read_int(environ, "WORLD_SIZE", SAME_POD, minimum=1)
    if pods is not None and world > pods:
        raise _several(
            f"WORLD_SIZE={world} counts processes but PET_NNODES={pods} pods and RANK={rank} is "
            f"a pod index ({who})", "WORLD_SIZE", str(world),
        )
    agree("WORLD_SIZE", world, "PET_NNODES", pods, SAME_POD, "one process per pod")
    agree("RANK", rank, "PET_NODE_RANK", optional_int(environ, "PET_NODE_RANK", SAME_POD),
          SAME_POD, "the pod's index")  # fmt: skip
    below("RANK", rank, "WORLD_SIZE", world, SAME_POD)
    _check_pod_name(environ, rank)
    fixed = {name: environ[name] for name in ("MASTER_ADDR", "MASTER_PORT") if environ.get(name)}
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in fixed]
    if missing:
        raise SlurmEnvError(
            f"{who} set RANK and WORLD_SIZE but not {missing[0]}", variable=missing[0],
            value=None, fix="the operator sets it when the job has a master replica; add one",
        )
    told = f"set by {who} (one process per pod: the pod index is the rank)"
    return _task(environ, who, rank, world, told, fixed, ("RANK", "WORLD_SIZE"))


def _pet_only(environ: Mapping[str, str], who: str, pods: int | None) -> Task:
    """Trainer v2: PET_* only, which are torchrun's arguments; one process per pod here."""
    if pods is None:
        raise SlurmEnvError(
            f"{who}: neither RANK nor PET_NNODES is set", variable="PET_NNODES", value=None,
            fix=TORCHRUN_FIX,
        )
    rank = optional_int(environ, "PET_NODE_RANK", SAME_POD)
    if rank is None:
        raise SlurmEnvError(
            f"PET_NNODES={pods} but PET_NODE_RANK is not set ({who})", variable="PET_NODE_RANK",
            value=None, fix=TORCHRUN_FIX,
        )
    agree("PET_NODE_RANK", rank, "JOB_COMPLETION_INDEX",
          optional_int(environ, "JOB_COMPLETION_INDEX", SAME_POD), SAME_POD,
          "the Indexed Job's pod index")  # fmt: skip
    below("PET_NODE_RANK", rank, "PET_NNODES", pods,
          "these come from the operator: do not set them by hand")
    fixed = {}
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        value = environ.get(f"PET_{name}")
        if not value:
            raise SlurmEnvError(
                f"{who} set PET_NNODES but not PET_{name}", variable=f"PET_{name}", value=None,
                fix=TORCHRUN_FIX,
            )
        fixed[name] = value
    told = f"set by {who} for torchrun, with PET_NPROC_PER_NODE=1 (one process per pod)"
    return _task(environ, who, rank, pods, told, fixed, ("PET_NODE_RANK", "PET_NNODES"))


def _check_pod_name(environ: Mapping[str, str], rank: int) -> None:
    """PyTorchJob and Volcano name pods <job>-master-<i> / <job>-worker-<i>: the pod index in
    the name must give this RANK (master 0, worker i -> i + 1), else the variables are another
    pod's."""
    host = environ.get("HOSTNAME", "")
    head, _, index = host.rpartition("-")
    role = head.rpartition("-")[2]
    if not is_number(index) or role not in ("master", "worker"):
        return  # custom task names or hostnames: nothing to compare
    expected = int(index) + (1 if role == "worker" else 0)
    if role == "master" and int(index) != 0:
        return
    agree("RANK", rank, f"the rank the pod name {host} gives", expected, SAME_POD,
          "master 0, worker i -> i + 1")


def _task(
    environ: Mapping[str, str], who: str, rank: int, world: int, told: str,
    fixed: dict[str, str], names: tuple[str, str],
) -> Task:  # fmt: skip
    rank_name, world_name = names
    sources = {
        "RANK": f"{rank_name}={rank} {told}",
        "WORLD_SIZE": f"{world_name}={world} {told}",
        "LOCAL_RANK": "0: one process per pod",
        "LOCAL_WORLD_SIZE": "1: one process per pod",
        **node_sources(f"{rank_name}={rank}: the pod is the node", f"{world_name}={world} pods"),
        "MASTER_ADDR": f"MASTER_ADDR set by {who}",
        "MASTER_PORT": f"MASTER_PORT set by {who}",
    }
    return Task(
        launcher=NAME, rank=rank, local_rank=0, world_size=world, local_world_size=1,
        node_rank=rank, nnodes=world, hostname=environ.get("HOSTNAME", ""), sources=sources,
        master_host=None, master_source=f"MASTER_ADDR set by {who}", port_seed=None,
        port_seed_source=f"MASTER_PORT set by {who}", reserved_ports=None, topology=Topology(),
        fixed=fixed, notes=(f"{who}: one process per pod, so the pod index is the rank",),
        origin=f"a pod of {who}", label=f"pod {environ.get('HOSTNAME') or '?'}",
    )
