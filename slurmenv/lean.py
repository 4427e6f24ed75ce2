"""``NamedTuple`` without importing :mod:`typing` on ``slurmenv export``'s path.

Importing ``typing`` costs about 3 ms on an interpreter whose start-up has not already loaded
it (a plain virtual environment), a quarter of ``python -c "import re"``, and every task of a
step pays it. Modules on the export path take ``NamedTuple`` from here and put their other
typing-only names under ``if TYPE_CHECKING:`` with this module's ``TYPE_CHECKING`` (mypy
treats any ``TYPE_CHECKING`` as true).

At run time ``NamedTuple`` builds a tuple class with the fields, defaults, docstring and
methods ``typing.NamedTuple`` gives (``_make``, ``_replace``, ``_asdict``, pickling), without
the per-class code that :func:`collections.namedtuple` writes and compiles at import.
:func:`lazy` re-exports a package's names without its ``__init__`` importing its modules.
"""

from __future__ import annotations

__all__ = ["TYPE_CHECKING", "NamedTuple", "bisect_right", "lazy"]

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, NamedTuple
else:
    from _collections import _tuplegetter  # what collections.namedtuple uses

    _SKIP = ("__annotations__", "__module__", "__qualname__", "__dict__", "__weakref__")
    _MISSING = object()

    def _new(name, fields, defaults):
        """``__new__`` for the tuple class: positional and keyword arguments, defaults.

        One generic function instead of the code ``collections.namedtuple`` writes and
        compiles for each class (0.1-0.3 ms per class at import, on export's path).
        """
        count = len(fields)
        first_default = count - len(defaults)
        index = {field: i for i, field in enumerate(fields)}
        tuple_new = tuple.__new__

        def __new__(cls, *args, **kwargs):
            if not kwargs and len(args) == count:
                return tuple_new(cls, args)
            if len(args) > count:
                raise TypeError(
                    f"{name}() takes {count} positional arguments but {len(args)} were given")
            values = [*args, *([_MISSING] * (count - len(args)))]
            for key, value in kwargs.items():
                i = index.get(key)
                if i is None:
                    raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
                if values[i] is not _MISSING:
                    raise TypeError(f"{name}() got multiple values for argument {key!r}")
                values[i] = value
            for i in range(count):
                if values[i] is _MISSING:
                    if i < first_default:
                        raise TypeError(f"{name}() missing required argument: {fields[i]!r}")
                    values[i] = defaults[i - first_default]
            return tuple_new(cls, values)

        return __new__

    class _Base(tuple):
        """The methods ``collections.namedtuple`` gives, shared by every class."""

        __slots__ = ()
        _fields = ()
        _field_defaults = {}  # noqa: RUF012 - replaced in every class

        @classmethod
        def _make(cls, iterable):
            result = tuple.__new__(cls, iterable)
            if len(result) != len(cls._fields):
                raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
            return result

        def _replace(self, **changes):
            result = self._make(map(changes.pop, self._fields, self))
            if changes:
                raise ValueError(f"Got unexpected field names: {list(changes)!r}")
            return result

        def __repr__(self):
            fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
            return f"{type(self).__name__}({fields})"

        def _asdict(self):
            return dict(zip(self._fields, self))

        def __getnewargs__(self):
            return tuple(self)

    class _NamedTupleMeta(type):
        def __new__(mcls, name, bases, namespace):
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            annotations = namespace.get("__annotations__", {})
            fields = tuple(annotations)
            defaults = tuple(namespace[field] for field in fields if field in namespace)
            body = {
                "__slots__": (), "_fields": fields,
                "_field_defaults": dict(zip(fields[len(fields) - len(defaults):], defaults)),
                "__match_args__": fields, "__new__": _new(name, fields, defaults),
                "__module__": namespace["__module__"],
                "__doc__": namespace.get("__doc__") or f"{name}({', '.join(fields)})",
            }
            for i, field in enumerate(fields):
                body[field] = _tuplegetter(i, f"Alias for field number {i}")
            for key, value in namespace.items():
                if key not in fields and key not in _SKIP and key not in body:
                    body[key] = value
            cls = type.__new__(type, name, (_Base,), body)
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


def lazy(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package that re-exports ``where``'s names (name -> module, as
    ``importlib.import_module(module, package)`` takes it), each loaded on first use: an
    ``__init__`` importing its own modules would tie each of them to it in a loop (they run it
    first), and load them all where one is needed (tests/test_imports.py)."""
    import importlib
    import sys

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
