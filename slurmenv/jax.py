"""JAX helper: the arguments of ``jax.distributed.initialize`` from the Slurm step (JAX optional).

>>> import slurmenv.jax
>>> slurmenv.jax.initialize()       # in every task of srun (one process per task)

The coordinator runs on the node of rank 0 at slurmenv's port for the step (``MASTER_PORT``),
so two steps of one job never meet each other's coordinator. jax is imported only by
:func:`initialize`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .resolution import Resolution


def local_device_ids(res: Resolution) -> list[int] | None:
    """The GPUs of this process among those it sees, or None to let JAX take all of them.

    When every task of the node sees all the node's GPUs (``srun --gres=gpu:N`` with several
    tasks per node and no binding), the node's GPUs are split evenly by local rank; when a
    task sees exactly its own share (``--gpus-per-task``, ``--bind-gpus``) or runs alone on
    the node, or the count does not divide, None.
    """
    gpus, tasks = res.gpus, res.local_world_size
    if not gpus or tasks < 2 or len(gpus) < tasks or len(gpus) % tasks:
        return None
    per = len(gpus) // tasks
    return list(range(res.local_rank * per, (res.local_rank + 1) * per))


def initialize_args(resolution: Resolution | None = None, *,
                    environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``coordinator_address``, ``num_processes``, ``process_id`` and ``local_device_ids`` for
    ``jax.distributed.initialize`` (one JAX process per Slurm task)."""
    from . import resolve

    res = resolution if resolution is not None else resolve(environ)
    return {
        "coordinator_address": f"{res.master_addr}:{res.master_port}",
        "num_processes": res.world_size,
        "process_id": res.rank,
        "local_device_ids": local_device_ids(res),
    }


def initialize(resolution: Resolution | None = None, *, environ: Mapping[str, str] | None = None,
               **kwargs: Any) -> Resolution:
    """Call ``jax.distributed.initialize`` with :func:`initialize_args` (``kwargs`` win) and
    return the resolution used."""
    from . import resolve

    res = resolution if resolution is not None else resolve(environ)
    import jax

    jax.distributed.initialize(**{**initialize_args(res), **kwargs})
    return res
