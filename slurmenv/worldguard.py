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
  true here (its own included); those of a launcher its own module is ``ENCLOSED_BY`` may
  differ only when the task shows the enclosure: the module's ``AGENTS`` (torchrun's agent,
  a Flux job shell) among its ancestors (``launchers/evidence.py``), read only then;
* a world of one (rank 0 of 1, every single-process result) must agree with every launcher's
  ``WORLD`` facts, detecting or not, and, outside a step of srun tasks of its own, with the
  job's sizes (``batch.JOB_WORLD``): :func:`check_world_of_one`;
* a launcher chosen by ``--launcher``/``SLURMENV_LAUNCHER`` must also agree with the launcher
  slurmenv detects without the choice: that one must read the task and give the same rank,
  local rank and sizes. The choice picks among readings that agree; it never silences one
  that contradicts.

A disagreement is refused naming both sources (variable and value of each). Presence and
equality of a few variables per launcher: a module none of whose signals is set
(``launchers.SIGNALS``) is not even imported, and those of ``launchers.NO_WORLD`` declare no
fact, so an srun task of a larger step imports no other launcher for it (a world of one
imports them all).
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
ONE_FIX = (
    "run slurmenv in every task of the larger world (srun -K slurmenv exec -- python train.py; "
    "under torchrun, in each worker), or, for a single process, unset {variable} (a stale "
    "copy, set by hand or exported by a batch script)")
ENCLOSED_FIX = (
    "unset {variable} and the rank variables the {launcher} launcher set before starting the "
    "tasks (in a batch script: before srun, or srun --export=NONE), or run slurmenv in a task "
    "that {launcher} started itself")
#: ``enclosure`` default: look in /proc (``evidence.agent_ancestor``), only when needed.
FIND = "find"
FIX = (
    "unset the variables that describe another world (a stale copy, set by hand or exported "
    "in the batch script) and resolve inside the task the launcher started")


def check(environ: Mapping[str, str], task: Task, chosen: ModuleType, forced: str | None,
          enclosure: str | None = FIND) -> None:
    """Refuse ``task`` (read by ``chosen``) unless every detecting launcher's facts agree with
    it (those of a launcher ``chosen`` is ``ENCLOSED_BY`` only when the enclosure is not
    shown: ``enclosure``, the evidence, ``FIND`` to look in /proc when needed, None: none), a
    world of one agrees with every declared fact (:func:`check_world_of_one`) and, when a
    launcher was chosen (``forced``: its registry name), the detected launcher reads the same
    world (module docstring)."""
    for name in launchers.REGISTRY:
        if name in launchers.NO_WORLD:
            continue
        signals = launchers.SIGNALS.get(name)
        if signals is not None and not any(environ.get(signal) for signal in signals):
            continue
        module = launchers.load(name)
        if module is not chosen and not module.detect(environ):
            continue
        for field, variable in module.WORLD:
            text = environ.get(variable)
            if text is None or text == "" or to_int(text) == getattr(task, field):
                continue
            if name not in chosen.ENCLOSED_BY:
                raise _disagree(task, chosen, field, module, variable, text, forced)
            if enclosure == FIND:
                from .launchers import evidence

                enclosure = evidence.agent_ancestor(getattr(chosen, "AGENTS", ()))
            if not enclosure:
                raise _not_enclosed(task, chosen, field, module, variable, text)
            break  # the task shows its launcher inside this one: the outer world is another
    if forced is not None:
        _check_detected(environ, task, chosen, forced)
    if task.world_size == 1:
        check_world_of_one(environ, task)


def check_world_of_one(environ: Mapping[str, str], task: Task) -> None:
    """A world of one (rank 0 of 1) is given only where nothing declared says the world is
    larger: the ``WORLD`` facts of **every** launcher, whether it detects the task or not and
    enclosure or not, and, where the task runs in no step of srun tasks of its own, the job's
    sizes (a module's ``JOB_WORLD``: the batch script, an salloc shell, the interactive step).
    Every single-process result goes through here (the fallback, a one-task job, the
    interactive step, hand-set or torchrun variables of one process, a one-task step)."""
    from .launchers.base import SPECIAL_STEPS, step_id

    step = step_id(environ)
    own_step = step is not None and step not in SPECIAL_STEPS
    facts: dict[tuple[str, str], list[str]] = {}  # (field, variable) -> the launchers saying so
    for module in launchers.modules():  # a single process: every declaration is looked at
        for fact in module.WORLD if own_step else (*module.WORLD, *getattr(module, "JOB_WORLD", ())):
            facts.setdefault(fact, []).append(str(module.NAME))
    for (field, variable), names in facts.items():
        text = environ.get(variable)
        if text is None or text == "" or to_int(text) == getattr(task, field):
            continue
        raise SlurmEnvError(
            f"the {task.launcher} launcher reads a world of one process, "
            f"{_told(task, field)}, but {variable}={text} (a variable of the "
            f"{' or '.join(names)} launcher) says the world is larger: as a single process, "
            "every task would train alone",
            variable=variable, value=text, fix=ONE_FIX.format(variable=variable))


