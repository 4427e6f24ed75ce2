"""The verdicts of ``slurmenv doctor`` and how they are printed: text (colour, wrapping) or JSON."""

from __future__ import annotations

import os
from typing import Any

from ..errors import printable
from ..lean import NamedTuple
from .registry import CHECKS

OK, WARNING, ERROR, SKIPPED = "ok", "warning", "error", "skipped"
VERDICTS = (OK, WARNING, ERROR, SKIPPED)


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
        return {"title": self.title, "checks": [c._asdict() for c in self.checks],
                "errors": self.errors, "warnings": self.warnings, "ifname": self.ifname}


def to_json(report: Report) -> str:
    """``doctor --json``."""
    import json

    return json.dumps(report.to_dict(), indent=1) + "\n"


_COLOURS = {OK: "32", WARNING: "33", ERROR: "31;1", SKIPPED: "2"}


def use_colour(choice: str, stream: Any) -> bool:
    """``auto``: colour only on a terminal, and never with NO_COLOR set."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def format_report(report: Report, colour: bool = False, quiet: bool = False,
                  width: int | None = None) -> str:
    """Plain text: one line per check, and a ``fix:`` line under a problem; ``width`` wraps
    them under their message column (None: one line each, for logs and grep)."""
    import textwrap

    lines = [] if quiet else [printable(f"slurmenv doctor: {report.title}")]
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
        if colour:  # the padding stays outside the escape codes
            verdict = verdict.replace(check.verdict,
                                      f"\033[{_COLOURS[check.verdict]}m{check.verdict}\033[0m")
        add(f"{verdict} {CHECKS[check.name]:<{label_width}}  ", printable(check.message))
        if check.fix and check.verdict in (WARNING, ERROR):
            add(indent, printable(f"fix: {check.fix}"))
    errors, warnings = report.errors, report.warnings
    summary = f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    prefix = printable(f"slurmenv doctor: {report.title}: ") if quiet else ""
    lines.append(f"{prefix}{summary}")
    return "\n".join(lines) + "\n"
