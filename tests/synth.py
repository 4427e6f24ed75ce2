"""Synthetic Slurm step environments for unit and property tests.

This module is a small, deliberately *independent* reference of what Slurm puts in the
environment of one task of a job step. It never imports ``slurmenv`` (least of all
``slurmenv.layout``): tests compare slurmenv's answers against it, so sharing code would make
them prove nothing.

Layouts (``slurm_step_layout.c``; see ``reference_layout``) are written here as a sort order of
the step's task slots: slot ``(node i, local k)`` of a node that runs ``counts[i]`` tasks gets
the rank given by its position when all slots are sorted by

* ``block``:      ``(i, k)``              -- fill a node before the next one;
* ``cyclic``:     ``(k, i)``              -- one task per node in turn, full nodes skipped;
* ``plane=P``:    ``(k // P, i, k)``      -- like cyclic, in chunks of ``P`` consecutive ranks;
* ``arbitrary``:  rank ``r`` is on the host named by line ``r`` of the host file;
* unset:          block when there are more tasks than nodes, else cyclic.

Stable API (other test modules use it):

* ``step_env(hosts, counts, rank, distribution=None, plane=None, job_id=DEFAULT_JOB_ID,
  step_id=DEFAULT_STEP_ID, *, nodelist=None, hostfile_hosts=None, **extra)`` -> ``dict[str, str]``
* ``step_envs(hosts, counts, **same)`` -> one environment per rank, in rank order
* ``expected(hosts, counts, rank, ...)`` -> the torch values slurmenv should produce
* ``reference_layout(counts, distribution=None, plane=None, hosts=None, hostfile_hosts=None)``
* ``compress_counts(counts)`` -> ``"2(x3),1"``; ``compress_hosts(hosts)`` -> a node list
* ``clean_env(**extra)`` -> a minimal non-Slurm environment for subprocesses
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import hostlist

DEFAULT_JOB_ID = 4242
DEFAULT_STEP_ID = 0
INTERACTIVE_STEP_ID = 4294967290
BATCH_STEP_ID = 4294967291  # SLURM_BATCH_SCRIPT (0xfffffffb)

# Variables whose presence in the test runner's own environment would leak into a resolution.
_LEAKY_PREFIXES = ("SLURM", "SLURMENV_", "TORCHELASTIC_", "PMI_", "OMPI_")
_LEAKY_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "NNODES",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TF_CONFIG",
)


def compress_counts(counts: Sequence[int]) -> str:
    """Slurm's compressed task counts: ``[2, 2, 2, 1]`` -> ``"2(x3),1"``."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        run = j - i
        parts.append(str(counts[i]) if run == 1 else f"{counts[i]}(x{run})")
        i = j
    return ",".join(parts)


def compress_hosts(hosts: Sequence[str]) -> str:
    """A node list for ``hosts`` in their order: python-hostlist's compression when it keeps
    the order (it sorts and drops duplicates), else the names joined by commas."""
    packed = hostlist.collect_hostlist(list(hosts))
    if hostlist.expand_hostlist(packed, allow_duplicates=True) == list(hosts):
        return str(packed)
    return ",".join(hosts)


def layout_kind(distribution: str | None, ntasks: int, nnodes: int) -> str:
    """The node-level layout Slurm uses for a ``SLURM_DISTRIBUTION`` value (None = unset)."""
    if not distribution:
        return "block" if ntasks > nnodes else "cyclic"
    kind = distribution.split(",")[0].split(":")[0]
    if kind.startswith("plane"):
        return "plane"
    if kind == "*":
        return "block" if ntasks > nnodes else "cyclic"
    return kind


