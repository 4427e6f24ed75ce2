"""Slurm job steps: ``srun`` tasks, one process each.

Only step-level variables are read (``SLURM_STEP_*``, ``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_NODEID``, ``SLURM_GTIDS``); the job-level ones (``SLURM_NTASKS``, ``SLURM_JOB_NODELIST``)
describe the allocation, not the step, and are never mixed in.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import layout, nodes, ports
from ..errors import SlurmEnvError, parse_int, require
from ..options import Options
from ..resolution import Resolution, Topology

INTERACTIVE_STEP = 4294967290  # salloc with LaunchParameters=use_interactive_step
EXTERN_STEP = 4294967291
BATCH_STEP = 4294967294
OUTSIDE_STEP_FIX = (
    "evaluate slurmenv inside the job step, in every task: "
    "srun bash -c 'eval $(slurmenv export); python train.py' (single quotes, so the batch "
    "script does not expand it) or srun slurmenv exec -- python train.py"
)
STEP_FIX = "run slurmenv inside an srun task; Slurm sets this variable in every task"


def job_id(environ: Mapping[str, str]) -> str | None:
    """The job ID, if this process belongs to a Slurm job."""
    return environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or None


def step_id(environ: Mapping[str, str]) -> str | None:
    """The step ID, if this process is a task of a Slurm step."""
    return environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or None


def is_present(environ: Mapping[str, str]) -> bool:
    """True inside a Slurm job (a step, the batch script or an salloc shell)."""
    return job_id(environ) is not None


def refuse_outside_step(environ: Mapping[str, str], step: str | None) -> SlurmEnvError:
    """The error for the batch script / salloc shell: the bug that gives every task rank 0."""
    return SlurmEnvError(
        f"inside Slurm job {job_id(environ)} but outside any job step (the batch script or an "
        "salloc shell): evaluated here, every task would get rank 0",
        variable="SLURM_STEP_ID",
        value=step,
        fix=OUTSIDE_STEP_FIX,
    )


def parse_gtids(text: str) -> list[int]:
    """``SLURM_GTIDS``: the step's ranks on this node (``0,4,5``)."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise SlurmEnvError(
            "SLURM_GTIDS is not a comma-separated list of ranks",
            variable="SLURM_GTIDS", value=text, fix=STEP_FIX,
        ) from None


