"""The world guard, and the task prolog's marker: the first and the last steps of every
resolution.

The marker (:data:`SET_BY`, :func:`without_stale`) is applied before anything is read. The
world guard is the last check of every resolution (``pipeline.resolve``, so the API,
``export``, ``exec``, the task prolog, ``doctor`` and the step check).

Every launcher module declares ``WORLD``: the variables that, in a task it started, hold the
task's place in the world (``("rank", "SLURM_PROCID")``: SLURM_PROCID is the rank), and
``ENCLOSED_BY``: the launchers whose variables its tasks carry from the process that started
them (torchrun's agent ran in an srun task; a Flux broker started by ``srun flux start``), not
their own. The rule, once for every launcher (``docs/fail-closed.md``):

* the Task read must agree with every ``WORLD`` fact of every launcher whose ``detect`` is
  true here (its own included), except the launchers its own module is ``ENCLOSED_BY``;
* a launcher chosen by ``--launcher``/``SLURMENV_LAUNCHER`` must also agree with the launcher
  slurmenv detects without the choice: that one must read the task and give the same rank,
  local rank and sizes. The choice picks among readings that agree; it never silences one
  that contradicts.

A disagreement is refused naming both sources (variable and value of each). Presence and
equality of a few variables per launcher: a module none of whose signals is set
(``launchers.SIGNALS``) is not even imported, and those of ``launchers.NO_WORLD`` declare no
fact, so an srun task imports no other launcher for it.
"""

from __future__ import annotations

from . import launchers
from .errors import SlurmEnvError, to_int
from .lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

    from .launchers.base import Task

#: The Task fields a WORLD fact may hold, with the output each is.
FIELDS = {"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE",
          "local_world_size": "LOCAL_WORLD_SIZE", "node_rank": "NODE_RANK", "nnodes": "NNODES"}
#: What a chosen launcher and the detected one must both tell the same.
COMPARED = ("rank", "local_rank", "world_size", "local_world_size")
#: Exported by slurmenv's task prolog after its values: ``<job>.<step>:NAME,NAME,...``, the
#: step it resolved and the names it set (slurmenv/commands/taskprolog.py). A task of another step (a
#: ``srun`` inside ``srun --pty bash`` of an opted-in job) inherits them: they are slurmenv's
#: values for that step, not the user's, and are resolved again as if unset.
SET_BY = "SLURMENV_SET_BY"
FORCED_FIX = (
    "unset SLURMENV_LAUNCHER (or drop --launcher): a chosen launcher picks among readings "
    "that agree and never silences one that contradicts; unset the variables that describe "
    "another world (a stale copy, set by hand or exported in the batch script)")
LAUNCHER_FIX = (
    "unset SLURMENV_LAUNCHER (or drop --launcher) to let slurmenv detect the launcher, or run "
    "where that launcher started the task")
FIX = (
    "unset the variables that describe another world (a stale copy, set by hand or exported "
    "in the batch script) and resolve inside the task the launcher started")


def check(environ: Mapping[str, str], task: Task, chosen: ModuleType, forced: str | None) -> None:
    """Refuse ``task`` (read by ``chosen``) unless every detecting launcher's facts agree with
    it and, when a launcher was chosen (``forced``: its registry name), the detected launcher
    reads the same world (module docstring)."""
    for name in launchers.REGISTRY:
        if name in launchers.NO_WORLD or name in chosen.ENCLOSED_BY:
            continue
        signals = launchers.SIGNALS.get(name)
        if signals is not None and not any(environ.get(signal) for signal in signals):
            continue
        module = launchers.load(name)
        if module is not chosen and not module.detect(environ):
            continue
        for field, variable in module.WORLD:
            text = environ.get(variable)
            if text is None or text == "":
                continue
            if to_int(text) != getattr(task, field):
                raise _disagree(task, chosen, field, module, variable, text, forced)
    if forced is not None:
        _check_detected(environ, task, chosen, forced)


def _told(task: Task, field: str) -> str:
    output = FIELDS[field]
    return f"{output}={getattr(task, field)} ({task.sources.get(output, task.launcher)})"


