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
configless cache's copy in configless mode), and ``topology.conf`` beside it, read as bounded
local files (``files.py``). Whatever cannot be read or reproduced (an unreadable file,
``topology.yaml``, another topology plugin, a line this parser does not know) is a refusal in
every task, naming the setting and the fixes that work on 26.05.
"""

from __future__ import annotations

from .. import nodes
from .. import readfile as files
from ..errors import SlurmEnvError
from ..lean import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Set by Slurm 26.05 and later in every task: the release whose block layout follows topology.
RELEASE_VARIABLE = "SLURM_JOB_SLUID"
#: Files of slurm.conf's includes followed at most, and their depth.
MAX_INCLUDES = 16
#: The topology plugins whose order is reproduced here (the value of TopologyPlugin).
ORDERED = ("topology/tree", "topology/block")
#: TopologyPlugin values that are Slurm's flat default (no order of its own without topology.yaml).
FLAT = ("", "none", "default", "topology/none", "topology/default", "topology/flat")
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
    settings = read_slurm_conf(conf)
    folder = conf.rpartition("/")[0] or "."
    yaml = f"{folder}/topology.yaml"
    if _exists(yaml):
        raise _refuse(f"{yaml} configures the topology, which slurmenv does not read",
                      "SLURM_CONF", conf)
    if any(part.strip().lower() == "cr_no_dist_topo_block"
           for part in settings.get("selecttypeparameters", "").split(",")):
        return NodeOrder(None, "SelectTypeParameters holds CR_NO_DIST_TOPO_BLOCK: node-list order")
    plugin = settings.get("topologyplugin", "").strip().lower()
    if plugin in FLAT:
        return NodeOrder(None, "no topology plugin in slurm.conf: node-list order")
    select = settings.get("selecttype", "select/cons_tres")
    if select.strip().lower() != "select/cons_tres":  # node ranks come from cons_tres
        raise _refuse(f"SelectType={select} in {conf} with {plugin} is not reproduced",
                      "SLURM_CONF", conf)
    if plugin not in ORDERED:
        raise _refuse(f"TopologyPlugin={settings['topologyplugin']} in {conf} orders tasks in a "
                      "way slurmenv does not reproduce", "SLURM_CONF", conf)
    path = f"{folder}/topology.conf"
    text = files.read_text(path, "SLURM_CONF", f"make {path} a readable regular file")
    if text is None:
        raise _refuse(f"{path} ({plugin}) cannot be read here", "SLURM_CONF", conf,
                      f"make {path} readable on every node, or " + FIX)
    ranks = tree_ranks(text, path, hosts) if plugin == "topology/tree" \
        else block_ranks(text, path, hosts)
    order = sorted(range(len(hosts)), key=lambda i: (ranks[i], i))
    return NodeOrder(order, f"{plugin}, {path}")


def _exists(path: str) -> bool:
    import os

    try:
        os.stat(path)
    except OSError:
        return False
    return True


# -- slurm.conf ------------------------------------------------------------------------------
#: The slurm.conf keys read (lower case); every other line is skipped unread.
KEYS = ("topologyplugin", "selecttypeparameters", "selecttype")


def read_slurm_conf(path: str) -> dict[str, str]:
    """The values of :data:`KEYS` in slurm.conf at ``path`` and the files it includes (the
    last value wins, as in Slurm); refuses an unreadable file, an include slurmenv cannot
    follow exactly (``%`` formats, globs), and a line naming a key in a way it cannot read."""
    found: dict[str, str] = {}
    pending = [(path, 0)]
    seen = 0
    folder = path.rpartition("/")[0] or "."
    while pending:
        name, depth = pending.pop(0)
        seen += 1
        if seen > MAX_INCLUDES or depth > 4:
            raise _refuse(f"{path} includes more than {MAX_INCLUDES} files", "SLURM_CONF", path)
        text = files.read_text(name, "SLURM_CONF", "SLURM_CONF must name slurm.conf")
        if text is None:
            raise _refuse(f"{name} cannot be read here", "SLURM_CONF", path,
                          f"make {name} readable on every node (Slurm's commands need it too), or "
                          + FIX)
        for line in _lines(text, name):
            head, _, rest = line.partition(" ")
            if head.lower() == "include" and rest.strip():
                target = rest.strip()
                if any(c in target for c in "%*?[ \t"):
                    raise _refuse(f"{name} includes {target!r}, which slurmenv does not expand",
                                  "SLURM_CONF", path)
                pending.append((target if target.startswith("/") else f"{folder}/{target}",
                                depth + 1))
                continue
            lowered = line.lower()
            if not any(key in lowered for key in KEYS):
                continue
            if '"' in line or "'" in line:
                raise _refuse(f"{name} has a quoted line naming {', '.join(KEYS)}: {line!r}",
                              "SLURM_CONF", path)
            for token in line.split():
                key, eq, value = token.partition("=")
                if eq and key.lower() in KEYS:
                    found[key.lower()] = value
    return found


def _lines(text: str, name: str) -> list[str]:
    """The lines of a Slurm configuration file without comments and blank lines; a line
    with a backslash (an escape or a continuation) is refused, never half read."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "\\" in line:
            raise _refuse(f"{name} has a line with a backslash, which slurmenv does not read: "
                          f"{line!r}", "SLURM_CONF", name)
        out.append(line)
    return out


