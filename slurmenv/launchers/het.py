"""Heterogeneous steps (``srun A : B``, ``srun --het-group=0,1``): one world over components.

What the tasks of such a step see on real Slurm 22.05 (``tests/test_real_cluster.py``):

* ``SLURM_PROCID`` is global: component 0 holds the first ranks, component 1 the next ones, ...;
  ``SLURM_STEP_NUM_TASKS``, ``SLURM_STEP_NODELIST`` and ``SLURM_STEP_TASKS_PER_NODE`` describe
  the union. ``SLURM_JOB_ID`` is the leader's (component 0's) job ID and ``SLURM_STEP_ID`` is
  the same in every component, so the port formula agrees everywhere.
  ``SLURM_STEP_RESV_PORTS`` is the same in every task: the components' reservations (each
  max tasks per node + 1 ports) one after the other, component 0 first.
* ``SLURM_NODEID`` numbers the nodes component after component, *not* in the order of
  ``SLURM_STEP_NODELIST`` (a sorted list): ``srun -w r2n10 -n1 : -w r1n09 -n2`` gives r2n10
  node ID 0, the node list ``r1n09,r2n10`` and ``SLURM_STEP_TASKS_PER_NODE=2,1`` (list order).
* ``SLURM_DISTRIBUTION`` does not describe each component (``-m cyclic`` on component 0 of
  ``-N2 -n4 -m cyclic : -N2 -n4`` shows ``block``): it cannot be used.
* The component node lists are ``SLURM_JOB_NODELIST_HET_GROUP_k`` (batch job) or
  ``SLURM_JOB_NODELIST_PACK_GROUP_k`` (``srun A : B``). Every step of a heterogeneous job
  carries them and ``SLURM_HET_SIZE``, even a step of one component, which is an ordinary step.

So the node order is each component's step nodes in the order of its list, component after
component; counts follow the names; a component holds the ranks after the previous ones. A
component with one node, or one task per node, can only be laid out one way. For a component with
several tasks on several nodes Slurm does not tell the layout: the torch variables (which need
only this task's own values and rank 0's node, the first node of component 0) are still exact,
but ``TF_CONFIG`` is refused. Every task checks its own ``SLURM_GTIDS``, ``SLURM_LOCALID`` and
``SLURMD_NODENAME`` against this model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import layout, nodes, ports
from ..errors import SlurmEnvError, parse_int, require
from ..lean import NamedTuple
from . import SIGNALS, slurm, topology
from .base import Task
from .slurm import STEP_FIX, SlurmStep, parse_gtids

#: A heterogeneous step is a Slurm step (its tasks show launcher "slurm"); this module comes
#: before ``slurm`` in the registry and is imported only when SLURM_HET_SIZE/SLURM_PACK_SIZE
#: is set (launchers.SIGNALS), so slurm.py never imports it (no het <-> slurm cycle).
NAME = "slurm-het"
VARIABLES = slurm.VARIABLES
PREFIXES = slurm.PREFIXES
TASK_VARIABLES: tuple[str, ...] = ()
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = slurm.WORLD
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {
    "TASK_VARIABLES": "the variables of a heterogeneous step are Slurm's: slurm.py declares them",
}


def detect(environ: Mapping[str, str]) -> bool:
    """A Slurm step task (``slurm.detect``) of a heterogeneous job."""
    return any(environ.get(name) for name in SIGNALS["het"]) and slurm.detect(environ)


def read(environ: Mapping[str, str]) -> Task:
    """The task, with the step's topology in component order when it spans components."""
    return slurm.task(environ, step(environ))

HET_FIX = (
    "export only the torch variables (slurmenv export --for torch), give that component one "
    "node or one task per node, or run the components as separate steps"
)


class Part(NamedTuple):
    """One component of the step: its node-index range and rank range."""

    component: int
    first_node: int
    nnodes: int
    first_rank: int
    ntasks: int


def het_size(environ: Mapping[str, str]) -> int:
    """The number of components of the job (0 when not a heterogeneous job)."""
    for name in ("SLURM_HET_SIZE", "SLURM_PACK_SIZE"):
        text = environ.get(name)
        if text:
            return parse_int(name, text)
    return 0


def component_nodes(environ: Mapping[str, str], size: int) -> list[list[str]]:
    """The node list of each component of the job, in component order."""
    lists = []
    for k in range(size):
        names = [f"SLURM_JOB_NODELIST_{spelling}_GROUP_{k}" for spelling in ("HET", "PACK")]
        variable = next((name for name in names if environ.get(name)), None)
        if variable is None:
            raise SlurmEnvError(
                f"SLURM_HET_SIZE={size} but neither {names[0]} nor {names[1]} is set",
                variable=names[0],
                fix=STEP_FIX,
            )
        lists.append(nodes.expand(environ[variable], variable))
    return lists


