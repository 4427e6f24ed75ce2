"""What every launcher module of the registry declares: :class:`Launcher`, checked twice.

* By mypy: the end of this module assigns each registered module to a name typed
  :class:`Launcher` (under ``TYPE_CHECKING``, so nothing is imported at run time): a module
  missing a field, or declaring one of the wrong type, is a type error here.
* By the tests (``tests/test_registry.py``): every module of ``REGISTRY`` is an instance of
  :class:`Launcher` (the protocol is runtime-checkable: every field is present), each field
  has its type, a field declared empty says why in ``WHY_EMPTY``, the assignments below name
  exactly the registered modules, and every module under ``launchers/`` is registered or
  listed in ``launchers.HELPERS``.

No module imports this one at run time but the tests: it costs ``export`` nothing. The recipe
that uses it is ``docs/design.md``'s "add a launcher".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .base import Task


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
    def CLAIMS(self) -> tuple[Mapping[str, object], ...]:
        """Its rows of the docs' launcher tables (``launchers/table.py``)."""

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
        launcher in the registry (tests/test_registry.py)."""

    @property
    def WHY_EMPTY(self) -> Mapping[str, str]:
        """For each field above declared empty, why (``{"PREFIXES": "every variable read is
        named in VARIABLES"}``); tests/test_registry.py refuses an empty field without one."""

    def detect(self, environ: Mapping[str, str], /) -> bool:
        """Whether this launcher started the task: presence and equality of variables only
        (it runs for many tasks of every step)."""

    def read(self, environ: Mapping[str, str], /) -> Task:
        """The task as the launcher tells it, or SlurmEnvError naming the variable at fault."""


#: The fields of :class:`Launcher` that are tuples: each is either non-empty or has a reason in
#: ``WHY_EMPTY``.
TUPLES = ("VARIABLES", "PREFIXES", "TASK_VARIABLES", "CLAIMS", "WORLD")
#: Every field of :class:`Launcher`, with the type its value must have at run time.
FIELDS: dict[str, type | tuple[type, ...]] = {
    "NAME": str, "VARIABLES": tuple, "PREFIXES": tuple, "TASK_VARIABLES": tuple,
    "CLAIMS": tuple, "FALLBACK": bool, "WHY_EMPTY": dict, "WORLD": tuple, "ENCLOSED_BY": tuple,
}

if TYPE_CHECKING:
    # One line per module of launchers.REGISTRY (tests/test_registry.py checks the list):
    # mypy checks each against Launcher.
    from . import (
        batch,
        flux,
        het,
        hydra,
        k8s,
        local,
        lsf,
        mvapich,
        openmpi,
        pals,
        preset,
        slurm,
        torchrun,
    )

    _torchrun: Launcher = torchrun
    _flux: Launcher = flux
    _het: Launcher = het
    _slurm: Launcher = slurm
    _lsf: Launcher = lsf
    _pals: Launcher = pals
    _openmpi: Launcher = openmpi
    _hydra: Launcher = hydra
    _mvapich: Launcher = mvapich
    _batch: Launcher = batch
    _k8s: Launcher = k8s
    _preset: Launcher = preset
    _local: Launcher = local
