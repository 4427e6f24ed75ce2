"""The ports the step's tasks listen on: taken, ephemeral or inherited, and enroot's hook."""

from __future__ import annotations

from collections.abc import Mapping

from .. import ports
from ..dump.probe import ports_here
from ..errors import to_int
from .context import Context
from .registry import check
from .report import ERROR, OK, WARNING, Check

#: The fix for an inherited MASTER_PORT inside a Slurm job (see :func:`_inherited_port`).
INHERITED_PORT_FIX = (
    "unset MASTER_PORT in the batch script and let slurmenv derive a port per step (or reserve "
    "ports with srun --resv-ports=N)"
)


def _inherited_port(ctx: Context) -> str | None:
    """Why an inherited ``MASTER_PORT`` (set, not the launcher's, not overridden: the resolver
    keeps it as the user's choice) is shared by every step of this Slurm job, or None."""
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
    resolution=True, errors=("ports",),
)
def _check_ports(ctx: Context) -> Check:
    res = ctx.resolved
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
    message = f"ports{step} opened on {ctx.node}: {shown}; {range_note}; "
    taken, ours = [], []
    for entry in (ctx.facts or {}).get("listening") or []:
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
    message += "listening sockets not probed" if ctx.facts is None else "none taken"
    if ours:
        message += f" (already opened by this step: {'; '.join(ours)})"
    inherited = _inherited_port(ctx)
    if inherited:
        return Check("ports", WARNING, f"{inherited}; {message}", INHERITED_PORT_FIX)
    return Check("ports", OK, message)


#: enroot's PyTorch hook (``conf/hooks/extra/50-slurm-pytorch.sh``, which pyxis runs for an
#: image whose environment sets ``PYTORCH_VERSION``): ``MASTER_PORT`` from ``SLURM_JOB_ID`` as
#: ``(modulus, base, release)``: enroot 4 (issue 243), then enroot 3 (docs/containers.md).
ENROOT_PORTS = ((4536, 61000, "enroot 4"), (16384, 49152, "enroot 3, in the ephemeral range"))
ENROOT_FIX = (
    "let slurmenv derive a port for the step: run it with MASTER_PORT unset (srun -K "
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