def _not_enclosed(task: Task, chosen: ModuleType, field: str, outer: ModuleType, variable: str,
                  text: str) -> SlurmEnvError:
    agents = " or ".join(getattr(chosen, "AGENTS", ())) or "such"
    return SlurmEnvError(
        f"the {chosen.NAME} launcher reads {_told(task, field)}, but {variable}={text} (the "
        f"{outer.NAME} launcher detects this task too), and no {agents} process is an "
        f"ancestor of this one: the {chosen.NAME} variables are not this task's own (a "
        f"leftover copy: inherited by a srun started from one of its tasks, or exported by a "
        "script), so neither world is taken",
        variable=variable, value=text, fix=ENCLOSED_FIX.format(
            variable=" ".join(chosen.TASK_VARIABLES[:1]), launcher=chosen.NAME))


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


def _marker(environ: Mapping[str, str]) -> tuple[str, tuple[str, ...]] | None:
    """(the step, the names slurmenv outputs it lists) of the marker, None without one. Only
    names slurmenv outputs count: the marker cannot remove a Slurm variable."""
    text = environ.get(SET_BY)
    if text is None:
        return None
    step, _, listed = text.partition(":")
    from .render import OUTPUTS

    ours = {name for names in OUTPUTS.values() for name in names}
    return step, tuple(name for name in listed.split(",") if name in ours)


def set_for_another_step(environ: Mapping[str, str]) -> tuple[str, tuple[str, ...]] | None:
    """(the step, the names) of the values slurmenv's task prolog set for a step other than
    this task's (:data:`SET_BY`); None when it set none or set them for this step, or when
    this task has no Slurm job of its own to be another (:func:`without_stale` then keeps
    them as the marker's step's)."""
    from .launchers.base import job_id

    marker = _marker(environ)
    if marker is None or job_id(environ) is None or marker[0] == step_key(environ):
        return None
    step, listed = marker
    names = tuple(name for name in listed if name in environ)
    return (step, names) if names else None


def without_stale(environ: Mapping[str, str]) -> tuple[Mapping[str, str], str | None]:
    """``environ`` without the values slurmenv's task prolog set for another step
    (:func:`set_for_another_step`), and the note saying so (None when there were none).

    A task with no Slurm job of its own (a scrubbed container, ``env -i``) that carries the
    marker runs in the marker's step: the prolog's values are kept when the rank-like ones it
    lists are all there and include ``RANK`` and ``WORLD_SIZE`` (the reader then checks that
    they form a whole world), else refused; never dropped into a single process."""
    stale = set_for_another_step(environ)
    if stale is not None:
        step, names = stale
        kept = {name: value for name, value in environ.items() if name not in names}
        return kept, (f"{', '.join(names)} were set by slurmenv's task prolog for step {step} "
                      f"({SET_BY}), not for this one: resolved again")
    from .launchers.base import job_id

    marker = _marker(environ)
    if marker is None or job_id(environ) is not None:
        return environ, None
    step, listed = marker
    from .render import RANK_FIELDS

    world = [name for name in listed if name in RANK_FIELDS]
    missing = [name for name in world if not environ.get(name)]
    if missing or not {"RANK", "WORLD_SIZE"} <= set(world):
        told = (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set here"
                if missing else "it lists no whole world (RANK and WORLD_SIZE)")
        raise SlurmEnvError(
            f"{SET_BY} says slurmenv's task prolog resolved this task in Slurm step "
            f"{step or '(none named)'}, and this process carries no Slurm variable "
            f"of its own (a scrubbed environment), but {told}: as a single process, every "
            "task would train alone", variable=SET_BY, value=environ[SET_BY],
            fix="keep the prolog's values where slurmenv runs (apptainer exec --env RANK=$RANK,"
            "..., or without --cleanenv), or unset " + SET_BY + " outside that step")
    return environ, (f"{', '.join(world)} were set by slurmenv's task prolog for step {step} "
                     f"({SET_BY}), and this process carries no Slurm variable of its own (a "
                     "scrubbed environment): kept as that step's values")
