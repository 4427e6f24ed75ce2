"""What the MPI launchers (``openmpi``, ``hydra``, ``mvapich``) share.

An MPI rank has no Slurm variables of its own. It inherits those of whatever started it
(observed with Open MPI 4.1.4 and MPICH 4.0.2 under Slurm 22.05.8, ``tests/fixtures/mpi``):

* the batch script's, for the ranks ``mpirun`` starts itself on its own node (no
  ``SLURM_STEP_ID``, ``SLURM_PROCID=0``);
* a **daemon step**'s, for ranks started by the launcher's per-node daemon (Open MPI's
  ``orted``, Hydra's ``hydra_pmi_proxy``), which the launcher starts with ``srun``: one task
  per node, so ``SLURM_PROCID`` is the daemon's node index and ``SLURM_LOCALID`` is 0 in every
  rank of that node.

So a rank's ``SLURM_PROCID``/``SLURM_LOCALID``/``SLURM_STEP_NUM_TASKS`` are never its rank.
This module reads the MPI counts, checks them against each other, tells which of these cases
the Slurm variables come from (and refuses the cases that are neither), and states where rank
0 runs only where that is a fact every rank can check.

**Daemon step or leaked variables?** A task of an ``srun`` started *inside* an MPI rank
inherits the rank's MPI variables although it is not that rank. It is told apart from a rank
under a daemon step by the step's shape: a daemon step runs exactly one task per node
(``SLURM_STEP_NUM_TASKS == SLURM_STEP_NUM_NODES``, ``SLURM_LOCALID=0``); a step with several
tasks on a node is an ``srun`` step, and MPI variables there that disagree with its own
``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS`` (which ``srun --mpi=pmi2`` tasks pass, see
``launchers/slurm.py``) leaked. The limit: an ``srun`` with one task per node started inside
a rank has a daemon step's shape. The launcher modules then catch what contradicts the MPI
counts (Open MPI: a rank that ``mpirun`` itself started, ``OMPI_MCA_orte_local_daemon_uri`` =
``OMPI_MCA_orte_hnp_uri``, inside a step of several tasks, or a step of fewer nodes than the
other nodes with ranks; Hydra: a step whose node count is not that of the nodes with ranks
(one when all ranks are here, else 2 to 1 + the ranks elsewhere); both: rank 0 away from the
node of rank 0, the first rank of that node not rank 0), and not the rest.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import nodes
from ..errors import SlurmEnvError, require
from ..lean import NamedTuple
from .base import Topology, below, read_int

#: Step IDs that are not a step a rank runs in: the batch script and the extern step.
NOT_STEPS = ("4294967294", "4294967291")
LOOPBACK = "127.0.0.1"

LEAK_FIX = (
    "do not evaluate slurmenv in an srun started inside an MPI rank (or unset the MPI variables "
    "before that srun: env -u {var} …); start MPI ranks either with one mpirun/mpiexec in the batch "
    "script or with srun --mpi=pmi2"
)
TF_FIX = (
    "export without TF_CONFIG: slurmenv export --for torch (or slurmenv exec --for torch --), "
    "or start one task per process with srun"
)


class Counts(NamedTuple):
    """This rank's place in the MPI world, read from the launcher's four variables."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    names: tuple[str, str, str, str]  # the variables: rank, size, local rank, local size

    @property
    def one_node(self) -> bool:
        """Every rank runs on this node (the launcher says so: local size = size)."""
        return self.local_size == self.size

    @property
    def one_node_source(self) -> str:
        """The sentence for NODE_RANK/NNODES when every rank runs on this node."""
        return f"every rank on one node ({self.names[3]}={self.local_size} = {self.names[1]})"

    def sources(self) -> dict[str, str]:
        rank_v, size_v, local_v, local_size_v = self.names
        return {
            "RANK": f"{rank_v}={self.rank}",
            "LOCAL_RANK": f"{local_v}={self.local_rank}",
            "WORLD_SIZE": f"{size_v}={self.size}",
            "LOCAL_WORLD_SIZE": f"{local_size_v}={self.local_size}",
        }


def read_counts(
    environ: Mapping[str, str], names: tuple[str, str, str, str], who: str, ordered: bool = True
) -> Counts:
    """The four counts, each checked against the others (the error names the one at fault).
    ``ordered``: the launcher numbers a node's local ranks in rank order (so a local rank
    counts the ranks of its node below it); Open MPI 5 does not (observed: ``mpirun -np 3`` on
    one machine gave ranks 0, 1, 2 the local ranks 0, 2, 1), so only the ranges are checked."""
    rank_v, size_v, local_v, local_size_v = names
    fix = f"{who} sets {', '.join(names)} together in every rank; do not set them by hand"
    rank = read_int(environ, rank_v, fix)
    size = read_int(environ, size_v, fix, minimum=1)
    local = read_int(environ, local_v, fix)
    local_size = read_int(environ, local_size_v, fix, minimum=1)

    def bad(variable: str, value: int, why: str) -> SlurmEnvError:
        return SlurmEnvError(why, variable=variable, value=str(value), fix=fix)

    below(rank_v, rank, size_v, size, fix)
    below(local_v, local, local_size_v, local_size, fix)
    if local_size > size:
        raise bad(local_size_v, local_size, f"{local_size_v}={local_size} is more than {size_v}={size}")
    if ordered and local > rank:
        raise bad(
            local_v, local,
            f"{local_v}={local} is more than {rank_v}={rank}: a local rank counts the ranks of "
            "this node below this one",
        )
    if ordered and rank - local > size - local_size:
        raise bad(
            rank_v, rank,
            f"{rank_v}={rank} with {local_v}={local} needs {rank - local} ranks below it on other "
            f"nodes, but {size_v}={size} and {local_size_v}={local_size} leave {size - local_size}",
        )
    return Counts(rank, size, local, local_size, names)


