"""The order in which Slurm 26.05 fills a step's nodes with tasks under a topology plugin.

From Slurm 26.05 on, with ``TopologyPlugin=topology/tree`` or ``topology/block``, a block or
default step lays its tasks out over its nodes in *topology order* (``slurm_step_layout.c``
``_task_layout_topo``), while ``SLURM_STEP_NODELIST`` and ``SLURM_NODEID`` keep the node
table's order. The order: the step's nodes sorted by their rank (``topology_p_get_rank``),
ties kept in ``SLURM_STEP_NODELIST`` order. A node's rank is

* tree: the position, counted from 1, of the first leaf switch (a ``SwitchName`` line without
  ``Switches=``) listing it among the leaf switches of ``topology.conf``;
* block: the position, counted from 0, of the first ``BlockName`` line listing it.

Slurm gives a node listed nowhere rank 0; slurmenv refuses it instead (Slurm also matches a
node by its ``NodeHostName``, which a task cannot know).

Slurm does not reorder when the job has one node, when ``SelectTypeParameters`` holds
``CR_NO_DIST_TOPO_BLOCK``, nor for ``-m cyclic``, ``-m plane`` or ``-m arbitrary`` (the caller
asks only for block and default steps). ``TopologyParam=SwitchAsNodeRank`` or
``BlockAsNodeRank`` reorder the node table itself: the node list then already comes in
topology order, which the rule above keeps.

What decides is what every task of the step reads alike, never a task's own node: the
release (``SLURM_JOB_SLUID`` is set from 26.05 on, which is also the first release to
reorder), ``slurm.conf`` at ``SLURM_CONF`` (Slurm 23.11 and later set it in every task, the
configless cache's copy in configless mode) and the files it includes, and ``topology.conf``
beside it, read as bounded local files with Slurm's own grammar (``slurmconf.py``). Whatever
cannot be read or reproduced (an unreadable file, ``topology.yaml``, another topology plugin,
a form ``slurmconf`` refuses) is a refusal in every task, naming the setting and the fixes
that work on 26.05. A ``Nodes=`` list costs what the step's hosts and the file's length make
it cost, never what its ranges name (:class:`_Ranks`).
"""

from __future__ import annotations

import bisect
import itertools
import re

from .. import nodes
from ..errors import SlurmEnvError
from ..lean import TYPE_CHECKING, NamedTuple
from . import slurmconf

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Set by Slurm 26.05 and later in every task: the release whose block layout follows topology.
RELEASE_VARIABLE = "SLURM_JOB_SLUID"
#: The topology plugins whose order is reproduced here (the value of TopologyPlugin).
ORDERED = ("topology/tree", "topology/block")
#: TopologyPlugin values that Slurm turns into its flat default (``read_config.c``, compared
#: without case; ``topology/flat`` itself is compared as written).
FLAT = ("none", "default", "topology/none", "topology/default")
FIX = (
    "pass -m cyclic or -m plane=N to srun (Slurm 26.05 lays those out in node-list order "
    "whatever the topology), or -m arbitrary with a host file (SLURM_HOSTFILE); or ask the "
    "administrators for SelectTypeParameters=...,CR_NO_DIST_TOPO_BLOCK in slurm.conf"
)


class NodeOrder(NamedTuple):
    """``order``: the step's node indices in the order Slurm fills them (None: the listed
    order); ``why``: one sentence saying what decided it."""

    order: list[int] | None
    why: str


def _refuse(what: str, variable: str, value: str | None, fix: str = FIX) -> SlurmEnvError:
    return SlurmEnvError(
        f"the task layout of this block step cannot be known: {what}; Slurm 26.05 orders a "
        "block step's tasks by topology, and every task refuses alike",
        variable=variable, value=value, fix=fix,
    )


