"""The doctor's checks, one function each, registered in print order by ``@check``.

Every check reads the :class:`~.context.Context` (environment, options, the resolution or its
error, the probed node facts) and asks the resolver's own rules (``gpus``, ``threads``,
``ports``, ``launchers``) rather than restating them; NCCL/gloo/gRPC rules are in ``rules``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import gpus, nodes, ports, tfconfig, threads
from ..errors import SlurmEnvError, is_number, to_int
from ..launchers import base, batch
from .context import Context, from_error, ports_here, rank_addresses, resolve_for_doctor
from .registry import CHECKS, FUNCTIONS, NEEDS, check
from .report import ERROR, OK, SKIPPED, WARNING, Check, Report
from .rules import (
    ALL_PROXIES,
    GRPC_NO_PROXIES,
    gloo_allows,
    grpc_exempt,
    grpc_proxy,
    is_loopback,
    nccl_allows,
)


def diagnose(
    environ: Mapping[str, str],
    options: Mapping[str, Any] | None = None,
    *,
    ephemeral: tuple[int, int] | None = None,
    facts: Mapping[str, Any] | None = None,
    for_: str = "all",
    recorded_by: str | None = None,
) -> Report:
    """Every check for the task whose environment is ``environ``.

    ``facts`` is what :func:`~.probe.probe` found on the node (None: the node-local checks are
    skipped); ``ephemeral`` the node's ephemeral port range (None: unknown); ``recorded_by``
    the slurmenv version of the dump ``facts`` come from (a check needing a fact that dump
    predates is skipped), None when they were probed here.
    """
    opts = dict(options or {})
    res, err = resolve_for_doctor(environ, opts)
    ctx = Context(environ, opts, res, err, ephemeral, facts, for_, recorded_by)
    names = list(CHECKS)
    checks = [_run(name, function, ctx) for name, function in zip(names, FUNCTIONS)]
    try:
        ifname = ctx.ifname()
    except Exception:  # noqa: BLE001 - malformed facts (an edited dump): no interface to name
        ifname = None
    return Report(ctx.title(), checks, ifname)


def _run(name: str, function: Callable[[Context], Check], ctx: Context) -> Check:
    """One check; one that fails on what it is given (a dump whose probe facts were edited)
    is reported skipped with the reason, so the other checks are still shown, as is one
    needing a fact the replayed dump predates."""
    missing = ctx.unrecorded(NEEDS.get(name, ()))
    if missing:
        return ctx.not_recorded(name, missing)
    try:
        return function(ctx)
    except Exception as exc:  # noqa: BLE001 - facts from a file: any shape may come in
        from .. import __version__

        return Check(
            name, SKIPPED, f"not checked: it failed on its input ({type(exc).__name__}: "
            f"{str(exc)[:120]}); unless that input is an edited dump, this is a bug in "
            f"slurmenv {__version__}: please report it on the slurmenv issue tracker",
        )


@check(
    "step", "step",
    "inside a job step, or the batch script / an `salloc` shell (where every task would get "
    "rank 0), an interactive step, no Slurm at all, or variables set by torchrun",
)
def _check_step(ctx: Context) -> Check:
    env = ctx.environ
    res = ctx.res
    if res is None:
        if ctx.in_batch_script():
            nodes_ = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "?"
            return Check(
                "step", ERROR,
                f"inside job {ctx.job} ({env.get('SLURM_NTASKS', '?')} tasks on {nodes_}) but "
                "outside any job step: the batch script or an salloc shell, where every task "
                "would get rank 0",
                batch.OUTSIDE_STEP_FIX + "; run the doctor there too: srun slurmenv doctor",
            )
        if ctx.job is not None and base.slurm_step_is_own(env):
            return Check("step", OK, f"a task of job step {ctx.job}.{ctx.step} (srun)")
        return ctx.no_resolution("step")
    if res.origin_fix is not None:
        return Check("step", WARNING, res.origin, res.origin_fix)
    if res.in_worker:
        return Check("step", OK, res.origin)
    return Check("step", OK, f"{res.origin}: rank {res.rank} of {res.world_size}")


@check(
    "counts", "counts",
    "the step's counts agree with each other and with this task's `SLURM_NODEID`, "
    "`SLURM_LOCALID`, `SLURM_GTIDS`; no `RANK`/`WORLD_SIZE` left over from the batch script",
)
def _check_counts(ctx: Context) -> Check:
    category = ctx.err_category()
    if ctx.err is not None and category in ("counts", "options"):
        return from_error("counts", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("counts")
    if res.tasks_per_node is None:
        return Check(
            "counts", OK,
            f"rank {res.rank} of {res.world_size}, local rank {res.local_rank} of "
            f"{res.local_world_size}, "
            + (f"{res.nnodes} node(s)" if not res.unknown else "node count not known here")
            + f" ({res.launcher})",
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


def _template_fix(ctx: Context) -> str:
    template = ctx.options.get("addr_template") or ctx.environ.get("SLURMENV_ADDR_TEMPLATE")
    if template:
        return (
            f"the address template {template!r} (SLURMENV_ADDR_TEMPLATE/--addr-template) makes a "
            "name this node cannot resolve: fix or drop it"
        )
    return "node names must resolve on every node (DNS or /etc/hosts); otherwise give a name " \
        "that does with --addr-template/SLURMENV_ADDR_TEMPLATE (e.g. '{host}-ib')"


@check(
    "master-name", "master name",
    "`MASTER_ADDR` resolves on this node, and to which address; a loopback answer (`127.0.1.1` "
    "from a hosts file) is an error for a multi-node step. The only DNS lookup slurmenv makes "
    "without being asked",
)
def _check_master_name(ctx: Context) -> Check:
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
)
def _check_interface(ctx: Context) -> Check:
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
    if name == "lo" and res.several_nodes:
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


#: The fix for an inherited MASTER_PORT inside a Slurm job (see :func:`_inherited_port`).
INHERITED_PORT_FIX = (
    "unset MASTER_PORT in the batch script and let slurmenv derive a port per step (or reserve "
    "ports with srun --resv-ports=N)"
)


def _inherited_port(ctx: Context) -> str | None:
    """Why an inherited ``MASTER_PORT`` is shared by every step of this Slurm job, or None.

    Inherited: set in the environment, not fixed by the launcher (torchrun's workers) and not
    overridden by ``--port``/``SLURMENV_PORT``; the resolver keeps it as the user's choice. Any
    step of a job (``SLURM_JOB_ID`` set) can run beside or after another step or launch of the
    same job, and all of them would take that port instead of one derived per step.
    """
    res, env = ctx.res, ctx.environ
    value = env.get("MASTER_PORT")
    if res is None or not value or not env.get("SLURM_JOB_ID") or "MASTER_PORT" in res.fixed:
        return None
    if ctx.options.get("port") is not None or env.get("SLURMENV_PORT"):
        return None
    return (
        f"MASTER_PORT={value} is inherited (exported before srun, e.g. in the batch script): "
        f"every step and launch of job {env['SLURM_JOB_ID']} takes it instead of a port derived "
        "per step, so concurrent ones collide"
    )


@check(
    "ports", "ports",
    "the ports this node's tasks will listen on (`MASTER_PORT` on rank 0's node, each local "
    "task's TensorFlow port): inside the ephemeral range, or already listening on this node "
    "(psutil, with the owner's PID; a listener of the same step is fine); a warning when "
    "`MASTER_PORT` was inherited inside a Slurm job (e.g. `export MASTER_PORT=29500` in the "
    "batch script): every step of the job takes it instead of a port of its own, so concurrent "
    "steps collide — unset it, or `srun --resv-ports=N`",
)
def _check_ports(ctx: Context) -> Check:
    if ctx.err is not None and ctx.err_category() == "ports":
        return from_error("ports", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("ports")
    here = ports_here(res)
    lines = {port: what for port, what in here}
    shown = ", ".join(f"{p} ({w})" for p, w in here) or "none"
    step = f" of step {res.job_id}.{res.step_id}" if res.job_id else ""
    if res.job_id and res.step_id is None:  # mpirun in a batch script: a job, no step
        step = f" of job {res.job_id}"
    eph = ctx.ephemeral
    bad = [p for p in lines if ports.in_ephemeral(p, eph)]
    if bad and eph:
        return Check(
            "ports", ERROR,
            f"{', '.join(f'{p} ({lines[p]})' for p in bad)} inside this node's ephemeral port "
            f"range {eph[0]}-{eph[1]} (any outgoing connection may take it)",
            f"{ports.EPHEMERAL_FIX} (or unset MASTER_PORT/SLURMENV_PORT)",
        )
    range_note = f"below the ephemeral range {eph[0]}-{eph[1]}" if eph else \
        "ephemeral range unknown"
    inherited = _inherited_port(ctx)
    if ctx.facts is None:
        message = f"ports{step} opened on {ctx.node}: {shown}; {range_note}; listening " \
            "sockets not probed"
        if inherited:
            return Check("ports", WARNING, f"{inherited}; {message}", INHERITED_PORT_FIX)
        return Check("ports", OK, message)
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
            f"reserve ports ({ports.resv_ports()}), or stop the leftover process",
        )
    message = f"ports{step} opened on {ctx.node}: {shown}; {range_note}; none taken"
    if ours:
        message += f" (already opened by this step: {'; '.join(ours)})"
    if inherited:
        return Check("ports", WARNING, f"{inherited}; {message}", INHERITED_PORT_FIX)
    return Check("ports", OK, message)


#: enroot's PyTorch hook (``conf/hooks/extra/50-slurm-pytorch.sh``, which pyxis runs for an
#: image whose environment sets ``PYTORCH_VERSION``): ``MASTER_PORT`` from ``SLURM_JOB_ID`` as
#: ``(modulus, base, release)``: enroot 4 (issue 243), then enroot 3 (docs/containers.md).
ENROOT_PORTS = ((4536, 61000, "enroot 4"), (16384, 49152, "enroot 3, in the ephemeral range"))
ENROOT_FIX = (
    "let slurmenv derive a port for the step: run it with MASTER_PORT unset (srun "
    "--container-image=IMAGE env -u MASTER_PORT slurmenv exec -- python train.py), or give "
    "each step that runs at the same time its own SLURMENV_PORT (docs/containers.md)"
)


def enroot_hook_port(environ: Mapping[str, str]) -> str | None:
    """The formula of enroot's PyTorch hook that gives ``MASTER_PORT`` from ``SLURM_JOB_ID``
    here (``"SLURM_JOB_ID % 4536 + 61000, enroot 4"``), or None."""
    port, job = to_int(environ.get("MASTER_PORT", "")), to_int(environ.get("SLURM_JOB_ID", ""))
    if port is None or job is None:
        return None
    for modulus, lowest, release in ENROOT_PORTS:
        if port == job % modulus + lowest:
            return f"SLURM_JOB_ID % {modulus} + {lowest}, {release}"
    return None


@check(
    "enroot", "enroot hook",
    "whether `MASTER_PORT` is the value enroot's PyTorch hook sets in pyxis containers "
    "(`SLURM_JOB_ID % 4536 + 61000`; `% 16384 + 49152` before enroot 4): slurmenv keeps an "
    "inherited `MASTER_PORT`, so every step of the job gets that one port; with it, the "
    "hook's `MASTER_ADDR` (the step's first node) where slurmenv's rank-0 node differs",
)
def _check_enroot(ctx: Context) -> Check:
    env = ctx.environ
    formula = enroot_hook_port(env)
    if formula is None:
        return Check("enroot", OK, "no MASTER_PORT from enroot's PyTorch hook (pyxis)")
    res = ctx.res
    if res is None:
        return ctx.no_resolution("enroot")
    port = env["MASTER_PORT"].strip()
    if "MASTER_PORT" in res.fixed or ctx.options.get("port") is not None or \
            env.get("SLURMENV_PORT"):
        return Check("enroot", OK, f"MASTER_PORT={port} is enroot's PyTorch hook's ({formula}) "
                     f"but not used: MASTER_PORT is {res.master_port}")
    hint = " (PYTORCH_VERSION is set: the image is one the hook acts on)" \
        if env.get("PYTORCH_VERSION") else ""
    message = (
        f"MASTER_PORT={port} is what enroot's PyTorch hook sets in pyxis containers "
        f"({formula}){hint}; slurmenv keeps an inherited MASTER_PORT, so every step of job "
        f"{env.get('SLURM_JOB_ID', '').strip()} gets this one port instead of its own and "
        "steps that run at the same time collide"
    )
    addr = env.get("MASTER_ADDR", "").strip()
    if addr and addr != res.master_addr:
        message += f"; the hook's MASTER_ADDR={addr} is replaced by rank 0's {res.master_addr}"
    return Check("enroot", WARNING, message, ENROOT_FIX)


def _targets(ctx: Context) -> list[str]:
    """The hosts tasks connect to: the TensorFlow workers and the master."""
    res = ctx.res
    if res is not None:
        hosts = [res.master_addr]
        try:
            hosts += [tfconfig.host_of(a) for a in rank_addresses(res)]
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


@check(
    "gpus", "GPUs",
    "the GPUs visible to this task against the tasks on its node: shared and picked by "
    "`LOCAL_RANK`, bound one per task (use `cuda:0`), idle GPUs, tasks sharing a GPU, a list "
    "unset by the job script",
)
def _check_gpus(ctx: Context) -> Check:
    res = ctx.res
    if res is None:
        return ctx.no_resolution("gpus")
    env = ctx.environ
    tasks = res.local_world_size
    found = [(n, env[n]) for n in gpus.VARIABLES if n in env]
    on_node = gpus.node_gpus(env)
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
    count = gpus.count_list(value) if value not in gpus.NO_DEVICES else 0
    seen = f"{name}={value}"
    node_note = f" (SLURM_GPUS_ON_NODE={on_node})" if on_node is not None else ""
    if name in res.bindings:  # --bind-gpus: the task gets its share of the node's list
        share = res.bindings[name]
        return Check(
            "gpus", OK,
            f"{seen} shared by the {tasks} task(s) on {ctx.node}; slurmenv's GPU binding gives "
            f"this task {name}={share}: use device 0 (cuda:0)"
            if gpus.count_list(share) == 1 else
            f"{seen} shared by the {tasks} task(s) on {ctx.node}; slurmenv's GPU binding gives "
            f"this task {name}={share}",
        )
    if count == 0:
        return Check("gpus", WARNING, f"{seen}: no GPU visible to this task",
                     "request GPUs for the step: srun --gpus-per-task=1 or --gres=gpu:N")
    if gpus.bound_per_task(env) or (on_node is None and count == 1 and tasks > 1):
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


@check(
    "threads", "threads",
    "`OMP_NUM_THREADS` against the CPUs per task (`SLURM_CPUS_PER_TASK`, the task's CPU "
    "affinity, `SLURM_CPUS_ON_NODE`), including the value slurmenv itself will set",
)
def _check_threads(ctx: Context) -> Check:
    res = ctx.res
    if res is None:
        return ctx.no_resolution("threads")
    env = ctx.environ
    tasks = res.local_world_size
    try:
        cpt = threads.cpus_per_task(env)
    except SlurmEnvError:  # refused by the resolver unless --no-threads: nothing to compare
        cpt = None
    omp_text = env.get("OMP_NUM_THREADS", "")
    omp = threads.omp_threads(omp_text)
    cpus = (ctx.facts or {}).get("cpus") or {}
    affinity = cpus.get("affinity")
    on_node_text = env.get("SLURM_CPUS_ON_NODE", "")
    on_node = to_int(on_node_text) if is_number(on_node_text) else cpus.get("count")
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
                     f"set OMP_NUM_THREADS to the CPUs per task: {threads.FROM_CPUS_PER_TASK}")
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
                threads.FROM_CPUS_PER_TASK,
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
            f"{threads.FROM_CPUS_PER_TASK} before starting the training",
        )
    if tasks > 1 and affinity is not None and on_node and affinity * tasks > on_node:
        return Check(
            "threads", WARNING,
            f"OMP_NUM_THREADS unset and no srun -c: each of the {tasks} tasks on {ctx.node} "
            f"may start {affinity} threads on {on_node} CPUs",
            f"give CPUs per task (srun -c {max(1, on_node // tasks)}) and "
            f"{threads.FROM_CPUS_PER_TASK}",
        )
    return Check("threads", OK, "OMP_NUM_THREADS unset; no CPU oversubscription seen")


@check(
    "tf-config", "TF_CONFIG",
    "its size against Linux's 128 KiB limit for one variable; a different `TF_CONFIG` left in "
    "the environment",
)
def _check_tf_config(ctx: Context) -> Check:
    if ctx.for_ in ("torch", "torchrun"):
        return Check("tf-config", SKIPPED, "not asked for (--for torch)")
    if ctx.err is not None and ctx.err_category() == "tf-config":
        return from_error("tf-config", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("tf-config")
    if not res.layout_known and "TF_CONFIG" not in res.fixed:
        return Check(
            "tf-config", SKIPPED,
            f"no TF_CONFIG for a task of {res.label}: {res.launcher} tells each task its own "
            "place only, not where every task runs, which TF_CONFIG lists",
        )
    try:
        config = res.tf_config
    except SlurmEnvError as exc:
        return from_error("tf-config", exc)
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


@check(
    "lightning", "Lightning",
    "when Lightning is installed, what its own `SLURMEnvironment` would make of this step: rank"
    " and world size from `SLURM_PROCID`/`SLURM_NTASKS`, `SLURM_NTASKS_PER_NODE` against the "
    "step's tasks per node, tasks spread unevenly over nodes, a job named `bash` or "
    "`interactive` (then Lightning numbers ranks itself); the fix is "
    "`slurmenv.lightning.Environment()`",
)
def _check_lightning(ctx: Context) -> Check:
    """What Lightning's own cluster environment would make of this step, unless the probe
    found Lightning is not installed on the node (a dump predating that fact, or taken without
    --probe, does not say: the step is checked): it refuses or misnumbers steps that the plugin
    ``slurmenv.lightning.Environment`` runs. Never the machine replaying a dump."""
    from ..lightning import tasks_per_node

    if (ctx.facts or {}).get("lightning") is False:
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
    if "SLURM_NTASKS" not in env or "SLURM_PROCID" not in env:
        return Check("lightning", OK, "not a Slurm step: Lightning's SLURMEnvironment stays out")
    # Lightning's SLURMEnvironment takes SLURM_PROCID and SLURM_NTASKS as rank and world size
    # (with int(), which strips blanks: the strip below is Lightning's reading, not slurmenv's).
    if not interactive and (env["SLURM_PROCID"].strip(), env["SLURM_NTASKS"].strip()) != (
        str(res.rank), str(res.world_size)
    ):
        return Check(
            "lightning", WARNING,
            f"if this step runs Lightning: its SLURMEnvironment would take rank "
            f"SLURM_PROCID={env['SLURM_PROCID']} of SLURM_NTASKS={env['SLURM_NTASKS']}, not "
            f"rank {res.rank} of {res.world_size} ({res.launcher})",
            fix,
        )
    if job_name is None:
        return Check("lightning", OK, "SLURM_JOB_NAME unset (a replayed dump?): not checked")
    if "NNODES" in res.unknown:
        return Check("lightning", OK, f"not checked: {res.sources.get('NNODES', 'NNODES unknown')}")
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
    import json

    try:
        return json.loads(text)
    except ValueError:
        return None
