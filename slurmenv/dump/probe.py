"""The facts of this node that ``slurmenv doctor`` checks, the only code of the doctor's that
touches the machine: DNS for the master, the kernel's route to it, the network interfaces and
listening sockets (psutil), the CPUs. ``slurmenv dump --probe`` records them and
``doctor --from`` replays the checks on them anywhere, so they live here, below both.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from .. import resolve, tfconfig
from ..errors import SlurmEnvError
from ..resolution import Resolution

#: Every node fact the probe records: a new one is gathered in :func:`_facts` and named here.
FACTS = ("hostname", "cpus", "interfaces", "master", "route", "listening", "lightning")
#: The facts of the first probe (slurmenv 0.1.0), which left out ``master``, ``route`` and
#: ``listening`` when they did not apply. Every later fact is always written (None when it does
#: not apply), so a dump without one was recorded before it existed. Never extended.
FIRST_FACTS = ("hostname", "cpus", "interfaces", "master", "route", "listening")


def resolve_for_doctor(
    environ: Mapping[str, str], options: Mapping[str, Any]
) -> tuple[Resolution | None, SlurmEnvError | None]:
    """Resolve without DNS and without the ephemeral check: doctor makes both itself."""
    opts = {k: v for k, v in options.items() if v is not None}
    opts["resolve_addr"] = False
    try:
        return resolve(environ, ephemeral_range=None, **opts), None
    except SlurmEnvError as exc:
        return None, exc
    except ValueError as exc:  # a TF_CONFIG set by hand that is not JSON
        return None, SlurmEnvError(
            f"TF_CONFIG is set but is not JSON ({exc})", variable="TF_CONFIG",
            value=environ.get("TF_CONFIG"), fix="unset TF_CONFIG and let slurmenv build it",
        )


def ports_here(res: Resolution) -> list[tuple[int, str]]:
    """The ports this node's tasks will listen on: ``(port, what)``."""
    try:
        node_of: Sequence[int] = res.node_of
        master_here = node_of[0] == res.node_rank
        ranks = [r for r, n in enumerate(node_of) if n == res.node_rank]
    except SlurmEnvError:
        master_here, ranks = res.rank == 0, [res.rank]
    out = [(res.master_port, "MASTER_PORT, rank 0")] if master_here else []
    try:
        addresses = res.tf_addresses
    except SlurmEnvError:
        return out
    for rank in ranks:
        port = tfconfig.port_of(addresses[rank]) if rank < len(addresses) else None
        if port is not None:
            out.append((port, f"TensorFlow, rank {rank}"))
    return out


def probe(environ: Mapping[str, str] | None = None, options: Mapping[str, Any] | None = None,
          res: Resolution | None = None) -> dict[str, Any]:
    """This node's facts, JSON-ready, keyed by ``FACTS``: each fact added after
    ``FIRST_FACTS`` is always there (None when it does not apply)."""
    env = os.environ if environ is None else environ
    if res is None:
        res, _ = resolve_for_doctor(env, options or {})
    facts = _facts(res)
    for name in FACTS:
        if name not in FIRST_FACTS:
            facts.setdefault(name, None)
    return facts


def _facts(res: Resolution | None) -> dict[str, Any]:
    facts: dict[str, Any] = {"hostname": socket.gethostname(), "cpus": cpus(),
                             "interfaces": interfaces(), "lightning": _lightning()}
    if res is None:
        return facts
    facts["master"] = _lookup(res.master_addr)
    addresses = facts["master"]["addresses"]
    if addresses:
        facts["route"] = _route(addresses[0], res.master_port, facts["interfaces"])
    facts["listening"] = _listening([port for port, _ in ports_here(res)], res.job_id, res.step_id)
    return facts


def _lightning() -> bool:
    """Whether Lightning is installed for this Python (found, not imported)."""
    import importlib.util

    return any(importlib.util.find_spec(p) is not None for p in ("lightning", "pytorch_lightning"))


def cpus() -> dict[str, int | None]:
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"affinity": affinity, "count": os.cpu_count()}


def interfaces() -> dict[str, list[str]]:
    """Each network interface's IP addresses (psutil)."""
    import psutil

    ip = (socket.AF_INET, socket.AF_INET6)
    return {name: [a.address.split("%")[0] for a in addrs if a.family in ip]
            for name, addrs in psutil.net_if_addrs().items()}


def _lookup(name: str) -> dict[str, Any]:
    """The addresses ``name`` resolves to on this node (IPv4 first), or the error."""
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:  # UnicodeError: a label IDNA refuses (checked
        return {"name": name, "addresses": [], "error": str(exc)}  # before, as a backstop)
    addresses: list[str] = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for info in infos:
            address = str(info[4][0])
            if info[0] == family and address not in addresses:
                addresses.append(address)
    return {"name": name, "addresses": addresses, "error": None}


def _route(address: str, port: int, interfaces: Mapping[str, list[str]]) -> dict[str, Any]:
    """The local address (and interface) the kernel would use to reach ``address`` (a UDP
    ``connect`` picks the route without sending anything)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, port))
            source = str(sock.getsockname()[0])
    except OSError as exc:
        return {"address": address, "source": None, "interface": None, "error": str(exc)}
    interface = next((name for name, addrs in interfaces.items() if source in addrs), None)
    return {"address": address, "source": source, "interface": interface, "error": None}


def _listening(
    ports: Sequence[int], job_id: str | None, step_id: str | None
) -> list[dict[str, Any]]:
    """Listening TCP sockets on ``ports`` in this network namespace, with their owner."""
    import psutil

    if not ports:
        return []
    wanted = set(ports)
    found = []
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port not in wanted:
            continue
        entry: dict[str, Any] = {
            "port": conn.laddr.port, "address": conn.laddr.ip, "pid": conn.pid,
            "process": None, "same_step": None, "rank": None,
        }  # fmt: skip
        if conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                entry["process"] = proc.name()
                env = proc.environ()
                entry["same_step"] = bool(job_id) and (
                    env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
                ) == (job_id, step_id)
                entry["rank"] = env.get("SLURM_PROCID")
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
                pass
        found.append(entry)
    return sorted(found, key=lambda e: (e["port"], str(e["address"])))
