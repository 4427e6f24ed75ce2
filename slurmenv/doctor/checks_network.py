"""The network between the tasks: the master's name, the interface that reaches it, proxies."""

from __future__ import annotations

from .. import nodes, tfconfig
from ..errors import SlurmEnvError
from ..launchers import base
from .context import Context
from .libraries import (
    ALL_PROXIES,
    GRPC_NO_PROXIES,
    gloo_allows,
    grpc_exempt,
    grpc_proxy,
    is_loopback,
    nccl_allows,
)
from .registry import check
from .report import ERROR, OK, SKIPPED, WARNING, Check


def _template_fix(ctx: Context) -> str:
    template = ctx.options.get("addr_template") or ctx.environ.get("SLURMENV_ADDR_TEMPLATE")
    if template:
        return (f"the address template {template!r} (SLURMENV_ADDR_TEMPLATE/--addr-template) makes "
                "a name this node cannot resolve: fix or drop it")
    return "node names must resolve on every node (DNS or /etc/hosts); otherwise give a name " \
        "that does with --addr-template/SLURMENV_ADDR_TEMPLATE (e.g. '{host}-ib')"


@check(
    "master-name", "master name",
    "`MASTER_ADDR` resolves on this node, and to which address; a loopback answer (`127.0.1.1` "
    "from a hosts file) is an error for a multi-node step. The only DNS lookup slurmenv makes "
    "without being asked",
    resolution=True, facts=("master",),
)
def _check_master_name(ctx: Context) -> Check:
    res = ctx.resolved
    found = ctx.probed.get("master") or {}
    name = res.master_addr
    if found.get("name") not in (None, name):
        return Check("master-name", SKIPPED,
                     f"the probe looked up {found.get('name')!r}, not {name!r} (other options?)")
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
    if res.several_nodes and is_loopback(addresses[0]):
        return Check(
            "master-name", ERROR,
            f"{what}: a loopback address, which other nodes cannot reach (gloo and NCCL pick "
            "their interface from it)",
            "make the node's name resolve to its network address in /etc/hosts (not 127.0.1.1), "
            "or use --addr-template/SLURMENV_ADDR_TEMPLATE for a name that does",
        )
    return Check("master-name", OK, what)


@check(
    "interface", "interface",
    "which local interface reaches the master (the kernel's route, psutil for the name) and the"
    " `NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME` that follow; an error if they are already set"
    " and exclude it",
    resolution=True, facts=("route",),
)
def _check_interface(ctx: Context) -> Check:
    res = ctx.resolved
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
    if name == "lo" and res.several_nodes:
        return Check("interface", ERROR,
                     f"{reach}: loopback, which tasks on other nodes cannot use",
                     "make the master's name resolve to its network address (see master name)")
    wanted = ctx.ifname()
    problems = []
    nccl, gloo = ctx.environ.get("NCCL_SOCKET_IFNAME"), ctx.environ.get("GLOO_SOCKET_IFNAME")
    if nccl and name != "?" and not nccl_allows(nccl, name):
        problems.append(f"NCCL_SOCKET_IFNAME={nccl} excludes {name}")
    if gloo and name != "?" and not gloo_allows(gloo, name):
        problems.append(f"GLOO_SOCKET_IFNAME={gloo} does not name {name}")
    follow = " ".join(f"{k}={v}" for k, v in (wanted or {}).items())
    if problems:
        return Check("interface", ERROR, f"{reach}, but " + " and ".join(problems),
                     f"export {follow} (slurmenv doctor --export-ifname prints it) or unset them")
    if follow:
        reach += f"; would follow: {follow} (--export-ifname)"
    return Check("interface", OK, reach)



def _targets(ctx: Context) -> list[str]:
    """The hosts tasks connect to: the TensorFlow workers and the master."""
    res = ctx.res
    if res is not None:
        hosts = [res.master_addr]
        try:
            hosts += [tfconfig.host_of(a) for a in res.tf_addresses]
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


@check(
    "proxy", "proxy",
    "`grpc_proxy`/`https_proxy`/`http_proxy` set without the step's nodes in "
    "`no_grpc_proxy`/`no_proxy`, with gRPC's own rules (lowercase names only, first one set "
    "wins, an empty value means none, suffix match, CIDR for addresses): TensorFlow and JAX "
    "would send the tasks' connections to the proxy — the reason Jean Zay's documentation says "
    "to unset proxies for multi-node jobs. An error, a warning with `--for torch` "
    "(torch.distributed uses no proxy)",
)
def _check_proxy(ctx: Context) -> Check:
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
    shown = f"{name}={base.redact_proxy(value)}"
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
