"""Another launcher already set the variables (``torchrun`` inside ``srun``, for example).

Its values win; slurmenv reports them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._compat import TYPE_CHECKING
from ..errors import SlurmEnvError, parse_int, require
from ..resolution import Resolution

if TYPE_CHECKING:
    from typing import Any

REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# Variables by which launchers announce themselves.
MARKERS = {"TORCHELASTIC_RUN_ID": "torchrun"}


def marker(environ: Mapping[str, str]) -> str | None:
    """The name of the launcher that set the variables, if it announced itself."""
    for variable, name in MARKERS.items():
        if environ.get(variable):
            return name
    return None


def is_present(environ: Mapping[str, str]) -> bool:
    """All of RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set."""
    return all(environ.get(name) for name in REQUIRED)


def resolve(environ: Mapping[str, str], tf_chief: bool = False) -> Resolution:
    """Report what the other launcher set."""
    fix = "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together, or none of them"
    who = marker(environ) or "the environment"

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
    port = parse_int("MASTER_PORT", environ["MASTER_PORT"], minimum=1)
    sources = {
        name: f"{name} set by {who}"
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT", "NODE_RANK", "GROUP_RANK", "NNODES")
    }
    tf_config = environ.get("TF_CONFIG")
    tf_fn = None
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

        def tf_fn() -> dict[str, Any]:
            # A fresh copy each time: the Resolution stays immutable.
            return json.loads(tf_config)  # type: ignore[no-any-return]
    group_rank = number("GROUP_RANK", 0) if environ.get("GROUP_RANK") else number("NODE_RANK", 0)
    nnodes = number("GROUP_WORLD_SIZE", 0) or number("NNODES", 0) or max(1, world // local_world)
    return Resolution(
        launcher=who if who != "the environment" else "preset",
        rank=rank, local_rank=number("LOCAL_RANK", 0), world_size=world,
        local_world_size=local_world, node_rank=group_rank, nnodes=nnodes,
        master_addr=environ["MASTER_ADDR"], master_port=port,
        hostname=environ.get("SLURMD_NODENAME") or environ.get("HOSTNAME") or "",
        job_id=environ.get("SLURM_JOB_ID"), step_id=environ.get("SLURM_STEP_ID"),
        sources=sources, notes=[f"RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT were set by {who}"],
        tf_chief=tf_chief, tf_config=tf_fn,
    )
