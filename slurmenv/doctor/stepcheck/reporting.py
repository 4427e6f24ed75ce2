"""Rank 0's report: a summary line, then only the problems, each on one line, then the action
(the nodes at fault as one host list, and the line to run again without them)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import SlurmEnvError
from ...resolution import Resolution
from .protocol import AGREE, one_line
from .rank0 import Arrival, Outcome

MAX_SHOWN = 20  # problem lines shown before "... and N more"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # a name that may go on a command line


def ranks_text(ranks: Sequence[int]) -> str:
    """``1-3,7``: sorted ranks as ranges."""
    from itertools import groupby  # a run of consecutive ranks keeps rank - index

    runs = [[r for _, r in run] for _, run in
            groupby(enumerate(sorted(set(ranks))), lambda pair: pair[1] - pair[0])]
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _value_text(key: str, value: Any) -> str:
    if key == "options" and isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def _from_text(arrival: Arrival) -> str:
    """The address a task came from: as rank 0 saw it, and as the task said if it differs
    (a NAT, a proxy in between)."""
    via = arrival.facts.get("via")
    if not isinstance(via, str) or via == arrival.address:
        return arrival.address
    return f"{via[:64]}, seen as {arrival.address}"


def topology_note(environ: Mapping[str, str]) -> str | None:
    """Why the address rank 0 was expected on may be wrong: a topology plugin (Slurm 26.05
    lays tasks out in topology order, slurmenv in the node list's)."""
    pattern = environ.get("SLURM_TOPOLOGY_ADDR_PATTERN", "")
    if pattern in ("", "node"):
        return None
    return (f"a topology plugin is on (SLURM_TOPOLOGY_ADDR_PATTERN={one_line(pattern)}, this "
            f"node's SLURM_TOPOLOGY_ADDR={one_line(environ.get('SLURM_TOPOLOGY_ADDR', '?'))}): "
            "Slurm 26.05 lays tasks out in topology order, so the node rank 0 was expected on "
            "may be wrong")


def exclude_line(nodes: set[str]) -> str | None:
    """The nodes at fault as one host list, and how to run again without them."""
    import hostlist

    names = sorted(n for n in nodes if _HOST.fullmatch(n))
    if not names:
        return None
    try:
        hosts = hostlist.collect_hostlist(names)
    except (ValueError, hostlist.BadHostlist):
        hosts = ",".join(names)
    return (f"nodes at fault: {hosts}; run again without them: srun --exclude={hosts} ... "
            f"(in an allocation with other nodes), or sbatch --exclude={hosts} ...")


class _Report:
    def __init__(self, res: Resolution, own: Mapping[str, Any], outcome: Outcome) -> None:
        self.res, self.own, self.outcome = res, own, outcome
        self.world = res.world_size
        self.where = f"{res.master_addr}:{res.master_port}"
        try:
            self.hosts: Sequence[str] | None = res.hosts
            self.node_of: Sequence[int] | None = res.node_of
        except SlurmEnvError:
            self.hosts = self.node_of = None
        self.problems: list[str] = []
        self.bad: set[int] = set()
        self.nodes: set[str] = set()  # the nodes at fault
        self.disagree: dict[tuple[str, str, str], list[tuple[int, str, str]]] = {}

    def expected(self, rank: int) -> str | None:
        if self.hosts is None or self.node_of is None or not 0 <= rank < len(self.node_of):
            return None
        return self.hosts[self.node_of[rank]]

    def mark(self, rank: int, node: object) -> None:
        self.bad.add(rank)
        if isinstance(node, str):
            self.nodes.add(node)

    def flag(self, rank: int, node: object, text: str) -> None:
        self.mark(rank, node)
        self.problems.append(text)

    def gathered(self, by_rank: dict[int, list[Arrival]]) -> None:
        own, world = self.own, self.world
        for rank in sorted(by_rank):  # ranks claimed twice (rank 0 is this task)
            claims = by_rank[rank]
            count = len(claims) + (rank == 0)
            if count > 1:
                holders = [f"{one_line(a.facts.get('node'))} ({_from_text(a)})" for a in claims]
                if rank == 0:
                    holders.insert(0, f"{own['node']} (rank 0 itself)")
                exp = self.expected(rank)
                for a in claims:
                    self.nodes.add(str(a.facts.get("node")))
                self.flag(rank, None, f"rank {rank} started {count} times: by "
                          + ", ".join(holders)
                          + (f" (the step's layout puts it on {exp})" if exp else ""))
        outside = sorted(r for r in by_rank if r >= world)
        if outside:
            for r in outside:
                self.mark(r, by_rank[r][0].facts.get("node"))
            self.problems.append(f"{plural(len(outside), 'task')} claimed rank "
                                 f"{ranks_text(outside[:50])}, not a rank of this step of {world}")
        missing = [r for r in range(1, world) if r not in by_rank]
        by_node: dict[str | None, list[int]] = {}
        for rank in missing:
            by_node.setdefault(self.expected(rank), []).append(rank)
        held = self.held_by()
        for node, ranks in by_node.items():
            self.bad.update(ranks)
            if node and held is None:
                self.nodes.add(node)
            on = f" (expected on {node})" if node else ""
            self.problems.append(f"{plural(len(ranks), 'rank')} {ranks_text(ranks)}{on} never "
                                 f"connected to {self.where}" + (held or ""))
        for rank, claims in sorted(by_rank.items()):
            for arrival in claims:
                self.one_arrival(rank, arrival, len(claims) == 1)

    def held_by(self) -> str | None:
        """Why a rank that never connected may not be its node's fault: rank 0 held all the
        connections it may, some of them strangers that never said who they were (or it met
        its open-file limit), so the rank may have waited behind them in the kernel's backlog.
        None when rank 0 always had room: then a rank that never came did not connect."""
        outcome = self.outcome
        if outcome.crowded:
            return (f": rank 0 was held by {plural(outcome.crowded, 'connection')} that did not "
                    "say who they were (refused, below), so it may have waited behind them; "
                    "not blamed on its node")
        if outcome.fd_limit is not None:
            return (": rank 0 met its open-file limit (below), so it may have waited in the "
                    "kernel's backlog; not blamed on its node")
        return None

    def one_arrival(self, rank: int, arrival: Arrival, alone: bool) -> None:
        facts = arrival.facts
        node = one_line(facts.get("node"))
        if arrival.problems:
            self.flag(rank, facts.get("node"), (
                f"rank {rank} on {node} ({_from_text(arrival)}) sent a message with "
                f"{', '.join(arrival.problems[:6])}: not trusted (another slurmenv version, or "
                "not slurmenv)"))
            return
        if arrival.lost and self.outcome.verdict is None:
            self.flag(rank, facts.get("node"), (
                f"rank {rank} on {node} reached rank 0, then its link broke before the verdict"))
        exp = self.expected(rank)
        if exp is not None and facts.get("node") != exp and alone:
            self.flag(rank, facts.get("node"),
                      f"rank {rank} runs on {node}, but the step's layout puts it on {exp}")
        for key, label, source in AGREE:
            if key == "step" and not str(self.own.get("launcher", "")).startswith("slurm"):
                continue  # under mpirun in a batch script rank 0 is in another step
            mine, theirs = self.own.get(key), facts.get(key)
            if mine == theirs or (key == "tf_digest" and
                                  self.own.get("master_port") != facts.get("master_port")):
                continue  # TensorFlow's ports follow MASTER_PORT: said once
            self.bad.add(rank)
            self.nodes.add(str(facts.get("node")))
            sources = facts.get("sources")
            src = sources.get(source, "") if source and isinstance(sources, dict) else ""
            if isinstance(mine, dict) and isinstance(theirs, dict):  # the options:
                names = sorted({*mine, *theirs}, key=str)  # only those that differ
                mine = {k: mine.get(k) for k in names if mine.get(k) != theirs.get(k)}
                theirs = {k: theirs.get(k) for k in mine}
            self.disagree.setdefault(
                (label, one_line(_value_text(key, theirs)), _value_text(key, mine)), []
            ).append((rank, node, one_line(src)))

    def disagreements(self) -> None:
        labels = {label: source for _, label, source in AGREE}
        for (label, value, mine), who in self.disagree.items():
            source = labels[label]
            my_src = self.own["sources"].get(source, "") if source else ""
            nodes = sorted({entry[1] for entry in who})
            src = who[0][2]
            self.problems.append(
                f"{plural(len(who), 'rank')} {ranks_text([entry[0] for entry in who])} on "
                f"{', '.join(nodes)} disagree on {label}: {value}"
                + (f" ({src})" if src else "")
                + f"; rank 0 has {mine}" + (f" ({my_src})" if my_src else ""))

    def after_verdict(self) -> None:
        outcome = self.outcome
        if outcome.late:
            held = self.held_by() is not None  # late from the backlog: not their nodes' fault
            for arrival in outcome.late:
                self.mark(int(arrival.facts["rank"]), None if held else arrival.facts.get("node"))
            who = [f"rank {a.facts['rank']} on {one_line(a.facts.get('node'))} "
                   f"({_from_text(a)}) at {a.seconds:.1f} s" for a in outcome.late[:5]]
            more = len(outcome.late) - len(who)
            self.problems.append(
                f"{plural(len(outcome.late), 'task')} of this step reached rank 0 after its "
                "verdict (told so, they do not start): " + ", ".join(who)
                + (f" and {more} more" if more else ""))
        if outcome.decision == "abort" and outcome.verdict:
            for arrival in outcome.arrivals:
                if not arrival.acked:
                    self.mark(int(arrival.facts["rank"]), arrival.facts.get("node"))
            self.problems.append("all agreed, but " + "; ".join(outcome.abort_why)
                                 + ": no task starts")
        if outcome.decision == "go":
            lost = [a for a in outcome.arrivals if not a.confirmed]
            if lost:
                ranks = [int(a.facts["rank"]) for a in lost]
                self.nodes.update(str(a.facts.get("node")) for a in lost)
                self.problems.append(
                    f"{plural(len(lost), 'rank')} {ranks_text(ranks)} did not confirm the go "
                    "(a link broke after the last acknowledgement): they may not have started")


def report(res: Resolution, own: Mapping[str, Any], outcome: Outcome,
           environ: Mapping[str, str] | None = None) -> tuple[bool, list[str]]:
    """Rank 0's verdict and report lines (summary first, then only the problems, each on one
    line); the verdict phase's when ``outcome.verdict`` is still None, else the final one."""
    if outcome.listen_error is not None:
        return False, [
            (f"slurmenv step check: rank 0 on {one_line(own['node'])} {outcome.listen_error}: "
             "something else holds it on this node (a leftover of an earlier step?); training "
             "would fail there too"),
            ("  fix: find it with `slurmenv doctor` (ports check) on this node, or give the "
             "step another port (srun --resv-ports, SLURMENV_PORT)"),
        ]
    rep = _Report(res, own, outcome)
    by_rank: dict[int, list[Arrival]] = {}
    for arrival in outcome.arrivals:
        by_rank.setdefault(int(arrival.facts["rank"]), []).append(arrival)
    rep.gathered(by_rank)
    rep.disagreements()
    if outcome.verdict is not None:
        rep.after_verdict()
    reached = len({r for r in by_rank if r != 0}) + 1
    # once "go" is sent, rank 0 starts as the others do (what came after is only said)
    ok = outcome.decision == "go" if outcome.decision else not rep.problems
    head = (f"slurmenv step check: {reached} of {rep.world} ranks reached {rep.where} in "
            f"{outcome.seconds:.1f} s")
    head += ", all agree" if ok else \
        f"; {plural(len(rep.bad), 'rank')} with problems, the step is not sound"
    problems = rep.problems
    if len(problems) > MAX_SHOWN:
        problems = [*problems[:MAX_SHOWN], f"... and {len(problems) - MAX_SHOWN} more"]
    lines = [head, *(f"  {p}" for p in problems)]
    if outcome.fd_limit is not None:
        lines.append(
            f"  rank 0 reached its open-file limit ({outcome.fd_limit} descriptors, `ulimit -n`; "
            f"the step needs about {rep.world + 64}) and held {outcome.most_kept} connections: "
            "raise the hard limit on rank 0's node (limits.conf nofile, Slurm's "
            "PropagateResourceLimits)")
    if outcome.foreign:
        lines.append(f"  not counted: {plural(len(outcome.foreign), 'task')} of another step "
                     f"reached {rep.where} (two steps share it): " + "; ".join(outcome.foreign[:5]))
    if outcome.refused_count:
        lines.append(f"  refused {plural(outcome.refused_count, 'connection')} that did not "
                     "speak the step check: " + "; ".join(outcome.refused))
    missing = any(r not in by_rank for r in range(1, rep.world))
    note = topology_note(environ or {}) if missing else None
    action = exclude_line(rep.nodes) if rep.nodes else None
    lines += [f"  {extra}" for extra in (note, action) if extra]
    return ok, [one_line(line) for line in lines]
