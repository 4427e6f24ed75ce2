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

Layout: ``registry.py`` (one record per check, the ``@check`` decorator), ``context.py``
(what a check looks at), ``checks.py`` (the print order and the runner, with each record's
guard), ``checks_*.py`` (the checks, one function each, by topic), ``rules.py``
(NCCL/gloo/gRPC rules), ``report.py`` (verdicts, text and JSON), ``command.py`` (the command
line).

Importing this package loads the probe and what it needs (``slurmenv dump --probe`` imports
``slurmenv.doctor.probe``, and nothing more of the doctor); the checks and the command line
are loaded on first use of :func:`diagnose`, :data:`CHECKS`, :func:`main` or
:func:`build_parser`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .context import ports_here, resolve_for_doctor
from .libraries import (
    ALL_PROXIES,
    GRPC_NO_PROXIES,
    GRPC_PROXIES,
    OTHER_PROXIES,
    gloo_allows,
    grpc_exempt,
    grpc_proxy,
    nccl_allows,
)
from .probe import probe  # eager: the package's `probe` is the function, not the module
from .registry import check
from .report import ERROR, OK, SKIPPED, VERDICTS, WARNING, Check, Report, format_report, use_colour

if TYPE_CHECKING:
    from .checks import diagnose
    from .command import build_parser, main
    from .registry import CHECKS

__all__ = [
    "ALL_PROXIES", "CHECKS", "ERROR", "GRPC_NO_PROXIES", "GRPC_PROXIES", "OK", "OTHER_PROXIES",
    "SKIPPED", "VERDICTS", "WARNING", "Check", "Report", "build_parser", "check", "diagnose",
    "format_report", "gloo_allows", "grpc_exempt", "grpc_proxy", "main", "nccl_allows",
    "ports_here", "probe", "replay", "resolve_for_doctor", "use_colour",
]  # fmt: skip

#: The public names loaded on first use, and their module (CHECKS is complete only once
#: checks.py has imported the checks_* modules, which register every check).
_LAZY = {"CHECKS": "checks", "diagnose": "checks", "build_parser": "command", "main": "command",
         "replay": "command"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
