"""The whole step check in one task: rank 0's three phases and report, or a task's session
(see the package's docstring and docs/step-check.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ... import options, resolve
from ...errors import SlurmEnvError, parse_int
from ...resolution import Resolution
from .protocol import facts_of, one_line
from .rank0 import (
    HANDSHAKE_SECONDS,
    RESERVE_FDS,
    SPARE_PLACES,
    Outcome,
    Rank0,
    raise_fd_limit,
    restore_fd_limit,
)
from .reporting import report, topology_note
from .task import join

DEFAULT_TIMEOUT = 30.0
TIMEOUT_VARIABLE = "SLURMENV_STEP_TIMEOUT"
TIMEOUT_FIX = f"give seconds, e.g. {TIMEOUT_VARIABLE}=30 or --step-timeout 30 (1 to 3600)"


def parse_timeout(text: str, variable: str = TIMEOUT_VARIABLE) -> float:
    """Seconds of the step check: whole seconds from 1 to 3600, read as every number slurmenv
    reads is (``errors.parse_int``: ASCII digits, no sign, blank, separator, exponent or
    leading zero); SlurmEnvError naming ``variable``."""
    value = parse_int(variable, text, minimum=1, fix=TIMEOUT_FIX)
    if value > 3600:
        raise SlurmEnvError("the step check's timeout must be seconds from 1 to 3600",
                            variable=variable, value=text, fix=TIMEOUT_FIX)
    return float(value)


def timeout_from(environ: Mapping[str, str], given: str | None = None) -> float:
    """``--step-timeout`` (``given``), else ``SLURMENV_STEP_TIMEOUT``, else 30 s."""
    if given is not None:
        return parse_timeout(given, "--step-timeout")
    text = environ.get(TIMEOUT_VARIABLE, "")
    return parse_timeout(text) if text.strip() else DEFAULT_TIMEOUT


def baseline_port(environ: Mapping[str, str], given: Mapping[str, Any]) -> int | None:
    """The port the step would use without a port override (``SLURMENV_PORT``, ``--port``,
    an inherited ``MASTER_PORT``), None when that does not resolve. A task tries it after its
    own (so a node with an override is named as disagreeing); rank 0 listens on its own only."""
    overrides = ("SLURMENV_PORT", "MASTER_PORT")
    if given.get("port") is None and not any(environ.get(name) for name in overrides):
        return None  # no override here: the step's port is this task's (no second resolve)
    env = {k: v for k, v in environ.items() if k not in overrides}
    opts = {k: v for k, v in given.items() if k != "port"}
    try:
        return resolve(env, ephemeral_range=None, rivals=None, **opts).master_port
    except (SlurmEnvError, ValueError):
        return None


def serve(res: Resolution, own: Mapping[str, Any], timeout: float,
          environ: Mapping[str, str] | None = None,
          handshake: float = HANDSHAKE_SECONDS) -> tuple[bool, list[str], Outcome]:
    """Rank 0's whole check: gather, verdict, decision; (start?, report lines, outcome)."""
    old = raise_fd_limit(res.world_size + SPARE_PLACES + RESERVE_FDS)
    rank0 = Rank0(own, timeout, handshake, str(own.get("launcher", "")).startswith("slurm"))
    try:
        if not rank0.open(res.master_port):
            return (*report(res, own, rank0.outcome, environ), rank0.outcome)
        rank0.gather()
        ok, lines = report(res, own, rank0.outcome, environ)
        short = lines[0].replace("slurmenv step check: ", "").split(";")[0]
        node = one_line(own["node"])

        def lines_for(kind: str) -> dict[int, str]:
            text = {"go": f"ok ({short})",
                    "bad": f"the step is not sound ({short}; rank 0's report on {node} says why)",
                    "abort": ("the step does not start: not every task learnt the verdict "
                              f"({short}; rank 0's report on {node} says why)")}[kind]
            return {int(a.facts["rank"]): f"slurmenv step check: rank {a.facts['rank']}: {text}"
                    for a in rank0.outcome.arrivals}

        rank0.verdict(ok, lines_for("go" if ok else "bad"))
        if ok:
            rank0.decide(lines_for("go"), lines_for("abort"))
        rank0.linger()
    finally:
        rank0.close()
        restore_fd_limit(old)
    return (*report(res, own, rank0.outcome, environ), rank0.outcome)


def run(
    res: Resolution, environ: Mapping[str, str], given: Mapping[str, Any], timeout: float
) -> tuple[bool, list[str]]:
    """The step check in this task: (start?, the lines to print). Rank 0's are the report;
    any other task's is its own verdict, one line (two with a topology note)."""
    if res.launcher == "torchrun":
        return False, [("slurmenv step check: not inside torchrun's workers (its agent "
                        "already holds MASTER_PORT); run it in the step before torchrun: "
                        "srun slurmenv doctor --step")]
    try:
        opts = options.from_environ(environ, **given)._asdict()
    except SlurmEnvError:
        opts = dict(given)
    own = facts_of(res, opts)
    where = f"{res.master_addr}:{res.master_port}"
    if res.world_size <= 1:
        return True, [f"slurmenv step check: 1 of 1 rank ({where}): nothing to check"]
    if res.rank != 0:
        ports = [res.master_port]
        other = baseline_port(environ, given)
        if other is not None and other != res.master_port:
            ports.append(other)
        ok, line = join(res.master_addr, ports, own, timeout)
        lines = [line if line.startswith("slurmenv") else f"slurmenv step check: {line}"]
        note = topology_note(environ)
        if not ok and note and "could not reach rank 0" in line:
            lines.append(f"  {note}")
        return ok, lines
    ok, lines, _ = serve(res, own, timeout, environ)
    return ok, lines


def main_for(res: Resolution, given: Mapping[str, Any], timeout: float,
             stream: Any = None) -> int:
    """Run the check in this process (``os.environ``), print its lines on ``stream`` (default
    stdout), return the exit status: 0 when this task may start, else 1."""
    import sys

    ok, lines = run(res, os.environ, dict(given), timeout)
    out = sys.stdout if stream is None else stream
    try:
        out.write("\n".join(lines) + "\n")
        out.flush()
    except (OSError, ValueError, AttributeError):
        pass
    return 0 if ok else 1
