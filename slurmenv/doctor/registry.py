"""The doctor's checks, in the order they run and are printed.

A check is one function ``(Context) -> Check`` registered with :func:`check`; the order of
registration (the order of the functions in ``checks.py``) is the order of the report.

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


def check(name: str, label: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``name``, shown as ``label``."""

    def register(function: CheckFunction) -> CheckFunction:
        if name in CHECKS:
            raise ValueError(f"doctor check {name!r} is registered twice")
        CHECKS[name] = label
        FUNCTIONS.append(function)
        return function

    return register