def reference_layout(
    counts: Sequence[int],
    distribution: str | None = None,
    plane: int | None = None,
    hosts: Sequence[str] | None = None,
    hostfile_hosts: Sequence[str] | None = None,
) -> tuple[list[int], list[int]]:
    """``(node_of, local_of)`` indexed by rank, for Slurm's layout of ``counts``.

    ``hostfile_hosts`` (one host per rank) and ``hosts`` (the step's node list) are needed for
    ``arbitrary``. ``plane`` is the plane size for ``plane`` (``SLURM_DIST_PLANESIZE``).
    """
    ntasks, nnodes = sum(counts), len(counts)
    kind = layout_kind(distribution, ntasks, nnodes)
    if kind == "arbitrary":
        if hosts is None or hostfile_hosts is None:
            raise ValueError("arbitrary needs hosts and hostfile_hosts")
        node_of = [list(hosts).index(h) for h in hostfile_hosts[:ntasks]]
        local_of = [node_of[:r].count(n) for r, n in enumerate(node_of)]
        return node_of, local_of
    slots = [(i, k) for i, count in enumerate(counts) for k in range(count)]
    if kind == "block":
        slots.sort(key=lambda s: (s[0], s[1]))
    elif kind == "cyclic":
        slots.sort(key=lambda s: (s[1], s[0]))
    elif kind == "plane":
        if not plane or plane < 1:
            raise ValueError("plane needs a plane size >= 1")
        size = plane
        slots.sort(key=lambda s: (s[1] // size, s[0], s[1]))
    else:
        raise ValueError(f"no reference for distribution {distribution!r}")
    return [s[0] for s in slots], [s[1] for s in slots]


def step_env(
    hosts: Sequence[str],
    counts: Sequence[int],
    rank: int,
    distribution: str | None = None,
    plane: int | None = None,
    job_id: int | str = DEFAULT_JOB_ID,
    step_id: int | str = DEFAULT_STEP_ID,
    *,
    nodelist: str | None = None,
    hostfile_hosts: Sequence[str] | None = None,
    **extra: str | None,
) -> dict[str, str]:
    """The environment Slurm gives task ``rank`` of a step running ``counts[i]`` tasks on
    ``hosts[i]``.

    ``distribution`` is written to ``SLURM_DISTRIBUTION`` as given (None: unset, Slurm's
    default layout); ``plane`` to ``SLURM_DIST_PLANESIZE``. ``nodelist`` replaces the
    compressed ``SLURM_STEP_NODELIST`` (it must expand to ``hosts``). For ``arbitrary``,
    ``hostfile_hosts`` is the host file's content (one host per rank); the caller writes the
    file and passes ``SLURM_HOSTFILE=path``. Job-level variables (``SLURM_JOB_NODELIST``,
    ``SLURM_NTASKS``, ...) equal the step's unless overridden. ``extra`` sets further
    variables; a value of None removes a variable.
    """
    if len(hosts) != len(counts):
        raise ValueError("one count per host")
    node_of, local_of = reference_layout(counts, distribution, plane, hosts, hostfile_hosts)
    node = node_of[rank]
    ntasks = sum(counts)
    step_list = nodelist if nodelist is not None else compress_hosts(hosts)
    tasks_per_node = compress_counts(counts)
    env = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_STEP_NODELIST": step_list,
        "SLURM_STEP_NUM_NODES": str(len(hosts)),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local_of[rank]),
        "SLURM_NODEID": str(node),
        "SLURM_GTIDS": ",".join(str(r) for r, n in enumerate(node_of) if n == node),
        "SLURMD_NODENAME": hosts[node],
        "SLURM_CLUSTER_NAME": "synth",
        "SLURM_JOB_NAME": "synth",
        # Job level: the allocation (equal to the step's here unless overridden).
        "SLURM_JOB_NODELIST": step_list,
        "SLURM_NODELIST": step_list,
        "SLURM_JOB_NUM_NODES": str(len(hosts)),
        "SLURM_NNODES": str(len(hosts)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": tasks_per_node,
    }
    if distribution is not None:
        env["SLURM_DISTRIBUTION"] = distribution
    if plane is not None:
        env["SLURM_DIST_PLANESIZE"] = str(plane)
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def step_envs(
    hosts: Sequence[str], counts: Sequence[int], **kwargs: object
) -> list[dict[str, str]]:
    """``step_env`` for every rank of the step, in rank order (same keyword arguments)."""
    return [step_env(hosts, counts, rank, **kwargs) for rank in range(sum(counts))]  # type: ignore[arg-type]


def expected(
    hosts: Sequence[str],
    counts: Sequence[int],
    rank: int,
    distribution: str | None = None,
    plane: int | None = None,
    hostfile_hosts: Sequence[str] | None = None,
) -> dict[str, object]:
    """What a correct resolver answers for ``rank``: the torch values, plus ``HOST`` (this
    task's node) and ``MASTER_NODE`` (the node holding rank 0)."""
    node_of, local_of = reference_layout(counts, distribution, plane, hosts, hostfile_hosts)
    node = node_of[rank]
    return {
        "RANK": rank,
        "LOCAL_RANK": local_of[rank],
        "WORLD_SIZE": sum(counts),
        "LOCAL_WORLD_SIZE": counts[node],
        "NODE_RANK": node,
        "GROUP_RANK": node,
        "NNODES": len(hosts),
        "HOST": hosts[node],
        "MASTER_NODE": hosts[node_of[0]],
    }


def clean_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) without any Slurm, launcher or training
    variable, plus ``extra``: the starting point for subprocess tests."""
    source = os.environ if base is None else base
    env = {
        name: value
        for name, value in source.items()
        if not name.startswith(_LEAKY_PREFIXES) and name not in _LEAKY_NAMES
    }
    env.update(extra)
    return env
