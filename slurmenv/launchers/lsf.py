"""IBM Spectrum LSF with ``jsrun`` (Summit, Lassen): documented variables only, LSF is not
available here (``tests/fixtures/beyond/lsf_jsrun.json`` cites IBM's and the sites' documents).

* ``JSM_NAMESPACE_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE`` give the task's rank and
  sizes; the ``OMPI_COMM_WORLD_*`` of Spectrum MPI, when present, must agree.
* ``LSB_DJOB_RANKFILE`` lists the job's hosts, one line per slot. Its **first line is the launch
  node** (where the batch script runs), not a compute node: the compute hosts are the distinct
  names after it, and rank 0's host is the first of them (where jsrun puts its first resource
  set). ``LSB_HOSTS`` is not used: LSF leaves it out for large jobs.
* The node count is the compute hosts', which holds when the jsrun spans them all with
  ``JSM_NAMESPACE_LOCAL_SIZE`` tasks each: checked (``SIZE = hosts x LOCAL_SIZE``), refused
  otherwise. jsrun's default (packed) distribution then puts rank ``r`` on host
  ``r // LOCAL_SIZE``: every task checks its own local rank against that, so another
  distribution is refused. ``HOSTNAME`` is not this task's host: jsrun passes the launching
  shell's environment on, so it names the launch node.
* ``LSB_JOBID`` seeds the port; two concurrent jsrun of one job would meet on it: give each
  ``--port``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError, require
from .base import Task, Topology, agree, node_sources, optional_int, read_int

NAME = "lsf"
VARIABLES = (
    "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK",
    "JSM_NAMESPACE_LOCAL_SIZE", "LSB_JOBID", "LSB_DJOB_RANKFILE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
#: Set only in a task jsrun started, or in any process of an LSF job (LSB_JOBID, the job's
#: hosts and slot count; never the LSB_DEFAULT* settings of a login profile): with any of them
#: and no launcher detecting the task, local.py refuses the single-process default.
TASK_VARIABLES = (
    "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK",
    "JSM_NAMESPACE_LOCAL_SIZE", "LSB_JOBID", "LSB_HOSTS", "LSB_MCPU_HOSTS", "LSB_DJOB_NUMPROC",
    "LSB_DJOB_HOSTFILE", "LSB_DJOB_RANKFILE",
)  # fmt: skip
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "JSM_NAMESPACE_RANK"), ("world_size", "JSM_NAMESPACE_SIZE"),
         ("local_rank", "JSM_NAMESPACE_LOCAL_RANK"),
         ("local_world_size", "JSM_NAMESPACE_LOCAL_SIZE"))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}
FIX = "run slurmenv inside a task that jsrun started; jsrun sets this in every task"
SAME_JSRUN = "these come from the same jsrun: do not set them by hand"


def detect(environ: Mapping[str, str]) -> bool:
    """A task that jsrun started."""
    return bool(environ.get("JSM_NAMESPACE_RANK") and environ.get("JSM_NAMESPACE_SIZE"))


def compute_hosts(path: str) -> tuple[str, list[str]]:
    """(launch node, the distinct compute hosts in order) of an LSF rank file."""
    from .. import readfile as files

    fix = "resolve inside the job, where LSF writes the file"
    text = files.read_text(path, "LSB_DJOB_RANKFILE", fix)
    lines = [] if text is None else [line.strip() for line in text.splitlines() if line.strip()]
    if text is None:
        raise SlurmEnvError(
            f"cannot read LSB_DJOB_RANKFILE {path}",
            variable="LSB_DJOB_RANKFILE", value=path,
            fix="resolve inside the job, where LSF writes the file",
        ) from None
    hosts = list(dict.fromkeys(lines[1:]))
    if not hosts:
        raise SlurmEnvError(
            f"LSB_DJOB_RANKFILE {path} names no compute host after the launch node",
            variable="LSB_DJOB_RANKFILE", value=path,
            fix="its first line is the launch node; the compute hosts follow",
        )
    return lines[0], hosts


def read(environ: Mapping[str, str]) -> Task:
    rank = read_int(environ, "JSM_NAMESPACE_RANK", FIX)
    world = read_int(environ, "JSM_NAMESPACE_SIZE", FIX, minimum=1)
    local = read_int(environ, "JSM_NAMESPACE_LOCAL_RANK", FIX)
    local_world = read_int(environ, "JSM_NAMESPACE_LOCAL_SIZE", FIX, minimum=1)
    if rank >= world or local >= local_world:
        raise SlurmEnvError(
            f"JSM_NAMESPACE_RANK={rank}/SIZE={world}, LOCAL_RANK={local}/LOCAL_SIZE="
            f"{local_world} do not fit", variable="JSM_NAMESPACE_RANK", value=str(rank), fix=FIX,
        )
    for name, other, value in (("OMPI_COMM_WORLD_RANK", "JSM_NAMESPACE_RANK", rank),
                               ("OMPI_COMM_WORLD_SIZE", "JSM_NAMESPACE_SIZE", world),
                               ("OMPI_COMM_WORLD_LOCAL_RANK", "JSM_NAMESPACE_LOCAL_RANK", local),
                               ("OMPI_COMM_WORLD_LOCAL_SIZE", "JSM_NAMESPACE_LOCAL_SIZE",
                                local_world)):  # fmt: skip
        agree(name, optional_int(environ, name, SAME_JSRUN), other, value, SAME_JSRUN)
    path = require(environ, "LSB_DJOB_RANKFILE", FIX)
    launch, hosts = compute_hosts(path)
    if world != len(hosts) * local_world:
        raise SlurmEnvError(
            f"JSM_NAMESPACE_SIZE={world} is not {len(hosts)} compute hosts of "
            f"LSB_DJOB_RANKFILE x JSM_NAMESPACE_LOCAL_SIZE={local_world}: this jsrun does not "
            "span every host with the same count, so the node of each task is unknown",
            variable="JSM_NAMESPACE_SIZE", value=str(world),
            fix="give jsrun every host of the job with the same tasks per host, or pass "
            "--master-addr and set the variables yourself",
        )
    # jsrun's default (packed) distribution fills each host's resource sets in host order:
    # rank r on host r // LOCAL_SIZE as local rank r % LOCAL_SIZE. Every task checks its own
    # local rank against it, so another distribution (cyclic, plane) is refused by some task.
    node, expected_local = divmod(rank, local_world)
    if local != expected_local:
        raise SlurmEnvError(
            f"JSM_NAMESPACE_LOCAL_RANK={local} but jsrun's packed distribution would make rank "
            f"{rank} local rank {expected_local} of host {node}: another distribution (-d "
            "cyclic/plane?) whose placement the environment does not tell",
            variable="JSM_NAMESPACE_LOCAL_RANK", value=str(local),
            fix="use jsrun's default packed distribution, or pass --master-addr and set the "
            "variables yourself",
        )
    host = hosts[node]
    job = read_int(environ, "LSB_JOBID", FIX)
    told = "the rank file LSB_DJOB_RANKFILE"  # no path: a replay reads a copy elsewhere
    sources = {
        "RANK": f"JSM_NAMESPACE_RANK={rank}", "WORLD_SIZE": f"JSM_NAMESPACE_SIZE={world}",
        "LOCAL_RANK": f"JSM_NAMESPACE_LOCAL_RANK={local}",
        "LOCAL_WORLD_SIZE": f"JSM_NAMESPACE_LOCAL_SIZE={local_world}",
        **node_sources(
            f"rank {rank} // JSM_NAMESPACE_LOCAL_SIZE={local_world} (jsrun's packed "
            f"distribution, checked with the local rank): compute host {node} ({host}) of {told}",
            f"{len(hosts)} compute hosts of {told} (after the launch node {launch})",
        ),
    }
    return Task(
        launcher=NAME, rank=rank, local_rank=local, world_size=world,
        local_world_size=local_world, node_rank=node, nnodes=len(hosts), hostname=host,
        sources=sources, master_host=hosts[0],
        master_source=f"first compute host of {told} (line 1, {launch}, is the launch node), "
        "where jsrun puts its first resource set",
        port_seed=(job, 0), port_seed_source=f"LSB_JOBID={job} (one jsrun at a time per job)",
        reserved_ports=None, topology=Topology(), job_id=str(job),
        origin=f"a task of jsrun in LSF job {job}", label=f"LSF job {job}",
    )