def step(environ: Mapping[str, str]) -> SlurmStep:
    """A :class:`HetStep` when the step spans several components, else an ordinary step."""
    size = het_size(environ)
    if size < 2:
        return SlurmStep(environ)
    components = component_nodes(environ, size)
    text = require(environ, "SLURM_STEP_NODELIST", STEP_FIX)
    names = nodes.expand(text, "SLURM_STEP_NODELIST")
    members = [set(listed) for listed in components]
    owners = []
    for name in names:
        owner = [k for k, listed in enumerate(members) if name in listed]
        if not owner:
            raise SlurmEnvError(
                f"node {name} of SLURM_STEP_NODELIST is in no component of this heterogeneous job",
                variable="SLURM_STEP_NODELIST",
                value=text,
                fix=STEP_FIX,
            )
        owners.append(owner)
    if set.intersection(*(set(owner) for owner in owners)):
        return SlurmStep(environ)  # the step lies in one component: an ordinary step
    shared = [name for name, owner in zip(names, owners) if len(owner) > 1]
    if len(set(names)) != len(names):  # a node listed twice
        shared += [name for k, name in enumerate(names) if name in names[:k]]
    if shared:
        raise SlurmEnvError(
            f"heterogeneous step whose components share node {shared[0]}: the node order "
            "Slurm uses for SLURM_NODEID cannot be known",
            variable="SLURM_STEP_NODELIST",
            value=text,
            fix="give the components disjoint nodes, or run them as separate steps",
        )
    return HetStep(environ, components, names)