def _disagree(task: Task, chosen: ModuleType, field: str, other: ModuleType, variable: str,
              text: str, forced: str | None) -> SlurmEnvError:
    who = "its own variable" if other is chosen else \
        f"the {other.NAME} launcher detects this task too"
    how = ", chosen with --launcher or SLURMENV_LAUNCHER," if forced is not None else ""
    return SlurmEnvError(
        f"the {chosen.NAME} launcher{how} reads {_told(task, field)}, but {variable}={text} "
        f"({who}): two sources describe different worlds, so neither is taken",
        variable=variable, value=text, fix=FORCED_FIX if forced is not None else FIX)


def launcher_of(environ: Mapping[str, str], name: str | None) -> ModuleType:
    """The launcher module that reads this task: the one chosen (``name``; refused when its
    ``detect`` is false here), else the registry's first that detects it."""
    if name is None:
        return launchers.detect(environ)
    module = launchers.load(name)
    if module.detect(environ):
        return module
    own = module.TASK_VARIABLES or module.VARIABLES
    missing = [variable for variable in own if not environ.get(variable)]
    shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
    if missing and len(missing) < len(own):
        told = f"{len(missing)} of its {len(own)} variables are unset or empty ({shown})"
    elif missing:
        told = f"none of its variables is set ({shown})"
    else:
        told = "its variables are set, but it does not take this task as its own"
    raise _refused_choice(name, f", but it does not detect this task: {told}; without the "
                          "choice,", launchers.detect(environ), "", "SLURMENV_LAUNCHER", name,
                          LAUNCHER_FIX)


def _refused_choice(name: str, but: str, detected: ModuleType, after: str, variable: str | None,
                    value: str | None, fix: str = FORCED_FIX) -> SlurmEnvError:
    return SlurmEnvError(
        f"the {name} launcher was chosen (--launcher, SLURMENV_LAUNCHER or launcher=){but} "
        f"slurmenv detects {detected.NAME}{after}", variable=variable, value=value, fix=fix)


def _check_detected(environ: Mapping[str, str], task: Task, chosen: ModuleType,
                    forced: str) -> None:
    """The launcher detected without the choice reads the same world as the chosen one."""
    detected = launchers.detect(environ)
    if detected is chosen:
        return
    try:
        theirs: Task = detected.read(environ)
    except SlurmEnvError as err:
        raise _refused_choice(chosen.NAME, ", but", detected, " here, which refuses this task: "
                              + err.message, err.variable, err.value) from None
    for field in COMPARED:
        if getattr(theirs, field) != getattr(task, field):
            raise _refused_choice(
                chosen.NAME, f" and reads {_told(task, field)}, but", detected,
                f" here, which reads {_told(theirs, field)}: two sources describe different "
                "worlds", "SLURMENV_LAUNCHER", forced)


# -- the prolog's marker, applied before anything is read ---------------------------------
def step_key(environ: Mapping[str, str]) -> str:
    """``<job>.<step>`` of the task whose environment is ``environ`` (:data:`SET_BY`)."""
    from .launchers.base import job_id, step_id

    return f"{job_id(environ) or ''}.{step_id(environ) or ''}"


def set_for_another_step(environ: Mapping[str, str]) -> tuple[str, tuple[str, ...]] | None:
    """(the step, the names) of the values slurmenv's task prolog set for a step other than
    this task's (:data:`SET_BY`); None when it set none or set them for this step. Only names
    slurmenv outputs count: the marker cannot remove a Slurm variable."""
    step, colon, listed = environ.get(SET_BY, "").partition(":")
    if not colon or step == step_key(environ):
        return None
    from .render import OUTPUTS

    ours = {name for names in OUTPUTS.values() for name in names}
    names = tuple(name for name in listed.split(",") if name in ours and name in environ)
    return (step, names) if names else None


def without_stale(environ: Mapping[str, str]) -> tuple[Mapping[str, str], str | None]:
    """``environ`` without the values slurmenv's task prolog set for another step
    (:func:`set_for_another_step`), and the note saying so (None when there were none)."""
    stale = set_for_another_step(environ)
    if stale is None:
        return environ, None
    step, names = stale
    kept = {name: value for name, value in environ.items() if name not in names}
    return kept, (f"{', '.join(names)} were set by slurmenv's task prolog for step {step} "
                  f"({SET_BY}), not for this one: resolved again")
