"""``slurmenv doctor``: why distributed training might hang at start-up, checked in one task.

Each check gives a verdict (``ok``, ``warning``, ``error``; ``skipped`` when it cannot be
made here) and, when something is wrong, a one-line fix. The exit status is 0 when no check
gives an error. The checks are split in two halves so that a dump can be replayed anywhere:
:func:`probe` (``dump/probe.py``, below both the doctor and the dump that records its facts)
looks at this node (DNS, psutil, the kernel's routing); :func:`diagnose` (``checks.py``)
turns an environment, the options and those facts into verdicts without touching the machine
(so ``doctor --from FILE`` gives the same verdicts on a laptop).

Layout: ``registry.py`` (one record per check, the ``@check`` decorator), ``context.py``
(what a check looks at), ``checks.py`` (the print order and the runner), ``checks_*.py`` (the
checks, by topic), ``libraries.py`` (NCCL/gloo/gRPC rules), ``report.py`` (verdicts, text and
JSON), ``stepcheck/`` (``doctor --step``); the command line is ``commands/doctor.py``.

This ``__init__`` imports nothing: each public name loads its module on first use, so the
step check (``exec --preflight``) loads none of the checks.
"""

from __future__ import annotations

from ..lean import lazy

#: Each public name, by the module it comes from (CHECKS is complete only once checks.py has
#: imported the checks_* modules, which register every check).
_FROM = {
    "slurmenv.dump.probe": ("ports_here", "probe", "resolve_for_doctor"),
    ".checks": ("CHECKS", "diagnose", "replay"),
    ".libraries": ("ALL_PROXIES", "GRPC_NO_PROXIES", "GRPC_PROXIES", "OTHER_PROXIES",
                   "gloo_allows", "grpc_exempt", "grpc_proxy", "nccl_allows"),
    ".registry": ("check",),
    ".report": ("ERROR", "OK", "SKIPPED", "VERDICTS", "WARNING", "Check", "Report",
                "format_report", "use_colour"),
}
_LAZY = {name: module for module, names in _FROM.items() for name in names}
__all__ = [*_LAZY]  # noqa: PLE0604 - the names of _FROM, all strings
__getattr__ = lazy(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
