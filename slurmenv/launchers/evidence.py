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
"""

from __future__ import annotations

import os

EXEMPT = ("batch", "extern", "interactive")
_MAX_DEPTH = 64


def stepd_ancestor(proc: str = "/proc", pid: int | None = None) -> str | None:
    """``slurmstepd: [J.S] (pid P)`` for the nearest slurmstepd ancestor of a task step, or
    None (no slurmstepd ancestor, or the nearest one runs an exempt step)."""
    current = os.getpid() if pid is None else pid
    for _ in range(_MAX_DEPTH):
        try:
            with open(f"{proc}/{current}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            return None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2:
            return None
        parent = int(fields[1])
        if parent <= 1:
            return None
        try:
            with open(f"{proc}/{parent}/comm", "rb") as handle:
                comm = handle.read().strip()
        except OSError:
            return None
        if comm == b"slurmstepd":
            try:
                with open(f"{proc}/{parent}/cmdline", "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmdline = "slurmstepd"
            start, end = cmdline.find("["), cmdline.find("]")
            step = cmdline[start + 1 : end].rpartition(".")[2] if 0 <= start < end else ""
            if step in EXEMPT:
                return None
            return f"{cmdline} (pid {parent}) is an ancestor of this process"
        current = parent
    return None


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
