"""The doctor's checks: one record each (:class:`Entry`), in one list, in print order.

A check is one function ``(Context) -> Check`` registered with :func:`check` in a
``checks_*`` module; ``checks.ORDER`` places them (:func:`order`). The guard every check would
otherwise open with is declared in its record and run once by ``checks.diagnose``:
``resolution=True`` (not called without one), ``facts=`` (skipped when the node was not probed,
or the replayed dump predates a fact), ``errors=`` (the categories of
``Context.err_category`` whose resolver error it reports, with the resolver's message and fix).

The package's lowest module (``report.py`` prints with its labels): it names no type of the
modules above it; the decorator keeps each function's own type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..lean import NamedTuple

if TYPE_CHECKING:
    from typing import TypeVar

    CheckFunction = TypeVar("CheckFunction", bound=Callable[..., Any])


class Entry(NamedTuple):
    """One check: ``name`` is the key in ``Check.name`` and JSON, ``label`` what text output
    shows, ``looks_at`` docs/doctor.md's row; the rest is its shared guard (see above)."""

    name: str
    label: str
    looks_at: str
    function: Callable[..., Any]
    facts: tuple[str, ...] = ()
    resolution: bool = False
    errors: tuple[str, ...] = ()


#: The registry: every check, in print order (the only list of them).
ENTRIES: list[Entry] = []


class _Labels(Mapping[str, str]):
    """name -> label, in print order: a view of :data:`ENTRIES`."""

    def __getitem__(self, name: str) -> str:
        for entry in ENTRIES:
            if entry.name == name:
                return entry.label
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter([entry.name for entry in ENTRIES])

    def __len__(self) -> int:
        return len(ENTRIES)


#: name -> label, in print order (``Check.name`` is a key; the label is what text output shows).
CHECKS: Mapping[str, str] = _Labels()


def check(
    name: str, label: str, looks_at: str, *, facts: tuple[str, ...] = (),
    resolution: bool = False, errors: tuple[str, ...] = (),
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``name``, shown as ``label``; ``looks_at``
    is its row in docs/doctor.md; the rest is its guard (see the module's docstring)."""

    if not looks_at.strip() or "\n" in looks_at or "|" in looks_at:
        raise ValueError(f"doctor check {name!r}: looks_at is one line without '|'")

    def register(function: CheckFunction) -> CheckFunction:
        if name in CHECKS:
            raise ValueError(f"doctor check {name!r} is registered twice")
        ENTRIES.append(Entry(name, label, looks_at, function, facts, resolution, errors))
        return function

    return register


def order(names: Sequence[str]) -> None:
    """Put the registered checks in the order of ``names``, which must name each once."""
    by_name = {entry.name: entry for entry in ENTRIES}
    if sorted(names) != sorted(by_name):
        raise ValueError(
            f"the doctor's check order {list(names)} does not name each registered check "
            f"{sorted(by_name)} once"
        )
    ENTRIES[:] = [by_name[name] for name in names]
