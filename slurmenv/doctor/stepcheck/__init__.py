"""The step check: every task of a step meets rank 0 on the step's own address and port before
training, and either every task starts or none does (``srun slurmenv doctor --step``,
``slurmenv exec --preflight -- CMD``). docs/step-check.md describes the protocol.

Modules: :mod:`.protocol` (messages, identity, what a task says), :mod:`.rank0` (rank 0),
:mod:`.task` (the other tasks), :mod:`.reporting` (rank 0's report), :mod:`.check` (the
timeout, and the whole check in one task), whose names this ``__init__`` loads on first use
(``lean.lazy``). Imported by ``doctor --step`` and ``exec --preflight`` alone.
"""

from __future__ import annotations

from ...lean import lazy

__getattr__ = lazy(__name__, {
    "DEFAULT_TIMEOUT": ".check", "TIMEOUT_VARIABLE": ".check", "main_for": ".check",
    "parse_timeout": ".check", "run": ".check", "serve": ".check", "timeout_from": ".check",
    "MAGIC": ".protocol", "MAX_MESSAGE": ".protocol", "ProtocolError": ".protocol",
    "encode": ".protocol", "facts_of": ".protocol",
    "Arrival": ".rank0", "Outcome": ".rank0", "report": ".reporting",
})
