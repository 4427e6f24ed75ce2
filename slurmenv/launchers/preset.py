"""RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand (outside Slurm): reported as
they are; ``torchrun.py`` reads torchrun's workers the same way."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError, parse_int
from .base import Task, Topology, agree, below, job_id, node_sources, optional_int, step_id

NAME = "preset"
REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: Every name read; GROUP_WORLD_SIZE is torchrun's name for the node count.
VARIABLES = REQUIRED + (
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "NNODES",
    "TF_CONFIG", "HOSTNAME", "SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID",
    "SLURM_STEPID",
)
PREFIXES: tuple[str, ...] = ()
TASK_VARIABLES: tuple[str, ...] = ()
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "RANK"), ("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK"),
         ("local_world_size", "LOCAL_WORLD_SIZE"))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {
    "PREFIXES": "every variable read is named in VARIABLES",
    "TASK_VARIABLES": (
        "set by hand, not by a launcher: any rank-like variable makes this module "
        "detect the task, so the fallback never sees one"
    ),
}
#: The names whose values, when set, the launcher fixed (they win as they are).
SET_NAMES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "NNODES", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG",
)


#: Rank-like variables: any one of them set outside every launcher means the user (or an
#: unknown launcher) describes the world by hand: it must then be complete.
RANK_LIKE = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "NNODES",
    "GROUP_WORLD_SIZE",
)
FIX = (
    "set all of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK (or GROUP_RANK), "
    "NNODES (or GROUP_WORLD_SIZE), MASTER_ADDR and MASTER_PORT (as torchrun does), or none of "
    "them for a single process; inside Slurm, run under srun"
)


def detect(environ: Mapping[str, str]) -> bool:
    """Any rank-like variable is set (complete or not: read() refuses what is missing)."""
    return any(environ.get(name) for name in RANK_LIKE)


def read(environ: Mapping[str, str]) -> Task:
    """The hand-set variables, as they are; refused unless they describe the task fully."""
    return read_set(environ, NAME, "the environment", "hand-set variables")


def _missing(environ: Mapping[str, str], world: int | None, local_world: int | None) -> list[str]:
    """What a complete hand-set world lacks. Values follow from others only where they are
    forced: a world of 1 has local rank 0 of 1; all ranks on one node have node rank 0 of 1."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
               if not environ.get(name)]
    if world != 1:
        missing += [name for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if not environ.get(name)]
    one_node = world is not None and (world == 1 or local_world == world)
    if not one_node:
        if not (environ.get("NODE_RANK") or environ.get("GROUP_RANK")):
            missing.append("NODE_RANK")
        if not (environ.get("NNODES") or environ.get("GROUP_WORLD_SIZE")):
            missing.append("NNODES")
    return missing


def read_set(environ: Mapping[str, str], launcher: str, who: str, told: str) -> Task:
    """A task whose variables ``who`` set; ``told`` names it in doctor's sentence.

    Every value is read or forced by what was read (see :func:`_missing`); a partial set is
    refused naming what is missing, and values that contradict each other are refused.
    """

    def number(name: str, minimum: int = 0) -> int | None:
        return optional_int(environ, name, FIX, minimum=minimum)

    world = number("WORLD_SIZE", 1)
    local_world = number("LOCAL_WORLD_SIZE", 1)
    missing = _missing(environ, world, local_world)
    if missing:
        present = [n for n in (*RANK_LIKE, "MASTER_ADDR", "MASTER_PORT") if environ.get(n)]
        raise SlurmEnvError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set, but "
            f"{', '.join(present)} {'is' if len(present) == 1 else 'are'} (set by {who}): "
            "slurmenv does not fill in a partial world by guessing",
            variable=missing[0], value=None, fix=FIX,
        )
    for one, other, minimum in (("GROUP_RANK", "NODE_RANK", 0), ("GROUP_WORLD_SIZE", "NNODES", 1)):
        agree(other, number(other, minimum), one, number(one, minimum), FIX)
    assert world is not None
    rank = number("RANK")
    local_rank = number("LOCAL_RANK")
    local_rank = 0 if local_rank is None else local_rank
    local_world = 1 if local_world is None else local_world
    group_name = "GROUP_RANK" if environ.get("GROUP_RANK") else "NODE_RANK"
    nodes_name = "GROUP_WORLD_SIZE" if environ.get("GROUP_WORLD_SIZE") else "NNODES"
    node_rank = number(group_name)
    nnodes = number(nodes_name, 1)
    forced = "all ranks on one node"
    node_rank = 0 if node_rank is None else node_rank
    nnodes = 1 if nnodes is None else nnodes
    assert rank is not None
    for small, value, big, limit in (
        ("RANK", rank, "WORLD_SIZE", world),
        ("LOCAL_RANK", local_rank, "LOCAL_WORLD_SIZE", local_world),
        (group_name, node_rank, nodes_name, nnodes),
    ):
        below(small, value, big, limit, FIX)
    for small, value in (("LOCAL_WORLD_SIZE", local_world), (nodes_name, nnodes)):
        if value > world:
            raise SlurmEnvError(
                f"{small}={value} is larger than WORLD_SIZE={world}", variable=small,
                value=str(value), fix=FIX,
            )
    parse_int("MASTER_PORT", environ["MASTER_PORT"], minimum=1, fix=FIX)

    def source(name: str, forced_by: str) -> str:
        return f"{name} set by {who}" if environ.get(name) else f"{forced_by} ({who})"

    one = "a world of 1"
    sources = {
        "RANK": source("RANK", ""),
        "WORLD_SIZE": source("WORLD_SIZE", ""),
        "LOCAL_RANK": source("LOCAL_RANK", one),
        "LOCAL_WORLD_SIZE": source("LOCAL_WORLD_SIZE", one),
        **node_sources(source(group_name, forced), source(nodes_name, forced)),
        "MASTER_ADDR": source("MASTER_ADDR", ""),
        "MASTER_PORT": source("MASTER_PORT", ""),
    }
    tf_config = environ.get("TF_CONFIG")
    if tf_config:
        sources["TF_CONFIG"] = f"TF_CONFIG set by {who}"
        import json  # only here: slurmenv export must not pay for it

        try:
            parsed = json.loads(tf_config)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise SlurmEnvError(
                "TF_CONFIG is set but is not a JSON object", variable="TF_CONFIG",
                value=tf_config, fix="unset TF_CONFIG or set it to TensorFlow's JSON form",
            )
    job = job_id(environ)
    inside = f" inside Slurm job {job}" if job else ""
    return Task(
        launcher=launcher, rank=rank, local_rank=local_rank, world_size=world,
        local_world_size=local_world, node_rank=node_rank, nnodes=nnodes,
        hostname=environ.get("SLURMD_NODENAME") or environ.get("HOSTNAME") or "",
        sources=sources, master_host=None, master_source=f"MASTER_ADDR set by {who}",
        port_seed=None, port_seed_source=f"MASTER_PORT set by {who}", reserved_ports=None,
        topology=Topology(), job_id=job, step_id=step_id(environ),
        fixed={name: environ[name] for name in SET_NAMES if environ.get(name)},
        notes=(f"RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT were set by {who}",),
        origin=f"RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT come from {told}{inside}: they win",
        in_worker=True,
    )