def job_id(environ: Mapping[str, str]) -> str | None:
    """The Slurm job this rank belongs to (inherited, but the same for every rank), if any."""
    return environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or None


def step_id(environ: Mapping[str, str]) -> str | None:
    """The Slurm step whose variables this rank carries; None in the batch script."""
    step = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or None
    return None if step in NOT_STEPS else step


class Step(NamedTuple):
    """The Slurm step whose variables a rank carries (a daemon step, or the step mpirun ran in)."""

    id: str
    ntasks: int
    nnodes: int
    node_index: int  # SLURM_NODEID: this node's index in SLURM_STEP_NODELIST
    nodelist: str

    @property
    def one_per_node(self) -> bool:
        return self.ntasks == self.nnodes

    def node_list(self) -> nodes.NodeList:
        """The step's node list, checked like every step's (``nodes.step_nodes``)."""
        return nodes.step_nodes(self.nodelist, self.nnodes)


def read_step(environ: Mapping[str, str], step: str) -> Step:
    fix = "Slurm sets these in every task of a step; do not set them by hand"
    nnodes = read_int(environ, "SLURM_STEP_NUM_NODES", fix, minimum=1)
    node = read_int(environ, "SLURM_NODEID", fix)
    below("SLURM_NODEID", node, "SLURM_STEP_NUM_NODES", nnodes, fix)
    return Step(
        step, read_int(environ, "SLURM_STEP_NUM_TASKS", fix, minimum=1), nnodes, node,
        require(environ, "SLURM_STEP_NODELIST", fix),
    )


def refuse_leak(environ: Mapping[str, str], counts: Counts, who: str, why: str) -> SlurmEnvError:
    """The error for MPI variables found in a task that is not that MPI rank."""
    rank_v = counts.names[0]
    return SlurmEnvError(
        f"{rank_v}={counts.rank} ({who}) is set in a task of Slurm step {step_id(environ)} "
        f"({environ.get('SLURM_STEP_NUM_TASKS')} tasks on {environ.get('SLURM_STEP_NUM_NODES')} "
        f"node(s), this one SLURM_PROCID={environ.get('SLURM_PROCID')}), which {why}: the MPI "
        "variables leaked from an MPI rank into an srun started there (or mpirun was started by "
        "an srun of several tasks); this task is not that rank",
        variable=rank_v,
        value=str(counts.rank),
        fix=LEAK_FIX.format(var=rank_v),
    )


def check_daemon_shape(environ: Mapping[str, str], counts: Counts, who: str, step: Step) -> None:
    """A launcher's daemon step runs one task per node; anything else is an srun step."""
    local = environ.get("SLURM_LOCALID", "0")
    if not step.one_per_node or local not in ("0", ""):
        raise refuse_leak(
            environ, counts, who,
            "runs several tasks on a node (SLURM_LOCALID="
            f"{local}), unlike a launcher's daemon step (one task per node)",
        )


class Master(NamedTuple):
    """Rank 0's node as this rank knows it: ``host`` None when it cannot be known (``source``
    then says why)."""

    host: str | None
    source: str


def rank0_check(
    counts: Counts, here: bool | None, where: str, node: str, because: str, ordered: bool = True
) -> Master | None:
    """The self-check that makes "rank 0 runs on ``node``" a fact.

    ``here`` says whether this rank runs on ``node`` (None: this rank cannot tell) and ``where``
    names its own node. Rank 0 must run there; a rank that runs there as local rank 0 (the
    lowest rank of the node) must be rank 0. A mapping that puts rank 0 elsewhere is thus
    refused by rank 0 itself and by the lowest rank on ``node``; Open MPI's ``mpirun`` then
    aborts every rank (observed). Returns None when the check passes (or cannot apply).
    """
    if counts.rank == 0 and here is None:
        return Master(None, f"rank 0 cannot tell whether it runs on {node} ({where}), where "
                      f"{because}")
    if counts.rank == 0 and here is False:
        return Master(None, f"rank 0 runs on {where}, not on {node}, where {because}: this "
                      "mapping (--host, -hosts, a rankfile, --rank-by …) puts it elsewhere")
    if ordered and here and counts.local_rank == 0 and counts.rank != 0:
        return Master(None, f"this node {node} should hold rank 0 ({because}), but its lowest "
                      f"rank is {counts.rank}: this mapping puts rank 0 elsewhere")
    return None


def one_node_master(counts: Counts) -> Master:
    return Master(
        LOOPBACK, f"loopback: every rank runs on this node ({counts.names[3]}={counts.local_size} "
        f"= {counts.names[1]}={counts.size})",
    )


class MpiTopology(Topology):
    """An MPI launch does not tell where every rank runs: hosts, layout and TF_CONFIG are
    refused with the reason and the way out (``--for torch``)."""

    def __init__(self, who: str) -> None:
        self.who = who

    def _refuse(self, what: str) -> SlurmEnvError:
        return SlurmEnvError(
            f"{what} cannot be built: {self.who} tells each rank only its own rank, local rank "
            "and counts, not where the other ranks run",
            variable="TF_CONFIG",
            fix=TF_FIX,
        )

    def hosts(self) -> list[str]:
        raise self._refuse("the node list")

    def node_of(self) -> list[int]:
        raise self._refuse("the rank layout")

    def tf_workers(self) -> list[str]:
        raise self._refuse("TF_CONFIG")
