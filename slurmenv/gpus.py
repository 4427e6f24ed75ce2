"""GPU binding: give each task of a node its share of the GPU list the tasks share.

By default Slurm lets every task of a step see all of the step's GPUs on its node
(``srun --gres=gpu:4 --ntasks-per-node=2``: both tasks get ``CUDA_VISIBLE_DEVICES=0,1,2,3``).
With binding (opt-in: ``--bind-gpus`` or ``SLURMENV_BIND_GPUS=1``) task ``k`` of ``n`` on a
node keeps block ``k`` of ``len(list) // n`` consecutive entries *of the list it already has*:
``4,5,6,7`` shared by 2 tasks gives ``4,5`` and ``6,7``. Entries are opaque (indices, GPU or MIG
UUIDs pass through), so a renumbered list (cgroup ``ConstrainDevices``) stays right. When the
count does not divide, the last ``len(list) % n`` entries are left unused (every task gets the
same number of GPUs); fewer entries than tasks is an error.

Every variable of the list that is set is narrowed the same way, like Slurm's own per-task
binding (``--gpus-per-task``, ``--gpu-bind``) does: ``CUDA_VISIBLE_DEVICES`` (NVIDIA),
``ROCR_VISIBLE_DEVICES`` (ROCm), ``GPU_DEVICE_ORDINAL`` (OpenCL/HIP) and ``ZE_AFFINITY_MASK``
(oneAPI Level Zero).

A list Slurm already bound per task is left alone: the task's list is shorter than
``SLURM_GPUS_ON_NODE`` (the step's GPU count on this node), or ``SLURM_GPUS_PER_TASK`` is set.
(``SLURM_STEP_GPUS`` cannot tell: Slurm narrows it per task too.) The same test makes binding
idempotent inside Slurm: evaluating it twice does not split the share again.

Everything here is a pure function of an environment mapping and the task's local rank.
"""

from __future__ import annotations

from .errors import SlurmEnvError, require_list, to_int
from .lean import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: The GPU lists Slurm sets for every task (gres/gpu), in the order they are reported (and
#: exported, when GPU binding narrows them).
VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK")
#: What Slurm writes when the gres has no device files (old versions): no GPU at all.
NO_DEVICES = ("", "NoDevFiles")
REQUEST_FIX = (
    "give every task at least one GPU (srun --gres=gpu:N with N >= tasks per node, or "
    "--gpus-per-task=1), run fewer tasks per node, or drop --bind-gpus / SLURMENV_BIND_GPUS")


class Binding(NamedTuple):
    """The GPUs of one task.

    * ``env``: variables to set (empty when the lists are left as they are);
    * ``gpus``: the entries of the first list (``VARIABLES`` order) this task sees once ``env``
      is applied, or None when no list is set (the environment restricts nothing);
    * ``source``: one sentence saying where ``gpus`` comes from;
    * ``notes``: remarks worth showing (GPUs left unused, lists left alone and why).
    """

    env: dict[str, str]
    gpus: tuple[str, ...] | None
    source: str
    notes: tuple[str, ...] = ()


def parse_list(value: str, variable: str) -> list[str]:
    """Split a comma-separated GPU list; ``""`` and ``NoDevFiles`` mean no GPU.

    Entries are kept as written (stripped of blanks): indices, ``GPU-…``/``MIG-…`` UUIDs.
    An empty or repeated entry is an error (two tasks would share a GPU).
    """
    text = value.strip()
    if text in NO_DEVICES:
        return []
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise SlurmEnvError(
            f"{variable} has an empty entry", variable=variable, value=value,
            fix=f"{variable} must be a comma-separated list of GPU indices or UUIDs")
    if len(set(items)) != len(items):
        raise SlurmEnvError(
            f"{variable} lists a GPU twice", variable=variable, value=value,
            fix=f"list each GPU once in {variable}")
    return items


def for_local_rank(visible: Sequence[str], local_rank: int, local_world_size: int, *,
                   variable: str = "CUDA_VISIBLE_DEVICES") -> list[str]:
    """The share of ``visible`` (the list the node's tasks share) of task ``local_rank``.

    ``local_world_size`` tasks get ``len(visible) // local_world_size`` consecutive entries
    each, in local-rank order; the last ``len(visible) % local_world_size`` entries go unused.
    Raises SlurmEnvError (naming ``variable``) when there are fewer entries than tasks.

    It depends only on the list and the task's place on its node, so it gives the GPUs of any
    rank of the step (``show --all-ranks``) given its node's list; each node has its own list
    (``SLURM_STEP_GPUS`` may differ between nodes), only this node's is in the environment.

    >>> for_local_rank(["4", "5", "6", "7"], 1, 2)
    ['6', '7']
    >>> for_local_rank(["0", "1", "2"], 1, 2)
    ['1']

    A string is refused (TypeError): split a variable's value with :func:`parse_list` first.
    """
    require_list(visible, "visible", "a list of GPU entries such as ['4', '5', '6', '7']: "
                 "split a CUDA_VISIBLE_DEVICES value with slurmenv.gpus.parse_list(value, name)")
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"local rank {local_rank} is not in 0..{local_world_size - 1}")
    count = len(visible) // local_world_size
    if count == 0:
        raise SlurmEnvError(
            f"{local_world_size} tasks on this node share {len(visible)} GPU(s): each task "
            "needs at least one",
            variable=variable, value=",".join(visible), fix=REQUEST_FIX)
    return list(visible[local_rank * count : (local_rank + 1) * count])


