"""Open MPI: ranks started by ``mpirun``/``orterun`` (4.x) or ``mpirun``/``prterun`` (5.x).

Each rank gets ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE`` (4.x and
5.x, documented in ``mpirun(1)``). What else it has, observed with Open MPI 4.1.4 under Slurm
22.05.8 (``tests/fixtures/mpi/openmpi_*.json``):

* ranks on ``mpirun``'s own node carry the batch script's Slurm variables (no
  ``SLURM_STEP_ID``) and ``OMPI_MCA_orte_local_daemon_uri`` = ``OMPI_MCA_orte_hnp_uri``;
* ranks on other nodes carry the variables of the ``orted`` daemon step (one task per node,
  ``SLURM_PROCID`` = the daemon's index, the same for every rank of the node), whose
  ``SLURMD_NODENAME`` is their node;
* ``OMPI_MCA_ess_base_jobid`` is the same in every rank of one ``mpirun`` and differs between
  two ``mpirun`` (its upper 16 bits are the job family, made from ``mpirun``'s host and PID);
  ``OMPI_MCA_orte_num_nodes`` is the number of nodes that hold ranks;
* the default mapping (by slot), ``--map-by node`` and ``--npernode N`` put rank 0 on
  ``mpirun``'s node, the batch script's node: the first node of ``SLURM_JOB_NODELIST``
  (``sbatch(1)``: the script runs on the first node of the allocation). ``--host`` lists in
  another order do not move it; a ``--host`` list without that node does (rank 0 then runs on
  the first listed node in allocation order).

**Rank 0's node.** No Open MPI variable names it. Inside a Slurm job slurmenv takes the first
node of ``SLURM_JOB_NODELIST`` and makes it a fact by two checks each rank can make of itself
(``SLURMD_NODENAME`` is its node): rank 0 must run there, and the lowest rank there (local rank
0) must be rank 0. A mapping that puts rank 0 elsewhere is refused by those ranks, and ``mpirun``
then aborts every rank (it does on a non-zero exit). When all ranks share one node (local size =
size) the address is loopback. Elsewhere (outside Slurm on several nodes) it is refused: give
``--master-addr``.

**Ports.** The ranks on ``mpirun``'s node see no step ID, so the launch ID is the job family
(``OMPI_MCA_ess_base_jobid >> 16``; 5.x: a hash of ``PMIX_NAMESPACE``), the same in every rank
of one ``mpirun``. ``ports.launch_ports`` takes the port anywhere in the range outside the job's
own block (so never a port of the job's ``srun`` steps), and rank 0 refuses a port that the rank
0 of another live ``mpirun`` on its node holds (``rivals.py``; the launch key is
``OMPI_MCA_ess_base_jobid`` or ``PMIX_NAMESPACE``). Outside Slurm there is no job ID:
``--port`` is required. The daemon step's ``SLURM_STEP_RESV_PORTS`` are not used: the ranks on
``mpirun``'s node do not see them.

**Open MPI 5** (PRRTE's ``prterun``; observed with the 5.0.11 wheel, ``tests/fixtures/mpi/
openmpi5_*.json``): the ranks carry ``OMPI_COMM_WORLD_*``, ``PMIX_NAMESPACE`` (the launch key),
``PMIX_HOSTNAME`` and ``PMIX_SERVER_URI*`` = ``<namespace>@0.<vpid>;…``, the vpid of the daemon
serving the rank: 0 is ``mpirun``, daemon ``k`` of the daemon step is ``SLURM_NODEID + 1``. No
``OMPI_MCA_orte_*``: nothing tells how many nodes hold ranks (PRRTE starts a daemon on every
node of the allocation or ``--host`` list, ranks or not; ``OMPI_COMM_WORLD_NODE_RANK`` is the
rank among its node's processes, ``OMPI_UNIVERSE_SIZE`` the slots). So over several nodes
``NODE_RANK``, ``GROUP_RANK`` and ``NNODES`` are left out (never guessed; torch's ``env://``
does not need them), ``TF_CONFIG`` and torchrun's options are refused, and everything else is
resolved as for 4.x. The daemon vpid must match the daemon step's node index, and be 0 on
``mpirun``'s node: an ``srun`` started inside a rank is refused as a leak.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import nodes
from ..errors import SlurmEnvError, parse_int
from . import mpi
from .base import Task, hashed_id, node_sources

NAME = "openmpi"
COUNTS = (
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)
#: Open MPI 5's PMIx server URIs, by PMIx version, newest first (:func:`daemon_vpid`).
SERVER_URIS = ("PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
               "PMIX_SERVER_URI2")
VARIABLES = (
    *COUNTS, "OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE", "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_orte_local_daemon_uri", "OMPI_MCA_orte_num_nodes",
    "PMIX_RANK", "PMIX_NAMESPACE", "PMIX_HOSTNAME", *SERVER_URIS,
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOB_NODELIST",
    "SLURM_NODELIST", "SLURMD_NODENAME", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_PROCID",
)  # fmt: skip
#: dump records every OMPI_* and PMIX_* (OMPI_MCA_orte_precondition_transports is redacted).
PREFIXES: tuple[str, ...] = ()
#: Set only in a rank Open MPI (or another PMIx launcher) started; not OMPI_MCA_* settings
#: such as OMPI_MCA_btl, which users keep in their shell profiles (local.py).
TASK_VARIABLES = (*COUNTS, "OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE",
                  "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri", "PMIX_RANK",
                  "PMIX_NAMESPACE")
WHO = "Open MPI's mpirun"
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = tuple(zip(("rank", "world_size", "local_rank", "local_world_size"), COUNTS))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}


def detect(environ: Mapping[str, str]) -> bool:
    """Open MPI (or, later in the registry, LSF's jsrun) set OMPI_COMM_WORLD_RANK."""
    return bool(environ.get("OMPI_COMM_WORLD_RANK"))


def _launch_id(environ: Mapping[str, str]) -> tuple[int, str, tuple[str, str]] | None:
    """The id every rank of one mpirun shares (the 4.x job family, or a hash of 5.x's
    PMIX_NAMESPACE), its sentence and the launch key (the variable that names the launch)."""
    jobid = environ.get("OMPI_MCA_ess_base_jobid")
    if jobid:
        family = parse_int("OMPI_MCA_ess_base_jobid", jobid) >> 16
        return (family, f"Open MPI job family {family} (OMPI_MCA_ess_base_jobid={jobid} >> 16)",
                ("OMPI_MCA_ess_base_jobid", jobid))
    namespace = environ.get("PMIX_NAMESPACE")
    if namespace:
        return (*hashed_id("PMIX_NAMESPACE", namespace), ("PMIX_NAMESPACE", namespace))
    return None


def read(environ: Mapping[str, str]) -> Task:
    """This rank of an Open MPI launch (see the module docstring for every rule)."""
    # Open MPI 5 (PRRTE) numbers a node's local ranks in mapping order, not rank order
    version5 = not environ.get("OMPI_MCA_orte_hnp_uri") and daemon_vpid(environ) is not None
    counts = mpi.read_counts(environ, COUNTS, WHO, ordered=not version5)
    job = mpi.job_id(environ)
    hnp = environ.get("OMPI_MCA_orte_hnp_uri")
    daemon_uri = environ.get("OMPI_MCA_orte_local_daemon_uri")
    vpid = daemon_vpid(environ)
    # True: mpirun started this rank itself, on its own node (4.x: the daemon URI is mpirun's;
    # 5.x: the PMIx server of this rank is daemon 0, mpirun); None: cannot tell.
    by_mpirun = (hnp == daemon_uri) if (hnp and daemon_uri) else (
        None if vpid is None else vpid == 0)
    sources = counts.sources()
    notes: list[str] = []
    launch = _launch_id(environ)
    step: mpi.Step | None = None
    node: str | None = None  # this rank's node name, where Slurm tells it
    if job is None:
        origin = "a rank of Open MPI's mpirun, outside any Slurm job"
        port_seed, seed_source = None, ("outside a Slurm job no job ID exists to derive a port "
            "from (pass --port, e.g. mpirun -x SLURMENV_PORT=29500 …)")
    else:
        step_text = mpi.step_id(environ)
        if step_text is not None:
            step = mpi.read_step(environ, step_text)
            if by_mpirun:
                if step.ntasks != 1:
                    raise mpi.refuse_leak(
                        environ, counts, WHO,
                        "is not the step mpirun ran in (OMPI_MCA_orte_local_daemon_uri = "
                        "OMPI_MCA_orte_hnp_uri says mpirun started this rank itself, and an "
                        "mpirun started inside a step of several tasks is one of several)",
                    )
            else:
                mpi.check_daemon_shape(environ, counts, WHO, step)
        node = environ.get("SLURMD_NODENAME") or None
        if step is None and by_mpirun is False:
            node = None  # an orted not started by srun (ssh?): the script's name is not ours
        job_number = parse_int("SLURM_JOB_ID", job)
        if launch is None:
            port_seed, seed_source = None, ("neither OMPI_MCA_ess_base_jobid nor PMIX_NAMESPACE "
                "is set, so no id is shared by the ranks of this mpirun")
        else:
            port_seed = (job_number, launch[0])
            seed_source = f"Slurm job {job} and {launch[1]}, outside the job's own block"
        origin = f"a rank of Open MPI's mpirun in Slurm job {job}" + (
            f" (its Slurm variables are those of step {step.id}, "
            + ("the step mpirun ran in)" if by_mpirun else "the orted daemon step: one task per node)")
            if step else " (its Slurm variables are the batch script's: mpirun's own node)"
        )
        notes.append(
            "SLURM_PROCID/SLURM_LOCALID/SLURM_STEP_NUM_TASKS here are not this rank's: they "
            + ("belong to Open MPI's daemon step" if step and not by_mpirun else
               "belong to the batch script or the step mpirun ran in")
        )

    if counts.one_node:
        master = mpi.one_node_master(counts)
        node_rank, nnodes = 0, 1
        node_source = counts.one_node_source
    elif job is None:
        # over several nodes outside Slurm: rank 0's address and the port must be given
        # (--master-addr, --port, the same in every rank); the node values are not told
        master = mpi.Master(None, "outside a Slurm job no variable tells which node holds rank 0 "
                            "(Open MPI's ranks only know their own place)")
        node_rank, nnodes, node_source = 0, 0, NOT_TOLD
    else:
        master, node_rank, nnodes, node_source = _in_job(
            environ, counts, step, by_mpirun, node, ordered=not version5)
    unknown: tuple[str, ...] = ()
    if nnodes == 0:  # Open MPI 5 over several nodes: no variable tells them (module docstring)
        unknown = ("NODE_RANK", "GROUP_RANK", "NNODES")
        sources.update(node_sources(NOT_TOLD, NOT_TOLD))
    else:
        sources.update(node_sources(
            node_source, node_source if counts.one_node else _nnodes_source(environ)
        ))
    return Task(
        launcher=NAME, rank=counts.rank, local_rank=counts.local_rank, world_size=counts.size,
        local_world_size=counts.local_size, node_rank=node_rank, nnodes=nnodes,
        hostname=node or "", sources=sources, master_host=master.host,
        master_source=master.source, port_seed=port_seed, port_seed_source=seed_source,
        reserved_ports=None, topology=mpi.MpiTopology(WHO), job_id=job,
        step_id=step.id if step else None, own_bindings=False,
        notes=tuple(notes),
        origin=origin, label=f"Open MPI job {job or '-'}",
        launch_key=launch[2] if launch else None, unknown=unknown,
    )


#: Why NODE_RANK and NNODES are left out under Open MPI 5 over several nodes.
NOT_TOLD = (
    "not told by Open MPI 5: its ranks carry no node count (4.x's OMPI_MCA_orte_num_nodes is "
    "gone) and PRRTE starts daemons on nodes that may hold no rank, so neither can be counted "
    "without a guess; torch's env:// does not need them"
)


def daemon_vpid(environ: Mapping[str, str]) -> int | None:
    """Open MPI 5: the vpid of the PRRTE daemon whose PMIx server this rank talks to, from
    ``PMIX_SERVER_URI*`` (``<namespace>@0.<vpid>;tcp4://…``): 0 is ``mpirun`` itself, daemon
    ``k`` of the daemon step is ``SLURM_NODEID + 1`` (observed, tests/fixtures/mpi/). None when
    absent or malformed."""
    from ..errors import to_int

    for name in SERVER_URIS:
        uri = environ.get(name)
        if uri:
            rank = uri.partition(";")[0].rpartition("@")[2]
            return to_int(rank.partition(".")[2]) if rank.startswith("0.") else None
    return None


def _nnodes_source(environ: Mapping[str, str]) -> str:
    return f"OMPI_MCA_orte_num_nodes={environ.get('OMPI_MCA_orte_num_nodes')} (nodes holding ranks)"


def _version5(
    environ: Mapping[str, str],
    counts: mpi.Counts,
    step: mpi.Step | None,
    by_mpirun: bool | None,
    master: mpi.Master,
    here: bool | None,
    where: str,
) -> tuple[mpi.Master, int, int, str]:
    """Open MPI 5 over several nodes inside a Slurm job: rank 0's node is proven as for 4.x;
    NODE_RANK and NNODES are not told (returned as 0, 0: ``read`` marks them unknown). The
    daemon vpid must be this rank's daemon step index + 1, else the Slurm variables are those
    of another step (an srun started inside a rank) and are refused."""
    vpid = daemon_vpid(environ)
    if vpid is None:
        raise SlurmEnvError(
            "this Open MPI rank carries neither OMPI_MCA_orte_num_nodes (4.x) nor a "
            "PMIX_SERVER_URI naming its daemon (5.x)",
            variable="PMIX_SERVER_URI41", value=None,
            fix="run slurmenv in the rank mpirun started, with the variables Open MPI set "
            "(a container must pass OMPI_* and PMIX_* through)",
        )
    if here is False and not by_mpirun:
        if step is None or vpid != step.node_index + 1:
            raise mpi.refuse_leak(
                environ, counts, WHO,
                f"is not Open MPI's daemon step: this rank's daemon is vpid {vpid} "
                f"(PMIX_SERVER_URI), but {'no step' if step is None else f'SLURM_NODEID={step.node_index}'}"
                " would make it daemon " + ("?" if step is None else str(step.node_index + 1)),
            )
    elif here and not by_mpirun and vpid != 0:
        raise mpi.refuse_leak(
            environ, counts, WHO,
            f"says this rank runs on mpirun's node ({where}), but its daemon is vpid {vpid}, "
            "not mpirun (vpid 0)",
        )
    return master, 0, 0, NOT_TOLD


def _unknown_nodes(counts: mpi.Counts, master: mpi.Master, where: str) -> SlurmEnvError:
    return SlurmEnvError(
        f"this Open MPI launch spans several nodes {where}, and no variable tells this rank's node "
        f"index and the node count (NODE_RANK, NNODES) nor where rank 0 runs: {master.source}",
        variable="OMPI_MCA_orte_num_nodes", value=None,
        fix="start mpirun in the batch script itself (not through ssh or inside a step), whose "
        "daemon step tells every rank its node; or start the ranks with srun --mpi=pmi2; or pass "
        "--master-addr and export only --for torch",
    )


def _in_job(
    environ: Mapping[str, str],
    counts: mpi.Counts,
    step: mpi.Step | None,
    by_mpirun: bool | None,
    node: str | None,
    ordered: bool = True,
) -> tuple[mpi.Master, int, int, str]:
    """Rank 0's node and this rank's node index inside a Slurm job, over several nodes."""
    joblist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not joblist:
        raise SlurmEnvError(
            "SLURM_JOB_NODELIST is not set in this Open MPI rank of a Slurm job",
            variable="SLURM_JOB_NODELIST", value=None,
            fix="Slurm sets it in the batch script and every step; do not unset it",
        )
    first = nodes.NodeList(joblist, "SLURM_JOB_NODELIST")[0]
    because = (
        "Open MPI's default mapping, --map-by node and --npernode put rank 0: mpirun's node, the "
        f"batch script's (the first node of SLURM_JOB_NODELIST={joblist})"
    )
    here = None if node is None else node == first
    where = f"SLURMD_NODENAME={node}" if node else "SLURMD_NODENAME unset"
    master = mpi.rank0_check(counts, here, where, first, because, ordered) or mpi.Master(
        first, f"node of rank 0 = {first}: {because}; rank 0 and the lowest rank there check it"
    )
    num = environ.get("OMPI_MCA_orte_num_nodes")
    if not num:
        return _version5(environ, counts, step, by_mpirun, master, here, where)
    nnodes = parse_int("OMPI_MCA_orte_num_nodes", num, minimum=1)
    if here:
        node_rank, source = 0, f"0: this rank runs on {first}, the node of rank 0 ({where})"
    elif step is not None and not by_mpirun and node is not None:
        daemons = step.node_list().names()
        shift = 0 if first in daemons else 1
        if step.nnodes + shift < nnodes:  # Open MPI runs a daemon on every other node with ranks
            raise mpi.refuse_leak(
                environ, counts, WHO,
                f"spans {step.nnodes} node(s), fewer than the {nnodes - shift} other nodes "
                f"holding ranks of this launch (OMPI_MCA_orte_num_nodes={nnodes}), each of which "
                "runs an Open MPI daemon of the daemon step",
            )
        node_rank = step.node_index + shift
        source = (
            f"SLURM_NODEID={step.node_index} of Open MPI's daemon step "
            f"(SLURM_STEP_NODELIST={step.nodelist}" + (f", without mpirun's node {first}) + 1"
                                                       if shift else ")")
        )
    else:
        raise _unknown_nodes(counts, master, f"from a node slurmenv cannot place ({where})")
    if node_rank >= nnodes:
        raise SlurmEnvError(
            f"this rank's node index {node_rank} ({source}) is not below "
            f"OMPI_MCA_orte_num_nodes={nnodes}: mpirun's node {first} runs no rank of this "
            "launch (a --host list without it, --nolocal?), so the daemon step's node index is "
            "not this node's index in the launch",
            variable="SLURM_NODEID", value=str(step.node_index if step else None),
            fix="keep ranks on mpirun's node (the batch script's): Open MPI's default mapping, "
            "--map-by node or --npernode N without a --host list that leaves it out; or start "
            "the ranks with srun --mpi=pmi2",
        )
    return master, node_rank, nnodes, source
