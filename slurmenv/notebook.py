"""Notebooks: ipyparallel engines started in a Slurm job, one training process each.

Each engine is an ordinary task of its launcher (``srun ipengine``, ipyparallel's Slurm or MPI
engine launcher), so ``slurmenv.resolve().apply()`` in a ``%%px`` cell gives it its own rank.
What a notebook cannot see is whether the engines it holds form **one** world: engines of two
steps (two ``srun ipengine``, or an engine job started twice) would each join their own step's
world, and every cell would still "work". :func:`check_engines` refuses that.

ipyparallel is never imported here: the caller passes its view (``rc[:]``).
"""

from __future__ import annotations

from typing import Any

from .errors import SlurmEnvError

__all__ = ["check_engines", "describe"]


def describe(for_: str = "torch") -> dict[str, Any]:
    """This engine's place, as slurmenv resolves it (runs in the engine)."""
    import socket

    from . import resolve

    res = resolve()
    return {
        "rank": res.rank, "world_size": res.world_size, "local_rank": res.local_rank,
        "launch": f"{res.label}", "job_id": res.job_id, "step_id": res.step_id,
        "master": f"{res.master_addr}:{res.master_port}", "host": socket.gethostname(),
    }


def check_engines(view: Any) -> list[dict[str, Any]]:
    """Each engine's place (``describe``, rank order), after checking that the engines of
    ``view`` form exactly one world: one launch, one ``MASTER_ADDR:MASTER_PORT``, and ranks
    ``0 … n-1`` each once, ``n`` being the number of engines. Raises SlurmEnvError otherwise
    (engines of several steps, or only part of a step's tasks connected)."""
    places = list(view.apply_sync(describe))
    launches = sorted({(p["launch"], p["master"]) for p in places})
    ranks = sorted(p["rank"] for p in places)
    worlds = sorted({p["world_size"] for p in places})
    fix = ("connect the notebook to the engines of one launch only (one srun ipengine, one engine "
           "job), or select them: rc[ids] with the ids of one launch")
    if len(launches) > 1:
        shown = "; ".join(f"{label} at {master}" for label, master in launches)
        raise SlurmEnvError(
            f"the {len(places)} engines belong to {len(launches)} launches ({shown}): each "
            "would train in a world of its own", variable="SLURM_STEP_ID",
            value=",".join(sorted({str(p['step_id']) for p in places})), fix=fix,
        )
    if worlds != [len(places)] or ranks != list(range(len(places))):
        raise SlurmEnvError(
            f"the {len(places)} engines hold ranks {ranks} of a world of "
            f"{', '.join(map(str, worlds))}: some of its ranks are not engines of this view, "
            "so init_process_group would wait for them", variable="WORLD_SIZE",
            value=",".join(map(str, worlds)), fix=fix,
        )
    return sorted(places, key=lambda p: int(p["rank"]))
