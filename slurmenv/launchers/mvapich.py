"""MVAPICH2: ranks started by ``mpirun_rsh`` (documented variables only: not installed here).

The MVAPICH2 user guide documents ``MV2_COMM_WORLD_RANK``, ``MV2_COMM_WORLD_SIZE``,
``MV2_COMM_WORLD_LOCAL_RANK`` and ``MV2_COMM_WORLD_LOCAL_SIZE`` in every rank. MVAPICH2's
Hydra-based ``mpiexec`` also sets Hydra's variables and is read by ``hydra`` (earlier in the
registry); ``srun --mpi=pmi2`` ranks are Slurm tasks.

Nothing documented names rank 0's node or an id shared by the ranks of one launch, so:
all ranks on one node resolve (loopback; ``--port`` required, no launch id to derive a port
from); over several nodes slurmenv refuses and says what to pass. Slurm variables found here
are never taken as the rank's; a step with several tasks on a node means the variables leaked.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import SlurmEnvError
from . import mpi
from .base import Task, node_sources

NAME = "mvapich"
COUNTS = (
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)
VARIABLES = (*COUNTS, "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
             "SLURM_STEP_NUM_NODES", "SLURM_LOCALID")
PREFIXES: tuple[str, ...] = ()
#: Set only in a rank mpirun_rsh started; not MV2_* settings (local.py).
TASK_VARIABLES = COUNTS
WHO = "MVAPICH2's mpirun_rsh"
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = tuple(zip(("rank", "world_size", "local_rank", "local_world_size"), COUNTS))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}


def detect(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("MV2_COMM_WORLD_RANK"))


def read(environ: Mapping[str, str]) -> Task:
    """This rank of an MVAPICH2 launch, on one node; several nodes are refused."""
    counts = mpi.read_counts(environ, COUNTS, WHO)
    job = mpi.job_id(environ)
    step_text = mpi.step_id(environ) if job else None
    if step_text is not None:
        mpi.check_daemon_shape(environ, counts, WHO, mpi.read_step(environ, step_text))
    if not counts.one_node:
        raise SlurmEnvError(
            f"this MVAPICH2 launch spans several nodes ({COUNTS[3]}={counts.local_size} < "
            f"{COUNTS[1]}={counts.size}) and no documented MVAPICH2 variable tells this rank's "
            "node index, the node count or which node holds rank 0",
            variable=COUNTS[3], value=str(counts.local_size),
            fix="start the ranks with srun --mpi=pmi2 (slurmenv reads Slurm's variables) or with "
            "MVAPICH2's Hydra mpiexec; or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT yourself",
        )
    sources = counts.sources()
    one = counts.one_node_source
    sources.update(node_sources(one, one))
    master = mpi.one_node_master(counts)
    return Task(
        launcher=NAME, rank=counts.rank, local_rank=counts.local_rank, world_size=counts.size,
        local_world_size=counts.local_size, node_rank=0, nnodes=1, hostname="",
        sources=sources, master_host=master.host, master_source=master.source,
        port_seed=None, port_seed_source="MVAPICH2 sets no id shared by the ranks of one launch "
        "(pass --port, e.g. mpirun_rsh … SLURMENV_PORT=29500 …)",
        reserved_ports=None, topology=mpi.MpiTopology(WHO), job_id=job,
        step_id=step_text, own_bindings=False,
        origin="a rank of MVAPICH2's mpirun_rsh" + (f" in Slurm job {job}" if job else ""),
        label="MVAPICH2",
    )