def lists_set(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: environ[name] for name in VARIABLES if environ.get(name) is not None}


def count_list(value: str) -> int:
    """How many entries a comma-separated GPU list has (blank entries not counted)."""
    return len([x for x in value.split(",") if x.strip()])


def node_gpus(environ: Mapping[str, str]) -> int | None:
    """The step's GPUs on this node (``SLURM_GPUS_ON_NODE``), None when Slurm does not say."""
    return to_int(environ.get("SLURM_GPUS_ON_NODE", ""))


def bound_by_slurm(environ: Mapping[str, str], name: str, count: int) -> str | None:
    """Why the list ``name`` (``count`` entries) is already this task's own (a sentence), or
    None when the tasks of the node share it. The one rule for "Slurm bound the GPUs per task".

    Observed on Slurm 22.05: with ``--gpus-per-task`` or ``--gpu-bind`` Slurm sets
    ``SLURM_GPUS_PER_TASK`` or ``SLURMD_TRES_BIND=...per_task...`` and each task's list (even
    ``SLURM_STEP_GPUS``) is shorter than ``SLURM_GPUS_ON_NODE``; without binding every task of
    a node sees all of them. A list shorter than ``SLURM_GPUS_ON_NODE`` is also what an earlier
    binding leaves, which makes binding idempotent.
    """
    per_task = environ.get("SLURM_GPUS_PER_TASK")
    if per_task:
        return f"SLURM_GPUS_PER_TASK={per_task}: Slurm gives each task its own GPUs"
    on_node = node_gpus(environ)
    if on_node is not None and count < on_node:
        return (
            f"{name} has {count} of the step's SLURM_GPUS_ON_NODE={on_node} GPUs on "
            "this node: Slurm (or an earlier binding) already gave this task its own")
    tres = environ.get("SLURMD_TRES_BIND", "")
    if "per_task" in tres:
        return f"SLURMD_TRES_BIND={tres}: Slurm gives each task its own GPUs"
    return None


def bound_per_task(environ: Mapping[str, str]) -> bool:
    """Whether the task's first GPU list set (``VARIABLES`` order) is its own
    (:func:`bound_by_slurm`); False when no list is set."""
    present = lists_set(environ)
    if not present:
        return False
    name, value = next(iter(present.items()))
    count = 0 if value.strip() in NO_DEVICES else count_list(value)
    return bound_by_slurm(environ, name, count) is not None


def plan(environ: Mapping[str, str], local_rank: int, local_world_size: int,
         bind: bool = False) -> Binding:
    """The GPUs of the task ``local_rank`` of ``local_world_size`` on this node.

    With ``bind`` the shared lists are narrowed to this task's share (see the module
    docstring) and errors are raised for lists that cannot be split; without it nothing is
    changed or checked: the result only describes what the task sees.
    """
    present = lists_set(environ)
    if not present:
        return _no_list(environ, local_world_size, bind)
    name, value = next(iter(present.items()))
    if not bind:
        gpus = tuple(item.strip() for item in value.split(",")) if value.strip() not in \
            NO_DEVICES else ()
        shared = f"shared by the {local_world_size} tasks of this node" \
            if local_world_size > 1 else "the only task on this node"
        return Binding({}, gpus, f"{name}={value} ({shared}; not bound)")
    lists = {var: parse_list(text, var) for var, text in present.items()}
    first = lists[name]
    for var, items in lists.items():
        if len(items) != len(first):
            raise SlurmEnvError(
                f"{var} lists {len(items)} GPUs but {name} lists {len(first)}: the lists "
                "disagree, so no share can be chosen",
                variable=var, value=present[var],
                fix=f"set {var} and {name} to the same devices, or unset the one set by hand")
    why = bound_by_slurm(environ, name, len(first))
    if why is not None:
        return Binding({}, tuple(first), f"{name}={value} ({why}; left alone)",
                       (f"GPU binding: left alone ({why})",))
    if local_world_size == 1:
        return Binding({}, tuple(first), f"{name}={value} (the only task on this node: all)")
    env: dict[str, str] = {}
    for var, items in lists.items():
        env[var] = ",".join(for_local_rank(items, local_rank, local_world_size, variable=var))
    share = env[name].split(",")
    notes: list[str] = []
    unused = len(first) % local_world_size
    if unused:
        notes.append(
            f"GPU binding: {len(first)} GPUs do not divide among {local_world_size} tasks; "
            f"{','.join(first[-unused:])} left unused (each task gets {len(share)})")
    source = (
        f"share {local_rank + 1} of {local_world_size} (LOCAL_RANK={local_rank}) of "
        f"{name}={value}, shared by the tasks of this node")
    return Binding(env, tuple(share), source, tuple(notes))


def _no_list(environ: Mapping[str, str], local_world_size: int, bind: bool) -> Binding:
    on_node = environ.get("SLURM_GPUS_ON_NODE")
    if bind and local_world_size > 1:
        detail = (
            f" although the step has SLURM_GPUS_ON_NODE={on_node} (srun --gpu-bind=none?)"
            if on_node else "")
        raise SlurmEnvError(
            f"cannot bind GPUs: {local_world_size} tasks on this node but no GPU list "
            f"(CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ... are unset){detail}",
            variable="CUDA_VISIBLE_DEVICES", value=None,
            fix="request GPUs for the step (srun --gres=gpu:N or --gpus-per-node=N), or drop "
            "--bind-gpus / SLURMENV_BIND_GPUS for a step without GPUs")
    return Binding({}, None, "no GPU list set (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ... "
                   "unset): the environment restricts nothing")
