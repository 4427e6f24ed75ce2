"""Slurm job steps: ``srun`` tasks, one process each.

Only step-level variables are read (``SLURM_STEP_*``, ``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_NODEID``, ``SLURM_GTIDS``); the job-level ones (``SLURM_NTASKS``, ``SLURM_JOB_NODELIST``)
describe the allocation, not the step, and are never mixed in.
"""

from __future__ import annotations

from .. import layout, nodes, ports
from ..errors import SlurmEnvError, parse_int, require, to_int
from ..lean import TYPE_CHECKING
from .base import Task, Topology, below, job_id, node_sources, read_int, slurm_step_is_own, step_id

if TYPE_CHECKING:
    from collections.abc import Mapping

NAME = "slurm"
#: The step-level variables read (job-level ones describe the allocation and are never mixed
#: in); the component node lists of a heterogeneous job are PREFIXES.
VARIABLES = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURMD_NODENAME",
    "SLURM_DISTRIBUTION", "SLURM_DIST_PLANESIZE", "SLURM_HOSTFILE", "SLURM_STEP_RESV_PORTS",
    "SLURM_HET_SIZE", "SLURM_PACK_SIZE", "SLURM_JOB_SLUID", "SLURM_CONF",
    "PMI_FD", "PMI_SIZE", "SLURMENV_PMI", "SLURMENV_PMI_TIMEOUT",
)  # fmt: skip
PREFIXES = ("SLURM_JOB_NODELIST_HET_GROUP_", "SLURM_JOB_NODELIST_PACK_GROUP_")
FALLBACK = False
WORLD: tuple[tuple[str, str], ...] = (("rank", "SLURM_PROCID"), ("world_size", "SLURM_STEP_NUM_TASKS"),
         ("local_rank", "SLURM_LOCALID"), ("node_rank", "SLURM_NODEID"),
         ("nnodes", "SLURM_STEP_NUM_NODES"))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY: dict[str, str] = {}
#: Set only inside a Slurm job or step (never in a login shell): any of them without a job ID
#: is a partial copy of a task's variables, which local.py refuses.
TASK_VARIABLES = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID",
    "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_TASKS_PER_NODE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_STEP_RESV_PORTS",
    "SLURMD_NODENAME", "SLURM_HET_SIZE", "SLURM_PACK_SIZE",
)  # fmt: skip
STEP_FIX = "run slurmenv inside an srun task; Slurm sets this variable in every task"
HOSTFILE_FIX = "SLURM_HOSTFILE must name the host file given to srun -m arbitrary, one host per line"

detect = slurm_step_is_own


def parse_gtids(text: str, most: int | None = None) -> list[int]:
    """``SLURM_GTIDS``: the step's ranks on this node (``0,4,5``). With ``most`` (the tasks
    this node runs), only the first ``most + 1`` entries are read: a longer list is wrong
    whatever its tail (the caller refuses it), and 128 KiB of ``0,`` costs no more than it."""
    parts = text.split(",", most + 1) if most is not None else text.split(",")
    ranks = [to_int(x) for x in parts[: None if most is None else most + 1]]
    if None in ranks:
        raise SlurmEnvError(
            "SLURM_GTIDS is not a comma-separated list of ranks",
            variable="SLURM_GTIDS", value=text, fix=STEP_FIX,
        )
    return [rank for rank in ranks if rank is not None]


