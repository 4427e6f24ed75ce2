"""``slurmenv doctor``: why distributed training might hang at start-up, checked in one task.

Each check gives a verdict (``ok``, ``warning``, ``error``; ``skipped`` when it cannot be
made here) and, when something is wrong, a one-line fix. The exit status is 0 when no check
gives an error.

The checks are split in two halves so that a dump can be replayed anywhere:

* :func:`probe` (``probe.py``) looks at this node (the only DNS lookup, psutil, the kernel's
  routing): the master's address as this node resolves it, the interface that reaches it,
  which of the step's ports are already listening here, the CPUs this task may use;
* :func:`diagnose` (``checks.py``) turns an environment, the options and those facts into
  verdicts, without touching the machine (so ``doctor --from FILE`` gives the same verdicts
  on a laptop).

Layout: ``registry.py`` (the ``@check`` decorator and the print order), ``context.py`` (what
a check looks at), ``checks.py`` (one function per check), ``rules.py`` (NCCL/gloo/gRPC
rules), ``report.py`` (verdicts, text and JSON), ``main.py`` (the command line).
"""

from __future__ import annotations

from .checks import diagnose
from .context import ports_here, resolve_for_doctor
from .main import build_parser, main, replay
from .probe import probe
from .registry import CHECKS, check
from .report import ERROR, OK, SKIPPED, VERDICTS, WARNING, Check, Report, format_report, use_colour
from .rules import (
    ALL_PROXIES,
    GRPC_NO_PROXIES,
    GRPC_PROXIES,
    OTHER_PROXIES,
    gloo_allows,
    grpc_exempt,
    grpc_proxy,
    nccl_allows,
)

__all__ = [
    "ALL_PROXIES", "CHECKS", "ERROR", "GRPC_NO_PROXIES", "GRPC_PROXIES", "OK", "OTHER_PROXIES",
    "SKIPPED", "VERDICTS", "WARNING", "Check", "Report", "build_parser", "check", "diagnose",
    "format_report", "gloo_allows", "grpc_exempt", "grpc_proxy", "main", "nccl_allows",
    "ports_here", "probe", "replay", "resolve_for_doctor", "use_colour",
]  # fmt: skip
