"""The doctor's checks, in the order they run and are printed.

A check is one function ``(Context) -> Check`` registered with :func:`check`; the order of
registration (the order of the functions in ``checks.py``) is the order of the report. Each
says in one line what it looks at: :func:`markdown` makes docs/debugging.md's table of them. A
check that cannot do without a node fact names it (``facts=``): replaying a dump recorded before
that fact existed, the check is reported skipped ("not recorded in this dump") instead of run.

This module is the lowest of the package (``report.py`` prints with its labels), so it does
not name the types of the modules above it (``context.Context``, ``report.Check``): the
decorator keeps each function's own type, and ``checks.diagnose`` calls them with a Context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypeVar

    CheckFunction = TypeVar("CheckFunction", bound=Callable[..., Any])

#: name -> label, in print order (``Check.name`` is a key; the label is what text output shows).
CHECKS: dict[str, str] = {}
#: The check functions, in the same order: each ``(Context) -> Check``.
FUNCTIONS: list[Callable[..., Any]] = []
#: name -> what the check looks at (Markdown, one line): docs/debugging.md's table.
LOOKS_AT: dict[str, str] = {}
#: name -> the node facts (keys of ``probe()``) the check cannot do without.
NEEDS: dict[str, tuple[str, ...]] = {}


def check(
    name: str, label: str, looks_at: str, *, facts: tuple[str, ...] = ()
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``name``, shown as ``label``; ``looks_at``
    says what it looks at, for the docs; ``facts`` are the node facts (``probe.FACTS``) it
    needs when the node was probed."""

    if not looks_at.strip() or "\n" in looks_at or "|" in looks_at:
        raise ValueError(f"doctor check {name!r}: looks_at is one line without '|'")

    def register(function: CheckFunction) -> CheckFunction:
        if name in CHECKS:
            raise ValueError(f"doctor check {name!r} is registered twice")
        CHECKS[name] = label
        LOOKS_AT[name] = looks_at
        FUNCTIONS.append(function)
        NEEDS[name] = facts
        return function

    return register


def markdown() -> str:
    """docs/debugging.md's table: every check (in print order) and what it looks at."""
    lines = ["| check | what it looks at |", "|---|---|"]
    lines += [f"| `{label}` | {LOOKS_AT[name]} |" for name, label in CHECKS.items()]
    return "\n".join(lines)