# -- topology.conf ---------------------------------------------------------------------------
def _records(text: str, path: str, first: str, allowed: tuple[str, ...],
             alone: tuple[str, ...] = ()) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The lines of ``topology.conf`` beginning with ``first`` (``SwitchName``) as dicts of
    their keys (lower case), and the keys of ``alone`` given on lines of their own; refuses
    any other line, key, repeated key or empty value."""
    records: list[dict[str, str]] = []
    single: dict[str, str] = {}
    for line in _lines(text, path):
        record: dict[str, str] = {}
        for token in line.split():
            key, eq, value = token.partition("=")
            key = key.lower()
            if not eq or not value or key in record or '"' in value or "'" in value:
                raise _refuse(f"{path} has a line slurmenv cannot read: {line!r}", "SLURM_CONF",
                              path, f"fix {path} (Slurm reads key=value pairs), or " + FIX)
            record[key] = value
        keys = list(record)
        if keys[0] in alone and len(keys) == 1:
            single[keys[0]] = record[keys[0]]
            continue
        if keys[0] != first or any(k not in allowed for k in keys[1:]):
            raise _refuse(f"{path} has a line slurmenv does not know: {line!r}", "SLURM_CONF",
                          path, f"fix {path}, or " + FIX)
        records.append(record)
    return records, single


def _members(expression: str, path: str) -> list[str]:
    return nodes.expand(expression, f"Nodes= in {path}")


def _rank_of(groups: list[list[str]], hosts: Sequence[str], first: int, path: str) -> list[int]:
    """Each host's rank: ``first`` + the index of the first group naming it. A host no group
    names is refused: Slurm would give it rank 0, but it also matches a group naming it by
    its ``NodeHostName``, which slurmenv does not know (and such a node is not allocated with
    the others, observed)."""
    wanted = set(hosts)
    rank: dict[str, int] = {}
    for i, group in enumerate(groups):
        for host in group:
            if host in wanted and host not in rank:
                rank[host] = first + i
    missing = [host for host in hosts if host not in rank]
    if missing:
        raise _refuse(f"{path} lists no leaf switch or block with node {missing[0]} of this "
                      "step (by another name, its NodeHostName?)", "SLURM_CONF", path,
                      f"list every node in {path} by its NodeName, or " + FIX)
    return [rank[host] for host in hosts]


def tree_ranks(text: str, path: str, hosts: Sequence[str]) -> list[int]:
    """topology/tree: the rank of each of ``hosts`` (see the module's docstring)."""
    records, _ = _records(text, path, "switchname", ("nodes", "switches", "linkspeed"))
    names = [r["switchname"] for r in records]
    if len(set(names)) != len(names):
        raise _refuse(f"{path} defines a switch twice", "SLURM_CONF", path)
    leaves = []
    for record in records:
        if "nodes" in record and "switches" in record:
            raise _refuse(f"{path}: switch {record['switchname']} has both nodes and switches",
                          "SLURM_CONF", path)
        if "switches" not in record:  # a leaf switch, possibly empty (Slurm's level 0)
            leaves.append(_members(record["nodes"], path) if "nodes" in record else [])
    return _rank_of(leaves, hosts, 1, path)


def block_ranks(text: str, path: str, hosts: Sequence[str]) -> list[int]:
    """topology/block: the rank of each of ``hosts`` (BlockSizes changes which nodes a job
    gets, not their order)."""
    records, _ = _records(text, path, "blockname", ("nodes",), ("blocksizes",))
    names = [r["blockname"] for r in records]
    if not records or len(set(names)) != len(names):
        raise _refuse(f"{path} defines no block, or a block twice", "SLURM_CONF", path)
    return _rank_of([_members(r["nodes"], path) if "nodes" in r else [] for r in records],
                    hosts, 0, path)