class HetStep(SlurmStep):
    """A step over several components: node order, counts and ranks component by component."""

    def __init__(
        self, environ: Mapping[str, str], components: Sequence[Sequence[str]], names: Sequence[str]
    ) -> None:
        self.components = components
        self.step_names = list(names)
        self.order: list[str] = []
        self.parts: list[Part] = []
        super().__init__(environ)

    def _node_order(self, counts: list[int]) -> list[int]:
        """The counts (given in SLURM_STEP_NODELIST order) in SLURM_NODEID order, which is
        component order; records the components' parts and the node order."""
        if len(counts) != len(self.step_names):
            raise SlurmEnvError(
                f"SLURM_STEP_TASKS_PER_NODE lists {len(counts)} nodes but "
                f"SLURM_STEP_NODELIST names {len(self.step_names)}",
                variable="SLURM_STEP_TASKS_PER_NODE",
                value=self.tasks_per_node,
                fix="these come from the same step; do not set them by hand or mix in job values",
            )
        count_of = dict(zip(self.step_names, counts))
        ordered: list[int] = []
        rank = 0
        for k, listed in enumerate(self.components):
            mine = [name for name in listed if name in count_of]
            if not mine:
                continue
            tasks = sum(count_of[name] for name in mine)
            self.parts.append(Part(k, len(self.order), len(mine), rank, tasks))
            self.order.extend(mine)
            ordered.extend(count_of[name] for name in mine)
            rank += tasks
        return ordered

    def part_of(self, node: int) -> Part:
        """The component that node index ``node`` belongs to."""
        return next(p for p in self.parts if p.first_node <= node < p.first_node + p.nnodes)

    def node_list(self) -> nodes.NodeList:
        if self._nodes is None:
            self._nodes = nodes.NodeList(",".join(self.order), "SLURM_STEP_NODELIST")
        return self._nodes

    def layout_name(self) -> str:
        return f"heterogeneous-step ({len(self.parts)} components, nodes in component order)"

    def tf_source(self) -> str:
        return f"{self.layout_name()} layout, TensorFlow ports by local rank from " + (
            "each component's reserved ports" if self._own_reservations() is not None
            else f"{self.port_plan.tf[: max(self.counts)]}"
        )

    def placement(self) -> layout.Placement | layout.UnknownLayout:
        if self._placement is None:
            node_of: list[int] = []
            local_of: list[int] = []
            for part in self.parts:
                counts = self.counts[part.first_node : part.first_node + part.nnodes]
                if part.nnodes > 1 and max(counts) > 1:
                    self._placement = layout.UnknownLayout(
                        f"component {part.component} of this heterogeneous step runs "
                        f"{part.ntasks} tasks on {part.nnodes} nodes and Slurm does not tell "
                        "the other components how it laid them out"
                    )
                    return self._placement
                # One node, or one task per node: block, cyclic and plane agree.
                placed = layout.place(counts, layout.Distribution("block"))
                node_of.extend(part.first_node + n for n in placed.node_of)
                local_of.extend(placed.local_of)
            self._placement = layout.Placement(node_of, local_of)
        return self._placement

    def known(self) -> layout.Placement:
        placed = self.placement()
        if isinstance(placed, layout.UnknownLayout):
            raise SlurmEnvError(
                f"the task layout cannot be known: {placed.reason}",
                variable="SLURM_STEP_TASKS_PER_NODE",
                value=self.tasks_per_node,
                fix=HET_FIX,
            )
        return placed

    def topology_order(self) -> list[int] | None:
        """Refused, alike in every task, when a topology would reorder a component's nodes
        (Slurm 26.05, ``topology.py``): not reproduced for heterogeneous steps."""
        dist = self.distribution
        if not isinstance(dist, layout.Distribution) or dist.kind not in ("block", "default"):
            return None
        for part in self.parts:
            hosts = self.order[part.first_node : part.first_node + part.nnodes]
            order = topology.node_order(self.environ, hosts).order
            if order is not None and order != sorted(order):
                raise SlurmEnvError(
                    f"component {part.component} of this heterogeneous step spans nodes "
                    f"{','.join(hosts)}, which Slurm 26.05 fills in topology order; slurmenv "
                    "does not reproduce that for heterogeneous steps",
                    variable="SLURM_STEP_NODELIST", value=self.nodelist,
                    fix="run the components as separate steps, or pass -m cyclic to srun",
                )
        return None

    def check_self(self) -> None:
        """This task's node name, node ID, local rank and SLURM_GTIDS against the model."""
        self.topology_order()
        name = self.environ.get("SLURMD_NODENAME")
        if name and self.order[self.nodeid] != name:
            raise SlurmEnvError(
                f"heterogeneous step: SLURM_NODEID={self.nodeid} is {self.order[self.nodeid]} "
                f"in component order ({','.join(self.order)}) but this node is {name}",
                variable="SLURM_NODEID", value=str(self.nodeid), fix=STEP_FIX,
            )
        gtids_text = require(self.environ, "SLURM_GTIDS", STEP_FIX)
        gtids = parse_gtids(gtids_text, self.counts[self.nodeid])
        part = self.part_of(self.nodeid)
        ranks = range(part.first_rank, part.first_rank + part.ntasks)
        placed = self.placement()
        expected = placed.ranks_on(self.nodeid) if isinstance(placed, layout.Placement) else None
        if (
            self.procid not in gtids
            or gtids.index(self.procid) != self.localid
            or len(gtids) != self.counts[self.nodeid]
            or not all(rank in ranks for rank in gtids)
            # block, cyclic and plane all put a component's first rank on its first node
            or (part.first_rank in gtids) != (self.nodeid == part.first_node)
            or (expected is not None and gtids != expected)
        ):
            raise SlurmEnvError(
                f"heterogeneous step: this node ({self.order[self.nodeid]}, SLURM_NODEID="
                f"{self.nodeid}) holds ranks {gtids_text} with this task (rank {self.procid}) as "
                f"local rank {self.localid}, but component {part.component} holds ranks "
                f"{ranks.start}-{ranks.stop - 1} on {part.nnodes} nodes with "
                f"SLURM_STEP_TASKS_PER_NODE={self.tasks_per_node}"
                + (f" (expected ranks {','.join(map(str, expected))} here)" if expected else ""),
                variable="SLURM_GTIDS",
                value=gtids_text,
                fix="run the components as separate steps (this layout is not one slurmenv "
                "can reproduce: -m arbitrary in a component?)",
            )

    def master_node(self) -> str:
        """The first node of component 0 (check_self verified rank 0 is there)."""
        return self.order[0]

    def tf_workers(self) -> list[str]:
        placed = self.known()
        per_node = self._tf_ports()
        for port in per_node[self.nodeid][: self.counts[self.nodeid]]:
            ports.check_outside(port, self.ephemeral, "TF_CONFIG port", self.port_plan, self.environ)
        hosts = self.addresses(self.order)
        return [f"{hosts[n]}:{per_node[n][k]}" for n, k in zip(placed.node_of, placed.local_of)]

    def _own_reservations(self) -> list[list[int]] | None:
        """The TF ports of each node from its own component's reserved ports: Slurm reserves
        max tasks per node + 1 ports per component and lists the reservations one after the
        other. None when the ports are not (only) Slurm's reservations."""
        plan = self.port_plan
        reserved = self.environ.get("SLURM_STEP_RESV_PORTS")
        if not reserved:
            return None
        listed = ports.parse_port_list(reserved, "SLURM_STEP_RESV_PORTS")
        if (plan.master, plan.tf) != (listed[0], listed[1 : 1 + len(plan.tf)]):
            return None  # an explicit port (or MASTER_PORT) won over the reservation
        sizes = [max(self.counts[p.first_node : p.first_node + p.nnodes]) + 1 for p in self.parts]
        if sum(sizes) != len(listed) or listed[0] != plan.master:
            return None
        per_node: list[list[int]] = []
        start = 0
        for part, size in zip(self.parts, sizes):
            per_node.extend([listed[start + 1 : start + size]] * part.nnodes)
            start += size
        return per_node

    def _tf_ports(self) -> list[list[int]]:
        """The TF ports of each node: from its own component's reservation when Slurm reserved
        ports, else the step's ports by local rank (as for an ordinary step)."""
        own = self._own_reservations()
        if own is not None:
            return own
        return [self.step_tf_ports()] * len(self.order)