class SlurmStep(Topology):
    """A validated Slurm step: counts, node list and layout, expanded lazily."""

    layout_known = True

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.nodelist = require(environ, "SLURM_STEP_NODELIST", STEP_FIX)
        self.nnodes = read_int(environ, "SLURM_STEP_NUM_NODES", STEP_FIX, minimum=1)
        self.ntasks = read_int(environ, "SLURM_STEP_NUM_TASKS", STEP_FIX, minimum=1)
        self.tasks_per_node = require(environ, "SLURM_STEP_TASKS_PER_NODE", STEP_FIX)
        self.counts = nodes.parse_tasks_per_node(self.tasks_per_node, "SLURM_STEP_TASKS_PER_NODE",
                                                 self.nnodes)
        self.procid = read_int(environ, "SLURM_PROCID", STEP_FIX)
        self.localid = read_int(environ, "SLURM_LOCALID", STEP_FIX)
        self.nodeid = read_int(environ, "SLURM_NODEID", STEP_FIX)
        self.distribution = layout.parse_distribution(environ)
        self._nodes: nodes.NodeList | None = None
        self._placement: layout.Placement | layout.UnknownLayout | None = None
        self._order: tuple[list[int] | None, str] | None = None
        #: The layout Slurm's PMI told (``ask_pmi``), and what the derivation said of it.
        self._pmi: layout.Placement | None = None
        self.pmi_note = ""
        self.pmi_name = ""
        self.counts = self._node_order(self.counts)
        self._check_counts()

    def _node_order(self, counts: list[int]) -> list[int]:
        """The per-node counts (SLURM_STEP_TASKS_PER_NODE order) in SLURM_NODEID order: the
        same for an ordinary step (a heterogeneous step reorders them, see het.py)."""
        return counts

    def _check_counts(self) -> None:
        if len(self.counts) != self.nnodes:
            raise SlurmEnvError(
                f"SLURM_STEP_TASKS_PER_NODE lists {len(self.counts)} nodes but "
                f"SLURM_STEP_NUM_NODES={self.nnodes}",
                variable="SLURM_STEP_TASKS_PER_NODE",
                value=self.tasks_per_node,
                fix="these come from the same step; do not set them by hand or mix in job values",
            )
        if layout.total(self.counts) != self.ntasks:
            raise SlurmEnvError(
                f"SLURM_STEP_TASKS_PER_NODE adds up to {sum(self.counts)} tasks but "
                f"SLURM_STEP_NUM_TASKS={self.ntasks}",
                variable="SLURM_STEP_TASKS_PER_NODE",
                value=self.tasks_per_node,
                fix="these come from the same step; do not set them by hand or mix in job values",
            )
        below("SLURM_PROCID", self.procid, "SLURM_STEP_NUM_TASKS", self.ntasks,
              "a task's rank must be smaller than the step's task count")
        below("SLURM_NODEID", self.nodeid, "SLURM_STEP_NUM_NODES", self.nnodes,
              "the node index must be smaller than the step's node count")
        if self.localid >= self.counts[self.nodeid]:
            raise SlurmEnvError(
                f"SLURM_LOCALID={self.localid} but node {self.nodeid} runs "
                f"{self.counts[self.nodeid]} tasks",
                variable="SLURM_LOCALID",
                value=str(self.localid),
                fix="the local rank must be smaller than this node's task count",
            )

    # Topology ---------------------------------------------------------------------------
    def node_list(self) -> nodes.NodeList:
        """SLURM_STEP_NODELIST, counted against SLURM_STEP_NUM_NODES on first use (which
        expands it with python-hostlist) and refused when it names a node twice."""
        if self._nodes is None:
            self._nodes = nodes.step_nodes(self.nodelist, self.nnodes)
        return self._nodes

    def hosts(self) -> list[str]:
        return self.node_list().names()

    def topology_order(self) -> list[int] | None:
        """The order Slurm fills this step's nodes in (None: the listed order): a topology's
        for a block or default step on Slurm 26.05 (``topology.py``); refuses, alike in every
        task, when it cannot be known."""
        dist = self.distribution
        if not isinstance(dist, layout.Distribution) or dist.kind not in ("block", "default") \
                or self.nnodes < 2:
            return None
        if self._order is None:
            if not self.environ.get("SLURM_JOB_SLUID"):  # before 26.05 (topology.py, unread)
                self._order = (None, "node-list order (Slurm before 26.05)")
            else:
                from . import topology

                try:
                    found = topology.node_order(self.environ, self.hosts())
                except SlurmEnvError as exc:
                    exc.fix = f"{exc.fix}; or let slurmenv ask the step itself: srun --mpi=pmi2 " \
                        "with SLURMENV_PMI=1 (docs/topology.md)"
                    raise
                self._order = (found.order, found.why)
        order = self._order[0]
        return None if order is None or order == sorted(order) else order

    def placement(self) -> layout.Placement | layout.UnknownLayout:
        """The layout, or UnknownLayout with the reason it cannot be known."""
        if self._pmi is not None:
            return self._pmi
        if self._placement is None:
            dist = self.distribution
            order = self.topology_order()
            if isinstance(dist, layout.UnknownLayout):
                self._placement = dist
            elif dist.kind == "arbitrary":
                self._placement = self._arbitrary()
            elif order is not None:
                self._placement = layout.ordered_block(self.counts, order)
            else:
                self._placement = layout.place(self.counts, dist)
        return self._placement

    def ask_pmi(self) -> None:
        """Read the layout from Slurm's PMI (``pmi.py``; every task of the step asks alike,
        ``pmi.wanted``): each node's name must be the step's node at its SLURM_NODEID, its
        ranks as many as SLURM_STEP_TASKS_PER_NODE says, every rank once. A derivation from
        the variables and files that disagrees is refused naming both; one that cannot be
        made (an unreadable topology, say) gives way to what the step told."""
        from . import pmi

        gtids = parse_gtids(require(self.environ, "SLURM_GTIDS", STEP_FIX),
                            self.counts[self.nodeid])
        host = self.environ.get("SLURMD_NODENAME") or self.node_list()[self.nodeid]
        told = pmi.exchange(self.environ, self.nodeid, self.nnodes, self.ntasks, host, gtids)
        listed = self.node_list()
        node_of, local_of = [-1] * self.ntasks, [0] * self.ntasks
        for node, (name, ranks) in enumerate(told):
            if name != listed[node] or len(ranks) != self.counts[node] \
                    or any(not 0 <= r < self.ntasks or node_of[r] != -1 for r in ranks):
                raise SlurmEnvError(
                    f"Slurm's PMI says node {node} is {name} with ranks {pmi.ranges(ranks)}, "
                    f"but SLURM_STEP_NODELIST={self.nodelist} and SLURM_STEP_TASKS_PER_NODE="
                    f"{self.tasks_per_node} put {listed[node]} with {self.counts[node]} tasks "
                    "there (or a rank twice)",
                    variable="PMI_FD", value=self.environ.get("PMI_FD"), fix=pmi.FIX)
            for local, rank in enumerate(sorted(ranks)):
                node_of[rank], local_of[rank] = node, local
        read = layout.Placement(node_of, local_of)
        try:
            derived = self.placement()
            name = self._derived_name()
        except SlurmEnvError as exc:
            derived, name = layout.UnknownLayout(exc.message), ""
            self._order = (None, "")  # not asked again: the step told
        if isinstance(derived, layout.UnknownLayout):
            self.pmi_note = (f"the layout was read from Slurm's PMI (PMI_FD): the variables and "
                             f"files cannot tell it ({derived.reason})")
            self.pmi_name = "as Slurm placed it, read from Slurm's PMI"
        elif derived.node_of != node_of:
            rank = next(r for r, n in enumerate(node_of) if derived.node_of[r] != n)
            raise SlurmEnvError(
                f"Slurm's PMI says rank {rank} runs on {listed[node_of[rank]]}, but the {name} "
                f"layout slurmenv derives from the variables and files puts it on "
                f"{listed[derived.node_of[rank]]}",
                variable="SLURM_CONF" if self._order and self._order[0] else "SLURM_DISTRIBUTION",
                value=self.environ.get("SLURM_CONF" if self._order and self._order[0]
                                       else "SLURM_DISTRIBUTION"),
                fix="slurmenv's derivation is wrong for this step: report it (docs/topology.md); "
                "meanwhile pass -m cyclic or -m plane=N to srun")
        else:
            self.pmi_note = (f"the {name} layout derived from the variables and files agrees "
                             "with what Slurm's PMI (PMI_FD) told every task")
            self.pmi_name = f"{name}, read from Slurm's PMI"
        self._pmi = read

    def _arbitrary(self) -> layout.Placement | layout.UnknownLayout:
        path = self.environ.get("SLURM_HOSTFILE")
        if not path:
            return layout.UnknownLayout("-m arbitrary without SLURM_HOSTFILE")
        from .. import readfile as files  # -m arbitrary only

        text = files.read_text(path, "SLURM_HOSTFILE", HOSTFILE_FIX)
        if text is None:
            return layout.UnknownLayout(f"SLURM_HOSTFILE={path} cannot be read here")
        listed = nodes.expand(text, "SLURM_HOSTFILE")
        return layout.place(self.counts, layout.Distribution("arbitrary"), self.hosts(), listed)

    def known(self) -> layout.Placement:
        """The layout; raises SlurmEnvError when it cannot be known."""
        placed = self.placement()
        if isinstance(placed, layout.UnknownLayout):
            raise SlurmEnvError(
                f"the task layout cannot be known: {placed.reason}",
                variable="SLURM_DISTRIBUTION",
                value=self.environ.get("SLURM_DISTRIBUTION"),
                fix="use -m block, cyclic, plane=N, or arbitrary with SLURM_HOSTFILE readable on "
                "every node",
            )
        return placed

    def node_of(self) -> list[int]:
        return self.known().node_of

    def local_of(self) -> list[int]:
        return self.known().local_of

    def largest_local(self) -> int:
        return layout.largest(self.counts)

    def layout_name(self) -> str:
        if self._pmi is not None:
            return self.pmi_name
        return self._derived_name()

    def _derived_name(self) -> str:
        dist = self.distribution
        if isinstance(dist, layout.UnknownLayout):
            return "unknown"
        if self._order is not None and self.topology_order() is not None:
            kind = "block (Slurm's default)" if dist.kind == "default" else "block"
            return f"{kind} in topology order ({self._order[1]})"
        if dist.kind == "default":
            return ("block" if self.ntasks > self.nnodes else "cyclic") + " (Slurm's default)"
        if dist.kind == "plane":
            return f"plane={dist.plane_size}"
        return dist.kind

    def check_self(self) -> None:
        """This task's own SLURM_NODEID/LOCALID/GTIDS must agree with the computed layout,
        whose node order (a topology's, ``topology_order``) every task decides alike first."""
        order = self.topology_order()
        gtids_text = self.environ.get("SLURM_GTIDS")
        gtids = None
        if gtids_text:
            gtids = parse_gtids(gtids_text, self.counts[self.nodeid])
            if self.procid not in gtids or len(gtids) != self.counts[self.nodeid]:
                raise SlurmEnvError(
                    f"SLURM_GTIDS disagrees with SLURM_PROCID={self.procid} and "
                    f"SLURM_STEP_TASKS_PER_NODE={self.tasks_per_node} for node {self.nodeid}",
                    variable="SLURM_GTIDS", value=gtids_text, fix=STEP_FIX,
                )
        name = self.environ.get("SLURMD_NODENAME")
        if name and self.node_list()[self.nodeid] != name:
            raise self._wrong_node(name)
        dist = self.distribution
        if isinstance(dist, layout.UnknownLayout) and self._pmi is None:
            return
        expected: list[int] | None = None
        if self._pmi is not None or isinstance(dist, layout.UnknownLayout) \
                or dist.kind == "arbitrary" or order is not None:
            placed = self.placement()
            if isinstance(placed, layout.UnknownLayout):
                return
            node, local = placed.node_of[self.procid], placed.local_of[self.procid]
            if gtids is not None:
                expected = placed.ranks_on(self.nodeid)
        else:
            # This task's own place only; the whole layout is built if an output needs it.
            node, local = layout.locate(self.counts, dist, self.procid)
            if gtids is not None:
                expected = layout.ranks_on(self.counts, dist, self.nodeid)
        if node == self.nodeid and local == self.localid and gtids is not None and expected is not None \
                and gtids != expected:
            # this task's own place agrees with the layout: the set of ranks is what is wrong
            raise SlurmEnvError(
                f"SLURM_GTIDS={gtids_text} says node {self.nodeid} runs ranks {gtids_text}, but the "
                f"{self.layout_name()} layout, which SLURM_NODEID={self.nodeid} and "
                f"SLURM_LOCALID={self.localid} of rank {self.procid} agree with, puts ranks "
                f"{','.join(map(str, expected))} there",
                variable="SLURM_GTIDS", value=gtids_text,
                fix="SLURM_GTIDS comes from Slurm: do not set it by hand or carry it from another "
                "step or node; run slurmenv in the srun task itself, where Slurm sets it",
            )
        if node != self.nodeid or local != self.localid or (gtids is not None and gtids != expected):
            there = expected if node == self.nodeid else None
            if there is None and gtids is not None:  # the ranks of the node the layout names
                placed = self.placement()
                there = placed.ranks_on(node) if isinstance(placed, layout.Placement) \
                    else layout.ranks_on(self.counts, dist, node) \
                    if isinstance(dist, layout.Distribution) else None
            raise SlurmEnvError(
                f"Slurm placed this task (rank {self.procid}) on node {self.nodeid} as local rank "
                f"{self.localid} with ranks {gtids_text} there, but the {self.layout_name()} layout "
                f"puts it on node {node} as local rank {local}"
                + (f", where it puts ranks {','.join(map(str, there))}" if there else ""),
                variable="SLURM_DISTRIBUTION",
                value=self.environ.get("SLURM_DISTRIBUTION"),
                fix="slurmenv cannot reproduce this layout: do not set SLURM_DISTRIBUTION or "
                "SLURM_GTIDS by hand; else pass -m cyclic or -m plane=N to srun, or -m arbitrary "
                "with a host file",
            )

    def _wrong_node(self, name: str) -> SlurmEnvError:
        """SLURM_NODEID and SLURMD_NODENAME disagree: blame the one the layout of
        SLURM_PROCID contradicts (SLURM_NODEID when the layout puts this rank on this node)."""
        listed = self.node_list()[self.nodeid]
        message = (f"SLURM_NODEID={self.nodeid} is {listed} in SLURM_STEP_NODELIST but this node "
                   f"is {name} (SLURMD_NODENAME)")
        dist = self.distribution
        if isinstance(dist, layout.Distribution) and dist.kind != "arbitrary" \
                and self._pmi is None and self.topology_order() is None:
            node, _ = layout.locate(self.counts, dist, self.procid)
            if node != self.nodeid and self.node_list()[node] == name:
                return SlurmEnvError(
                    f"{message}, where the {self.layout_name()} layout puts rank {self.procid}",
                    variable="SLURM_NODEID", value=str(self.nodeid),
                    fix="do not set SLURM_NODEID by hand or carry it from another step or node: "
                    "run slurmenv in the srun task itself, where Slurm sets it for this node",
                )
        return SlurmEnvError(message, variable="SLURMD_NODENAME", value=name, fix=STEP_FIX)

    def master_node(self) -> str:
        """The node holding rank 0: the first node for block, cyclic and plane layouts in
        node-list order."""
        dist = self.distribution
        if isinstance(dist, layout.Distribution) and dist.kind != "arbitrary" \
                and self._pmi is None and self.topology_order() is None:
            return self.node_list()[0]
        return self.node_list()[self.known().node_of[0]]

    def tf_source(self) -> str:
        """Where TF_CONFIG comes from (for ``sources``); call after :meth:`use`."""
        return f"{self.layout_name()} layout, TensorFlow ports " \
            f"{self.port_plan.tf[: layout.largest(self.counts)]} by local rank"

    def step_tf_ports(self) -> list[int]:
        """The TF port of each local rank (the same on every node); refuses too few."""
        plan, needed = self.port_plan, layout.largest(self.counts)
        if len(plan.tf) < needed:
            from ..ports import too_few_tf_ports

            raise too_few_tf_ports(plan, needed, self.environ)
        return plan.tf[:needed]

    def tf_workers(self) -> list[str]:
        """``host:port`` per rank; the port of a rank is the TF port of its local rank."""
        tf_ports = self.step_tf_ports()
        for port in tf_ports[: self.counts[self.nodeid]]:
            ports.check_outside(port, self.ephemeral, "TF_CONFIG port", self.port_plan, self.environ)
        hosts = self.addresses(self.hosts())
        placed = self.known()
        suffixes = [f":{port}" for port in tf_ports]
        return [hosts[n] + suffixes[k] for n, k in zip(placed.node_of, placed.local_of)]