class SlurmStep(Topology):
    """A validated Slurm step: counts, node list and layout, expanded lazily."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.nodelist = require(environ, "SLURM_STEP_NODELIST", STEP_FIX)
        self.nnodes = parse_int(
            "SLURM_STEP_NUM_NODES", require(environ, "SLURM_STEP_NUM_NODES", STEP_FIX), minimum=1
        )
        self.ntasks = parse_int(
            "SLURM_STEP_NUM_TASKS", require(environ, "SLURM_STEP_NUM_TASKS", STEP_FIX), minimum=1
        )
        self.tasks_per_node = require(environ, "SLURM_STEP_TASKS_PER_NODE", STEP_FIX)
        self.counts = nodes.parse_tasks_per_node(self.tasks_per_node, "SLURM_STEP_TASKS_PER_NODE")
        self.procid = parse_int("SLURM_PROCID", require(environ, "SLURM_PROCID", STEP_FIX))
        self.localid = parse_int("SLURM_LOCALID", require(environ, "SLURM_LOCALID", STEP_FIX))
        self.nodeid = parse_int("SLURM_NODEID", require(environ, "SLURM_NODEID", STEP_FIX))
        self.distribution = layout.parse_distribution(environ)
        self._nodes: nodes.NodeList | None = None
        self._placement: layout.Placement | layout.UnknownLayout | None = None
        self._check_counts()

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
        if self.procid >= self.ntasks:
            raise SlurmEnvError(
                f"SLURM_PROCID={self.procid} is not below SLURM_STEP_NUM_TASKS={self.ntasks}",
                variable="SLURM_PROCID",
                value=str(self.procid),
                fix="a task's rank must be smaller than the step's task count",
            )
        if self.nodeid >= self.nnodes:
            raise SlurmEnvError(
                f"SLURM_NODEID={self.nodeid} is not below SLURM_STEP_NUM_NODES={self.nnodes}",
                variable="SLURM_NODEID",
                value=str(self.nodeid),
                fix="the node index must be smaller than the step's node count",
            )
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
        expands it with python-hostlist); looking up a name expands only the parts up to it."""
        if self._nodes is None:
            listed = nodes.NodeList(self.nodelist, "SLURM_STEP_NODELIST")
            if len(listed) != self.nnodes:
                raise SlurmEnvError(
                    f"SLURM_STEP_NODELIST names {len(listed)} nodes but "
                    f"SLURM_STEP_NUM_NODES={self.nnodes}",
                    variable="SLURM_STEP_NODELIST",
                    value=self.nodelist,
                    fix="these come from the same step; do not set them by hand or mix in job values",
                )
            self._nodes = listed
        return self._nodes

    def hosts(self) -> list[str]:
        return self.node_list().names()

    def placement(self) -> layout.Placement | layout.UnknownLayout:
        """The layout, or UnknownLayout with the reason it cannot be known."""
        if self._placement is None:
            dist = self.distribution
            if isinstance(dist, layout.UnknownLayout):
                self._placement = dist
            elif dist.kind == "arbitrary":
                self._placement = self._arbitrary()
            else:
                self._placement = layout.place(self.counts, dist)
        return self._placement

    def _arbitrary(self) -> layout.Placement | layout.UnknownLayout:
        path = self.environ.get("SLURM_HOSTFILE")
        if not path:
            return layout.UnknownLayout("-m arbitrary without SLURM_HOSTFILE")
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            return layout.UnknownLayout(f"SLURM_HOSTFILE={path} cannot be read here ({exc})")
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

    def layout_name(self) -> str:
        dist = self.distribution
        if isinstance(dist, layout.UnknownLayout):
            return "unknown"
        if dist.kind == "default":
            return ("block" if self.ntasks > self.nnodes else "cyclic") + " (Slurm's default)"
        if dist.kind == "plane":
            return f"plane={dist.plane_size}"
        return dist.kind

    def check_self(self) -> None:
        """This task's own SLURM_NODEID/LOCALID/GTIDS must agree with the computed layout."""
        gtids_text = self.environ.get("SLURM_GTIDS")
        gtids = None
        if gtids_text:
            gtids = parse_gtids(gtids_text)
            if self.procid not in gtids or len(gtids) != self.counts[self.nodeid]:
                raise SlurmEnvError(
                    f"SLURM_GTIDS disagrees with SLURM_PROCID={self.procid} and "
                    f"SLURM_STEP_TASKS_PER_NODE={self.tasks_per_node} for node {self.nodeid}",
                    variable="SLURM_GTIDS", value=gtids_text, fix=STEP_FIX,
                )
        name = self.environ.get("SLURMD_NODENAME")
        if name and self.node_list()[self.nodeid] != name:
            raise SlurmEnvError(
                f"SLURM_NODEID={self.nodeid} is {self.node_list()[self.nodeid]} in "
                f"SLURM_STEP_NODELIST but this node is {name}",
                variable="SLURMD_NODENAME", value=name, fix=STEP_FIX,
            )
        dist = self.distribution
        if isinstance(dist, layout.UnknownLayout):
            return
        expected: list[int] | None = None
        if dist.kind == "arbitrary":
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
        if node != self.nodeid or local != self.localid or (gtids is not None and gtids != expected):
            raise SlurmEnvError(
                f"Slurm placed this task (rank {self.procid}) on node {self.nodeid} as local rank "
                f"{self.localid} with ranks {gtids_text} there, but the {self.layout_name()} layout "
                f"puts it on node {node} as local rank {local}"
                + (f" with ranks {','.join(map(str, expected))}" if expected is not None else ""),
                variable="SLURM_DISTRIBUTION",
                value=self.environ.get("SLURM_DISTRIBUTION"),
                fix="this layout is not one slurmenv can reproduce (a topology-ordered block "
                "layout?); pass -m block, -m cyclic or -m plane=N to srun",
            )

    def master_node(self) -> str:
        """The node holding rank 0: the first node for block, cyclic and plane layouts."""
        dist = self.distribution
        if isinstance(dist, layout.Distribution) and dist.kind != "arbitrary":
            return self.node_list()[0]
        return self.node_list()[self.known().node_of[0]]

    def tf_source(self) -> str:
        """Where TF_CONFIG comes from (for ``sources``); call after :meth:`use`."""
        return f"{self.layout_name()} layout, TensorFlow ports " \
            f"{self.port_plan.tf[: layout.largest(self.counts)]} by local rank"

    def use(self, options: Options, port_plan: ports.Ports, ephemeral: tuple[int, int] | None) -> None:
        """Remember the address options and ports that the worker list is built from."""
        self.options = options
        self.port_plan = port_plan
        self.ephemeral = ephemeral

    def step_tf_ports(self) -> list[int]:
        """The TF port of each local rank (the same on every node); refuses too few."""
        plan, needed = self.port_plan, layout.largest(self.counts)
        if len(plan.tf) < needed:
            raise SlurmEnvError(
                f"TF_CONFIG needs {needed} ports per node but only {len(plan.tf)} are available "
                f"({plan.source})",
                variable="SLURMENV_PORT_RANGE",
                value=self.environ.get("SLURMENV_PORT_RANGE"),
                fix=f"reserve ports with srun --resv-ports={needed + 1} (needs MpiParams=ports= "
                "in slurm.conf), use a wider --port-range, or export without TF_CONFIG "
                "(--for torch)",
            )
        return plan.tf[:needed]

    def tf_workers(self) -> list[str]:
        """``host:port`` per rank; the port of a rank is the TF port of its local rank."""
        tf_ports = self.step_tf_ports()
        for port in tf_ports[: self.counts[self.nodeid]]:
            ports.check_outside(port, self.ephemeral, "TF_CONFIG port")
        hosts = self.hosts()
        if self.options.addr_template:
            hosts = [_address(host, self.options) for host in hosts]
        placed = self.known()
        suffixes = [f":{port}" for port in tf_ports]
        return [hosts[n] + suffixes[k] for n, k in zip(placed.node_of, placed.local_of)]


