"""Lightning plugin: a ``ClusterEnvironment`` backed by ``slurmenv.resolve()`` (Lightning optional).

>>> from slurmenv.lightning import Environment
>>> env = Environment()             # in every task of srun, under torchrun or an MPI launcher
>>> fabric = Fabric(devices=env.devices, num_nodes=env.num_nodes, plugins=[env])
>>> trainer = Trainer(devices=env.devices, num_nodes=env.num_nodes, plugins=[env])

Lightning's own ``SLURMEnvironment`` reads the job's ``SLURM_NTASKS_PER_NODE`` (wrong in a
step with fewer tasks per node than the job) and refuses steps started with ``-n`` alone; this
one answers from slurmenv and ignores ``set_global_rank`` (Lightning's ``node_rank * devices +
local_rank`` is not the rank of a cyclic or plane layout). An ``Environment`` is an instance
of the ``ClusterEnvironment`` of every Lightning package the program has imported (every
installed one when none yet), imported only when one is made.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .errors import SlurmEnvError
from .resolution import Resolution

#: Top-level package -> the module holding its ``ClusterEnvironment``. ``pytorch_lightning``
#: uses the one of ``lightning_fabric``.
BASES = {
    "lightning": "lightning.fabric.plugins.environments",
    "lightning_fabric": "lightning_fabric.plugins.environments",
}
_IMPORTED_BY = {"lightning": "lightning", "pytorch_lightning": "lightning_fabric",
                "lightning_fabric": "lightning_fabric"}  # fmt: skip
_classes: dict[tuple[str, ...], type] = {}

_EVEN_FIX = (
    "start the same number of tasks on every node (srun -N{nnodes} --ntasks-per-node=K): "
    "Lightning needs devices x num_nodes = world size; plain torch.distributed or Accelerate "
    "under 'slurmenv exec' take any layout"
)


def packages() -> tuple[str, ...]:
    """The Lightning packages whose ``ClusterEnvironment`` an Environment extends: those
    imported, else every installed one (not imported); SlurmEnvError when there is none."""
    imported = {_IMPORTED_BY[name] for name in _IMPORTED_BY if name in sys.modules}
    if imported:
        return tuple(name for name in BASES if name in imported)
    installed = tuple(name for name in BASES if importlib.util.find_spec(name) is not None)
    if not installed:
        raise SlurmEnvError(
            "slurmenv.lightning.Environment needs Lightning, which is not installed",
            fix="pip install lightning (or pytorch-lightning)",
        )
    return installed


def _implementation() -> type:
    """``Environment`` joined with the ClusterEnvironment class of each package in use."""
    key = packages()
    if key not in _classes:
        bases = tuple(importlib.import_module(BASES[name]).ClusterEnvironment for name in key)
        _classes[key] = type("Environment", (Environment, *bases), {"__module__": __name__})
    return _classes[key]


def tasks_per_node(res: Resolution) -> list[int] | None:
    """The tasks on each node, in node order (None when the layout is not known)."""
    try:
        node_of = res.node_of
    except SlurmEnvError:
        return None
    counts = Counter(node_of)
    return [counts[node] for node in range(res.nnodes)]


def check_even(res: Resolution, environ: Mapping[str, str] | None = None) -> int:
    """The number of tasks on every node, or SlurmEnvError when nodes run different numbers
    of tasks (Lightning's ``devices`` is one number for all nodes)."""
    env = os.environ if environ is None else environ
    counts = tasks_per_node(res)
    if len(set(counts)) == 1 if counts else res.world_size == res.nnodes * res.local_world_size:
        return res.local_world_size
    shown = ",".join(map(str, counts)) if counts else f"{res.local_world_size} on this node"
    variable = "SLURM_STEP_TASKS_PER_NODE" if "SLURM_STEP_TASKS_PER_NODE" in env else None
    raise SlurmEnvError(
        f"Lightning cannot run this step: its {res.world_size} tasks are spread unevenly over "
        f"{res.nnodes} nodes ({shown} tasks per node), and Lightning needs the same number on "
        "every node (devices x num_nodes = world size)",
        variable=variable, value=env.get(variable) if variable else None,
        fix=_EVEN_FIX.format(nnodes=res.nnodes),
    )


class Environment:
    """Lightning's ``ClusterEnvironment`` for a task resolved by slurmenv: ``plugins=[env]``
    of ``Fabric`` or ``Trainer``, with ``devices=env.devices`` and ``num_nodes=env.num_nodes``.
    Every answer comes from ``resolution`` (default ``slurmenv.resolve(environ,
    **resolve_kwargs)``, made here: SlurmEnvError when the task cannot be resolved)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Environment:  # noqa: PYI034
        made = _implementation() if cls is Environment else cls
        instance: Environment = super().__new__(made)
        return instance

    def __init__(self, resolution: Resolution | None = None, *,
                 environ: Mapping[str, str] | None = None, **resolve_kwargs: Any) -> None:
        from . import resolve

        super().__init__()
        self._environ = os.environ if environ is None else environ
        self._resolution = (resolution if resolution is not None
                            else resolve(environ, **resolve_kwargs))

    def __copy__(self) -> Environment:
        return self  # immutable: a copy would be the same task's same answers

    def __deepcopy__(self, memo: dict[int, Any]) -> Environment:
        return self

    def __repr__(self) -> str:
        return f"slurmenv.lightning.Environment({self._resolution!r})"

    @property
    def resolution(self) -> Resolution:
        """The resolution every answer comes from."""
        return self._resolution

    @property
    def devices(self) -> int:
        """Lightning's ``devices``: the tasks on each node (SlurmEnvError if they differ)."""
        return check_even(self._resolution, self._environ)

    @property
    def num_nodes(self) -> int:
        """Lightning's ``num_nodes``: the nodes of the step."""
        return self._resolution.nnodes

    # -- the ClusterEnvironment interface -------------------------------------------------
    @property
    def creates_processes_externally(self) -> bool:
        """Always true: srun (or torchrun, mpirun) started every process already."""
        return True

    @property
    def main_address(self) -> str:
        return self._resolution.master_addr

    @property
    def main_port(self) -> int:
        return self._resolution.master_port

    @staticmethod
    def detect() -> bool:
        """Whether slurmenv can resolve this process's environment."""
        from . import resolve

        try:
            resolve()
        except SlurmEnvError:
            return False
        return True

    def world_size(self) -> int:
        return self._resolution.world_size

    def set_world_size(self, size: int) -> None:
        """Ignored: the world size is the step's."""

    def global_rank(self) -> int:
        return self._resolution.rank

    def set_global_rank(self, rank: int) -> None:
        """Ignored: Lightning's ``node_rank * devices + local_rank`` is not the rank of a cyclic
        or plane layout."""

    def local_rank(self) -> int:
        return self._resolution.local_rank

    def node_rank(self) -> int:
        return self._resolution.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """SlurmEnvError unless ``devices`` and ``num_nodes`` are the step's (called by
        Lightning before it joins the process group)."""
        res = self._resolution
        per_node = check_even(res, self._environ)
        for name, given, wanted in (("devices", num_devices, per_node),
                                    ("num_nodes", num_nodes, res.nnodes)):  # fmt: skip
            if given != wanted:
                raise SlurmEnvError(
                    f"Lightning was given {name}={given}, but this step runs {res.world_size} "
                    f"tasks on {res.nnodes} node(s), {per_node} per node",
                    variable=name, value=str(given),
                    fix=f"pass devices={per_node}, num_nodes={res.nnodes} (devices=env.devices, "
                    "num_nodes=env.num_nodes)",
                )

    def teardown(self) -> None:
        """Nothing to clean up."""
