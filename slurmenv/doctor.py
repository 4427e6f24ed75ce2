"""``slurmenv doctor``: why distributed training might hang at start-up, checked in one task.

Each check gives a verdict (``ok``, ``warning``, ``error``; ``skipped`` when it cannot be
made here) and, when something is wrong, a one-line fix. The exit status is 0 when no check
gives an error.

The checks are split in two halves so that a dump can be replayed anywhere:

* :func:`probe` looks at this node (the only DNS lookup, psutil, the kernel's routing): the
  master's address as this node resolves it, the interface that reaches it, which of the
  step's ports are already listening here, the CPUs this task may use;
* :func:`diagnose` turns an environment, the options and those facts into verdicts, without
  touching the machine (so ``doctor --from FILE`` gives the same verdicts on a laptop).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from . import nodes, resolve, tfconfig
from .errors import SlurmEnvError
from .launchers import base, outside_step
from .options import names as option_names
from .resolution import Resolution
from .show import (
    bound_per_task,
    count_list,
    host_of,
    node_gpus,
    port_of,
    rank_addresses,
)

OK, WARNING, ERROR, SKIPPED = "ok", "warning", "error", "skipped"
VERDICTS = (OK, WARNING, ERROR, SKIPPED)

#: The checks, in the order they are printed: name -> label.
CHECKS = {
    "step": "step",
    "counts": "counts",
    "master-name": "master name",
    "interface": "interface",
    "ports": "ports",
    "proxy": "proxy",
    "gpus": "GPUs",
    "threads": "threads",
    "tf-config": "TF_CONFIG",
    "lightning": "Lightning",
}
GRPC_PROXIES = ("grpc_proxy", "https_proxy", "http_proxy")  # gRPC's order (lowercase only)
GRPC_NO_PROXIES = ("no_grpc_proxy", "no_proxy")
OTHER_PROXIES = ("HTTPS_PROXY", "HTTP_PROXY")
ALL_PROXIES = GRPC_PROXIES + OTHER_PROXIES
NOT_PROBED = "not probed: this dump was taken without 'slurmenv dump --probe'"
NO_RESOLUTION = "needs a resolution (see above)"


class Check(NamedTuple):
    """One verdict: ``name`` is a key of CHECKS, ``fix`` one sentence (None when all is well)."""

    name: str
    verdict: str
    message: str
    fix: str | None = None


class Report(NamedTuple):
    """All checks of one task, with a title saying which task it is."""

    title: str
    checks: list[Check]
    ifname: dict[str, str] | None  # NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME that would follow

    @property
    def errors(self) -> int:
        return sum(c.verdict == ERROR for c in self.checks)

    @property
    def warnings(self) -> int:
        return sum(c.verdict == WARNING for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "checks": [c._asdict() for c in self.checks],
            "errors": self.errors,
            "warnings": self.warnings,
            "ifname": self.ifname,
        }


# -- resolution as doctor needs it ---------------------------------------------------------
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
        addresses = rank_addresses(res)
    except SlurmEnvError:
        return out
    for rank in ranks:
        port = port_of(addresses[rank]) if rank < len(addresses) else None
        if port is not None:
            out.append((port, f"TensorFlow, rank {rank}"))
    return out


# -- probe: the facts of this node ---------------------------------------------------------
def probe(
    environ: Mapping[str, str] | None = None,
    options: Mapping[str, Any] | None = None,
    res: Resolution | None = None,
) -> dict[str, Any]:
    """Look at this node: DNS for the master, the route to it, listening ports, CPUs.

    The result is JSON-ready (``slurmenv dump --probe`` records it).
    """
    import socket

    env = os.environ if environ is None else environ
    if res is None:
        res, _ = resolve_for_doctor(env, options or {})
    facts: dict[str, Any] = {"hostname": socket.gethostname(), "cpus": _cpus()}
    facts["interfaces"] = _interfaces()
    if res is None:
        return facts
    facts["master"] = _lookup(res.master_addr)
    addresses = facts["master"]["addresses"]
    if addresses:
        facts["route"] = _route(addresses[0], res.master_port, facts["interfaces"])
    facts["listening"] = _listening(
        [port for port, _ in ports_here(res)], res.job_id, res.step_id
    )
    return facts


def _cpus() -> dict[str, int | None]:
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"affinity": affinity, "count": os.cpu_count()}


def _interfaces() -> dict[str, list[str]]:
    import socket

    import psutil

    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        out[name] = [
            a.address.split("%")[0]
            for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
        ]
    return out


def _lookup(name: str) -> dict[str, Any]:
    """The addresses ``name`` resolves to on this node (IPv4 first), or the error."""
    import socket

    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        return {"name": name, "addresses": [], "error": str(exc)}
    addresses: list[str] = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for info in infos:
            address = str(info[4][0])
            if info[0] == family and address not in addresses:
                addresses.append(address)
    return {"name": name, "addresses": addresses, "error": None}


def _route(address: str, port: int, interfaces: Mapping[str, list[str]]) -> dict[str, Any]:
    """The local address (and interface) the kernel would use to reach ``address``.

    A UDP ``connect`` picks the route without sending anything.
    """
    import socket

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


# -- diagnose: verdicts from environment, options and facts --------------------------------
_STEP_VARIABLES = ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOB_ID")
_OPTION_VARIABLES = option_names()  # every SLURMENV_* variable and flag of the options table
_PORT_VARIABLES = ("MASTER_PORT", "SLURMENV_PORT", "SLURM_STEP_RESV_PORTS")


def diagnose(
    environ: Mapping[str, str],
    options: Mapping[str, Any] | None = None,
    *,
    ephemeral: tuple[int, int] | None = None,
    facts: Mapping[str, Any] | None = None,
    for_: str = "all",
) -> Report:
    """Every check for the task whose environment is ``environ``.

    ``facts`` is what :func:`probe` found on the node (None: the node-local checks are
    skipped); ``ephemeral`` the node's ephemeral port range (None: unknown).
    """
    opts = dict(options or {})
    res, err = resolve_for_doctor(environ, opts)
    ctx = _Context(environ, opts, res, err, ephemeral, facts, for_)
    checks = [
        _check_step(ctx), _check_counts(ctx), _check_master_name(ctx), _check_interface(ctx),
        _check_ports(ctx), _check_proxy(ctx), _check_gpus(ctx), _check_threads(ctx),
        _check_tf_config(ctx),
        _check_lightning(ctx),
    ]  # fmt: skip
    return Report(_title(ctx), checks, ctx.ifname())


class _Context:
    """What every check looks at."""

    def __init__(
        self,
        environ: Mapping[str, str],
        options: Mapping[str, Any],
        res: Resolution | None,
        err: SlurmEnvError | None,
        ephemeral: tuple[int, int] | None,
        facts: Mapping[str, Any] | None,
        for_: str,
    ) -> None:
        self.environ = environ
        self.options = options
        self.res = res
        self.err = err
        self.ephemeral = ephemeral
        self.facts = facts
        self.for_ = for_
        self.job = base.job_id(environ)
        self.step = base.step_id(environ)

    @property
    def node(self) -> str:
        if self.res is not None and self.res.hostname:
            return self.res.hostname
        if self.facts and self.facts.get("hostname"):
            return str(self.facts["hostname"])
        return self.environ.get("SLURMD_NODENAME") or "this node"

    def outside_step(self) -> bool:
        """In a Slurm job's batch script or salloc shell (no step of its own), and no launcher
        resolved this task there."""
        return self.res is None and base.outside_step(self.environ)

    def err_category(self) -> str | None:
        if self.err is None:
            return None
        variable = self.err.variable or ""
        if variable in _STEP_VARIABLES and self.outside_step():
            return "step"
        if variable in _PORT_VARIABLES:
            return "ports"
        if variable == "TF_CONFIG":
            return "tf-config"
        if variable in _OPTION_VARIABLES:
            return "options"
        return "counts"

    def route(self) -> Mapping[str, Any] | None:
        return None if self.facts is None else self.facts.get("route")

    def ifname(self) -> dict[str, str] | None:
        """The NCCL/GLOO interface variables that follow from the route to the master."""
        route = self.route()
        if not route or not route.get("interface"):
            return None
        name = str(route["interface"])
        if name == "lo" and self.res is not None and self.res.nnodes > 1:
            return None
        interfaces = (self.facts or {}).get("interfaces", {})
        # NCCL takes prefixes: use "=name" when another interface starts with this name.
        exact = any(other != name and other.startswith(name) for other in interfaces)
        return {"NCCL_SOCKET_IFNAME": f"={name}" if exact else name, "GLOO_SOCKET_IFNAME": name}

    def skipped_local(self, what: str) -> Check:
        return Check(what, SKIPPED, NOT_PROBED)

    def no_resolution(self, what: str) -> Check:
        """The verdict of a check that needs a resolution when there is none."""
        reason = "no job step" if self.err_category() == "step" else NO_RESOLUTION
        return Check(what, SKIPPED, reason)


def _title(ctx: _Context) -> str:
    res = ctx.res
    if res is not None:
        return f"rank {res.rank} of {res.world_size} on {ctx.node} ({res.label})"
    if ctx.job:
        where = "outside any step" if ctx.outside_step() else f"step {ctx.step}"
        return f"job {ctx.job}, {where}, on {ctx.node}"
    return f"on {ctx.node}"


def _from_error(name: str, exc: SlurmEnvError) -> Check:
    variable = f" ({exc.variable}={exc.value!r})" if exc.variable else ""
    return Check(name, ERROR, exc.message + variable, exc.fix)


def _check_step(ctx: _Context) -> Check:
    env = ctx.environ
    res = ctx.res
    if res is None:
        if ctx.outside_step():
            nodes_ = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "?"
            return Check(
                "step", ERROR,
                f"inside job {ctx.job} ({env.get('SLURM_NTASKS', '?')} tasks on {nodes_}) but "
                "outside any job step: the batch script or an salloc shell, where every task "
                "would get rank 0",
                outside_step.OUTSIDE_STEP_FIX + "; run the doctor there too: srun slurmenv doctor",
            )
        if ctx.job is not None:
            return Check("step", OK, f"a task of job step {ctx.job}.{ctx.step} (srun)")
        return ctx.no_resolution("step")
    if res.origin_fix is not None:
        return Check("step", WARNING, res.origin, res.origin_fix)
    if res.in_worker:
        return Check("step", OK, res.origin)
    return Check("step", OK, f"{res.origin}: rank {res.rank} of {res.world_size}")


def _check_counts(ctx: _Context) -> Check:
    category = ctx.err_category()
    if ctx.err is not None and category in ("counts", "options"):
        return _from_error("counts", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("counts")
    if res.tasks_per_node is None:
        return Check(
            "counts", OK,
            f"rank {res.rank} of {res.world_size}, local rank {res.local_rank} of "
            f"{res.local_world_size}, {res.nnodes} node(s) ({res.launcher})",
        )
    env = ctx.environ
    name = res.layout_name
    layout = f", {name} layout" if name else ""
    counts_from = res.sources.get("LOCAL_WORLD_SIZE", "").partition(" at ")[0]
    own_from = "/".join(
        res.sources.get(key, "").partition("=")[0] for key in ("NODE_RANK", "LOCAL_RANK")
    )
    message = (
        f"{res.world_size} tasks on {res.nnodes} nodes ({counts_from}{layout}); this task: node "
        f"{res.node_rank} ({res.hostname}), local rank {res.local_rank} of "
        f"{res.local_world_size}, as {own_from}"
        + ("/SLURM_GTIDS" if env.get("SLURM_GTIDS") else "") + " say"
    )
    job_tasks = env.get("SLURM_NTASKS")
    if job_tasks and job_tasks != str(res.world_size):
        message += f"; the job has {job_tasks} tasks, this step {res.world_size}"
    if res.notes:
        message += "; " + "; ".join(res.notes)
    return Check("counts", OK, message)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _template_fix(ctx: _Context) -> str:
    template = ctx.options.get("addr_template") or ctx.environ.get("SLURMENV_ADDR_TEMPLATE")
    if template:
        return (
            f"the address template {template!r} (SLURMENV_ADDR_TEMPLATE/--addr-template) makes a "
            "name this node cannot resolve: fix or drop it"
        )
    return "node names must resolve on every node (DNS or /etc/hosts); otherwise give a name " \
        "that does with --addr-template/SLURMENV_ADDR_TEMPLATE (e.g. '{host}-ib')"


def _check_master_name(ctx: _Context) -> Check:
    res = ctx.res
    if res is None:
        return ctx.no_resolution("master-name")
    if ctx.facts is None:
        return ctx.skipped_local("master-name")
    found = ctx.facts.get("master") or {}
    name = res.master_addr
    if found.get("name") not in (None, name):
        return Check(
            "master-name", SKIPPED,
            f"the probe looked up {found.get('name')!r}, not {name!r} (other options?)",
        )
    addresses = list(found.get("addresses") or [])
    if not addresses:
        return Check(
            "master-name", ERROR,
            f"MASTER_ADDR {name} does not resolve on {ctx.node} ({found.get('error')}): every "
            "task would fail to reach rank 0",
            _template_fix(ctx),
        )
    shown = ", ".join(addresses)
    is_address = name in addresses
    what = f"MASTER_ADDR {name} is an address" if is_address else f"{name} resolves here to {shown}"
    if res.nnodes > 1 and _is_loopback(addresses[0]):
        return Check(
            "master-name", ERROR,
            f"{what}: a loopback address, which other nodes cannot reach (gloo and NCCL pick "
            "their interface from it)",
            "make the node's name resolve to its network address in /etc/hosts (not 127.0.1.1), "
            "or use --addr-template/SLURMENV_ADDR_TEMPLATE for a name that does",
        )
    return Check("master-name", OK, what)


def nccl_allows(value: str, interface: str) -> bool:
    """Whether ``NCCL_SOCKET_IFNAME=value`` lets NCCL use ``interface``.

    NCCL reads a comma list of prefixes; a leading ``^`` excludes them, a leading ``=`` (after
    ``^`` if any) makes them exact names.
    """
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    names = [part.strip().split(":")[0] for part in text.split(",") if part.strip()]
    match = any(interface == n if exact else interface.startswith(n) for n in names)
    return not match if exclude else match


def gloo_allows(value: str, interface: str) -> bool:
    """Whether ``GLOO_SOCKET_IFNAME=value`` (exact names, comma-separated) includes it."""
    return interface in [part.strip() for part in value.split(",")]


def _check_interface(ctx: _Context) -> Check:
    res = ctx.res
    if res is None:
        return ctx.no_resolution("interface")
    if ctx.facts is None:
        return ctx.skipped_local("interface")
    route = ctx.route()
    if not route:
        return Check("interface", SKIPPED, "the master's address is unknown (see master name)")
    if route.get("error") or not route.get("source"):
        return Check(
            "interface", ERROR,
            f"no route from {ctx.node} to the master {route.get('address')}: {route.get('error')}",
            "the master's name resolves to an address this node cannot reach: check "
            "--addr-template/SLURMENV_ADDR_TEMPLATE and the node's network",
        )
    name, source = route.get("interface") or "?", route["source"]
    reach = f"{name} ({source}) reaches the master {route['address']}"
    if name == "lo" and res.nnodes > 1:
        return Check(
            "interface", ERROR,
            f"{reach}: loopback, which tasks on other nodes cannot use",
            "make the master's name resolve to its network address (see master name)",
        )
    wanted = ctx.ifname()
    problems = []
    nccl, gloo = ctx.environ.get("NCCL_SOCKET_IFNAME"), ctx.environ.get("GLOO_SOCKET_IFNAME")
    if nccl and name != "?" and not nccl_allows(nccl, name):
        problems.append(f"NCCL_SOCKET_IFNAME={nccl} excludes {name}")
    if gloo and name != "?" and not gloo_allows(gloo, name):
        problems.append(f"GLOO_SOCKET_IFNAME={gloo} does not name {name}")
    follow = " ".join(f"{k}={v}" for k, v in (wanted or {}).items())
    if problems:
        return Check(
            "interface", ERROR, f"{reach}, but " + " and ".join(problems),
            f"export {follow} (slurmenv doctor --export-ifname prints it) or unset them",
        )
    if follow:
        reach += f"; would follow: {follow} (--export-ifname)"
    return Check("interface", OK, reach)


def _check_ports(ctx: _Context) -> Check:
    if ctx.err is not None and ctx.err_category() == "ports":
        return _from_error("ports", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("ports")
    here = ports_here(res)
    lines = {port: what for port, what in here}
    shown = ", ".join(f"{p} ({w})" for p, w in here) or "none"
    step = f" of step {res.job_id}.{res.step_id}" if res.job_id else ""
    eph = ctx.ephemeral
    bad = [p for p in lines if eph and eph[0] <= p <= eph[1]]
    if bad and eph:
        return Check(
            "ports", ERROR,
            f"{', '.join(f'{p} ({lines[p]})' for p in bad)} inside this node's ephemeral port "
            f"range {eph[0]}-{eph[1]} (any outgoing connection may take it)",
            "choose ports below the ephemeral range with SLURMENV_PORT_RANGE or --port-range "
            "(or unset MASTER_PORT/SLURMENV_PORT)",
        )
    range_note = f"below the ephemeral range {eph[0]}-{eph[1]}" if eph else \
        "ephemeral range unknown"
    if ctx.facts is None:
        return Check(
            "ports", OK,
            f"ports{step} opened on {ctx.node}: {shown}; {range_note}; listening sockets "
            "not probed",
        )
    taken = []
    ours = []
    for entry in ctx.facts.get("listening") or []:
        owner = entry.get("process") or "?"
        if entry.get("pid"):
            owner = f"pid {entry['pid']} {owner}"
        port = int(entry["port"])
        if entry.get("same_step"):
            ours.append(f"{port} by rank {entry.get('rank')} of this step ({owner})")
        else:
            taken.append(f"{port} ({lines.get(port, 'port')}) by {owner}")
    if taken:
        return Check(
            "ports", ERROR,
            f"already listening on {ctx.node}: {'; '.join(taken)}: the task that needs it will "
            "fail (address already in use) or others will connect to the wrong process",
            "another job or step holds it: give another port (--port/SLURMENV_PORT), let Slurm "
            "reserve ports (srun --resv-ports=N, N = tasks per node + 1), or stop the leftover process",
        )
    message = f"ports{step} opened on {ctx.node}: {shown}; {range_note}; none taken"
    if ours:
        message += f" (already opened by this step: {'; '.join(ours)})"
    return Check("ports", OK, message)


def _entry_covers(entry: str, host: str) -> bool:
    """gRPC's no_proxy rule: the host ends with the entry, or it is an IP in the CIDR entry."""
    if host.lower().endswith(entry.lower()):
        return True
    if "/" not in entry:
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False