def read(environ: Mapping[str, str]) -> Task:
    """One task of an ordinary Slurm step (``detect`` said the SLURM_* are its own); a
    heterogeneous step (``srun A : B``) is read by ``het.py``, before this module. With
    ``SLURMENV_PMI`` on, the layout is asked of the step itself (``pmi.py``)."""
    step = SlurmStep(environ)
    if environ.get("SLURMENV_PMI") and step.nnodes > 1:
        from . import pmi

        if pmi.wanted(environ, step.ntasks):
            step.ask_pmi()
    return task(environ, step)


def task(environ: Mapping[str, str], slurm: SlurmStep) -> Task:
    """The Task of this srun task, given its step's topology (ordinary or heterogeneous)."""
    job = job_id(environ)
    step = step_id(environ)
    assert job is not None and step is not None
    step_number = parse_int("SLURM_STEP_ID", step)
    job_number = parse_int("SLURM_JOB_ID", job)
    slurm.check_self()
    master_host = slurm.master_node()
    reserved = environ.get("SLURM_STEP_RESV_PORTS")
    sources = {
        "RANK": f"SLURM_PROCID={slurm.procid}",
        "LOCAL_RANK": f"SLURM_LOCALID={slurm.localid}",
        "WORLD_SIZE": f"SLURM_STEP_NUM_TASKS={slurm.ntasks}",
        "LOCAL_WORLD_SIZE": f"SLURM_STEP_TASKS_PER_NODE={slurm.tasks_per_node} at "
        f"SLURM_NODEID={slurm.nodeid}",
        **node_sources(f"SLURM_NODEID={slurm.nodeid}", f"SLURM_STEP_NUM_NODES={slurm.nnodes}"),
    }
    return Task(
        launcher=NAME,
        rank=slurm.procid,
        local_rank=slurm.localid,
        world_size=slurm.ntasks,
        local_world_size=slurm.counts[slurm.nodeid],
        node_rank=slurm.nodeid,
        nnodes=slurm.nnodes,
        hostname=environ.get("SLURMD_NODENAME") or slurm.node_list()[slurm.nodeid],
        sources=sources,
        master_host=master_host,
        master_source=f"node of rank 0 = {master_host} ({slurm.layout_name()} layout of "
        f"SLURM_STEP_NODELIST={slurm.nodelist})",
        port_seed=(job_number, step_number),
        port_seed_source=f"SLURM_JOB_ID={job}, SLURM_STEP_ID={step}",
        reserved_ports=("SLURM_STEP_RESV_PORTS", reserved) if reserved else None,
        topology=slurm,
        job_id=job,
        step_id=step,
        notes=(slurm.pmi_note,) if slurm.pmi_note else (),
        origin=f"a task of job step {job}.{step} (srun)",
        label=f"job {job}, step {step}",
    )
