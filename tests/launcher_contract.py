"""What every launcher module of the registry declares: :class:`Launcher`, checked by
:func:`faults` for every module of ``slurmenv.launchers.REGISTRY`` (``tests/test_registry.py``):
the list of modules checked is the registry itself, so a launcher registered is checked with
no line here. Test code: nothing in the package imports it. The recipe that uses it is
``docs/design.md``'s "add a launcher".
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from slurmenv.launchers.base import Task


@runtime_checkable
class Launcher(Protocol):
    """A launcher module (read-only: each field is a module constant or function)."""

    @property
    def NAME(self) -> str:
        """Shown to users (``show``, ``doctor``, ``--launcher NAME``); never compared by the
        other modules."""

    @property
    def VARIABLES(self) -> tuple[str, ...]:
        """Every variable ``read`` reads (``dump`` records them, ``show``/``doctor`` list
        them)."""

    @property
    def PREFIXES(self) -> tuple[str, ...]:
        """Name prefixes ``read`` reads (``dump`` records them, credentials redacted)."""

    @property
    def TASK_VARIABLES(self) -> tuple[str, ...]:
        """The variables only this launcher sets in the processes it starts (never a tool
        setting kept in a login profile): with any of them set and no launcher detecting the
        task, the single-process default is refused naming it (``local.stray``)."""

    @property
    def FALLBACK(self) -> bool:
        """True only for the single-process default (``local``): the pipeline then looks in
        /proc for a scrubbed Slurm step before using it (``launchers/evidence.py``)."""

    @property
    def WORLD(self) -> tuple[tuple[str, str], ...]:
        """(Task field, variable) pairs: in a task this launcher started, each variable that is
        set holds that field (``("rank", "SLURM_PROCID")``); the world guard refuses a
        resolution that disagrees with them (``slurmenv/worldguard.py``)."""

    @property
    def ENCLOSED_BY(self) -> tuple[str, ...]:
        """Registry names of launchers whose variables this launcher's tasks carry from the
        process that started them (torchrun's agent in an srun task), not their own: their
        WORLD facts are not compared with this launcher's tasks. Each comes after this
        launcher in the registry (tests/test_world_guard.py)."""

    @property
    def WHY_EMPTY(self) -> Mapping[str, str]:
        """For each field above declared empty, why (``{"PREFIXES": "every variable read is
        named in VARIABLES"}``); :func:`faults` refuses an empty field without one."""

    def detect(self, environ: Mapping[str, str], /) -> bool:
        """Whether this launcher started the task: presence and equality of variables only
        (it runs for many tasks of every step)."""

    def read(self, environ: Mapping[str, str], /) -> Task:
        """The task as the launcher tells it, or SlurmEnvError naming the variable at fault."""



#: The fields of :class:`Launcher` that are tuples: each is either non-empty or has a reason in
#: ``WHY_EMPTY``.
TUPLES = ("VARIABLES", "PREFIXES", "TASK_VARIABLES", "WORLD")
#: Every field of :class:`Launcher`, with the type its value must have at run time.
FIELDS: dict[str, type | tuple[type, ...]] = {
    "NAME": str, "VARIABLES": tuple, "PREFIXES": tuple, "TASK_VARIABLES": tuple,
    "FALLBACK": bool, "WHY_EMPTY": dict, "WORLD": tuple, "ENCLOSED_BY": tuple,
}


def faults(module: types.ModuleType) -> list[str]:
    """What ``module`` lacks of :class:`Launcher`: each field present with its type, ``detect``
    and ``read`` functions of one positional argument, a reason for each empty field."""
    found = [] if isinstance(module, Launcher) else ["not a Launcher"]
    for field, kind in FIELDS.items():
        if not isinstance(getattr(module, field, None), kind):
            found.append(f"{field} missing or not a {kind}")
    for field in ("detect", "read"):
        function = getattr(module, field, None)
        if not callable(function):
            found.append(f"{field} is not a function")
            continue
        try:
            inspect.signature(function).bind({})
        except TypeError:
            found.append(f"{field} does not take the environment alone")
    why = getattr(module, "WHY_EMPTY", None)
    if isinstance(why, dict):
        for field in TUPLES:
            value = getattr(module, field, None)
            if value == () and not str(why.get(field, "")).strip():
                found.append(f"{field} is empty and WHY_EMPTY gives no reason")
            if value and field in why:
                found.append(f"WHY_EMPTY explains {field}, which is not empty")
        found += [f"WHY_EMPTY names {key}, no such field" for key in why if key not in TUPLES]
    for field in ("VARIABLES", "PREFIXES", "TASK_VARIABLES"):
        if not all(isinstance(n, str) and n for n in getattr(module, field, ()) or ()):
            found.append(f"{field} holds something other than names")
    return found