def node_order(environ: Mapping[str, str], hosts: Sequence[str]) -> NodeOrder:
    """How Slurm orders the nodes ``hosts`` (SLURM_STEP_NODELIST, expanded) of a block or
    default step; raises SlurmEnvError (the same in every task) when it cannot be known."""
    if len(hosts) < 2:
        return NodeOrder(None, "one node")
    if not environ.get(RELEASE_VARIABLE):
        return NodeOrder(None, f"Slurm before 26.05 ({RELEASE_VARIABLE} unset): node-list order")
    conf = environ.get("SLURM_CONF")
    if not conf:
        raise _refuse("SLURM_CONF is unset (Slurm 26.05 sets it in every task)", "SLURM_CONF",
                      None, "run slurmenv in the srun task itself, where Slurm sets SLURM_CONF; "
                      "or " + FIX)
    if "/" not in conf:
        raise _refuse("SLURM_CONF is a relative path (Slurm reads the files beside it from its "
                      "own folder)", "SLURM_CONF", conf,
                      "run slurmenv in the srun task itself, where Slurm sets SLURM_CONF; or "
                      + FIX)
    settings = read_slurm_conf(conf)
    folder = conf[:conf.rfind("/") + 1]  # get_extra_conf_path: the files beside SLURM_CONF
    yaml = f"{folder}topology.yaml"
    if _exists(yaml):
        raise _refuse(f"{yaml} configures the topology, which slurmenv does not read",
                      "SLURM_CONF", conf)
    # parse_select_type_param: strtok at commas, each token compared without case
    if any(part.lower() == "cr_no_dist_topo_block"
           for part in settings.get("selecttypeparameters", "").split(",")):
        return NodeOrder(None, "SelectTypeParameters holds CR_NO_DIST_TOPO_BLOCK: node-list order")
    plugin = settings.get("topologyplugin")
    if plugin is None or plugin.lower() in FLAT or plugin == "topology/flat":
        return NodeOrder(None, "no topology plugin in slurm.conf: node-list order")
    select = settings.get("selecttype", "select/cons_tres")
    if select != "select/cons_tres":  # node ranks come from cons_tres
        raise _refuse(f"SelectType={slurmconf.shown(select)} in {conf} with "
                      f"{slurmconf.shown(plugin)} is not reproduced",
                      "SLURM_CONF", conf)
    if plugin not in ORDERED:
        raise _refuse(f"TopologyPlugin={slurmconf.shown(plugin)} in {conf} orders tasks in a "
                      "way slurmenv does not reproduce", "SLURM_CONF", conf)
    path = f"{folder}topology.conf"
    data = _read_topology(path)
    if data is None:
        raise _refuse(f"{path} ({plugin}) cannot be read here", "SLURM_CONF", conf,
                      f"make {path} readable on every node, or " + FIX)
    ranks = tree_ranks(data, path, hosts) if plugin == "topology/tree" \
        else block_ranks(data, path, hosts)
    order = sorted(range(len(hosts)), key=lambda i: (ranks[i], i))
    return NodeOrder(order, f"{plugin}, {path}")


def _read_topology(path: str) -> bytes | None:
    from .. import readfile

    return readfile.read(path, "SLURM_CONF", f"make {path} a readable regular file",
                         slurmconf.MAX_BYTES)


def _exists(path: str) -> bool:
    import os

    try:
        os.stat(path)
    except OSError:
        return False
    return True


# -- slurm.conf ------------------------------------------------------------------------------
#: The global slurm.conf keys read (lower case); every other statement is skipped unread.
KEYS = ("topologyplugin", "topologyparam", "selecttype", "selecttypeparameters")


def read_slurm_conf(path: str) -> dict[str, str]:
    """The settings the resolver uses: the values of the global :data:`KEYS` in slurm.conf at
    ``path`` (``SLURM_CONF``) and the files it includes, read as Slurm reads them
    (``slurmconf.py``; the last value of a key wins). Refused (SlurmEnvError naming
    ``SLURM_CONF``): an unreadable file and every form ``slurmconf`` refuses."""
    try:
        return slurmconf.settings(path, KEYS)
    except slurmconf.Refused as exc:
        raise _unread(exc, path) from None


def _unread(exc: slurmconf.Refused, conf: str) -> SlurmEnvError:
    what = str(exc)
    if what.endswith("cannot be read here"):
        name = what.removesuffix(" cannot be read here")
        return _refuse(what, "SLURM_CONF", conf,
                       f"make {name} readable on every node (Slurm's commands need it too), or "
                       + FIX)
    return _refuse(f"{what}, a form slurmenv does not read", "SLURM_CONF", conf,
                   "write the line in the plain form `Key=value` (see docs/topology.md), or "
                   + FIX)


# -- topology.conf ---------------------------------------------------------------------------
#: Slurm's longest range in a node list (hostlist.c MAX_RANGE = MAX_SLURM_NODES): a longer
#: one is an invalid node name, and slurmctld does not start.
MAX_RANGE = 65536
#: Names read at most from one topology.conf: the largest step slurmenv resolves.
MAX_NAMES = nodes.MAX_NODES
#: The node lists read: names of letters, digits, ``.``, ``_`` and ``-``, each with at most one
#: bracket of numbers and ranges (``rack1-n[01-16,20]-ib``), which python-hostlist expands as
#: Slurm's hostlist.c does (the width of a range is its first number's).
_NAME = r"[A-Za-z0-9._-]"
_NUMBER = r"[0-9]{1,9}"  # no node list holds a billion names
_RANGES = rf"{_NUMBER}(?:-{_NUMBER})?(?:,{_NUMBER}(?:-{_NUMBER})?)*"
_PART = rf"({_NAME}+)(?:\[({_RANGES})\]({_NAME}*))?"
_PARTS = re.compile(_PART)  # one part; a list is parts separated by commas
#: Longest switch name (HOST_NAME_MAX).
MAX_SWITCH_NAME = 64


