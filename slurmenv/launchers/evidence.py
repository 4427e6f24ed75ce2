"""Local evidence of a Slurm step whose ``SLURM_*`` variables are gone (a container started
with ``--cleanenv``, ``env -i``): read from ``/proc`` only by the single-process fallback,
never on an srun task's path.

* a ``slurmstepd`` ancestor process: ``srun`` starts each task under ``slurmstepd: [JOB.STEP]``
  (its command line); the batch script runs under ``slurmstepd: [JOB.batch]``, salloc's
  interactive shell under ``[JOB.interactive]`` and the extern step under ``[JOB.extern]``:
  those are not steps of srun tasks and are exempt;
* ``job_N/step_M`` in ``/proc/self/cgroup`` under Slurm's cgroup plugins (``step_batch``,
  ``step_extern``, ``step_interactive`` exempt). The test cluster runs proctrack/linuxproc,
  without Slurm cgroups: there the ancestor is the evidence.

And, for the world guard, the evidence that a launcher declared as started inside another
(``ENCLOSED_BY``) really is: its agent (the module's ``AGENTS``: torchrun's agent, a Flux job
shell) among this process's ancestors, below the nearest slurmstepd (:func:`agent_ancestor`).
Read only when the two launchers' worlds disagree, never on an srun task's path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

EXEMPT = ("batch", "extern", "interactive")
_MAX_DEPTH = 64
#: The most bytes of a command line read (its first words are all that is looked at).
_MAX_CMDLINE = 4096


def _ancestors(proc: str, pid: int | None) -> Iterator[tuple[int, bytes]]:
    """(pid, comm) of each ancestor of process ``pid`` (default: this one), nearest first, at
    most ``_MAX_DEPTH`` of them, up to (not including) init."""
    current = os.getpid() if pid is None else pid
    for _ in range(_MAX_DEPTH):
        try:
            with open(f"{proc}/{current}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            return
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2 or not fields[1].isdigit():
            return
        parent = int(fields[1])
        if parent <= 1:
            return
        try:
            with open(f"{proc}/{parent}/comm", "rb") as handle:
                comm = handle.read().strip()
        except OSError:
            return
        yield parent, comm
        current = parent


def _cmdline(proc: str, pid: int) -> bytes | None:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            return handle.read(_MAX_CMDLINE)
    except OSError:
        return None


def stepd_ancestor(proc: str = "/proc", pid: int | None = None) -> str | None:
    """``slurmstepd: [J.S] (pid P)`` for the nearest slurmstepd ancestor of a task step, or
    None (no slurmstepd ancestor, or the nearest one runs an exempt step)."""
    for parent, comm in _ancestors(proc, pid):
        if comm == b"slurmstepd":
            raw = _cmdline(proc, parent)
            cmdline = "slurmstepd" if raw is None else \
                raw.replace(b"\0", b" ").decode(errors="replace").strip()
            start, end = cmdline.find("["), cmdline.find("]")
            step = cmdline[start + 1 : end].rpartition(".")[2] if 0 <= start < end else ""
            if step in EXEMPT:
                return None
            return f"{cmdline} (pid {parent}) is an ancestor of this process"
    return None


def agent_ancestor(names: tuple[str, ...], proc: str = "/proc",
                   pid: int | None = None) -> str | None:
    """The nearest ancestor of this process (or ``pid``) that is one of ``names``, a launcher's
    own process that starts its tasks (a launcher module's ``AGENTS``: torchrun's agent, a Flux
    job shell), as ``torchrun (pid P) is an ancestor of this process``; None when there is
    none below the nearest slurmstepd (a slurmstepd starts no such agent's tasks itself).

    A process is one of ``names`` when its command name (``comm``) is one, or its program or
    the script or module it runs is (:func:`_programs`: ``/usr/bin/python3
    /usr/local/bin/torchrun``, ``python -u -m torch.distributed.run``)."""
    wanted = {os.fsencode(name) for name in names}
    for parent, comm in _ancestors(proc, pid):
        if comm == b"slurmstepd":
            return None
        shown = comm if comm in wanted else next(
            (word for word in _programs(_cmdline(proc, parent) or b"") if word in wanted), None)
        if shown is not None:
            return f"{shown.decode(errors='replace')} (pid {parent}) is an ancestor of this process"
    return None


def _programs(cmdline: bytes) -> list[bytes]:
    """What a command line runs, last path parts: its program, and the script or module an
    interpreter runs, the first word after its options (``python3 -u -m torch.distributed.run``:
    ``torch.distributed.run``); none after ``-c`` (a command string)."""
    words = cmdline.split(b"\0")[:8]
    found = [words[0].rpartition(b"/")[2]]
    for word in words[1:]:
        if word == b"-c":
            break
        if not word.startswith(b"-"):
            found.append(word.rpartition(b"/")[2])
            break
    return found

def cgroup_step(path: str = "/proc/self/cgroup") -> str | None:
    """``job_N/step_M`` of Slurm's cgroup plugins in this process's cgroup, or None
    (none, or an exempt step)."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        start = line.find("/job_")
        if start < 0:
            continue
        parts = line[start + 1 :].split("/")
        if len(parts) >= 2 and parts[1].startswith("step_"):
            step = parts[1][len("step_") :]
            if step in EXEMPT:
                return None
            return f"this process is in Slurm's cgroup {parts[0]}/{parts[1]} ({path})"
    return None


def find(proc: str = "/proc", pid: int | None = None) -> str | None:
    """The local evidence of a Slurm task step, or None: this process's Slurm cgroup, else a
    slurmstepd ancestor (``proc`` and ``pid`` for tests: another tree, another process)."""
    return cgroup_step(f"{proc}/{'self' if pid is None else pid}/cgroup") or stepd_ancestor(
        proc, pid
    )
