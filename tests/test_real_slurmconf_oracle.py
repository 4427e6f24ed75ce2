"""Slurm as the oracle: slurm.conf and topology.conf in many forms, judged by a real controller
(issue 41 item 2).

Every form is a configuration an administrator could write: the same meaning spelled the ways
Slurm's grammar allows (``src/common/parse_config.c``: blanks and tabs around ``=``, key case,
quoted values, comments and ``\\#``, line continuation, ``Include`` with any blank, relative,
absolute and ``%c`` paths, nested; ``read_config.c``: keys repeated, ``SelectTypeParameters`` on
a ``PartitionName`` line; the tree and block tables of the topology plugins), plus a seeded
number of random combinations of them. For each form the module restarts the real controller on
it (:meth:`SlurmCluster.reconfigure`, about 0.4 s), then runs block, default and
one-task-per-node steps and a step over part of a 4-node allocation, side by side. Every task
prints its ``SLURM_PROCID``, its host and what ``slurmenv export`` gave (``PROBE_SH``).

The assertion, per step: either every task refuses, or every task exports ``RANK`` ==
``SLURM_PROCID``, ``WORLD_SIZE``, ``MASTER_ADDR`` == the host of ``SLURM_PROCID`` 0 and
``TF_CONFIG``'s workers == each rank's host. A split (some refuse, some export) or a wrong
value fails with the form's files as written. A form the controller refuses to start on, or a
step Slurm itself refuses, is recorded with Slurm's message (not skipped: CI turns skips into
failures) and printed in the module's report (``-s``, or the failure message).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import (
    SlurmCluster,
    SlurmStartError,
    SlurmUnavailable,
    parse_labels,
    release_built,
)

pytestmark = pytest.mark.slurm

#: what the tests prove, on which release (tests/slurm_releases.py: docs/releases.md's table)
FEATURES = {
    "slurm.conf/topology.conf written in every form Slurm's grammar allows (and random "
    "combinations), judged by the real controller: every task right, or every task refuses": (
        "26.05.3", ["test_every_form_is_right_or_refused_in_every_task"]),
    "the forms that matter before 26.05 (TopologyParam=SwitchAsNodeRank/BlockAsNodeRank reorder "
    "the node table): every task right, or every task refuses": (
        "25.11.7", ["test_node_rank_forms_are_right_or_refused_in_every_task"]),
    "dynamic nodes (slurmd -Z, auth/munge) registered out of name order, with and without "
    "topology/tree: steps follow registration order; every task right, or every task refuses": (
        "25.11.7,26.05.3", ["test_dynamic_nodes_registered_out_of_name_order"]),
}
ROOT = Path(__file__).resolve().parent.parent
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
NODES = ("n1", "n2", "n3", "n4")
#: How many random combinations run; the seed is printed (SLURMENV_ORACLE_SEED replays one).
RANDOM_FORMS = 8
SEED = int(os.environ.get("SLURMENV_ORACLE_SEED", "0")) or random.SystemRandom().randrange(1, 10**6)
#: Steps of a fresh allocation each: block, default, one task per node.
STEPS = (("block -N4 -n8", ["-N4", "-n8", "-m", "block"]), ("default -N4 -n5", ["-N4", "-n5"]),
         ("per-node -N4", ["-N4", "--ntasks-per-node=1"]))
#: Steps over part of a 4-node, 8-task allocation (salloc).
PARTIAL = ("-N3 -n6 -m block",)

# -- the forms ----------------------------------------------------------------------------------
TREE = "TopologyPlugin=topology/tree"
BLOCK = "TopologyPlugin=topology/block"
# leaf switches out of name order: under 26.05's topology order rank 0 runs on n2
LEAVES = (("sa", "n2"), ("sb", "n1"), ("sc", "n[3-4]"))
TREE_CONF = "".join(f"SwitchName={s} Nodes={n}\n" for s, n in LEAVES) + \
    "SwitchName=top Switches=sa,sb,sc\n"
BLOCK_CONF = "BlockName=b1 Nodes=n[3-4]\nBlockName=b2 Nodes=n[1-2]\nBlockSizes=2,4\n"
GLOBAL_SELECT = "SelectTypeParameters=CR_Core\n"  # the harness's line
PARTITION = "PartitionName=main "  # the harness's partition line starts so


@dataclass(frozen=True)
class Form:
    """One configuration: slurm.conf lines added (``conf``), topology.conf, more files beside
    slurm.conf (``@ETC@`` is their folder, ``@CLUSTER@`` the cluster's name), and edits of the
    harness's own slurm.conf text (old, new)."""

    name: str
    conf: str = ""
    topology: str | None = TREE_CONF
    files: tuple[tuple[str, str], ...] = ()
    edits: tuple[tuple[str, str], ...] = ()
    reverse_nodes: bool = False  # the NodeName lines written n4 n3 n2 n1

    def text(self) -> str:
        """The form as written, for failure messages (repr: tabs, NBSP, NUL visible)."""
        parts = [f"form {self.name}:", f"  slurm.conf adds {self.conf!r}"]
        parts += [f"  slurm.conf edit {old!r} -> {new!r}" for old, new in self.edits]
        parts += ["  NodeName lines in reverse order"] if self.reverse_nodes else []
        parts += [f"  {name}: {text!r}" for name, text in self.files]
        parts += [f"  topology.conf: {self.topology!r}"]
        return "\n".join(parts)


def named_forms() -> list[Form]:
    """The named forms: each one a rule of Slurm's grammar or of its tables."""
    f: list[Form] = []

    def add(name: str, conf: str = TREE, topology: str | None = TREE_CONF,
            files: dict[str, str] | None = None, edits: dict[str, str] | None = None,
            reverse_nodes: bool = False) -> None:
        f.append(Form(name, conf, topology, tuple((files or {}).items()),
                      tuple((edits or {}).items()), reverse_nodes))

    # the plugin line's spelling (parse_config.c keyvalue_pattern, case-insensitive keys)
    add("plain")
    add("blanks-around-eq", "TopologyPlugin = topology/tree")
    add("tabs-around-eq", "TopologyPlugin\t=\ttopology/tree")
    add("blank-after-eq", "TopologyPlugin= topology/tree")
    add("blank-before-eq", "TopologyPlugin =topology/tree")
    add("leading-blanks", "   TopologyPlugin=topology/tree")
    add("leading-tab", "\tTopologyPlugin=topology/tree")
    add("trailing-blanks", "TopologyPlugin=topology/tree \t ")
    add("lower-key", "topologyplugin=topology/tree")
    add("upper-key", "TOPOLOGYPLUGIN=topology/tree")
    add("quoted-value", 'TopologyPlugin="topology/tree"')
    add("quoted-value-blanks", 'TopologyPlugin = "topology/tree"')
    add("trailing-comment", "TopologyPlugin=topology/tree # the fabric")
    add("comment-no-blank", "TopologyPlugin=topology/tree#the fabric")
    add("commented-out", "#TopologyPlugin=topology/tree")
    add("escaped-hash-line", "\\#TopologyPlugin=topology/tree")
    add("escaped-hash-in-value", "TopologyPlugin=topology/tree\\#x")
    add("continued-value", "TopologyPlugin=topo\\\nlogy/tree")
    add("continued-key", "Topology\\\nPlugin=topology/tree")
    add("continued-blank-after", "TopologyPlugin=\\  \ntopology/tree")
    add("double-backslash", "TopologyPlugin=topology/tree\\\\\n")
    add("crlf", "TopologyPlugin=topology/tree\r")
    add("plugin-upper-value", "TopologyPlugin=Topology/Tree")
    add("plugin-bare-name", "TopologyPlugin=tree")
    add("plugin-flat", "TopologyPlugin=topology/flat")
    add("plugin-default", "TopologyPlugin=topology/default")
    add("plugin-none", "TopologyPlugin=topology/none")
    add("plugin-block-on-tree-file", BLOCK)
    add("two-keys-one-line", "TopologyPlugin=topology/tree TopologyParam=SwitchAsNodeRank")
    # keys repeated: which wins
    add("repeated-tree-last", "TopologyPlugin=topology/flat\nTopologyPlugin=topology/tree")
    add("repeated-flat-last", "TopologyPlugin=topology/tree\nTopologyPlugin=topology/flat")
    add("repeated-spelled-apart", "TopologyPlugin = topology/flat\ntopologyplugin=topology/tree")
    # Include (parse_config.c _parse_include_directive, get_extra_conf_path)
    inc = {"topo.inc": f"{TREE}\n"}
    add("include-relative", "Include topo.inc", files=inc)
    add("include-tab", "Include\ttopo.inc", files=inc)
    add("include-blanks", "Include   \t topo.inc", files=inc)
    add("include-lower", "include topo.inc", files=inc)
    add("include-upper", "INCLUDE topo.inc", files=inc)
    add("include-absolute", "Include @ETC@/topo.inc", files=inc)
    add("include-subdir", "Include sub/topo.inc", files={"sub/topo.inc": f"{TREE}\n"})
    add("include-leading-blank", "  Include topo.inc", files=inc)
    add("include-trailing-comment", "Include topo.inc # the fabric", files=inc)
    add("include-cluster-name", "Include %c.inc", files={"@CLUSTER@.inc": f"{TREE}\n"})
    add("include-nested", "Include a.inc",
        files={"a.inc": "Include b.inc\n", "b.inc": f"{TREE}\n"})
    add("include-eq", "Include=topo.inc", files=inc)
    add("include-then-override", "Include topo.inc\nTopologyPlugin=topology/flat", files=inc)
    add("override-then-include", "TopologyPlugin=topology/flat\nInclude topo.inc", files=inc)
    add("include-glob", "Include topo*.inc", files=inc)
    add("include-quoted", 'Include "topo.inc"', files=inc)
    # SelectTypeParameters: global vs a partition's, CR_NO_DIST_TOPO_BLOCK
    nodist = "SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK\n"
    add("no-dist", edits={GLOBAL_SELECT: nodist})
    add("no-dist-lower", edits={GLOBAL_SELECT: "selecttypeparameters = cr_core,cr_no_dist_topo_block\n"})
    add("no-dist-partition-socket",
        edits={GLOBAL_SELECT: nodist, PARTITION: PARTITION + "SelectTypeParameters=CR_Socket "})
    add("partition-no-dist",
        edits={PARTITION: PARTITION + "SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK "})
    add("no-dist-repeated-last", f"{TREE}\n{nodist}")
    add("no-dist-then-plain", f"{TREE}\n{GLOBAL_SELECT}", edits={GLOBAL_SELECT: nodist})
    add("no-dist-included", "Include sel.inc", files={"sel.inc": f"{TREE}\n{nodist}"})
    # TopologyParam
    add("switch-as-node-rank", f"{TREE}\nTopologyParam=SwitchAsNodeRank")
    add("switch-as-node-rank-lower", f"{TREE}\ntopologyparam=switchasnoderank")
    add("switch-as-node-rank-list", f"{TREE}\nTopologyParam=Dragonfly,SwitchAsNodeRank")
    add("block-as-node-rank", f"{BLOCK}\nTopologyParam=BlockAsNodeRank", BLOCK_CONF)
    add("param-repeated", f"{TREE}\nTopologyParam=SwitchAsNodeRank\nTopologyParam=Dragonfly")
    # topology.conf's own forms (the tree and block tables)
    add("topo-blanks", topology=TREE_CONF.replace("=", " = "))
    add("topo-lower-keys", topology=TREE_CONF.replace("SwitchName", "switchname")
        .replace("Nodes", "nodes").replace("Switches", "switches"))
    add("topo-comments", topology="# the fabric\n" + TREE_CONF.replace("\n", " # leaf\n", 1))
    add("topo-continued", topology=TREE_CONF.replace("SwitchName=sa ", "SwitchName=sa \\\n"))
    add("topo-quoted", topology=TREE_CONF.replace("Nodes=n[3-4]", 'Nodes="n[3-4]"'))
    add("topo-tabs", topology=TREE_CONF.replace(" ", "\t"))
    add("topo-top-first", topology="SwitchName=top Switches=sa,sb,sc\n" + TREE_CONF.rsplit(
        "SwitchName=top", 1)[0])
    add("topo-switch-range", topology=TREE_CONF.replace("sa,sb,sc", "s[a-c]"))
    add("topo-empty-switch", topology="SwitchName=se\n" + TREE_CONF.replace("sa,sb,sc", "se,sa,sb,sc"))
    add("topo-node-twice", topology=TREE_CONF.replace("Nodes=n2", "Nodes=n2,n2"))
    add("topo-node-two-leaves", topology=TREE_CONF.replace("Nodes=n1", "Nodes=n1,n2"))
    add("topo-linkspeed", topology=TREE_CONF.replace("Nodes=n1", "Nodes=n1 LinkSpeed=100"))
    add("topo-unknown-key", topology=TREE_CONF.replace("Nodes=n1", "Nodes=n1 Colour=red"))
    add("topo-reversed-range", topology=TREE_CONF.replace("n[3-4]", "n4,n3"))
    add("topo-nbsp-in-comment", topology="# fabric\u00a0one\n" + TREE_CONF)
    add("topo-nbsp-separator", topology=TREE_CONF.replace("SwitchName=sb Nodes", "SwitchName=sb\u00a0Nodes"))
    add("topo-x1c-separator", topology=TREE_CONF.replace("SwitchName=sb Nodes", "SwitchName=sb\x1cNodes"))
    add("topo-nul", topology=TREE_CONF.replace("Nodes=n1\n", "Nodes=n1\0 Nodes=n2\n"))
    add("topo-crlf", topology=TREE_CONF.replace("\n", "\r\n"))
    add("conf-nbsp-value", "TopologyPlugin=topology/tree\u00a0")
    add("block-plain", BLOCK, BLOCK_CONF)
    add("block-blanks", BLOCK, BLOCK_CONF.replace("=", " = "))
    add("block-lower", BLOCK, BLOCK_CONF.lower())
    add("block-no-sizes", BLOCK, BLOCK_CONF.replace("BlockSizes=2,4\n", ""))
    add("block-reversed-members", BLOCK, BLOCK_CONF.replace("n[3-4]", "n4,n3"))
    # node lines out of name order (the node table is sorted by name)
    add("node-lines-reversed", reverse_nodes=True)
    add("node-lines-reversed-block", BLOCK, BLOCK_CONF, reverse_nodes=True)
    add("no-plugin-node-lines-reversed", "", None, reverse_nodes=True)
    return f


#: Ways to write a line ``Key=value`` that mean the same to Slurm's grammar.
SPELLINGS = (
    lambda k, v: f"{k}={v}", lambda k, v: f"{k} = {v}", lambda k, v: f"{k}\t=\t{v}",
    lambda k, v: f"{k.lower()}={v}", lambda k, v: f"{k.upper()}={v}", lambda k, v: f'{k}="{v}"',
    lambda k, v: f"{k}={v} # a comment", lambda k, v: f"  {k}={v}",
    lambda k, v: f"{k}={v[:3]}\\\n{v[3:]}", lambda k, v: f"{k}= {v}\t",
)


def _spell(rng: random.Random, key: str, value: str) -> str:
    return rng.choice(SPELLINGS)(key, value)


def _topology_line(rng: random.Random, pairs: list[tuple[str, str]]) -> str:
    """One topology.conf record (its first key first), each pair spelled at random."""
    glue = rng.choice((" ", "\t", "  ", " \\\n"))
    words = []
    for key, value in pairs:
        key = rng.choice((key, key.lower(), key.upper()))
        words.append(rng.choice((f"{key}={value}", f"{key} = {value}", f'{key}="{value}"')))
    return glue.join(words) + rng.choice(("", " # c", "\t")) + "\n"


def random_form(rng: random.Random, index: int) -> Form:
    """A random combination of the named forms' rules: the plugin line's spelling and where it
    lives, the select parameters, TopologyParam, node lines' order and a random fabric (nodes
    shuffled over leaf switches or blocks) whose every record is spelled at random."""
    block = rng.random() < 0.3
    nodes = list(NODES)
    rng.shuffle(nodes)
    cut = sorted(rng.sample(range(1, 4), rng.randrange(0, 3)))
    groups = [nodes[a:b] for a, b in zip([0, *cut], [*cut, 4])]
    lines = []
    if block:
        plugin = "topology/block"
        for i, group in enumerate(groups):
            lines.append(_topology_line(rng, [("BlockName", f"b{i}"), ("Nodes", ",".join(group))]))
        if rng.random() < 0.5:
            lines.append(_topology_line(rng, [("BlockSizes", "1,4" if len(groups) > 1 else "4")]))
        rng.shuffle(lines)
    else:
        plugin = "topology/tree"
        for i, group in enumerate(groups):
            lines.append(_topology_line(rng, [("SwitchName", f"s{i}"), ("Nodes", ",".join(group))]))
        if len(groups) > 1:
            top = _topology_line(rng, [("SwitchName", "top"),
                                       ("Switches", ",".join(f"s{i}" for i in range(len(groups))))])
            lines.insert(rng.randrange(len(lines) + 1), top)
    conf = [_spell(rng, "TopologyPlugin", plugin)]
    param = rng.choice(("", "", "BlockAsNodeRank" if block else "SwitchAsNodeRank"))
    if param:
        conf.append(_spell(rng, "TopologyParam", param))
    edits: dict[str, str] = {}
    select = rng.choice(("", "", "global", "partition"))
    if select:
        edits[GLOBAL_SELECT] = _spell(rng, "SelectTypeParameters",
                                      "CR_Core,CR_NO_DIST_TOPO_BLOCK") + "\n"
    if select == "partition":
        edits[PARTITION] = PARTITION + "SelectTypeParameters=CR_Socket "
    files: dict[str, str] = {}
    where = rng.choice(("here", "here", "include", "nested"))
    text = "\n".join(conf)
    if where != "here":
        files["site.inc"] = text + "\n"
        text = rng.choice(("Include", "include", "INCLUDE")) + rng.choice((" ", "\t", "  ")) + \
            rng.choice(("site.inc", "@ETC@/site.inc"))
        if where == "nested":
            files["outer.inc"] = text + "\n"
            text = "Include outer.inc"
    return Form(f"random-{SEED}-{index}", text, "".join(lines), tuple(files.items()),
                tuple(edits.items()), rng.random() < 0.3)


def random_forms(count: int = RANDOM_FORMS) -> list[Form]:
    rng = random.Random(SEED)
    return [random_form(rng, i) for i in range(count)]


#: The forms that change something before 26.05 (no topology layout there, but
#: SwitchAsNodeRank and BlockAsNodeRank reorder the node table), and a few of the grammar.
NODE_RANK = ("plain", "blanks-around-eq", "include-tab", "no-dist-partition-socket",
             "switch-as-node-rank", "switch-as-node-rank-lower", "switch-as-node-rank-list",
             "block-as-node-rank", "param-repeated", "block-plain", "two-keys-one-line")


# -- running a form -----------------------------------------------------------------------------
@dataclass
class Outcome:
    """What became of one form: rejected by the controller, or each step's verdict."""

    form: Form
    rejected: str = ""  # the controller's message when it would not start on the form
    steps: dict[str, str] = field(default_factory=dict)  # step -> verdict
    failures: list[str] = field(default_factory=list)  # splits and wrong values
    restart: float = 0.0  # how long the daemons took to come up on it (the harness's clock)


#: Each task's probe (POSIX sh: a Python probe would double the time of every step): its exit
#: code, SLURM_PROCID, real host and ``slurmenv export --format json`` (or its refusal) on one
#: line.
PROBE_SH = """\
out=$(slurmenv export --format json 2>&1)
rc=$?
printf 'TOPO %s %s %s %s\\n' "$rc" "$SLURM_PROCID" "$(hostname)" "$(printf %s "$out" | tr '\\n' ' ')"
"""


def _probe_records(output: str) -> dict[int, dict[str, Any]]:
    """Rank -> {rc, PROCID, hostname, exported or error}, from ``srun --label`` output (srun
    cuts lines longer than 1024 bytes: the pieces are joined back)."""
    out: dict[int, dict[str, Any]] = {}
    for rank, lines in parse_labels(output).items():
        text = "".join(lines)
        m = re.match(r"TOPO (\d+) (\S+) (\S+) (.*)$", text, re.DOTALL)
        if not m:
            continue
        rec: dict[str, Any] = {"rc": int(m.group(1)), "procid": m.group(2),
                               "hostname": m.group(3)}
        if rec["rc"] == 0:
            rec["exported"] = json.loads(m.group(4))
        else:
            rec["error"] = m.group(4).strip()
        out[rank] = rec
    return out


def verdict(got: dict[int, dict[str, Any]]) -> tuple[str, list[str]]:
    """One step's verdict and what is wrong in it: every task refusing alike is right, so is
    every task exporting the world Slurm made; anything else is a failure."""
    host = {int(rec["procid"]): rec["hostname"] for rec in got.values()}
    if sorted(host) != list(range(len(got))) or sorted(got) != sorted(host):
        return "incomplete", [f"tasks missing or mislabelled: {sorted(got)} {sorted(host)}"]
    refused = sorted(r for r, rec in got.items() if rec["rc"] != 0)
    order = ",".join(host[r] for r in range(len(host)))
    if len(refused) == len(got):
        errors = {rec["error"] for rec in got.values()}
        return f"refused in every task ({order}): {min(errors)[:160]}", []
    wrong = []
    if refused:
        wrong.append(f"SPLIT: ranks {refused} refuse ({got[refused[0]]['error'][:300]!r}), "
                     f"the others export")
    for rank, rec in sorted(got.items()):
        exported = rec.get("exported")
        if exported is None:
            continue
        workers = [w.rsplit(":", 1)[0] for w in
                   json.loads(exported["TF_CONFIG"])["cluster"]["worker"]]
        seen = {"RANK": (exported["RANK"], str(rank)),
                "WORLD_SIZE": (exported["WORLD_SIZE"], str(len(host))),
                "MASTER_ADDR": (exported["MASTER_ADDR"], host[0]),
                "TF_CONFIG workers": (workers, [host[r] for r in range(len(host))])}
        bad = {name: value for name, (value, real) in seen.items() if value != real}
        if bad:
            wrong.append(f"rank {rank} on {host[rank]} exports {bad} (rank 0 on {host[0]})")
    return (f"WRONG ({order})" if wrong else f"right in every task ({order})"), wrong


#: Lines every start logs, whatever the form (no HTTP parser, mail or GPUs built here).
NOISE = ("http_parser", "MailProg", "GPU detection", "initialization failed", "daemon(s) exited")


def rejection(logs: str) -> str:
    """The daemons' reason for refusing a form: the first error and the first fatal line of
    their logs that are not noise."""
    lines = [line.strip() for line in logs.splitlines()
             if ("fatal" in line or "error" in line) and not any(n in line for n in NOISE)]
    fatal = [line for line in lines if "fatal" in line]
    errors = [line for line in lines if "fatal" not in line]
    found = [*errors[:1], *fatal[:1]] or logs.splitlines()[:1]  # the reason, then the verdict
    return "; ".join(re.sub(r"^\[[^]]*\] ", "", line) for line in found)[:300]


def run_form(cluster: SlurmCluster, form: Form) -> Outcome:
    """Restart the controller on ``form``, run every step, judge each."""
    outcome = Outcome(form)
    files = {name.replace("@CLUSTER@", cluster.prefix): text for name, text in form.files}

    def edit(text: str) -> str:
        for old, new in form.edits:
            assert old in text, f"{form.name}: the harness's slurm.conf has no {old!r}"
            text = text.replace(old, new, 1)
        if form.reverse_nodes:
            lines = text.split("\n")
            at = [i for i, line in enumerate(lines) if line.startswith("NodeName=")]
            for i, line in zip(at, [lines[i] for i in reversed(at)]):
                lines[i] = line
            text = "\n".join(lines)
        return text

    try:
        cluster.reconfigure(extra_conf=form.conf, topology=form.topology, files=files,
                            conf_edit=edit)
    except SlurmStartError as exc:
        outcome.rejected = rejection(str(exc))
        return outcome
    outcome.restart = cluster.start_seconds
    chunks = _run_steps(cluster)
    for name, rc, stdout, stderr in chunks:
        got = _probe_records(stdout)
        if rc != 0 and not got:
            lines = [line for line in stderr.splitlines() if "error" in line] or [stderr]
            outcome.steps[name] = f"Slurm refused the step: {lines[0][:160]}"
            continue
        outcome.steps[name], wrong = verdict(got)
        outcome.failures += [f"{name}: {w}" for w in wrong]
    return outcome


def _run_steps(cluster: SlurmCluster) -> list[tuple[str, int, str, str]]:
    """Every step at once (the allocations fit side by side: the wait for srun and slurmstepd
    overlaps), each one's output in a file: (step, exit code, stdout, stderr)."""
    here = cluster.conf.parent.parent / "oracle"
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir()
    probe = here / "probe.sh"
    probe.write_text(PROBE_SH)
    jobs = [(name, "srun --label " + " ".join(args) + f" sh {probe}") for name, args in STEPS]
    jobs += [(f"partial {args}", f"salloc -Q -N4 -n8 srun --label {args} sh {probe}")
             for args in PARTIAL]
    script = "".join(f"({command} >{here}/{i}.out 2>{here}/{i}.err; echo $? >{here}/{i}.rc) &\n"
                     for i, (_, command) in enumerate(jobs)) + "wait\n"
    res = cluster.run(["sh", "-c", script], env=ENV, timeout=240)
    assert res.returncode == 0, res.stderr
    return [(name, int((here / f"{i}.rc").read_text()), (here / f"{i}.out").read_text(),
             (here / f"{i}.err").read_text()) for i, (name, _) in enumerate(jobs)]


def report(outcomes: list[Outcome], release: str) -> str:
    lines = [(f"Slurm {release} as the oracle: {len(outcomes)} forms (random seed {SEED}; "
              f"SLURMENV_ORACLE_SEED={SEED} replays them)")]
    for o in outcomes:
        if o.rejected:
            lines.append(f"  {o.form.name}: the controller refuses the form: {o.rejected}")
            continue
        lines.append(f"  {o.form.name} (daemons up in {o.restart:.1f} s):")
        lines += [f"    {step}: {v}" for step, v in o.steps.items()]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def oracle_cluster(slurm_release: str | None) -> Iterator[SlurmCluster]:
    """A 4-node cluster n1..n4 of the release FEATURES names, restarted on each form (up in
    about 0.4 s; 10 s bound a form the daemons wait on, such as a missing include file, which
    slurmctld retries for 60 s)."""
    assert slurm_release is not None, "the oracle runs on releases built from source"
    if not release_built(slurm_release):
        pytest.skip(f"Slurm {slurm_release} is not built (sh tests/build_slurm.sh {slurm_release})")
    cluster = SlurmCluster(nodes=NODES, release=slurm_release, start_timeout=10)
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"real Slurm cluster unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_generated_forms_are_many_and_named_once() -> None:
    """At least 50 named forms, each name once; the random ones replay from their seed."""
    named = named_forms()
    assert len(named) >= 50
    assert len({form.name for form in named}) == len(named)
    assert set(NODE_RANK) <= {form.name for form in named}
    assert random_forms(5) == random_forms(5)


def run_forms(cluster: SlurmCluster, release: str, forms: list[Form]) -> None:
    """Every form on ``cluster``; fails with each form that split or exported a wrong value."""
    outcomes = [run_form(cluster, form) for form in forms]
    text = report(outcomes, release)
    print(f"\n{text}")
    failed = [o for o in outcomes if o.failures]
    assert not failed, "\n\n".join(
        o.form.text() + "\n  " + "\n  ".join(o.failures) for o in failed) + "\n\n" + text
    ran = [o for o in outcomes if not o.rejected]
    assert len(ran) >= len(outcomes) // 2, f"the controller refused most forms:\n{text}"


def test_every_form_is_right_or_refused_in_every_task(
    oracle_cluster: SlurmCluster, slurm_release: str
) -> None:
    run_forms(oracle_cluster, slurm_release, named_forms() + random_forms())


def test_node_rank_forms_are_right_or_refused_in_every_task(
    oracle_cluster: SlurmCluster, slurm_release: str
) -> None:
    """Before 26.05 the forms that matter are SwitchAsNodeRank and BlockAsNodeRank (they
    reorder the node table), and a few of the grammar."""
    run_forms(oracle_cluster, slurm_release,
              [form for form in named_forms() if form.name in NODE_RANK])


# -- dynamic nodes ------------------------------------------------------------------------------
#: The order the dynamic nodes register in (each waits for the one before).
REGISTERED = ("n3", "n1", "n4", "n2")
#: Each dynamic node's leaf switch (slurmd -Z --conf "Topology=default:LEAF"), under a
#: topology.conf of empty switches: the same fabric as TREE_CONF.
DYNAMIC_LEAF = {"n2": "sa", "n1": "sb", "n3": "sc", "n4": "sc"}
#: The order 26.05 fills a step in under that tree: leaf switch by leaf switch.
TREE_ORDER = ["n2", "n1", "n3", "n4"]
EMPTY_TREE = "SwitchName=sa\nSwitchName=sb\nSwitchName=sc\nSwitchName=top Switches=sa,sb,sc\n"


def munge_plugins(release: str) -> Path:
    """Slurm ``release``'s auth/munge and cred/munge plugins, built once
    (tests/build_munge_plugins.sh): dynamic nodes need a credential plugin cred/none is not."""
    from slurm_harness import release_dir

    script = ROOT / "tests" / "build_munge_plugins.sh"
    res = subprocess.run(["sh", str(script), release], capture_output=True, text=True,
                         check=False, timeout=900)
    if res.returncode != 0:
        pytest.skip(f"Slurm {release}'s munge plugins cannot be built here: {res.stderr[-500:]}")
    return release_dir(release) / "munge-plugins"


@pytest.mark.parametrize("topology", ["none", "tree"])
def test_dynamic_nodes_registered_out_of_name_order(slurm_release: str | None,
                                                    topology: str) -> None:
    """Nodes that register as dynamic nodes, n3 n1 n4 n2: the node table (and so
    SLURM_JOB_NODELIST, SLURM_NODEID and a block step's layout) takes registration order on
    25.11 and 26.05, not name order, and slurmenv, which reads that list, is right in every
    task. Under topology/tree (the nodes placed with --conf Topology=default:LEAF) 26.05 lays
    steps out leaf switch by leaf switch; every task is right or refuses alike."""
    assert slurm_release is not None, "dynamic nodes run on releases built from source"
    if not release_built(slurm_release):
        pytest.skip(f"Slurm {slurm_release} is not built (sh tests/build_slurm.sh {slurm_release})")
    if shutil.which("munged") is None or shutil.which("mungekey") is None:
        pytest.skip("munge is not installed (apt-get install munge; build_munge_plugins.sh does)")
    plugins = munge_plugins(slurm_release)
    tree = topology == "tree"
    cluster = SlurmCluster(
        nodes=NODES, release=slurm_release, start_timeout=30, munge_plugins=plugins,
        dynamic=REGISTERED, extra_conf=TREE if tree else "",
        topology=EMPTY_TREE if tree else None,
        dynamic_conf={n: f"Topology=default:{leaf}" for n, leaf in DYNAMIC_LEAF.items()}
        if tree else None)
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"real Slurm cluster unavailable: {exc}")
    try:
        failures, seen = [], []
        for name, rc, stdout, stderr in _run_steps(cluster):
            got = _probe_records(stdout)
            assert rc == 0 and got, f"{name}: {stderr}"
            said, wrong = verdict(got)
            seen.append(f"{name}: {said}")
            failures += [f"{name}: {w}" for w in wrong]
            if name.startswith("per-node"):
                hosts = [got[r]["hostname"] for r in range(4)]
                # 25.11 has no topology layout (test_real_topology.py): registration order
                want = TREE_ORDER if tree and slurm_release >= "26.05" else list(REGISTERED)
                assert hosts == want, f"Slurm's order changed: {hosts}"
        print(f"\ndynamic nodes on Slurm {slurm_release}, topology {topology}:\n  "
              + "\n  ".join(seen))
        assert not failures, "\n".join(failures + seen)
    finally:
        cluster.stop()
