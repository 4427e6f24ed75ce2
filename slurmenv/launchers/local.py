"""No launcher: a single process on this machine (rank 0 of 1, on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError
from .base import Task, Topology, node_sources

NAME = "local"
VARIABLES: tuple[str, ...] = ()
PREFIXES: tuple[str, ...] = ()
TASK_VARIABLES: tuple[str, ...] = ()
WHY_EMPTY = {
    "VARIABLES": "it reads no variable: it is what no launcher variable gives",
    "PREFIXES": "it reads no variable",
    "TASK_VARIABLES": "no launcher starts it: it is the default when none of the others' is set",
    "WORLD": "a single process: no variable tells its place",
}
#: The single-process fallback: refused when /proc shows a scrubbed Slurm step
#: (pipeline.resolve, evidence.py); the only launcher that pays for reading /proc.
FALLBACK = True
WORLD: tuple[tuple[str, str], ...] = ()
ENCLOSED_BY: tuple[str, ...] = ()


class LocalTopology(Topology):
    """One node, one rank; its TensorFlow port is the one ``derive`` found free."""

    layout_known = True

    def largest_local(self) -> int:
        return 1

    def hosts(self) -> list[str]:
        return ["127.0.0.1"]

    def node_of(self) -> list[int]:
        return [0]

    def local_of(self) -> list[int]:
        return [0]

    def tf_workers(self) -> list[str]:
        return [f"127.0.0.1:{self.port_plan.tf[0]}"]

    def tf_source(self) -> str:
        return f"one worker on 127.0.0.1:{self.port_plan.tf[0]}"


def detect(environ: Mapping[str, str]) -> bool:
    """The last resort of the registry: always."""
    return True


def single_process(
    environ: Mapping[str, str], launcher: str, where: str, origin: str, origin_fix: str | None
) -> Task:
    """Rank 0 of a world of 1 on 127.0.0.1; ``where`` says why (for ``sources``)."""
    import socket  # only here: the world guard imports this module for every world of one

    sources = {
        "RANK": f"{where}: single process",
        "LOCAL_RANK": f"{where}: single process",
        "WORLD_SIZE": f"{where}: single process",
        "LOCAL_WORLD_SIZE": f"{where}: single process",
        **node_sources(f"{where}: single node", f"{where}: single node"),
        "MASTER_ADDR": "loopback (single process)",
    }
    return Task(
        launcher=launcher, rank=0, local_rank=0, world_size=1, local_world_size=1,
        node_rank=0, nnodes=1, hostname=socket.gethostname(), sources=sources,
        master_host="127.0.0.1", master_source="loopback (single process)",
        port_seed=None, port_seed_source="a single process: a free port is chosen",
        reserved_ports=None, topology=LocalTopology(),
        job_id=environ.get("SLURM_JOB_ID"), step_id=environ.get("SLURM_STEP_ID"),
        fixed={"MASTER_ADDR": "127.0.0.1"}, origin=origin, origin_fix=origin_fix,
        free_port=True,
    )


def stray(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, launchers) of the first variable set here that only a launcher sets in the
    processes it starts (each launcher module's ``TASK_VARIABLES``; ``launchers`` names every
    module that declares it, ``pals or hydra``), or None.

    Reached only when no launcher detected the task: such a variable then means that a
    launcher started this process but part of its variables was lost (a container passing
    some of them, ``env -i``), and a single process would train alone. Settings users keep in
    their profiles (``SLURM_CONF``, ``OMPI_MCA_btl``, ``I_MPI_FABRICS``) are not listed."""
    from . import REGISTRY, load  # every launcher module: this is not an srun task's path

    owners: dict[str, list[str]] = {}
    for name in REGISTRY:
        module = load(name)
        for variable in module.TASK_VARIABLES:  # required of every launcher (the contract)
            owners.setdefault(variable, []).append(str(module.NAME))
    for variable, names in owners.items():
        if variable in environ:
            return variable, " or ".join(names)
    return None


def read(environ: Mapping[str, str]) -> Task:
    """Rank 0 of a world of 1: what a script started by hand outside any launcher needs;
    refused when a variable only a launcher sets is present (:func:`stray`)."""
    found = stray(environ)
    if found is not None:
        variable, launcher = found
        raise SlurmEnvError(
            f"{variable} is set, a variable that only a launcher ({launcher}) sets in the "
            "processes it starts, but the rest of that launcher's variables is missing (or "
            "this is its job script, not one of its tasks): as a single process, every task "
            "would train alone",
            variable=variable, value=environ[variable],
            fix="run slurmenv in each task the launcher starts and keep all of its variables "
            "there (a container or env -i that passes only some of them loses the others; "
            f"apptainer exec without --cleanenv), or unset {variable} to run a single process",
        )
    return single_process(
        environ, NAME, "not inside a Slurm step",
        origin="not inside a Slurm job: slurmenv gives a single process (rank 0 of 1 on "
        "127.0.0.1)",
        origin_fix="run it where the training runs: srun slurmenv doctor (or replay a dump: "
        "--from FILE)",
    )
