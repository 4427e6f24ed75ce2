"""Who runs where: the rank → (node, local rank) map of a Slurm step.

Slurm lays tasks out over the step's nodes (``slurm_step_layout.c``):

* ``block``: consecutive ranks fill a node before the next one;
* ``cyclic``: one rank per node in turn, skipping nodes that are full;
* ``plane=P``: like cyclic, in chunks of ``P`` consecutive ranks;
* ``arbitrary``: rank ``r`` runs on the host named on line ``r`` of ``SLURM_HOSTFILE``.

With ``SLURM_DISTRIBUTION`` unset Slurm uses block when there are more tasks than nodes, and
cyclic otherwise (one task per node, where the two agree).
"""

from __future__ import annotations

from itertools import accumulate

from .errors import SlurmEnvError, is_number
from .lean import TYPE_CHECKING, NamedTuple, bisect_right

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


class Distribution(NamedTuple):
    """How tasks are spread over nodes: ``kind`` is block, cyclic, plane or arbitrary."""

    kind: str
    plane_size: int = 0
    source: str = "default"


class Placement(NamedTuple):
    """The whole step's layout: ``node_of[r]`` and ``local_of[r]`` for every rank ``r``."""

    node_of: list[int]
    local_of: list[int]

    def ranks_on(self, node: int) -> list[int]:
        """The ranks placed on node index ``node``, in local-rank order."""
        return [rank for rank, n in enumerate(self.node_of) if n == node]


class UnknownLayout(NamedTuple):
    """The layout cannot be known from the environment; ``reason`` says why."""

    reason: str


def parse_distribution(environ: Mapping[str, str]) -> Distribution | UnknownLayout:
    """Read ``SLURM_DISTRIBUTION`` (and ``SLURM_DIST_PLANESIZE``) into a Distribution."""
    get = environ.get
    raw = get("SLURM_DISTRIBUTION")
    if not raw:
        return Distribution("default")
    # "block:cyclic,pack": the node level is the part before ':' and before ','.
    kind = raw.split(",")[0].split(":")[0].strip()
    source = f"SLURM_DISTRIBUTION={raw}"
    plane_size = 0
    if kind.startswith("plane"):
        inline = kind.partition("=")[2]
        size = inline or get("SLURM_DIST_PLANESIZE", "")
        if not is_number(size) or int(size) < 1:
            raise SlurmEnvError(
                "plane distribution without a valid plane size",
                variable="SLURM_DISTRIBUTION" if inline else "SLURM_DIST_PLANESIZE",
                value=raw if inline else get("SLURM_DIST_PLANESIZE"),
                fix="Slurm sets it with -m plane=N; set it to N if you build the environment by hand",
            )
        kind, plane_size = "plane", int(size)
    if kind in ("", "*"):
        return Distribution("default", 0, source)
    if kind not in ("block", "cyclic", "plane", "arbitrary"):
        return UnknownLayout(f"unknown node distribution {kind!r} in {source}")
    return Distribution(kind, plane_size, source)


def _round_robin(counts: Sequence[int], chunk: int) -> Placement:
    """Plane layout: in each round every node not yet full takes up to ``chunk`` ranks."""
    nnodes = len(counts)
    node_of: list[int] = []
    local_of: list[int] = []
    per_node = counts[0] if counts else 0
    if counts.count(per_node) == nnodes:
        # The same count on every node: every round takes the same number from each.
        for first in range(0, per_node, chunk):
            size = min(chunk, per_node - first)
            node_of.extend(_each_repeated(nnodes, size))
            local_of.extend(list(range(first, first + size)) * nnodes)
        return Placement(node_of, local_of)
    filled = [0] * nnodes
    open_nodes = [i for i, c in enumerate(counts) if c > 0]
    while open_nodes:
        still_open = []
        for node in open_nodes:
            base = filled[node]
            take = min(chunk, counts[node] - base)
            node_of.extend([node] * take)
            local_of.extend(range(base, base + take))
            filled[node] = base + take
            if base + take < counts[node]:
                still_open.append(node)
        open_nodes = still_open
    return Placement(node_of, local_of)


def _each_repeated(nnodes: int, times: int) -> list[int]:
    """``[0]*times + [1]*times + ... + [nnodes-1]*times``."""
    if times == 1:
        return list(range(nnodes))
    return [node for node in range(nnodes) for _ in range(times)]


def _block(counts: Sequence[int]) -> Placement:
    per_node = counts[0] if counts else 0
    if counts.count(per_node) == len(counts):
        return Placement(_each_repeated(len(counts), per_node), list(range(per_node)) * len(counts))
    node_of: list[int] = []
    local_of: list[int] = []
    for node, count in enumerate(counts):
        node_of.extend([node] * count)
        local_of.extend(range(count))
    return Placement(node_of, local_of)