class _Ranks:
    """The ranks of a step's ``hosts`` as the groups (leaf switches, blocks) come in file
    order, each host's from the first group naming it; ``budget``: the names the file may
    still name. Every list is checked and counted; then, while a host has no rank, each part
    ``P[ranges]S`` is looked at only through the hosts beginning with ``P`` (a bisection of the
    sorted hosts): python-hostlist expands it when it names no more names than there are such
    hosts, else each such host is tested against it (``_holds``). The cost follows the step's
    hosts and the file's length, never the ranges the file names."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.wanted = set(hosts)
        self.sorted = sorted(self.wanted)
        self.rank: dict[str, int] = {}
        self.budget = MAX_NAMES

    def group(self, expression: str | None, rank: int, where: str) -> None:
        if expression is None:  # a leaf switch or block without nodes
            return
        start = 0
        while (part := _PARTS.match(expression, start)) is not None:
            count = self._count(part, where)
            if len(self.rank) < len(self.sorted):
                self._look(part, count, rank, where)
            start = part.end() + 1
            if part.end() == len(expression) or expression[part.end()] != ",":
                break
        if part is None or part.end() != len(expression):
            raise slurmconf.Refused(f"{where}: a node list slurmenv does not read: "
                                    f"{slurmconf.shown(expression)}")

    def _count(self, part: re.Match[str], where: str) -> int:
        """The names of ``part``: a range of more than :data:`MAX_RANGE` names is refused as
        Slurm refuses it, and so is a file naming more than :data:`MAX_NAMES` in all."""
        count = 0
        for span in (part[2] or "0").split(","):
            low, _, high = span.partition("-")
            size = int(high or low) - int(low) + 1
            if not 1 <= size <= MAX_RANGE:
                raise slurmconf.Refused(f"{where}: the range [{span}] is not 1 to {MAX_RANGE} "
                                        "names (slurmctld refuses it)")
            count += size
        self.budget -= count
        if self.budget < 0:
            raise slurmconf.Refused(f"{where}: the file names more than {MAX_NAMES} nodes")
        return count

    def _look(self, part: re.Match[str], count: int, rank: int, where: str) -> None:
        """Give ``rank`` to the hosts ``part`` names that have none yet."""
        prefix = part[1]
        if part[2] is None:  # a plain name
            if prefix in self.wanted and prefix not in self.rank:
                self.rank[prefix] = rank
            return
        candidates: list[str] = []
        for host in itertools.islice(self.sorted, bisect.bisect_left(self.sorted, prefix), None):
            if not host.startswith(prefix) or len(candidates) >= count:
                break
            candidates.append(host)
        if not candidates:
            return
        if len(candidates) >= count:  # no more names than hosts: python-hostlist's
            found = nodes.expand(part[0], f"Nodes= in {where}")
        else:
            found = [host for host in candidates if _holds(part, host)]
        for host in found:
            if host not in self.rank and host in self.wanted:
                self.rank[host] = rank


def _holds(part: re.Match[str], host: str) -> bool:
    """Whether ``host`` is a name of ``part`` (``P[ranges]S``, checked by :data:`_PART`): ``P``,
    a number in one of the ranges written as hostlist.c writes it (zero-padded to the width
    of the range's first number), ``S``. tests/test_slurmconf.py checks it against Slurm's
    hostlist.c and python-hostlist."""
    prefix, spans, suffix = part[1], part[2], part[3] or ""
    if spans is None:
        return host == prefix
    middle = host[len(prefix):len(host) - len(suffix)]
    if not (host.endswith(suffix) and middle.isascii() and middle.isdigit()
            and len(host) > len(prefix) + len(suffix)):
        return False
    number = int(middle)
    for span in spans.split(","):
        low, _, high = span.partition("-")
        if int(low) <= number <= int(high or low) and f"{number:0{len(low)}d}" == middle:
            return True
    return False


class _Record(NamedTuple):
    name: str
    keys: dict[str, str]  # sub-key (lower case) -> its last value
    where: str


def _records(text: str | bytes, path: str, line_key: str, sub_keys: tuple[str, ...],
             plain: tuple[str, ...] = ()) -> tuple[list[_Record], dict[str, str]]:
    """topology.conf (``text``, read from ``path``, and what it includes) as Slurm's tables
    read it: the ``line_key`` lines (``SwitchName``) with their ``sub_keys``, and the values
    of the ``plain`` keys (``BlockSizes``). Refused: any other key, an operator, a line
    Slurm would not parse, an empty name or value."""
    data = text.encode() if isinstance(text, str) else text
    reader = slurmconf.Reader(path, "SLURM_CONF", cluster_key=False)
    records: list[_Record] = []
    single: dict[str, str] = {}
    for statement in reader.text_statements(data, path):
        first, where = statement.first, statement.where
        key = first.key.lower()
        if first.op or not first.value:
            raise slurmconf.Refused(f"{where} is a line slurmenv does not read as Slurm does")
        if key in plain and statement.alone():
            single[key] = first.value
            continue
        if key != line_key:
            raise slurmconf.Refused(f"{where} has a key Slurm does not know there")
        keys: dict[str, str] = {}
        for sub in statement.rest():  # a sub-key given twice: the last value (Slurm's)
            if sub.op or not sub.value or sub.key.lower() not in sub_keys:
                raise slurmconf.Refused(f"{where} has a key Slurm does not know there, or "
                                        "a form slurmenv does not read")
            keys[sub.key.lower()] = sub.value
        records.append(_Record(first.value, keys, where))
    return records, single


def _rank_of(ranks: _Ranks, hosts: Sequence[str], first: int, path: str) -> list[int]:
    """Each host's rank: ``first`` + the index of the first group naming it. A host no group
    names is refused: Slurm would give it rank 0, but it also matches a group naming it by
    its ``NodeHostName``, which slurmenv does not know (and such a node is not allocated with
    the others, observed)."""
    missing = [host for host in hosts if host not in ranks.rank]
    if missing:
        raise _refuse(f"{path} lists no leaf switch or block with node {missing[0]} of this "
                      "step (by another name, its NodeHostName?)", "SLURM_CONF", path,
                      f"list every node in {path} by its NodeName, or " + FIX)
    return [first + ranks.rank[host] for host in hosts]


def tree_ranks(text: str | bytes, path: str, hosts: Sequence[str]) -> list[int]:
    """topology/tree: the rank of each of ``hosts`` (see the module's docstring)."""
    ranks = _Ranks(hosts)
    try:
        records, _ = _records(text, path, "switchname", ("nodes", "switches", "linkspeed"))
        _leaves(records, ranks)
    except slurmconf.Refused as exc:
        raise _unread(exc, path) from None
    return _rank_of(ranks, hosts, 1, path)


def _leaves(records: list[_Record], ranks: _Ranks) -> None:
    """The leaf switches' nodes, in file order (``switch_record_validate``)."""
    names = [r.name for r in records]
    if not records or len(set(names)) != len(names):
        raise slurmconf.Refused("no switch, or a switch defined twice (slurmctld refuses it)")
    leaf = 0
    for record in records:
        speed = record.keys.get("linkspeed", "1")
        if len(record.name) > MAX_SWITCH_NAME or not speed.isdigit() or not speed.isascii():
            raise slurmconf.Refused(f"{record.where}: a switch name longer than "
                                    f"{MAX_SWITCH_NAME} or a LinkSpeed that is not a number")
        if "nodes" in record.keys and "switches" in record.keys:
            raise slurmconf.Refused(f"{record.where}: switch {record.name} has both nodes and "
                                    "switches (slurmctld refuses it)")
        if "switches" not in record.keys:  # a leaf switch, possibly empty (Slurm's level 0)
            ranks.group(record.keys.get("nodes"), leaf, record.where)
            leaf += 1


def block_ranks(text: str | bytes, path: str, hosts: Sequence[str]) -> list[int]:
    """topology/block: the rank of each of ``hosts`` (BlockSizes changes which nodes a job
    gets, not their order)."""
    ranks = _Ranks(hosts)
    try:
        records, _ = _records(text, path, "blockname", ("nodes",), ("blocksizes",))
        names = [r.name for r in records]
        if not records or len(set(names)) != len(names):
            raise slurmconf.Refused(f"{path} defines no block, or a block twice")
        for i, record in enumerate(records):
            ranks.group(record.keys.get("nodes"), i, record.where)
    except slurmconf.Refused as exc:
        raise _unread(exc, path) from None
    return _rank_of(ranks, hosts, 0, path)