def grpc_proxy(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """``(variable, value)`` of the proxy gRPC would use, as gRPC core chooses it.

    The first of grpc_proxy, https_proxy, http_proxy that is set wins; an empty value means
    no proxy; a scheme other than ``http://`` is ignored by gRPC.
    """
    for name in GRPC_PROXIES:
        value = environ.get(name)
        if value is None:
            continue
        if not value.strip() or not value.strip().lower().startswith("http://"):
            return None
        return name, value
    return None


def grpc_exempt(environ: Mapping[str, str], host: str) -> bool:
    """Whether gRPC connects to ``host`` directly despite a proxy (no_grpc_proxy, no_proxy)."""
    for name in GRPC_NO_PROXIES:
        value = environ.get(name)
        if value is None:
            continue
        entries = [e.strip() for e in value.split(",") if e.strip()]
        return any(_entry_covers(e, host) for e in entries)
    return False


def _targets(ctx: _Context) -> list[str]:
    """The hosts tasks connect to: the TensorFlow workers and the master."""
    res = ctx.res
    if res is not None:
        hosts = [res.master_addr]
        try:
            hosts += [host_of(a) for a in rank_addresses(res)]
        except SlurmEnvError:
            pass
        return list(dict.fromkeys(hosts))
    text = ctx.environ.get("SLURM_JOB_NODELIST") or ctx.environ.get("SLURM_NODELIST")
    if text:
        try:
            return list(dict.fromkeys(nodes.expand(text, "SLURM_JOB_NODELIST")))
        except SlurmEnvError:
            return []
    return []


def _check_proxy(ctx: _Context) -> Check:
    from .dump import redact_proxy

    env = ctx.environ
    chosen = grpc_proxy(env)
    if chosen is None:
        others = [n for n in ALL_PROXIES if env.get(n)]
        if others:
            names = ", ".join(others)
            return Check(
                "proxy", OK,
                f"{names} set, but gRPC (TensorFlow, JAX) does not use it for these tasks and "
                "torch.distributed uses no proxy",
            )
        return Check("proxy", OK, "no HTTP proxy set")
    name, value = chosen
    targets = _targets(ctx)
    uncovered = [h for h in targets if not grpc_exempt(env, h)]
    shown = f"{name}={redact_proxy(value)}"
    if not targets:
        return Check("proxy", WARNING, f"{shown} is set; the step's nodes are unknown here",
                     "unset the proxies before srun for multi-node TensorFlow/JAX")
    if not uncovered:
        exempting = next(n for n in GRPC_NO_PROXIES if env.get(n) is not None)
        return Check("proxy", OK, f"{shown} is set and {exempting} covers every node of the step")
    listed = ", ".join(uncovered[:6]) + (f" (+{len(uncovered) - 6} more)" if len(uncovered) > 6
                                          else "")
    verdict = WARNING if ctx.for_ in ("torch", "torchrun") else ERROR
    who = "TensorFlow and JAX (gRPC) would" if verdict == ERROR else \
        "torch.distributed does not use it, but TensorFlow and JAX (gRPC) would"
    hosts = ",".join(uncovered[:20]) + (",..." if len(uncovered) > 20 else "")
    set_names = " ".join(n for n in ALL_PROXIES if env.get(n) is not None)
    return Check(
        "proxy", verdict,
        f"{shown} is set and no_proxy does not cover {listed}: {who} send the connections "
        "between tasks to the proxy and hang at start-up",
        f"unset {set_names} in the batch script before srun, or export no_grpc_proxy={hosts}",
    )


def _check_gpus(ctx: _Context) -> Check:
    res = ctx.res
    if res is None:
        return ctx.no_resolution("gpus")
    env = ctx.environ
    tasks = res.local_world_size
    found = [(n, env[n]) for n in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if n in env]
    on_node = node_gpus(env)
    if not found:
        if env.get("SLURM_STEP_GPUS") or on_node:
            return Check(
                "gpus", WARNING,
                f"the step has GPUs here (SLURM_STEP_GPUS={env.get('SLURM_STEP_GPUS')}, "
                f"SLURM_GPUS_ON_NODE={on_node}) but CUDA_VISIBLE_DEVICES is unset: was it unset "
                "by the job script?",
                "do not unset CUDA_VISIBLE_DEVICES; Slurm sets it in each task",
            )
        return Check("gpus", OK, "no GPU given to this task (CUDA_VISIBLE_DEVICES unset)")
    name, value = found[0]
    count = count_list(value) if value not in ("", "NoDevFiles") else 0
    seen = f"{name}={value}"
    node_note = f" (SLURM_GPUS_ON_NODE={on_node})" if on_node is not None else ""
    if name in res.bindings:  # --bind-gpus: the task gets its share of the node's list
        share = res.bindings[name]
        return Check(
            "gpus", OK,
            f"{seen} shared by the {tasks} task(s) on {ctx.node}; slurmenv's GPU binding gives "
            f"this task {name}={share}: use device 0 (cuda:0)"
            if count_list(share) == 1 else
            f"{seen} shared by the {tasks} task(s) on {ctx.node}; slurmenv's GPU binding gives "
            f"this task {name}={share}",
        )
    if count == 0:
        return Check("gpus", WARNING, f"{seen}: no GPU visible to this task",
                     "request GPUs for the step: srun --gpus-per-task=1 or --gres=gpu:N")
    if bound_per_task(env) or (on_node is None and count == 1 and tasks > 1):
        if count == 1:
            return Check(
                "gpus", OK,
                f"{seen}: one GPU of its own for this task{node_note}: use device 0 (cuda:0), "
                "not cuda:LOCAL_RANK",
            )
        return Check(
            "gpus", WARNING,
            f"{seen}: {count} GPUs of its own for this task{node_note}: with one process per "
            f"GPU, {count - 1} would sit idle",
            "give one GPU per task (srun --gpus-per-task=1) unless one process drives several",
        )
    where = f"the {tasks} task(s) on {ctx.node}"
    if count == tasks:
        return Check(
            "gpus", OK,
            f"{seen}: {count} GPU(s) shared by {where}: each task must pick the one of its "
            "LOCAL_RANK (torch.cuda.set_device(LOCAL_RANK))",
        )
    if count > tasks:
        return Check(
            "gpus", WARNING,
            f"{seen}: {count} GPUs visible to {where}: {count - tasks} would sit idle with one "
            "process per GPU",
            f"start one task per GPU: srun --ntasks-per-node={count} (or --gpus-per-task=1)",
        )
    return Check(
        "gpus", WARNING,
        f"{seen}: {where} share {count} GPU(s)",
        f"request one GPU per task: srun --gpus-per-task=1 (or --gres=gpu:{tasks})",
    )


def _check_threads(ctx: _Context) -> Check:
    res = ctx.res
    if res is None:
        return ctx.no_resolution("threads")
    env = ctx.environ
    tasks = res.local_world_size
    cpt_text = env.get("SLURM_CPUS_PER_TASK", "")
    cpt = int(cpt_text) if cpt_text.strip().isdigit() else None
    omp_text = env.get("OMP_NUM_THREADS", "")
    first = omp_text.split(",")[0].strip()
    omp = int(first) if first.isdigit() else None
    cpus = (ctx.facts or {}).get("cpus") or {}
    affinity = cpus.get("affinity")
    on_node_text = env.get("SLURM_CPUS_ON_NODE", "")
    on_node = int(on_node_text) if on_node_text.isdigit() else cpus.get("count")
    if "OMP_NUM_THREADS" in res.bindings:
        value = res.bindings["OMP_NUM_THREADS"]
        why = res.sources.get("OMP_NUM_THREADS", "")
        if tasks > 1 and on_node and int(value) * tasks > on_node:
            return Check(
                "threads", WARNING,
                f"OMP_NUM_THREADS unset; slurmenv sets it to {value} from {why}, but {tasks} tasks "
                f"x {value} threads exceed the {on_node} CPUs of {ctx.node}",
                f"give CPUs per task: srun -c {max(1, on_node // tasks)} (SLURM_CPUS_PER_TASK)",
            )
        return Check(
            "threads", OK,
            f"OMP_NUM_THREADS unset; slurmenv export/exec sets it to {value} from {why}",
        )
    if omp_text and omp is None:
        return Check("threads", WARNING, f"OMP_NUM_THREADS={omp_text!r} is not a number",
                     "set OMP_NUM_THREADS to the CPUs per task: export "
                     "OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK")
    if omp is not None:
        limit = cpt if cpt is not None else (on_node // tasks if on_node else None)
        basis = f"SLURM_CPUS_PER_TASK={cpt}" if cpt is not None else \
            f"{on_node} CPUs on the node / {tasks} task(s)" if on_node else "unknown CPUs"
        if limit is not None and omp > limit:
            return Check(
                "threads", WARNING,
                f"OMP_NUM_THREADS={omp} is more than the CPUs per task ({basis}): threads of the "
                "tasks compete for cores",
                f"export OMP_NUM_THREADS={limit} (or srun -c {omp})",
            )
        if cpt is not None and omp < cpt:
            return Check(
                "threads", WARNING,
                f"OMP_NUM_THREADS={omp} uses fewer CPUs than the task has ({basis})",
                "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK",
            )
        return Check("threads", OK, f"OMP_NUM_THREADS={omp} fits the CPUs per task ({basis})")
    if cpt is not None:
        if affinity is not None and affinity <= cpt:
            return Check(
                "threads", OK,
                f"OMP_NUM_THREADS unset; this task is bound to {affinity} CPU(s) "
                f"(SLURM_CPUS_PER_TASK={cpt}): OpenMP uses those",
            )
        return Check(
            "threads", WARNING,
            f"OMP_NUM_THREADS unset with SLURM_CPUS_PER_TASK={cpt}: OpenMP and torch start one "
            f"thread per CPU this task may run on ({affinity if affinity else '?'}), "
            f"not {cpt}",
            "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK before starting the training",
        )
    if tasks > 1 and affinity is not None and on_node and affinity * tasks > on_node:
        return Check(
            "threads", WARNING,
            f"OMP_NUM_THREADS unset and no srun -c: each of the {tasks} tasks on {ctx.node} "
            f"may start {affinity} threads on {on_node} CPUs",
            f"give CPUs per task (srun -c {max(1, on_node // tasks)}) and export "
            "OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK",
        )
    return Check("threads", OK, "OMP_NUM_THREADS unset; no CPU oversubscription seen")


def _check_tf_config(ctx: _Context) -> Check:
    if ctx.for_ in ("torch", "torchrun"):
        return Check("tf-config", SKIPPED, "not asked for (--for torch)")
    if ctx.err is not None and ctx.err_category() == "tf-config":
        return _from_error("tf-config", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("tf-config")
    if not res.layout_known and "TF_CONFIG" not in res.fixed:
        return Check(
            "tf-config", SKIPPED,
            f"{res.launcher} sets no TF_CONFIG (TensorFlow needs one task per process under "
            "srun)",
        )
    try:
        config = res.tf_config
    except SlurmEnvError as exc:
        return _from_error("tf-config", exc)
    text = tfconfig.dumps(config, check_size=False)
    size, limit = len(text), tfconfig.MAX_VALUE
    workers = sum(len(v) for v in config.get("cluster", {}).values())
    message = f"{size} bytes for {workers} workers (limit {limit})"
    if size > limit:
        return Check(
            "tf-config", ERROR,
            f"{message}: every program started with it would fail (Argument list too long)",
            "build the resolver in Python (slurmenv.resolve().tf_config) or export --for torch",
        )
    inherited = ctx.environ.get("TF_CONFIG")
    if inherited and "TF_CONFIG" not in res.fixed and _json(inherited) != config:
        return Check(
            "tf-config", WARNING,
            f"TF_CONFIG is already set and differs from this step's ({message})",
            "unset TF_CONFIG in the batch script; slurmenv export sets the right one per task",
        )
    if size > limit // 2:
        return Check(
            "tf-config", WARNING, f"{message}: over half the limit",
            "build the resolver in Python (slurmenv.resolve().tf_config) for larger steps",
        )
    return Check("tf-config", OK, message)


def _check_lightning(ctx: _Context) -> Check:
    """What Lightning's own cluster environment would make of this step, when Lightning is
    installed (found, not imported): it refuses or misnumbers steps that the plugin
    ``slurmenv.lightning.Environment`` runs."""
    import importlib.util

    from .lightning import tasks_per_node

    if not any(importlib.util.find_spec(p) for p in ("lightning", "pytorch_lightning")):
        return Check("lightning", OK, "Lightning is not installed here: nothing to check")
    res, env = ctx.res, ctx.environ
    if res is None:
        return ctx.no_resolution("lightning")
    job_name = env.get("SLURM_JOB_NAME")
    interactive = job_name in ("bash", "interactive")
    fix = "if this step runs Lightning, pass plugins=[slurmenv.lightning.Environment()] to " \
        "Fabric or Trainer (docs/frameworks/lightning.md)"
    if res.world_size < 2 or env.get("TORCHELASTIC_RUN_ID"):
        return Check("lightning", OK, "Lightning's own environment fits this process")
    if res.launcher != "slurm":
        if "SLURM_NTASKS" in env and not interactive:
            return Check(
                "lightning", WARNING,
                f"if this step runs Lightning: its SLURMEnvironment would take the ranks of the "
                f"Slurm job (SLURM_PROCID, SLURM_NTASKS={env['SLURM_NTASKS']}), not {res.launcher}'s",
                fix,
            )
        return Check("lightning", OK, "not a Slurm step: Lightning's SLURMEnvironment stays out")
    if job_name is None:
        return Check("lightning", OK, "SLURM_JOB_NAME unset (a replayed dump?): not checked")
    counts = tasks_per_node(res)
    per = res.local_world_size
    even = len(set(counts)) == 1 if counts else res.world_size == res.nnodes * per
    problems = []
    if not even:
        shown = ",".join(map(str, counts)) if counts else "?"
        problems.append(
            f"its {res.world_size} tasks are spread unevenly over {res.nnodes} nodes ({shown}) "
            "and Lightning needs devices x num_nodes = world size"
        )
    if interactive:
        try:
            block = even and all(
                n * per + k == r for r, (n, k) in enumerate(zip(res.node_of, res.local_of))
            )
        except SlurmEnvError:
            block = False
        ranks = f"the job is named {job_name!r}, so Lightning ignores Slurm and numbers ranks " \
            "NODE_RANK x devices + LOCAL_RANK (from slurmenv export)"
        if block:
            return Check("lightning", OK, f"{ranks}: right for this block layout")
        if even:
            problems.append(f"{ranks}, which is not Slurm's rank in this {res.layout_name} layout")
    else:
        npn = env.get("SLURM_NTASKS_PER_NODE")
        if npn is None:
            problems.append(
                "SLURM_NTASKS_PER_NODE is unset (srun -n without --ntasks-per-node): Lightning's "
                f"SLURMEnvironment refuses {res.world_size} tasks"
            )
        elif even and npn.strip() != str(per):
            problems.append(
                f"SLURM_NTASKS_PER_NODE={npn} (set for the job) but this step runs {per} task(s) "
                f"on {ctx.node}: Lightning's SLURMEnvironment refuses devices={per}"
            )
    if not problems:
        return Check(
            "lightning", OK,
            f"Lightning's own SLURMEnvironment reads this step right (devices={per}, "
            f"num_nodes={res.nnodes})",
        )
    if not even:
        fix = f"for Lightning start the same number of tasks on every node (srun -N{res.nnodes} " \
            "--ntasks-per-node=K) and pass plugins=[slurmenv.lightning.Environment()] " \
            "(docs/frameworks/lightning.md)"
    return Check("lightning", WARNING, "if this step runs Lightning: " + "; ".join(problems), fix)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# -- output --------------------------------------------------------------------------------
_COLOURS = {OK: "32", WARNING: "33", ERROR: "31;1", SKIPPED: "2"}


def use_colour(choice: str, stream: Any) -> bool:
    """``auto``: colour only on a terminal, and never with NO_COLOR set."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def format_report(
    report: Report, colour: bool = False, quiet: bool = False, width: int | None = None
) -> str:
    """Plain text: one line per check (and a ``fix:`` line under a problem).

    ``width`` wraps long lines under their message column (for a terminal); None keeps one
    line per check and per fix, which suits log files and grep.
    """
    import textwrap

    lines = [] if quiet else [f"slurmenv doctor: {report.title}"]
    label_width = max(len(label) for label in CHECKS.values())
    indent = " " * (8 + 1 + label_width + 2)

    def add(first: str, text: str) -> None:
        if width is None or width <= len(indent) + 20:
            lines.append(first + text)
            return
        wrapped = textwrap.wrap(text, width - len(indent), break_on_hyphens=False) or [""]
        lines.append(first + wrapped[0])
        lines.extend(indent + more for more in wrapped[1:])

    for check in report.checks:
        if quiet and check.verdict in (OK, SKIPPED):
            continue
        verdict = f"{check.verdict:<8}"
        if colour:
            verdict = f"\033[{_COLOURS[check.verdict]}m{check.verdict}\033[0m" + " " * (
                8 - len(check.verdict)
            )
        add(f"{verdict} {CHECKS[check.name]:<{label_width}}  ", check.message)
        if check.fix and check.verdict in (WARNING, ERROR):
            add(indent, f"fix: {check.fix}")
    errors, warnings = report.errors, report.warnings
    summary = f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    prefix = f"slurmenv doctor: {report.title}: " if quiet else ""
    lines.append(f"{prefix}{summary}")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    from .cli import add_resolution_options

    parser = argparse.ArgumentParser(
        prog="slurmenv doctor",
        description="Check this task for what makes distributed training hang at start-up; "
        "each check says ok, warning or error, with a fix. Exit status 0 when no error. "
        "Run it in the training step itself: srun bash -c 'slurmenv doctor && "
        "exec slurmenv exec -- python train.py'",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of text")
    parser.add_argument(
        "--from", dest="from_file", metavar="FILE",
        help="diagnose a file written by 'slurmenv dump' (node facts only if it was taken "
        "with --probe)",
    )
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print only warnings, errors and a one-line summary")
    parser.add_argument(
        "--export-ifname", action="store_true",
        help="print export lines for NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on stdout (for "
        "eval) and the problems on stderr",
    )
    parser.add_argument(
        "--shell", choices=("sh", "bash", "zsh", "fish", "csh", "tcsh"), default="sh",
        help="syntax of --export-ifname (default sh)",
    )
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the verdicts (auto: only on a terminal)")
    add_resolution_options(parser)
    return parser


def main(argv: Sequence[str]) -> int:
    """``slurmenv doctor``; returns 1 when any check gives an error, else 0."""
    from . import ports
    from .cli import print_error
    from .dump import load, options_from_args

    args = build_parser().parse_args(argv)
    options = options_from_args(args)
    if args.from_file:
        try:
            loaded = load(args.from_file)
        except SlurmEnvError as exc:
            print_error(exc)
            return 2
        merged = {**loaded.replay_options, **options}
        with loaded.environment() as env:
            report = diagnose(
                env, merged, ephemeral=loaded.ephemeral_range, facts=loaded.probe,
                for_=args.for_,
            )
        report = report._replace(title=f"{report.title} [replayed from {args.from_file}]")
    else:
        res, _ = resolve_for_doctor(os.environ, options)
        facts = probe(os.environ, options, res)
        report = diagnose(
            os.environ, options, ephemeral=ports.ephemeral_range(), facts=facts, for_=args.for_
        )
    status = 1 if report.errors else 0
    if args.export_ifname:
        from . import render

        if report.errors or report.warnings:  # silent when all is well: it runs in every task
            sys.stderr.write(format_report(report, use_colour(args.color, sys.stderr), quiet=True))
        if report.ifname is None:
            from .cli import fail_closed

            sys.stderr.write("slurmenv: error: no interface to export (see the checks above)\n")
            fail_closed(args.shell)  # eval $(slurmenv doctor --export-ifname) must stop too
            return 1
        sys.stdout.write(render.render(report.ifname, args.shell))
        return status
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=1) + "\n")
    else:
        tty = bool(getattr(sys.stdout, "isatty", lambda: False)())
        width = shutil.get_terminal_size().columns if tty else None
        colour = use_colour(args.color, sys.stdout)
        sys.stdout.write(format_report(report, colour, quiet=args.quiet, width=width))
    return status