def place(counts: Sequence[int], distribution: Distribution, hosts: Sequence[str] | None = None,
          hostfile: Sequence[str] | None = None) -> Placement:
    """Compute the rank → (node index, local rank) map for a step.

    ``counts[i]`` is the number of tasks on node ``i``. For ``arbitrary``, ``hostfile`` is the
    expanded ``SLURM_HOSTFILE`` (one host per rank) and ``hosts`` the step's node list.
    """
    kind = distribution.kind
    if kind == "default":
        kind = "block" if total(counts) > len(counts) else "cyclic"
    if kind == "block":
        return _block(counts)
    if kind == "cyclic":
        return _round_robin(counts, 1)
    if kind == "plane":
        return _round_robin(counts, distribution.plane_size)
    assert kind == "arbitrary" and hosts is not None and hostfile is not None
    return _arbitrary(counts, hosts, hostfile)


def ordered_block(counts: Sequence[int], order: Sequence[int]) -> Placement:
    """Block layout over the nodes taken in ``order`` (node indices): Slurm 26.05's layout of a
    block or default step under a topology plugin (``launchers/topology.py``)."""
    node_of = [0] * total(counts)
    local_of = [0] * len(node_of)
    rank = 0
    for node in order:
        for local in range(counts[node]):
            node_of[rank], local_of[rank] = node, local
            rank += 1
    return Placement(node_of, local_of)


def total(counts: Sequence[int]) -> int:
    """``sum(counts)``, at the cost of a comparison per node when all counts are equal."""
    first = counts[0] if counts else 0
    return first * len(counts) if counts.count(first) == len(counts) else sum(counts)


def largest(counts: Sequence[int]) -> int:
    """``max(counts)``, likewise."""
    first = counts[0]
    return first if counts.count(first) == len(counts) else max(counts)


def _kind(counts: Sequence[int], distribution: Distribution) -> tuple[str, int]:
    """The layout actually used, and its chunk size (block = one chunk of a whole node)."""
    kind = distribution.kind
    if kind == "default":
        kind = "block" if total(counts) > len(counts) else "cyclic"
    return kind, 1 if kind == "cyclic" else distribution.plane_size


def locate(counts: Sequence[int], distribution: Distribution, rank: int) -> tuple[int, int]:
    """``(node index, local rank)`` of one rank, without building the whole placement.

    Block layouts and round-robin layouts (cyclic, plane) with the same task count on every
    node are computed directly (time in the node count at most); other round-robin layouts
    are placed in full. Not for ``arbitrary``, which needs the host file.
    """
    kind, chunk = _kind(counts, distribution)
    if kind == "block":
        ends = list(accumulate(counts))
        node = bisect_right(ends, rank)
        return node, rank - (ends[node - 1] if node else 0)
    assert kind in ("cyclic", "plane")
    per_node, nnodes = counts[0], len(counts)
    if counts.count(per_node) != nnodes:
        placed = _round_robin(counts, chunk)
        return placed.node_of[rank], placed.local_of[rank]
    # Every node takes ``chunk`` ranks per round (fewer in the last round).
    rnd, within = divmod(rank, nnodes * chunk)
    size = min(chunk, per_node - rnd * chunk)
    node, k = divmod(within, size)
    return node, rnd * chunk + k


def ranks_on(counts: Sequence[int], distribution: Distribution, node: int) -> list[int]:
    """The ranks that one node holds, in local-rank order (what Slurm puts in SLURM_GTIDS).

    Computed like :func:`locate`; not for ``arbitrary``.
    """
    kind, chunk = _kind(counts, distribution)
    if kind == "block":
        start = total(counts[:node])
        return list(range(start, start + counts[node]))
    assert kind in ("cyclic", "plane")
    per_node, nnodes = counts[0], len(counts)
    if counts.count(per_node) != nnodes:
        return _round_robin(counts, chunk).ranks_on(node)
    ranks = []
    for local in range(per_node):
        rnd, k = divmod(local, chunk)
        size = min(chunk, per_node - rnd * chunk)
        ranks.append(rnd * nnodes * chunk + node * size + k)
    return ranks


def _arbitrary(counts: Sequence[int], hosts: Sequence[str], hostfile: Sequence[str]) -> Placement:
    ntasks = sum(counts)
    index: dict[str, int] = {}
    for i, host in enumerate(hosts):
        index.setdefault(host, i)
    if len(hostfile) < ntasks:
        raise SlurmEnvError(
            f"SLURM_HOSTFILE names {len(hostfile)} hosts for {ntasks} tasks",
            variable="SLURM_HOSTFILE",
            fix="with -m arbitrary the host file needs one line per task")
    node_of = []
    local_of = []
    used = [0] * len(hosts)
    for rank in range(ntasks):
        node = index.get(hostfile[rank])
        if node is None:
            raise SlurmEnvError(
                f"SLURM_HOSTFILE line {rank + 1} names {hostfile[rank]!r}, not a node of this step",
                variable="SLURM_HOSTFILE",
                fix="the host file must only name nodes of the step (SLURM_STEP_NODELIST)")
        node_of.append(node)
        local_of.append(used[node])
        used[node] += 1
    if list(used) != list(counts):
        raise SlurmEnvError(
            "SLURM_HOSTFILE does not match SLURM_STEP_TASKS_PER_NODE",
            variable="SLURM_HOSTFILE",
            fix="the host file must be the one this step was started with")
    return Placement(node_of, local_of)
