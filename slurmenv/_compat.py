"""``NamedTuple`` without importing :mod:`typing` on ``slurmenv export``'s path.

Importing ``typing`` costs about 3 ms on an interpreter whose start-up has not already loaded
it (a plain virtual environment), a quarter of ``python -c "import re"``, and every task of a
step pays it. Modules on the export path take ``NamedTuple`` from here and put their other
typing-only names under ``if TYPE_CHECKING:`` with this module's ``TYPE_CHECKING`` (mypy
treats any ``TYPE_CHECKING`` as true).

At run time ``NamedTuple`` builds the class with :func:`collections.namedtuple`, which is what
``typing.NamedTuple`` does too: same tuple class, fields, defaults, docstring and methods.
"""

from __future__ import annotations

__all__ = ["TYPE_CHECKING", "NamedTuple", "bisect_right"]

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from collections import namedtuple

    _SKIP = ("__annotations__", "__module__", "__qualname__", "__dict__", "__weakref__")

    class _NamedTupleMeta(type):
        def __new__(mcls, name, bases, namespace):
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            annotations = namespace.get("__annotations__", {})
            fields = tuple(annotations)
            defaults = [namespace[field] for field in fields if field in namespace]
            cls = namedtuple(name, fields, defaults=defaults, module=namespace["__module__"])
            for key, value in namespace.items():
                if key not in fields and key not in _SKIP:
                    setattr(cls, key, value)
            cls.__qualname__ = namespace.get("__qualname__", name)
            cls.__annotations__ = annotations
            return cls

    NamedTuple = _NamedTupleMeta("NamedTuple", (), {})


def bisect_right(values: list[int], x: int) -> int:
    """:func:`bisect.bisect_right` for a sorted list of ints, without loading the ``_bisect``
    extension module (a shared library to map: 0.1-0.2 ms of start-up)."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo
