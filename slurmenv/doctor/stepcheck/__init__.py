"""The step check: every task of a step meets rank 0 on the step's own address and port before
training, and either every task starts or none does (``srun slurmenv doctor --step``,
``slurmenv exec --preflight -- CMD``). docs/step-check.md describes the protocol.

Modules: :mod:`.protocol` (messages, identity, schema), :mod:`.facts` (what a task says),
:mod:`.server` (rank 0), :mod:`.client` (the other tasks), :mod:`.reporting` (rank 0's report),
:mod:`.check` (the whole check in one task). This ``__init__`` holds the timeout's parsing and
loads the rest by name on first use (so no module of the package imports back into it).
Only the standard library (and python-hostlist for the report's host list): imported by
``doctor --step`` and ``exec --preflight`` alone, never on ``export``'s path.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ...errors import SlurmEnvError
from ...resolution import Resolution

DEFAULT_TIMEOUT = 30.0
TIMEOUT_VARIABLE = "SLURMENV_STEP_TIMEOUT"
TIMEOUT_FIX = f"give seconds, e.g. {TIMEOUT_VARIABLE}=30 or --step-timeout 30 (1 to 3600)"

#: Names of the package's modules, loaded on first use.
_LAZY = {
    "ACK_SECONDS": "rank0", "HANDSHAKE_SECONDS": "rank0", "LINGER_SECONDS": "rank0",
    "Arrival": "rank0", "Outcome": "rank0", "Rank0": "rank0",
    "MAGIC": "protocol", "MAX_MESSAGE": "protocol", "ProtocolError": "protocol",
    "decode": "protocol", "encode": "protocol", "one_line": "protocol",
    "AGREE": "facts", "facts_of": "facts", "tf_digest": "facts",
    "VERDICT_GRACE": "task", "join": "task", "route_text": "task",
    "MAX_SHOWN": "reporting", "report": "reporting", "topology_note": "reporting",
    "baseline_port": "check", "serve": "check",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def parse_timeout(text: str, variable: str = TIMEOUT_VARIABLE) -> float:
    """Seconds of the step check: whole seconds from 1 to 3600, read as every number slurmenv
    reads is (``errors.parse_int``: ASCII digits, no sign, blank, separator, exponent or
    leading zero); SlurmEnvError naming ``variable``."""
    from ...errors import parse_int

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


def run(
    res: Resolution, environ: Mapping[str, str], given: Mapping[str, Any], timeout: float
) -> tuple[bool, list[str]]:
    """The step check in this task: (start?, the lines to print); see :func:`.check.run`."""
    ok, lines = importlib.import_module(f"{__name__}.check").run(res, environ, given, timeout)
    return bool(ok), list(lines)


def main_for(res: Resolution, given: Mapping[str, Any], timeout: float,
             stream: Any = None) -> int:
    """Run the check in this process (``os.environ``), print its lines on ``stream`` (default
    stdout), return the exit status: 0 when this task may start, else 1."""
    return int(importlib.import_module(f"{__name__}.check").main_for(res, given, timeout, stream))
