"""Hydra: ranks started by MPICH's ``mpiexec``/``mpiexec.hydra`` (and Intel MPI's, also Hydra).

Each rank gets ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS`` (MPICH
and Intel MPI document them). Observed with MPICH 4.0.2 under Slurm 22.05.8
(``tests/fixtures/mpi/hydra_*.json``):

* inside a Slurm job Hydra starts one ``hydra_pmi_proxy`` per node with ``srun``, only on nodes
  that get ranks, and every rank, the batch node's included, carries that **proxy step**'s
  ``SLURM_STEP_ID``, ``SLURM_STEP_NODELIST``, ``SLURM_STEP_NUM_NODES`` and ``SLURM_NODEID``
  (= its node's index in the proxy step) - but ``SLURMD_NODENAME`` is ``mpiexec``'s, copied
  into every rank, so it is not read;
* ranks are placed on proxies in proxy order and the proxy with ``SLURM_NODEID=0`` holds rank
  0, with the default mapping, ``-ppn N`` and ``-hosts`` lists in any order (Slurm, not the
  ``-hosts`` order, decides which node is proxy 0; ``MPIR_CVAR_CH3_INTERFACE_HOSTNAME`` then
  names the ``-hosts`` entry Hydra *meant*, which can be another node: it is not read);
* a second ``mpiexec`` running at the same time gets a proxy step of its own, possibly on other
  nodes (rank 0 is then not on the job's first node, but on its proxy step's first node).

**Rank 0's node** is the first node of the proxy step's ``SLURM_STEP_NODELIST``; each rank
checks its own side of it: rank 0 must have ``SLURM_NODEID=0``, and the lowest rank of proxy
0 must be rank 0. ``NODE_RANK`` and ``NNODES`` are the proxy step's ``SLURM_NODEID`` and
``SLURM_STEP_NUM_NODES``. All ranks on one node: loopback. Hydra does **not** stop the other
ranks when one exits non-zero (observed): a refused rank 0 leaves them waiting for it until
their own timeout.

**Ports.** Slurm's reserved ports of the proxy step (``SLURM_STEP_RESV_PORTS``) when set, else
the formula from the job ID and the proxy step's ID, exactly as for an ``srun`` step: the proxy
step *is* a step, so its ID differs from every concurrent step's. Outside Slurm (no proxy step)
``--port`` is required.

Detected by ``MPI_LOCALRANKID`` (Hydra's own; ``srun --mpi=pmi2`` and Cray PALS set
``PMI_RANK`` but not it).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError, parse_int
from . import mpi
from .base import Task, node_sources

NAME = "hydra"
COUNTS = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
VARIABLES = (
    *COUNTS, "PMI_FD", "PMI_JOBID", "MPIR_CVAR_CH3_INTERFACE_HOSTNAME", "HYDI_CONTROL_FD",
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS", "SLURM_NODEID", "SLURM_LOCALID",
    "SLURM_PROCID", "SLURM_STEP_RESV_PORTS",
)  # fmt: skip
PREFIXES: tuple[str, ...] = ()
#: Set only in a rank Hydra started; not I_MPI_*/HYDRA_* settings (local.py).
TASK_VARIABLES = (*COUNTS, "PMI_FD", "PMI_JOBID", "HYDI_CONTROL_FD")
WHO = "Hydra's mpiexec"
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = tuple(zip(("rank", "world_size", "local_rank", "local_world_size"), COUNTS))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}


def detect(environ: Mapping[str, str]) -> bool:
    """MPI_LOCALRANKID: only Hydra sets it (PMI_RANK alone is also srun --mpi=pmi2's, PALS's)."""
    return bool(environ.get("MPI_LOCALRANKID"))


def read(environ: Mapping[str, str]) -> Task:
    """This rank of a Hydra launch (see the module docstring for every rule)."""
    counts = mpi.read_counts(environ, COUNTS, WHO)
    job = mpi.job_id(environ)
    step_text = mpi.step_id(environ) if job else None
    sources = counts.sources()
    reserved = None
    step: mpi.Step | None = None
    if step_text is None:
        where = "outside a Slurm job" if job is None else \
            f"in Slurm job {job} but with no proxy step (mpiexec did not start its proxies with srun)"
        origin = f"a rank of Hydra's mpiexec, {where}"
        port_seed, seed_source = None, (f"{where} no launch ID exists to derive a port from "
            "(pass --port, e.g. mpiexec -genv SLURMENV_PORT 29500 …)")
        if not counts.one_node:
            raise SlurmEnvError(
                f"this Hydra launch spans several nodes {where}: no variable tells this rank's "
                "node index, the node count or which node holds rank 0",
                variable="SLURM_STEP_ID", value=None,
                fix="run mpiexec inside a Slurm job with its default (srun) launcher, or srun "
                "--mpi=pmi2; or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT yourself",
            )
        master = mpi.one_node_master(counts)
        node_rank, nnodes = 0, 1
        node_source = node_count = counts.one_node_source
    else:
        step = mpi.read_step(environ, step_text)
        mpi.check_daemon_shape(environ, counts, WHO, step)
        # Hydra starts one proxy on each node with ranks: this node holds local_size ranks, and
        # every other node at least one, so the nodes are 1 (all ranks here) or 2..1+others.
        others = counts.size - counts.local_size
        fewest, most = (1, 1) if counts.one_node else (2, 1 + others)
        if not fewest <= step.nnodes <= most:
            says = ("says every rank runs on this node" if counts.one_node else
                    f"leaves {others} ranks for other nodes, so the ranks span 2 to {most} nodes")
            raise SlurmEnvError(
                f"{COUNTS[3]}={counts.local_size} with {COUNTS[1]}={counts.size} {says}, but this "
                f"rank's Slurm step {step.id} spans {step.nnodes} node(s) (Hydra starts a proxy "
                "on each node with ranks, and only there): these MPI variables leaked into an "
                "srun started inside an MPI rank",
                variable="SLURM_STEP_NUM_NODES", value=str(step.nnodes),
                fix=mpi.LEAK_FIX.format(var=COUNTS[0]),
            )
        assert job is not None
        port_seed = (parse_int("SLURM_JOB_ID", job), parse_int("SLURM_STEP_ID", step.id))
        seed_source = f"Slurm job {job} and Hydra's proxy step {step.id} (a step of its own)"
        resv = environ.get("SLURM_STEP_RESV_PORTS")
        if resv:
            reserved = ("SLURM_STEP_RESV_PORTS", resv)
        origin = f"a rank of Hydra's mpiexec in Slurm job {job} (its Slurm variables are those " \
            f"of proxy step {step.id}: one hydra_pmi_proxy per node)"
        node_rank, nnodes = step.node_index, step.nnodes
        node_source = f"SLURM_NODEID={step.node_index} of Hydra's proxy step {step.id}"
        node_count = f"SLURM_STEP_NUM_NODES={step.nnodes} of Hydra's proxy step {step.id}"
        if counts.one_node:
            master = mpi.one_node_master(counts)
        else:
            first = step.node_list()[0]
            because = f"Hydra puts rank 0 on proxy 0 (SLURM_STEP_NODELIST={step.nodelist})"
            master = mpi.rank0_check(
                counts, step.node_index == 0, f"proxy SLURM_NODEID={step.node_index}", first,
                because,
            ) or mpi.Master(first, f"node of rank 0 = {first}: {because}; rank 0 and the lowest "
                            "rank there check it")
    sources.update(node_sources(node_source, node_count))
    hostname = ""
    if step is not None:
        hostname = step.node_list()[step.node_index]
    return Task(
        launcher=NAME, rank=counts.rank, local_rank=counts.local_rank, world_size=counts.size,
        local_world_size=counts.local_size, node_rank=node_rank, nnodes=nnodes,
        hostname=hostname, sources=sources, master_host=master.host,
        master_source=master.source, port_seed=port_seed, port_seed_source=seed_source,
        reserved_ports=reserved, topology=mpi.MpiTopology(WHO), job_id=job,
        step_id=step.id if step else None, own_bindings=False,
        notes=(
            ("SLURM_PROCID/SLURM_LOCALID/SLURM_STEP_NUM_TASKS here are Hydra's proxy step's, not "
            "this rank's"),
        ),
        origin=origin, label=f"Hydra job {job or '-'}" + (f" proxy step {step.id}" if step else ""),
    )
