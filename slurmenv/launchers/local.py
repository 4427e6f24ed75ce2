"""No launcher: a single process on this machine (rank 0 of 1, on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from .. import ports
from ..errors import SlurmEnvError
from ..options import Options
from ..resolution import Resolution, Topology


def free_port(port_range: tuple[int, int], avoid: int = 0) -> int:
    """A TCP port of ``port_range`` that is free on 127.0.0.1 right now.

    Chosen in the range (below the ephemeral range) rather than by the kernel, which would
    pick one inside the ephemeral range. The search starts at a point derived from the PID.
    """
    lo, hi = port_range
    span = hi - lo + 1
    start = os.getpid() * 7919 % span
    for k in range(span):
        port = lo + (start + k) % span
        if port == avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SlurmEnvError(
        f"no free port on 127.0.0.1 in {lo}-{hi}", variable="SLURMENV_PORT_RANGE",
        value=f"{lo}-{hi}", fix="give another range with SLURMENV_PORT_RANGE or --port-range",
    )


class LocalTopology(Topology):
    """One node, one rank."""

    def __init__(self, tf_port: int) -> None:
        self.tf_port = tf_port

    def hosts(self) -> list[str]:
        return ["127.0.0.1"]

    def node_of(self) -> list[int]:
        return [0]

    def local_of(self) -> list[int]:
        return [0]

    def tf_workers(self) -> list[str]:
        return [f"127.0.0.1:{self.tf_port}"]


def resolve(
    environ: Mapping[str, str],
    options: Options,
    ephemeral: tuple[int, int] | None,
    launcher: str = "local",
) -> Resolution:
    """Rank 0 of a world of 1: what a script started by hand outside any launcher needs."""
    if options.port is not None:
        port, why = options.port, "given port (--port or SLURMENV_PORT)"
    elif environ.get("MASTER_PORT"):
        port = ports.parse_port(environ["MASTER_PORT"], "MASTER_PORT")
        why = f"MASTER_PORT={port} already set (it wins)"
    else:
        port, why = free_port(options.port_range), "a port free on 127.0.0.1 now (single process)"
    tf_port = free_port(options.port_range, avoid=port)
    where = "not inside a Slurm step" if launcher == "local" else "Slurm interactive step"
    sources = {
        "RANK": f"{where}: single process",
        "LOCAL_RANK": f"{where}: single process",
        "WORLD_SIZE": f"{where}: single process",
        "LOCAL_WORLD_SIZE": f"{where}: single process",
        "NODE_RANK": f"{where}: single node",
        "GROUP_RANK": f"{where}: single node",
        "NNODES": f"{where}: single node",
        "MASTER_ADDR": "loopback (single process)",
        "MASTER_PORT": why,
        "TF_CONFIG": f"one worker on 127.0.0.1:{tf_port}",
    }
    return Resolution(
        launcher=launcher, rank=0, local_rank=0, world_size=1, local_world_size=1,
        node_rank=0, nnodes=1, master_addr="127.0.0.1", master_port=port,
        hostname=socket.gethostname(), job_id=environ.get("SLURM_JOB_ID"),
        step_id=environ.get("SLURM_STEP_ID"), sources=sources, tf_chief=options.tf_chief,
        topology=LocalTopology(tf_port),
    )