def new_step(environ: Mapping[str, str]) -> SlurmStep:
    """The step's topology; a heterogeneous step (``srun A : B``) has its own (``het.py``)."""
    if environ.get("SLURM_HET_SIZE") or environ.get("SLURM_PACK_SIZE"):
        from . import het

        return het.step(environ)
    return SlurmStep(environ)


def _check_inherited(environ: Mapping[str, str], step: SlurmStep) -> list[str]:
    """Values another layer set (often the batch script) must agree with this task's own."""
    notes = []
    for name, mine in (
        ("RANK", step.procid), ("LOCAL_RANK", step.localid), ("WORLD_SIZE", step.ntasks),
    ):
        inherited = environ.get(name)
        if inherited is None or inherited == "":
            continue
        if inherited.strip() != str(mine):
            raise SlurmEnvError(
                f"{name}={inherited} is already set but this task's value is {mine}: it was "
                "probably exported in the batch script, where every task gets rank 0",
                variable=name,
                value=inherited,
                fix=f"unset {name} before srun (or use srun --export=NONE) and let slurmenv set it "
                "in the step",
            )
        notes.append(f"{name}={inherited} was already set and agrees")
    return notes


def _address(host: str, options: Options) -> str:
    return options.addr_template.format(host=host) if options.addr_template else host


