"""The doctor's checks, in the order they run and are printed.

A check is one function ``(Context) -> Check`` registered with :func:`check`; the order of
registration (the order of the functions in ``checks.py``) is the order of the report. A check
that cannot do without a node fact names it (``facts=``): replaying a dump recorded before
that fact existed, the check is reported skipped ("not recorded in this dump") instead of run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Context
    from .report import Check

    CheckFunction = Callable[[Context], Check]

#: name -> label, in print order (``Check.name`` is a key; the label is what text output shows).
CHECKS: dict[str, str] = {}
#: The check functions, in the same order.
FUNCTIONS: list[CheckFunction] = []
#: name -> the node facts (keys of ``probe()``) the check cannot do without.
NEEDS: dict[str, tuple[str, ...]] = {}


def check(
    name: str, label: str, *, facts: tuple[str, ...] = ()
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``name``, shown as ``label``, needing the
    node ``facts`` (``probe.FACTS``) when the node was probed."""

    def register(function: CheckFunction) -> CheckFunction:
        if name in CHECKS:
            raise ValueError(f"doctor check {name!r} is registered twice")
        CHECKS[name] = label
        FUNCTIONS.append(function)
        NEEDS[name] = facts
        return function

    return register
