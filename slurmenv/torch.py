"""PyTorch helper: ``torch.distributed.init_process_group`` from the Slurm step (torch optional).

>>> import slurmenv.torch
>>> res = slurmenv.torch.init_process_group()   # in every task of srun, or under torchrun

torch is imported only when the function is called; slurmenv does not depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .resolution import Resolution


def device_index(local_rank: int, visible: int) -> int:
    """The CUDA device of a local rank among the ``visible`` devices this task sees (never a
    global GPU number): ``k`` when it exists, else ``k % visible``; 0 when it sees one."""
    if visible < 1:
        raise ValueError("no visible device")
    return local_rank if local_rank < visible else local_rank % visible


def init_process_group(backend: str | None = None, *, resolution: Resolution | None = None,
                       environ: Mapping[str, str] | None = None, **kwargs: Any) -> Resolution:
    """Join this task's process group and return the :class:`~slurmenv.Resolution` used:
    resolve (``slurmenv.resolve(environ)`` unless ``resolution`` is given), set ``RANK``,
    ``MASTER_ADDR``, ... in ``os.environ`` where unset, select this local rank's CUDA device
    (:func:`device_index`), then ``torch.distributed.init_process_group(backend,
    init_method="env://", rank=..., world_size=..., **kwargs)``; ``backend`` defaults to
    ``nccl`` with CUDA, else ``gloo``. SlurmEnvError before torch is touched when the step
    cannot be resolved (in the batch script, outside ``srun``)."""
    from . import resolve

    res = resolution if resolution is not None else resolve(environ)
    res.apply(for_="torch")

    import torch
    import torch.distributed as dist

    cuda = bool(torch.cuda.is_available())
    if backend is None:
        backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(device_index(res.local_rank, torch.cuda.device_count()))
    kwargs.setdefault("init_method", "env://")
    dist.init_process_group(backend, rank=res.rank, world_size=res.world_size, **kwargs)
    return res
