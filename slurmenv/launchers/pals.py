"""Cray PALS ranks: PBS Pro / OpenPBS jobs started with HPE's ``mpiexec`` (ALCF Polaris and
Aurora), and any task whose PALS variables are its launcher's only word (Slurm's
``srun --mpi=cray_shasta`` writes the same variables and apinfo file; inside such a step the
``slurm`` launcher comes first and Slurm's own variables stay the truth).

What a PALS rank carries (HPE's ``pals.h``; PMI_* and PALS_LOCAL_* are documented only, not
observed here): ``PALS_RANKID``, ``PALS_NODEID``, ``PALS_LOCAL_RANKID``, ``PALS_LOCAL_SIZE``,
``PMI_RANK``, ``PMI_SIZE``, ``PMI_LOCAL_RANK``, ``PMI_LOCAL_SIZE`` and ``PALS_APINFO``, a binary
file (``apinfo.py``) telling every rank's node and local index and every node's name: the
whole layout and rank 0's host come from it. Every value present is checked against the file.

* ``PMI_CONTROL_PORT`` lists ports libpals itself binds on every node: never ``MASTER_PORT``
  (the shared port precedence in ``pipeline.derive`` skips them, for every launcher).
* Without ``PALS_APINFO``, ``PBS_NODEFILE``'s first host is rank 0's node only when mpiexec
  used the default host file (no ``--hostfile``/``--hosts``): the source sentence says so.
* Port seed: ``PBS_JOBID`` (its number) with the launch's ``PALS_APID`` hashed, taken outside
  the job's block (``ports.launch_ports``), and rank 0 looks for a rival launch on its node
  holding that port (``rivals.py``, launch key ``PALS_APID``); Slurm's cray_shasta sets
  ``PALS_APID=<job>.<step>``, which seeds it exactly as Slurm's own IDs (the step formula).
  PBS is never detected from ``PBS_JOBID`` alone: Slurm's ``spank_pbs`` plugin sets it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import SlurmEnvError, is_number
from .base import Task, Topology, agree, hashed_id, node_sources, optional_int, read_int

NAME = "pals"
VARIABLES = (
    "PALS_RANKID", "PALS_NODEID", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", "PALS_APINFO",
    "PALS_APID", "PMI_RANK", "PMI_SIZE", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", "PMI_CONTROL_PORT",
    "PBS_JOBID", "PBS_NODEFILE", "PBS_ENVIRONMENT",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
#: Set only in a rank PALS started (local.py refuses the single-process default then); PMI_*
#: also by srun --mpi=pmi2 and Hydra, whose modules list them too.
TASK_VARIABLES = ("PALS_RANKID", "PALS_NODEID", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE",
                  "PALS_APID", "PALS_APINFO", "PMI_RANK", "PMI_SIZE", "PMI_LOCAL_RANK",
                  "PMI_LOCAL_SIZE")
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "PALS_RANKID"),)
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}
FIX = (
    "run slurmenv inside the rank that PALS mpiexec (or srun --mpi=cray_shasta) started; "
    "PALS sets this variable in every rank"
)
SAME_LAUNCH = (
    "these come from the same PALS launch: do not set them by hand, and resolve inside the "
    "rank (a PALS_APINFO file left from another launch?)"
)
NODEFILE_CAVEAT = (
    "valid only when mpiexec used the default host file (no --hostfile/--hosts); pass "
    "--master-addr otherwise"
)


def detect(environ: Mapping[str, str]) -> bool:
    """A PALS rank: ``PALS_RANKID`` is set (PBS_JOBID alone is not PBS: spank_pbs sets it)."""
    return bool(environ.get("PALS_RANKID"))


def port_seed(environ: Mapping[str, str]) -> tuple[tuple[int, int] | None, str]:
    """(job, launch) for the port formula, and the sentence naming the variables."""
    apid = environ.get("PALS_APID", "")
    job_text, dot, step_text = apid.partition(".")
    slurm_apid = bool(dot) and is_number(job_text) and is_number(step_text)
    pbs_job = environ.get("PBS_JOBID", "")
    number = pbs_job.partition(".")[0].partition("[")[0]
    if is_number(number):
        if slurm_apid:
            launch, why = int(step_text), f"PALS_APID={apid} (step {step_text})"
        elif apid:
            launch, why = hashed_id("PALS_APID", apid)
        else:
            launch, why = 0, "no PALS_APID: one launch per job"
        return (int(number), launch), f"PBS_JOBID={pbs_job}, {why}"
    if slurm_apid:
        return (int(job_text), int(step_text)), f"PALS_APID={apid} (Slurm's <job>.<step>)"
    if apid:
        hashed, why = hashed_id("PALS_APID", apid)
        return (hashed, hashed), why
    return None, "no PBS_JOBID and no PALS_APID: nothing names this launch in every rank"


def launch_key(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """``("PALS_APID", apid)`` when the port seed hashes the APID (a PBS launch): concurrent
    launches of one job can then draw one port, so the port lies outside the job's block and
    rank 0 looks for rival launches (``rivals.py``). None for Slurm's ``<job>.<step>`` APID,
    a step ID of its own, and without an APID."""
    apid = environ.get("PALS_APID", "")
    job_text, dot, step_text = apid.partition(".")
    if not apid or (dot and is_number(job_text) and is_number(step_text)):
        return None
    return "PALS_APID", apid


class PalsLayout(Topology):
    """The layout an apinfo file tells: node and local index of every rank, node names."""

    layout_known = True

    def __init__(self, hosts: Sequence[str], node_of: Sequence[int], local_of: Sequence[int],
                 source: str, environ: Mapping[str, str]) -> None:  # fmt: skip
        self.environ = environ  # for the variable a refusal names
        self._hosts = list(hosts)
        self._node_of = list(node_of)
        self._local_of = list(local_of)
        self.source = source
        counts = [0] * len(self._hosts)
        for node in self._node_of:
            counts[node] += 1
        self.counts = counts

    def hosts(self) -> list[str]:
        return self._hosts

    def node_of(self) -> list[int]:
        return self._node_of

    def local_of(self) -> list[int]:
        return self._local_of

    def largest_local(self) -> int:
        return max(self.counts)

    def layout_name(self) -> str:
        return f"as the apinfo file tells ({self.source})"

    def tf_source(self) -> str:
        # a sentence only: too few ports refuse TF_CONFIG itself, not the whole resolution
        return f"{self.source}, TensorFlow ports {self.port_plan.tf[: max(self.counts)]} by " \
            "local rank"

    def tf_ports(self) -> list[int]:
        needed = max(self.counts)
        tf = self.port_plan.tf
        if len(tf) < needed:
            from ..ports import too_few_tf_ports

            raise too_few_tf_ports(self.port_plan, needed, self.environ)
        return tf[:needed]

    def tf_workers(self) -> list[str]:
        from .. import ports

        tf = self.tf_ports()
        for port in tf:
            ports.check_outside(port, self.ephemeral, "TF_CONFIG port")
        hosts = self.addresses(self._hosts)
        return [f"{hosts[n]}:{tf[k]}" for n, k in zip(self._node_of, self._local_of)]


def _number(environ: Mapping[str, str], name: str) -> int | None:
    return optional_int(environ, name, SAME_LAUNCH)


def _agree(environ: Mapping[str, str], names: Sequence[str], other: str, value: int) -> None:
    """Every variable of ``names`` that is set must equal ``value``, what ``other`` tells."""
    for name in names:
        agree(name, _number(environ, name), other, value, SAME_LAUNCH)


def read(environ: Mapping[str, str]) -> Task:
    """One PALS rank: its place from the apinfo file, checked against the PALS/PMI values."""
    rank = read_int(environ, "PALS_RANKID", FIX)
    _agree(environ, ("PMI_RANK",), "PALS_RANKID", rank)
    path = environ.get("PALS_APINFO")
    if path:
        return apinfo_task(environ, rank, path)
    return _from_nodefile(environ, rank)


def apinfo_task(environ: Mapping[str, str], rank: int, path: str) -> Task:
    """A rank whose place the apinfo file at ``path`` tells, checked against PALS_*/PMI_*
    (also the Flux launcher's, with its cray-pals plugin)."""
    from . import apinfo

    info = apinfo.read(path)
    world = len(info.nodes)
    if rank >= world:
        raise SlurmEnvError(
            f"PALS_RANKID={rank} but the apinfo file {path} lists {world} ranks",
            variable="PALS_RANKID", value=str(rank), fix=apinfo.FIX,
        )
    node, local = info.nodes[rank], info.local[rank]
    where = f"the apinfo file (PALS_APINFO, version {info.version})"
    _agree(environ, ("PMI_SIZE",), f"the rank count of {where}", world)
    _agree(environ, ("PALS_NODEID",), f"the node index of rank {rank} in {where}", node)
    _agree(environ, ("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"),
           f"the local index of rank {rank} in {where}", local)  # fmt: skip
    counts = info.counts
    _agree(environ, ("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE"),
           f"the rank count of node {node} in {where}", counts[node])  # fmt: skip
    hosts = info.hosts
    master = hosts[info.nodes[0]]
    told = f"the apinfo file PALS_APINFO (version {info.version})"  # no path: see dump
    sources = {
        "RANK": f"PALS_RANKID={rank}",
        "LOCAL_RANK": f"local index of rank {rank} in {told}",
        "WORLD_SIZE": f"{world} ranks in {told}",
        "LOCAL_WORLD_SIZE": f"{counts[node]} ranks on node {node} ({hosts[node]}) in {told}",
        **node_sources(f"node index of rank {rank} in {told}", f"{len(hosts)} nodes in {told}"),
    }
    notes: list[str] = []
    if info.ncmds > 1:
        notes.append(f"MPMD launch of {info.ncmds} commands: the world spans all of them")
    seed, seed_source = port_seed(environ)
    return Task(
        launcher=NAME, rank=rank, local_rank=local, world_size=world,
        local_world_size=counts[node], node_rank=node, nnodes=len(hosts),
        hostname=hosts[node], sources=sources, master_host=master,
        master_source=f"node of rank 0 = {master} in {told}",
        port_seed=seed, port_seed_source=seed_source, reserved_ports=None,
        topology=PalsLayout(hosts, info.nodes, info.local, told, environ),
        job_id=environ.get("PBS_JOBID") or None, step_id=environ.get("PALS_APID") or None,
        own_bindings=True, notes=tuple(notes),
        origin=_origin(environ), label=_label(environ), launch_key=launch_key(environ),
    )


def _from_nodefile(environ: Mapping[str, str], rank: int) -> Task:
    """No apinfo file: PALS_*/PMI_* give this rank; PBS_NODEFILE the first host, with its caveat."""
    missing = "PALS_APINFO is not set, so the layout cannot be read"
    world = _number(environ, "PMI_SIZE")
    local = _number(environ, "PALS_LOCAL_RANKID")
    if local is None:
        local = _number(environ, "PMI_LOCAL_RANK")
    local_size = _number(environ, "PALS_LOCAL_SIZE")
    if local_size is None:
        local_size = _number(environ, "PMI_LOCAL_SIZE")
    node = _number(environ, "PALS_NODEID")
    path = environ.get("PBS_NODEFILE")
    for name, value in (("PMI_SIZE", world), ("PALS_LOCAL_RANKID", local),
                        ("PALS_LOCAL_SIZE", local_size), ("PALS_NODEID", node),
                        ("PBS_NODEFILE", path)):  # fmt: skip
        if value is None:
            raise SlurmEnvError(
                f"{missing} and {name} is not set either", variable="PALS_APINFO", value=None,
                fix="resolve inside a rank that PALS mpiexec started (it sets PALS_APINFO), "
                "or pass --master-addr and set RANK, WORLD_SIZE and MASTER_PORT yourself",
            )
    assert world is not None and local is not None and local_size is not None
    assert node is not None and path is not None
    _agree(environ, ("PMI_LOCAL_RANK",), "PALS_LOCAL_RANKID", local)
    _agree(environ, ("PMI_LOCAL_SIZE",), "PALS_LOCAL_SIZE", local_size)
    hosts = _nodefile_hosts(path)
    if rank >= world or local >= local_size or node >= len(hosts):
        raise SlurmEnvError(
            f"PALS_RANKID={rank}, PALS_LOCAL_RANKID={local}, PALS_NODEID={node} do not fit "
            f"PMI_SIZE={world}, PALS_LOCAL_SIZE={local_size} and the {len(hosts)} hosts of "
            f"PBS_NODEFILE={path}",
            variable="PBS_NODEFILE", value=path, fix=NODEFILE_CAVEAT,
        )
    told = "PBS_NODEFILE"  # no path: a replay reads a copy elsewhere
    sources = {
        "RANK": f"PALS_RANKID={rank}",
        "LOCAL_RANK": f"PALS_LOCAL_RANKID={local}",
        "WORLD_SIZE": f"PMI_SIZE={world}",
        "LOCAL_WORLD_SIZE": f"PALS_LOCAL_SIZE={local_size}",
        **node_sources(
            f"PALS_NODEID={node}", f"{len(hosts)} distinct hosts of {told}, {NODEFILE_CAVEAT}"
        ),
    }
    seed, seed_source = port_seed(environ)
    return Task(
        launcher=NAME, rank=rank, local_rank=local, world_size=world,
        local_world_size=local_size, node_rank=node, nnodes=len(hosts), hostname=hosts[node],
        sources=sources, master_host=hosts[0],
        master_source=f"first host of {told} ({missing}; {NODEFILE_CAVEAT})",
        port_seed=seed, port_seed_source=seed_source, reserved_ports=None,
        topology=Topology(), job_id=environ.get("PBS_JOBID") or None,
        step_id=environ.get("PALS_APID") or None, own_bindings=True,
        notes=(f"rank 0's host is the first host of PBS_NODEFILE: {NODEFILE_CAVEAT}",),
        origin=_origin(environ), label=_label(environ), launch_key=launch_key(environ),
    )


def _nodefile_hosts(path: str) -> list[str]:
    """The distinct hosts of a PBS node file (one line per slot), in first-seen order."""
    from .. import readfile as files

    text = files.read_text(path, "PBS_NODEFILE", "PBS_NODEFILE must name the job's node file")
    lines = [] if text is None else text.split()
    if text is None:
        raise SlurmEnvError(
            f"cannot read PBS_NODEFILE {path}", variable="PBS_NODEFILE",
            value=path, fix="resolve on a node of the job, where PBS writes the file",
        ) from None
    hosts = list(dict.fromkeys(lines))
    if not hosts:
        raise SlurmEnvError(
            f"PBS_NODEFILE {path} is empty", variable="PBS_NODEFILE", value=path,
            fix=NODEFILE_CAVEAT,
        )
    return hosts


def _origin(environ: Mapping[str, str]) -> str:
    apid = environ.get("PALS_APID") or "?"
    if environ.get("PBS_ENVIRONMENT"):
        return f"a rank of PALS application {apid} in PBS job {environ.get('PBS_JOBID', '?')}"
    return f"a rank of PALS application {apid}"


def _label(environ: Mapping[str, str]) -> str:
    return f"PALS application {environ.get('PALS_APID') or '?'}"
