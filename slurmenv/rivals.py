"""Rival launches: another live launch whose rank 0, on this node, would bind our MASTER_PORT.

Open MPI's ranks share no Slurm step ID, only a launch ID that is not a small sequential
number (the job id ``mpirun`` makes from its host and PID; likewise a PBS PALS ``mpiexec``'s
``PALS_APID`` and a Flux job's ID), so two ``mpirun`` of one job can draw the same port (``ports.launch_ports``: when their IDs are equal modulo the 22,746 ports
outside the job's block, by default). No rule over the environment alone can exclude that: it
would need as many ports as launch IDs. So the rank that binds ``MASTER_PORT``, rank 0,
looks at the other processes of its node before it exports anything. A **rival** is a
process

* in the same network namespace (a port is taken per namespace: on a real cluster, the node),
* whose environment names another launch of the same kind (the task's ``launch_key``
  variable, e.g. ``OMPI_MCA_ess_base_jobid``, set to another value),
* and resolves, by slurmenv's own rules (its ``SLURMENV_*`` variables, our command-line
  options but ``--port``), to rank 0 with the same ``MASTER_PORT``.

A rival refuses the resolution, naming the process and the fix. No race lets both proceed: a
rank-0 process carries its launch's variables from the moment it starts (the shell of
``bash -c 'eval $(slurmenv export); …'``, the process ``slurmenv exec`` becomes, the Python
program that calls ``resolve()``) until its training ends; of two rank-0 processes that
overlap, the one that looks second sees the first (when both look at once, both refuse).

The loop lives in ``pipeline.check_rivals``, which runs the same pipeline on each candidate;
this module holds the rules: which processes (:func:`find`, :func:`other_launches`), with which
options (:func:`command_line`), and the refusal (:func:`refuse_same_port`). Read from
``/proc`` only on rank 0 of such a launch, never on an ``srun`` task's path. Not
seen: processes of other users (unreadable), processes in another PID namespace, a port given
on another launch's command line (only its environment is visible). A replay of a dump does not
look (the processes belong to the node the dump was taken on).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from .errors import SlurmEnvError
from .lean import TYPE_CHECKING
from .options import Options
from .ports import GIVEN

#: The way out when two launches hold one port.
OWN_PORT = (
    "give each launch that runs at the same time its own port: SLURMENV_PORT=PORT in its "
    "environment (mpirun -x SLURMENV_PORT=PORT, flux run --env=SLURMENV_PORT=PORT), a "
    "different PORT for each")

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .ports import Ports
    from .resolution import Resolution


def _netns(proc: str, pid: str) -> tuple[int, int] | None:
    """The network namespace of process ``pid`` (device, inode), None when unreadable."""
    try:
        stat = os.stat(f"{proc}/{pid}/ns/net")
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


#: PF_KTHREAD in /proc/<pid>/stat's flags: a kernel thread, which has no environment.
_KERNEL_THREAD = 0x00200000


def _environ(proc: str, pid: str, wait: Callable[[float], None] = time.sleep) -> bytes | None:
    """``/proc/<pid>/environ``, None when unreadable (gone, another user's).

    A process in the middle of an ``execve`` shows an empty environment for a moment (its new
    memory has no environment yet): a live process that is not a kernel thread and shows
    none is read again once, a few milliseconds later, so that a rank 0 that re-executes
    itself (``bash -c 'eval …; exec python …'``) is not missed in that moment."""
    for attempt in range(2):
        try:
            with open(f"{proc}/{pid}/environ", "rb") as handle:
                blob = handle.read()
        except OSError:
            return None
        if blob or attempt or not _may_have_environ(proc, pid):
            return blob
        wait(0.005)
    return blob


def _may_have_environ(proc: str, pid: str) -> bool:
    """Neither a kernel thread nor a zombie (both have no environment for good)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()  # state, ppid, ... flags is the 7th
    return len(fields) > 6 and fields[0] not in (b"Z", b"X") and not (
        int(fields[6]) & _KERNEL_THREAD)


def _owner(proc: str, pid: str) -> int | None:
    """The user ID owning process ``pid``, None when it is gone."""
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None


def find(variable: str, value: str, proc: str = "/proc",
         uid: int | None = None) -> list[tuple[int | None, dict[str, str]]]:
    """``(pid, environment)`` of every process of this user (``uid``, default ours, root
    included: never another user's) in this network namespace whose environment sets
    ``variable`` to another value than ``value`` (this launch's own processes set it to
    ``value``). A process whose namespace cannot be read counts as in ours."""
    uid = os.getuid() if uid is None else uid
    own = _netns(proc, "self")
    key = os.fsencode(variable) + b"="
    found: list[tuple[int | None, dict[str, str]]] = []
    seen: set[bytes] = set()  # children that inherited a process's environment: one is enough
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or _owner(proc, name) != uid:
            continue
        blob = _environ(proc, name)
        if blob is None or key not in blob or blob in seen:
            continue
        netns = _netns(proc, name)
        if own is not None and netns is not None and netns != own:
            continue
        seen.add(blob)  # in our namespace: a process with the same environment adds nothing
        env: dict[str, str] = {}
        for entry in blob.split(b"\0"):
            name_b, sep, val = entry.partition(b"=")
            if sep:
                env[os.fsdecode(name_b)] = os.fsdecode(val)
        if env.get(variable) not in (None, value):
            found.append((int(name), env))
    return found


def command_line(options: Options, environ: Mapping[str, str]) -> dict[str, object]:
    """Our options that did not come from our environment (the command line, keywords), but
    ``port``: another launch is taken to run the same command line with its own variables,
    and a port given on its command line is not visible (a given port of ours is no reason to
    think it gave the same)."""
    from .options import from_environ

    own = from_environ(environ)
    return {
        field: getattr(options, field)
        for field in Options._fields
        if field != "port" and getattr(options, field) != getattr(own, field)
    }


def other_launches(
    launch_key: tuple[str, str], found: Iterable[tuple[int | None, Mapping[str, str]]],
) -> Iterator[tuple[int | None, Mapping[str, str], str]]:
    """``(pid, environment, its launch ID)`` of each process of ``found`` that names another
    launch of the same kind (``launch_key``'s variable set to another value): the candidates
    ``pipeline.check_rivals`` resolves."""
    variable, value = launch_key
    for pid, env in found:
        other_key = env.get(variable)
        if other_key is not None and other_key != value:
            yield pid, env, other_key


def refuse_same_port(launch_key: tuple[str, str], environ: Mapping[str, str], plan: Ports,
                     pid: int | None, other_key: str, other: Resolution) -> None:
    """Refuse our rank 0 (whose ports are ``plan``) when ``other``, the resolution of process
    ``pid`` of launch ``other_key``, is a rank 0 with the same MASTER_PORT (module docstring)."""
    if other.rank != 0 or other.master_port != plan.master:
        return
    variable, value = launch_key
    who = f"process {pid}" if pid is not None else "a process"
    message = (
        f"MASTER_PORT {plan.master} ({plan.source}) is also the MASTER_PORT of another live "
        f"launch whose rank 0 runs on this node: {who}, {variable}={other_key} "
        f"({other.label}); two rank-0 processes cannot both listen on it, and the ranks of "
        f"one launch could join the other's world")
    if plan.variable in GIVEN:
        raise SlurmEnvError(
            message, variable=plan.variable,
            value=environ.get(plan.variable) or str(plan.master), fix=OWN_PORT)
    raise SlurmEnvError(
        message + f": their launch IDs {variable}={value} and {other_key} draw the same port",
        variable="MASTER_PORT", value=str(plan.master),
        fix="start this launch again (a new launch draws a new ID, so a new port), or "
        + OWN_PORT)
