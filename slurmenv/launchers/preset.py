"""RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand (outside Slurm): reported as
they are; ``torchrun.py`` reads torchrun's workers the same way."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError, parse_int, require
from ..options import Options
from .base import Task, Topology, job_id, step_id

NAME = "preset"
REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: Every name read; GROUP_WORLD_SIZE is torchrun's name for the node count.
VARIABLES = REQUIRED + (
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "NNODES",
    "TF_CONFIG", "HOSTNAME",
)
PREFIXES: tuple[str, ...] = ()
#: The names whose values, when set, the launcher fixed (they win as they are).
SET_NAMES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "NNODES", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG",
)


def detect(environ: Mapping[str, str]) -> bool:
    """All of RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set."""
    return all(environ.get(name) for name in REQUIRED)


def read(environ: Mapping[str, str], options: Options) -> Task:
    """The hand-set variables, as they are."""
    return read_set(environ, NAME, "the environment", "hand-set variables")


def read_set(environ: Mapping[str, str], launcher: str, who: str, told: str) -> Task:
    """A task whose variables ``who`` set; ``told`` names it in doctor's sentence."""
    fix = "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together, or none of them"

    def number(name: str, default: int | None = None) -> int:
        if default is not None and not environ.get(name):
            return default
        return parse_int(name, require(environ, name, fix))

    rank, world = number("RANK"), number("WORLD_SIZE", None)
    if rank >= world:
        raise SlurmEnvError(
            f"RANK={rank} is not below WORLD_SIZE={world}", variable="RANK", value=str(rank), fix=fix
        )
    local_world = number("LOCAL_WORLD_SIZE", 1)
    parse_int("MASTER_PORT", environ["MASTER_PORT"], minimum=1)
    sources = {
        name: f"{name} set by {who}"
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT", "NODE_RANK", "GROUP_RANK", "NNODES")
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
    group_rank = number("GROUP_RANK", 0) if environ.get("GROUP_RANK") else number("NODE_RANK", 0)
    nnodes = number("GROUP_WORLD_SIZE", 0) or number("NNODES", 0) or max(1, world // local_world)
    job = job_id(environ)
    inside = f" inside Slurm job {job}" if job else ""
    return Task(
        launcher=launcher, rank=rank, local_rank=number("LOCAL_RANK", 0), world_size=world,
        local_world_size=local_world, node_rank=group_rank, nnodes=nnodes,
        hostname=environ.get("SLURMD_NODENAME") or environ.get("HOSTNAME") or "",
        sources=sources, master_host=None, master_source=f"MASTER_ADDR set by {who}",
        port_seed=None, port_seed_source=f"MASTER_PORT set by {who}", reserved_ports=None,
        topology=Topology(), job_id=job, step_id=step_id(environ),
        fixed={name: environ[name] for name in SET_NAMES if environ.get(name)},
        notes=(f"RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT were set by {who}",),
        origin=f"RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT come from {told}{inside}: they win",
        in_worker=True,
    )
