"""The result of a resolution: an immutable, typed view of one task's distributed environment,
and the values it gives (``env``, ``apply``, torchrun's options, every rank's GPUs).

render.py holds the output sets' names and the formats; it and gpus.py never name a
Resolution, so that nothing below this module imports it back (tests/test_imports.py).
"""

from __future__ import annotations

import os
from types import MappingProxyType

from . import gpus, render
from .errors import SlurmEnvError
from .launchers.base import Topology
from .lean import TYPE_CHECKING

__all__ = ["Resolution", "Topology"]

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

#: What to do when NODE_RANK or NNODES is needed but not known (an Open MPI 5 rank over
#: several nodes): torch's env:// does not need them.
UNKNOWN_FIX = (
    "export only what env:// needs (slurmenv export --for torch leaves them out), or start the "
    "tasks with srun (srun --mpi=pmi2 for MPI programs), which tells every task its node")


class Resolution:
    """What one task needs to join its distributed job (see ``slurmenv.resolve``).

    Attributes are read-only. ``sources`` maps each output variable to a sentence saying which
    input variables it came from; ``notes`` are remarks worth showing a user (overrides taken,
    values inherited from another launcher).

    ``bindings`` holds the per-task settings to export besides the distributed ones (GPU lists
    narrowed by GPU binding, thread counts that were unset); ``gpus`` is the GPU list this task
    sees once they are applied (None when no GPU list is set) and
    ``gpu_source`` says where it comes from.
    """

    launcher: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    _node_rank: int
    _nnodes: int
    unknown: tuple[str, ...]
    master_addr: str
    master_port: int
    hostname: str
    job_id: str | None
    step_id: str | None
    sources: Mapping[str, str]
    notes: tuple[str, ...]
    tf_chief: bool
    tf_jobs: str | None
    bindings: Mapping[str, str]
    gpus: tuple[str, ...] | None
    gpu_source: str
    fixed: Mapping[str, str]
    origin: str
    origin_fix: str | None
    label: str
    in_worker: bool
    _topology: Topology
    _cache: dict[str, Any]
    _jobs_from: str  # the option that gave tf_jobs: SLURMENV_TF_JOBS or --tf-jobs

    __slots__ = tuple(__annotations__)

    def __init__(self, *, node_rank: int, nnodes: int, topology: Topology,
                 tf_config: Callable[[], dict[str, Any]] | None, tf_jobs_from: str,
                 **fields: Any) -> None:
        """Made by ``pipeline.derive``: every attribute by name (``node_rank``, ``nnodes``,
        ``topology`` and ``tf_jobs_from`` for the private ones; ``tf_config``: a TF_CONFIG
        another launcher set)."""
        fields.update(
            _node_rank=node_rank, _nnodes=nnodes, _topology=topology, _jobs_from=tf_jobs_from,
            _cache={} if tf_config is None else {"tf_config_fn": tf_config},
            label=fields["label"] or fields["launcher"], unknown=tuple(fields["unknown"]),
            notes=tuple(fields["notes"]),
            gpus=None if fields["gpus"] is None else tuple(fields["gpus"]),
            **{k: MappingProxyType(dict(fields[k])) for k in ("sources", "bindings", "fixed")})
        assert set(fields) == set(self.__slots__), set(fields) ^ set(self.__slots__)
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"Resolution is immutable (tried to set {key})")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"Resolution is immutable (tried to delete {key})")

    def __repr__(self) -> str:
        return (
            f"Resolution(launcher={self.launcher!r}, rank={self.rank}, world_size={self.world_size}, "
            f"local_rank={self.local_rank}, master={self.master_addr}:{self.master_port})")

    @property
    def node_rank(self) -> int:
        """This task's node index (``NODE_RANK``); SlurmEnvError where the launcher does not
        tell it (:attr:`unknown`)."""
        self._known("NODE_RANK")
        return self._node_rank

    @property
    def nnodes(self) -> int:
        """How many nodes hold tasks (``NNODES``); SlurmEnvError where the launcher does not
        tell it (:attr:`unknown`)."""
        self._known("NNODES")
        return self._nnodes

    @property
    def several_nodes(self) -> bool:
        """Whether the tasks span more than one node (also where NNODES is not known: then
        from the local count)."""
        if "NNODES" in self.unknown:
            return self.local_world_size < self.world_size
        return self._nnodes > 1

    def node_text(self) -> str:
        """``node 2 of 4`` for messages, ``node ? of ?`` where they are not known."""
        if self.unknown:
            return "node ? of ? (not known under this launcher)"
        return f"node {self._node_rank} of {self._nnodes}"

    def _known(self, name: str) -> None:
        if name in self.unknown:
            raise SlurmEnvError(
                f"{name} is not known here: {self.sources.get(name, self.launcher)}",
                variable=name, value=None, fix=UNKNOWN_FIX)

    @property
    def is_chief(self) -> bool:
        """True on rank 0: the task that should write checkpoints and logs."""
        return self.rank == 0

    @property
    def layout_known(self) -> bool:
        """Whether the launcher tells which node every rank is on (so the whole world can be
        drawn: ``show --all-ranks``); the layout may still be refused, with the reason."""
        return bool(self._topology.layout_known)

    @property
    def layout_name(self) -> str | None:
        """``block``, ``cyclic (Slurm's default)``, ... (None when the launcher has no layout)."""
        try:
            return self._topology.layout_name()
        except SlurmEnvError:
            return None

    @property
    def tasks_per_node(self) -> str | None:
        """The per-node task counts as the launcher wrote them (``2(x2)``), or None."""
        return self._topology.tasks_per_node

    @property
    def hosts(self) -> tuple[str, ...]:
        """The step's node names in node-index order (expanded on first use)."""
        return tuple(self._cached("hosts", self._topology.hosts))

    @property
    def node_of(self) -> tuple[int, ...]:
        """Node index of every rank of the step."""
        return tuple(self._cached("node_of", self._topology.node_of))

    @property
    def local_of(self) -> tuple[int, ...]:
        """Local rank of every rank of the step."""
        return tuple(self._cached("local_of", self._topology.local_of))

    @property
    def tf_config(self) -> dict[str, Any]:
        """TensorFlow's ``TF_CONFIG`` as a dict (no size limit: use it in-process)."""
        fn = self._cache.get("tf_config_fn")
        if fn is not None:
            return fn()  # type: ignore[no-any-return]
        from . import tfconfig  # only outputs with TF_CONFIG need it

        workers = self._cached("tf_workers", self._topology.tf_workers)
        return tfconfig.build(workers, self.rank, self.tf_chief, self.tf_jobs, self._jobs_from)

    @property
    def tf_addresses(self) -> tuple[str, ...]:
        """``host:port`` of every rank's TensorFlow task, in rank order (the evaluator's
        too, which ``TF_CONFIG``'s cluster leaves out). SlurmEnvError where the launcher does
        not tell where every rank runs."""
        fn = self._cache.get("tf_config_fn")
        if fn is not None:  # a TF_CONFIG the launcher set: its cluster, chief first
            from . import tfconfig

            return tuple(tfconfig.rank_addresses(fn()))
        return tuple(self._cached("tf_workers", self._topology.tf_workers))

    @property
    def tf_roles(self) -> tuple[tuple[str, int], ...]:
        """``(task type, index)`` of every rank in ``TF_CONFIG`` (``--tf-jobs``,
        ``--tf-chief``); SlurmEnvError naming ``SLURMENV_TF_JOBS`` (``--tf-jobs`` when the
        command line gave them) when its counts do not add up to the step's tasks."""
        from . import tfconfig

        fn = self._cache.get("tf_config_fn")
        if fn is not None:  # a TF_CONFIG the launcher set: its cluster, chief first
            return tuple(tfconfig.cluster_roles(fn()))
        return tuple(tfconfig.roles(self.world_size, self.tf_chief, self.tf_jobs,
                                    self._jobs_from))

    @property
    def tf_config_bound(self) -> int:
        """The fewest bytes ``TF_CONFIG``'s JSON can take (0: unknown), computed from the
        world size and the node addresses without building it (``render`` refuses a value
        over Linux's limit before it is built)."""
        if self._cache.get("tf_config_fn") is not None:
            return 0
        return int(self._cached("tf_bound", lambda: self._topology.tf_bound(self.world_size)))

    def _cached(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def env(self, for_: str = "all") -> dict[str, str]:
        """The variables to export, as strings: ``for_`` is a key of ``render.OUTPUTS``
        (``"torch"``, ``"tf"``, ``"all"``, ``"torchrun"``); each set but "torchrun" ends with
        the task's ``bindings`` (GPU lists, thread counts).

        Raises SlurmEnvError if any of them cannot be computed (then nothing should be set).
        """
        if for_ not in render.OUTPUTS:
            raise SlurmEnvError(
                f"unknown output set {for_!r}", variable="--for", value=for_,
                fix="use one of: " + ", ".join(render.OUTPUTS))
        if for_ == "torchrun":
            return pet_env(self)
        out: dict[str, str] = {}
        for name in render.OUTPUTS[for_]:
            if name in self.unknown:
                continue  # not known here: left out (self.sources says why)
            if name in render.BINDING_NAMES:
                if name in self.bindings:
                    out[name] = self.bindings[name]
            elif name == "TF_CONFIG":
                from . import tfconfig  # only outputs with TF_CONFIG need it

                tfconfig.check_world(self.world_size, self.tf_config_bound)
                out[name] = tfconfig.dumps(self.tf_config)
            elif name in ("MASTER_ADDR", "MASTER_PORT"):
                out[name] = str(getattr(self, name.lower()))
            else:
                out[name] = str(getattr(self, render.RANK_FIELDS[name]))
        for name, value in out.items():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # bytes that were not UTF-8 in an input (surrogateescape)
                raise SlurmEnvError(
                    f"{name} would hold bytes that are not UTF-8 text (from "
                    f"{self.sources.get(name, 'the environment')})", variable=name, value=value,
                    fix="fix the variable it comes from: host names and addresses are ASCII",
                ) from None
        return out

    def apply(self, environ: os._Environ[str] | dict[str, str] | None = None, *,
              overwrite: bool = False, for_: str = "all") -> dict[str, str]:
        """Set the variables of ``env(for_)`` in ``environ`` (default ``os.environ``); return
        what was set.

        ``MASTER_ADDR`` and ``TF_CONFIG`` describe the step and always replace a value already
        there (``sources``/``notes`` say so), as do the GPU lists of GPU binding, which narrow
        the list already there (``render.ALWAYS_REPLACED``). A value the user chose
        (``MASTER_PORT``, thread counts) is kept unless ``overwrite``. (Rank-like values already
        set that disagree were refused by the resolution.) Nothing at all is set if any value
        cannot be computed.
        """
        target = os.environ if environ is None else environ
        applied = {}
        for name, value in self.env(for_).items():
            if overwrite or name in render.ALWAYS_REPLACED or target.get(name) in (None, value):
                target[name] = value
                applied[name] = value
        return applied

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary of this task's resolution (TF_CONFIG included if computable)."""
        data: dict[str, Any] = {name: getattr(self, name) for name in (
            "launcher", "rank", "local_rank", "world_size", "local_world_size", "master_addr",
            "master_port", "hostname", "job_id", "step_id", "is_chief")}
        data.update(
            node_rank=None if "NODE_RANK" in self.unknown else self._node_rank,
            nnodes=None if "NNODES" in self.unknown else self._nnodes, sources=dict(self.sources),
            notes=list(self.notes), bindings=dict(self.bindings),
            gpus=None if self.gpus is None else list(self.gpus), gpu_source=self.gpu_source)
        try:
            data["tf_config"] = self.tf_config
        except SlurmEnvError as exc:
            data["tf_config"] = None
            data["tf_config_error"] = str(exc)
        return data


# -- torchrun's options for this node (export --for torchrun, slurmenv torchrun) -------------
ONE_PER_NODE_FIX = (
    "start one task per node, e.g. srun -K --ntasks-per-node=1 -n \"$SLURM_JOB_NUM_NODES\" "
    "slurmenv torchrun train.py (-n as well: in a job of several tasks per node srun takes the job's task "
    "count): torchrun starts the node's processes itself (--nproc-per-node sets how many)")


def nproc_per_node(res: Resolution) -> tuple[int, str]:
    """torchrun's ``--nproc-per-node`` for this node, with the reason: one process per GPU
    this task sees (``res.gpus``), else 1."""
    if res.gpus:
        return len(res.gpus), f"one process per GPU ({res.gpu_source})"
    why = f"no GPU in {res.gpu_source}" if res.gpus is not None else "no GPU list set"
    return 1, f"{why}: 1 process (pass --nproc-per-node=N for more)"


def check_one_per_node(res: Resolution) -> None:
    """Refuse a step that runs more than one task on some node (one torchrun per node), and
    a resolution made inside another launcher (torchrun's workers)."""
    if res.in_worker:
        raise SlurmEnvError(
            f"already inside a launcher ({res.launcher}) that set RANK and WORLD_SIZE: "
            "torchrun would start processes inside its processes",
            variable="RANK", value=str(res.rank),
            fix="start torchrun from the batch script's srun, not from a training process")
    if res.world_size != res.nnodes or res.local_world_size != 1:
        raise SlurmEnvError(
            f"torchrun needs exactly one task per node, but this step runs {res.world_size} "
            f"tasks on {res.nnodes} nodes ({res.local_world_size} on this one)",
            variable="SLURM_STEP_TASKS_PER_NODE",
            # The Slurm step's own text (the step topology keeps it), e.g. "2(x2)".
            value=res.tasks_per_node, fix=ONE_PER_NODE_FIX)


def rdzv_id(res: Resolution) -> str:
    """``<job>.<step>``: unique per step, equal on every node of the step."""
    if res.job_id and res.step_id:
        return f"{res.job_id}.{res.step_id}"
    return f"slurmenv-{res.master_port}"  # single node outside Slurm: one agent only


def filled_values(res: Resolution, backend: str = "c10d",
                  addr_template: str | None = None) -> dict[str, str]:
    """The torchrun options slurmenv fills for this node (canonical name -> value).

    ``backend`` is the rendezvous backend in use (slurmenv's ``c10d`` unless the user chose
    another): ``static`` gets ``master-addr``/``master-port``; ``c10d`` the endpoint, id and
    ``is_host``; any other backend only the id.
    """
    check_one_per_node(res)
    nproc, _ = nproc_per_node(res)
    values = {"nnodes": str(res.nnodes), "nproc-per-node": str(nproc), "rdzv-backend": backend}
    if backend == "static":
        # Only the static backend uses --node-rank; c10d assigns node ranks at rendezvous
        # (torchrun warns that it ignores --node-rank there).
        values["node-rank"] = str(res.node_rank)
        values["master-addr"] = res.master_addr
        values["master-port"] = str(res.master_port)
        return values
    values["rdzv-id"] = rdzv_id(res)
    if backend == "c10d":
        values["rdzv-endpoint"] = f"{res.master_addr}:{res.master_port}"
        # One task per node: the task of rank 0 is alone on the node of rank 0.
        values["rdzv-conf"] = f"is_host={1 if res.rank == 0 else 0}"
        if addr_template:
            values["local-addr"] = addr_template.format(host=res.hostname)
    return values


def pet_env(res: Resolution) -> dict[str, str]:
    """torchrun's ``PET_*`` variables for this node, so that a plain ``torchrun train.py``
    started once per node (``srun --ntasks-per-node=1``) joins the step."""
    values = filled_values(res)
    return {name: values[name[4:].lower().replace("_", "-")] for name in render.PET_NAMES}


def gpus_per_rank(res: Resolution, environ: Mapping[str, str]) -> list[tuple[str, ...] | None] | None:
    """The GPUs of every rank of the step as far as this task can tell (``show --all-ranks``).

    ``res`` is this task's resolution from ``environ``. Ranks on this node: their share of the
    list when ``res`` bound GPUs, the shared list itself when not; None (unknown) when Slurm
    bound GPUs per task. Ranks on other nodes: None (each node has its own list). Returns None
    when no GPU list is set at all.
    """
    present = gpus.lists_set(environ)
    if not present:
        return None
    out: list[tuple[str, ...] | None] = [None] * res.world_size
    out[res.rank] = res.gpus
    name, value = next(iter(present.items()))
    try:
        items = gpus.parse_list(value, name)
        node_of, local_of = res.node_of, res.local_of
    except SlurmEnvError:
        return out
    if gpus.bound_by_slurm(environ, name, len(items)) is not None:
        return out
    bound = any(var in res.bindings for var in gpus.VARIABLES)
    for rank, (node, local) in enumerate(zip(node_of, local_of)):
        if node != res.node_rank:
            continue
        try:
            share = gpus.for_local_rank(items, local, res.local_world_size) if bound else items
        except (SlurmEnvError, ValueError):
            continue
        out[rank] = tuple(share)
    return out