def resolve(environ: Mapping[str, str], options: Options, ephemeral: tuple[int, int] | None) -> Resolution:
    """Resolve one task of a Slurm step."""
    job = job_id(environ)
    step = step_id(environ)
    if step is None:
        raise refuse_outside_step(environ, step)
    step_number = parse_int("SLURM_STEP_ID", step)
    if step_number in (BATCH_STEP, EXTERN_STEP):
        raise refuse_outside_step(environ, step)
    assert job is not None
    job_number = parse_int("SLURM_JOB_ID", job)
    if step_number == INTERACTIVE_STEP:
        from . import local

        return local.resolve(environ, options, ephemeral, launcher="slurm-interactive-step")
    slurm = new_step(environ)
    slurm.check_self()
    notes = _check_inherited(environ, slurm)

    master_host = slurm.master_node()
    master_addr = _address(master_host, options)
    addr_source = f"node of rank 0 = {master_host} ({slurm.layout_name()} layout of " \
        f"SLURM_STEP_NODELIST={slurm.nodelist})"
    if options.addr_template:
        addr_source += f", through the template {options.addr_template!r}"
    if options.resolve_addr:
        import socket

        try:
            master_addr = socket.gethostbyname(master_addr)
        except OSError as exc:
            raise SlurmEnvError(
                f"cannot resolve the master node's name {master_addr!r} ({exc})",
                variable="SLURMENV_RESOLVE_ADDR", value="1",
                fix="drop the resolve option to pass the name, or fix the name/template",
            ) from None
        addr_source += ", resolved by DNS"

    max_local = layout.largest(slurm.counts)
    port_plan = _ports(environ, options, job_number, step_number, max_local, ephemeral)
    ports.check_outside(port_plan.master, ephemeral, "MASTER_PORT")

    slurm.use(options, port_plan, ephemeral)
    sources = {
        "RANK": f"SLURM_PROCID={slurm.procid}",
        "LOCAL_RANK": f"SLURM_LOCALID={slurm.localid}",
        "WORLD_SIZE": f"SLURM_STEP_NUM_TASKS={slurm.ntasks}",
        "LOCAL_WORLD_SIZE": f"SLURM_STEP_TASKS_PER_NODE={slurm.tasks_per_node} at "
        f"SLURM_NODEID={slurm.nodeid}",
        "NODE_RANK": f"SLURM_NODEID={slurm.nodeid}",
        "GROUP_RANK": f"SLURM_NODEID={slurm.nodeid}",
        "NNODES": f"SLURM_STEP_NUM_NODES={slurm.nnodes}",
        "MASTER_ADDR": addr_source,
        "MASTER_PORT": port_plan.source,
        "TF_CONFIG": slurm.tf_source(),
    }
    return Resolution(
        launcher="slurm",
        rank=slurm.procid,
        local_rank=slurm.localid,
        world_size=slurm.ntasks,
        local_world_size=slurm.counts[slurm.nodeid],
        node_rank=slurm.nodeid,
        nnodes=slurm.nnodes,
        master_addr=master_addr,
        master_port=port_plan.master,
        hostname=environ.get("SLURMD_NODENAME") or slurm.node_list()[slurm.nodeid],
        job_id=job,
        step_id=step,
        sources=sources,
        notes=notes,
        tf_chief=options.tf_chief,
        topology=slurm,
    )


def _ports(
    environ: Mapping[str, str],
    options: Options,
    job: int,
    step: int,
    tasks: int,
    ephemeral: tuple[int, int] | None = None,
) -> ports.Ports:
    """MASTER_PORT and TF ports: explicit port, then Slurm's reserved ports, then the formula."""
    explicit: tuple[int, str] | None = None
    if options.port is not None:
        explicit = (options.port, "given port (--port or SLURMENV_PORT)")
    elif environ.get("MASTER_PORT"):
        port = ports.parse_port(environ["MASTER_PORT"], "MASTER_PORT")
        explicit = (port, f"MASTER_PORT={port} already set (it wins)")
    if explicit is not None:
        port, why = explicit
        tf = [port + 1 + k for k in range(tasks) if port + 1 + k <= 65535]
        return ports.Ports(port, tf, f"{why}; TensorFlow ports follow it")
    reserved = environ.get("SLURM_STEP_RESV_PORTS")
    if reserved:
        listed = ports.parse_port_list(reserved, "SLURM_STEP_RESV_PORTS")
        return ports.Ports(
            listed[0], listed[1:], f"SLURM_STEP_RESV_PORTS={reserved} (reserved by Slurm)"
        )
    ports.check_range_outside(options.port_range, ephemeral, "SLURMENV_PORT_RANGE")
    return ports.block_ports(job, step, options.port_range, tasks)


