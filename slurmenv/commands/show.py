"""``slurmenv show``: this task's values and the variables each came from; ``--all-ranks``
the whole step as a table, from the layout, without talking to the others; ``--one-line`` one
line per task, padded so that ``sort`` lines up every task's in rank order; ``--json``;
``--from FILE`` replays a dump.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import gpus, options, tfconfig
from ..errors import SlurmEnvError, is_number, printable
from ..resolution import Resolution, gpus_per_rank
from .console import add_resolution_options, print_error, resolve_from_args, say, write_output

#: How the GPU column was computed (see gpu_column).
GPUS_OWN_NODE = "own-node"
GPUS_MODULE = "slurmenv.gpus"


def build_parser() -> argparse.ArgumentParser:
    from .console import argument_parser

    parser = argument_parser(
        prog="slurmenv show",
        description="Show this task's values and where each came from; --all-ranks shows the "
        "whole step, --one-line one aligned line per task (srun slurmenv show --one-line).",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--all-ranks", action="store_true",
        help="the whole step as a table: rank, node, node rank, local rank, ports, GPUs "
        "(computed here from the layout, no communication)",
    )
    mode.add_argument(
        "--one-line", action="store_true",
        help="one line for this task that lines up with the other tasks' lines and sorts by rank",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of text")
    parser.add_argument(
        "--from", dest="from_file", metavar="FILE",
        help="replay a file written by 'slurmenv dump' instead of reading this environment",
    )
    add_resolution_options(parser)
    return parser


# -- helpers -------------------------------------------------------------------------------
def _gpus_module_column(res: Resolution, environ: Mapping[str, str]) -> list[str] | None:
    """Per-rank GPUs from ``resolution.gpus_per_rank`` (None when no GPU list is set)."""
    try:
        values = gpus_per_rank(res, environ)
    except SlurmEnvError:
        return None
    if values is None or len(values) != res.world_size:
        return None
    return ["?" if v is None else (",".join(v) or "none") for v in values]


def gpu_column(res: Resolution, environ: Mapping[str, str]) -> tuple[list[str], str]:
    """The GPUs of every rank as far as this task can know them, and how they were found:
    ``slurmenv.gpus.per_rank`` when it knows; else this task's ``CUDA_VISIBLE_DEVICES`` (``-``
    unset), the same for this node's ranks unless Slurm bound GPUs per task (then ``?``), and
    ``?`` elsewhere (``-`` when this task has no GPU at all)."""
    from_module = _gpus_module_column(res, environ)
    if from_module is not None:
        return from_module, GPUS_MODULE
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    own = "-" if cvd is None else (cvd or "none")
    shared = not gpus.bound_per_task(environ)
    has_gpus = any(environ.get(n) is not None for n in (*gpus.VARIABLES, "SLURM_STEP_GPUS"))
    elsewhere = "?" if has_gpus else "-"
    try:
        node_of = res.node_of
    except SlurmEnvError:
        mine = -2 if "NODE_RANK" in res.unknown else res.node_rank
        node_of = tuple(mine if r == res.rank else -1 for r in range(res.world_size))
    out = []
    for rank, node in enumerate(node_of):
        if rank == res.rank:
            out.append(own)
        elif node == node_of[res.rank]:
            out.append(own if shared else "?")
        else:
            out.append(elsewhere)
    return out, GPUS_OWN_NODE


# -- the whole step -------------------------------------------------------------------------
def step_table(res: Resolution, environ: Mapping[str, str]) -> dict[str, Any]:
    """The whole step, rank by rank: what ``--all-ranks --json`` prints."""
    hosts, node_of, local_of = res.hosts, res.node_of, res.local_of
    notes = []
    try:
        addresses: list[str] | None = list(res.tf_addresses)
    except SlurmEnvError as exc:
        addresses = None
        notes.append(f"TensorFlow ports unknown: {exc.message}")
    try:
        roles: Sequence[tuple[str, int]] | None = res.tf_roles if addresses else None
    except SlurmEnvError as exc:
        roles = None
        notes.append(f"TensorFlow roles unknown: {exc.message} (fix: {exc.fix})")
    gpus, gpus_from = gpu_column(res, environ)
    ranks = []
    for rank, (node, local) in enumerate(zip(node_of, local_of)):
        tf_port = tfconfig.port_of(addresses[rank]) if addresses else None
        ports = ([res.master_port] if rank == 0 else []) + ([tf_port] if tf_port else [])
        ranks.append({
            "rank": rank, "node": hosts[node], "node_rank": node, "local_rank": local,
            "ports": ports, "tf_address": addresses[rank] if addresses else None,
            "gpus": gpus[rank], "master": rank == 0, "self": rank == res.rank,
            "tf_task": {"type": roles[rank][0], "index": roles[rank][1]} if roles else None,
        })  # fmt: skip
    return {
        "launcher": res.launcher, "job_id": res.job_id, "step_id": res.step_id,
        "layout": res.layout_name, "world_size": res.world_size, "nnodes": res.nnodes,
        "master": {"rank": 0, "node": hosts[node_of[0]], "addr": res.master_addr,
                   "port": res.master_port},
        "self": res.rank, "gpus_from": gpus_from, "ranks": ranks,
        "notes": notes + list(res.notes),
    }  # fmt: skip


def format_table(table: Mapping[str, Any]) -> str:
    """``--all-ranks`` as text: a header, one row per rank, a legend."""
    master = table["master"]
    where = (f"job {table['job_id']} step {table['step_id']}" if table["job_id"]
             else table["launcher"])
    if table["job_id"] and table["step_id"] is None:
        where = f"{table['launcher']} in job {table['job_id']}"
    layout = f", {table['layout']} layout" if table["layout"] else ""
    lines = [(f"{where}: {table['world_size']} ranks on {table['nnodes']} nodes{layout}; "
              f"master {master['addr']}:{master['port']} (rank 0 on {master['node']}, marked *)")]
    header: tuple[str, ...] = ("RANK", "NODE", "NODE_RANK", "LOCAL_RANK", "PORTS", "GPUS")
    right: tuple[bool, ...] = (True, False, True, True, False, False)
    # the TensorFlow role of each rank, once roles are asked for (--tf-jobs, --tf-chief)
    tasks = [row.get("tf_task") for row in table["ranks"]]
    with_roles = any(task and task["type"] != "worker" for task in tasks)
    rows = []
    for row, task in zip(table["ranks"], tasks):
        cells: tuple[str, ...] = (
            f"{row['rank']}{'*' if row['master'] else ' '}", row["node"], str(row["node_rank"]),
            str(row["local_rank"]), ",".join(map(str, row["ports"])) or "-", row["gpus"],
        )  # fmt: skip
        if with_roles:
            cells += (f"{task['type']} {task['index']}" if task else "?",)
        rows.append(cells)
    if with_roles:
        header, right = (*header, "TF_TASK"), (*right, False)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)
        ).rstrip()

    lines.append(fmt(header))
    for row, cells in zip(table["ranks"], rows):
        lines.append(fmt(cells) + ("   <- this task" if row["self"] else ""))
    lines.append(
        "PORTS: MASTER_PORT (rank 0), then the rank's TensorFlow port. GPUS: this task's "
        "CUDA_VISIBLE_DEVICES (after --bind-gpus if asked) and, where the tasks of this node "
        "share their list, theirs; '?' = not knowable from here (srun slurmenv show --one-line)"
        + ("; TF_TASK: the rank's task in TF_CONFIG (--tf-jobs, --tf-chief)" if with_roles else "")
    )
    lines.extend(f"note: {note}" for note in table["notes"])
    return "\n".join(lines) + "\n"


# -- one line per task ----------------------------------------------------------------------
def _width(n: int) -> int:
    return len(str(max(n - 1, 0)))


def one_line(res: Resolution, environ: Mapping[str, str]) -> str:
    """This task as one ``key=value`` line, padded from step-wide facts so lines align."""
    try:
        hosts: Sequence[str] = res.hosts
        local_max = max(res.local_of) + 1
    except SlurmEnvError:
        hosts, local_max = (res.hostname,), res.local_world_size
    try:
        addresses: list[str] | None = list(res.tf_addresses)
        cluster = res.tf_config.get("cluster", {})
        digest = hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:8]
    except SlurmEnvError:
        addresses, digest = None, "?"
    gpus, _ = gpu_column(res, environ)
    tf = addresses[res.rank] if addresses else "?"
    tf_width = max((len(a) for a in addresses), default=1) if addresses else 1
    # under mpirun in a batch script there is a job but no step of this task: say job=N
    if res.job_id and res.step_id is not None:
        where = f"step={res.job_id}.{res.step_id}"
    else:
        where = f"job={res.job_id}" if res.job_id else "step=-"
    hostname = res.hostname or socket.gethostname()
    host_width = max(len(h) for h in (*hosts, hostname))
    return " ".join([
        f"rank={res.rank:0{_width(res.world_size)}d}/{res.world_size}",
        f"node={hostname:<{host_width}}",
        "node_rank=?/?" if res.unknown else
        f"node_rank={res.node_rank:0{_width(res.nnodes)}d}/{res.nnodes}",
        f"local_rank={res.local_rank:0{_width(local_max)}d}/{res.local_world_size}",
        f"master={res.master_addr}:{res.master_port}", f"tf={tf:<{tf_width}}",
        f"cluster={digest}", where, f"gpus={gpus[res.rank]}",
    ])


def one_line_error(exc: SlurmEnvError, environ: Mapping[str, str]) -> str:
    """The line of a task whose resolution failed: same start, so it sorts in place."""
    rank = environ.get("SLURM_PROCID", "?")
    world = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS") or "?"
    if is_number(rank) and is_number(world):
        rank = f"{int(rank):0{_width(int(world))}d}"
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    variable = f" [{exc.variable}={exc.value!r}]" if exc.variable else ""
    return f"rank={rank}/{world} node={node} ERROR {exc.message}{variable}"


# -- command --------------------------------------------------------------------------------
def known_env(res: Resolution, for_: str) -> tuple[dict[str, str], dict[str, SlurmEnvError]]:
    """The values of ``for_`` that can be computed, and the error of each one that cannot
    (``TF_CONFIG`` where the launcher does not tell where every rank runs)."""
    try:
        return res.env(for_), {}
    except SlurmEnvError as exc:
        if exc.variable != "TF_CONFIG" or for_ not in ("all", "tf"):
            raise
    values = res.env("torch") if for_ == "all" else {
        name: value for name, value in res.env("torch").items() if name in res.bindings
    }
    try:
        res.tf_config  # noqa: B018 - the error to show
    except SlurmEnvError as exc:
        return values, {"TF_CONFIG": exc}
    return values, {}


def _own_task(res: Resolution, values: Mapping[str, str],
              unknown: Mapping[str, SlurmEnvError] | None = None) -> str:
    where = f"job {res.job_id} step {res.step_id}" if res.job_id else "no Slurm job"
    if res.job_id and res.step_id is None:
        where = res.origin  # the launcher's own words (a rank of mpirun's node has no step)
    out = [f"launcher: {res.launcher} ({where}), task on {res.hostname or '(host unknown)'}"]
    unknown = unknown or {}
    width = max(len(name) for name in [*values, *unknown])
    for name, value in values.items():
        out.append(f"{name:<{width}}  {value}")
        source = res.sources.get(name)
        if source:
            out.append(f"{'':<{width}}    from {source}")
    for name, exc in unknown.items():
        out.append(f"{name:<{width}}  (not known here: {exc.message})")
        if exc.fix:
            out.append(f"{'':<{width}}    fix: {exc.fix}")
    if res.gpu_source:  # the GPUs this task sees, bound or not (slurmenv.gpus)
        gpus = "no list" if res.gpus is None else ",".join(res.gpus) or "none"
        out.append(f"GPUs: {gpus}\n    from {res.gpu_source}")
    out.extend(f"note: {note}" for note in res.notes)
    return "\n".join(out) + "\n"


def main(argv: Sequence[str]) -> int:
    """``slurmenv show``; returns the exit status (1 when resolution fails)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.one_line and args.json:
        parser.error("--one-line is text: use --json alone for machines")
    environ: Mapping[str, str] = os.environ
    replay: list[str] = []
    replay_json: dict[str, Any] | None = None
    try:
        if args.from_file:
            from .. import dump

            loaded = dump.load(args.from_file)
            environ = loaded.environ
            res, replayed = loaded.replay(**options.given_in(args))
            replay = [f"replaying {args.from_file}: task on {loaded.hostname or '?'}",
                      *dump.replay_report(loaded, replayed)]
            diff = dump.differences(loaded.recorded, replayed) if loaded.recorded else None
            replay_json = {"file": args.from_file, "identical": diff == [], "differences": diff}
            if res is None:
                raise SlurmEnvError(str(replayed["error"]), variable=replayed.get("variable"),
                                    value=replayed.get("value"), fix=replayed.get("fix"))
        else:
            res = resolve_from_args(args)
        if args.one_line:
            text = one_line(res, environ) + "\n"
        elif args.all_ranks:
            if not res.layout_known:
                # the variable this task's rank came from (torchrun: its own marker)
                told = res.sources.get("RANK", "").partition("=")[0]
                variable = "TORCHELASTIC_RUN_ID" if environ.get("TORCHELASTIC_RUN_ID") else (
                    told if told in environ else "RANK")
                raise SlurmEnvError(
                    f"--all-ranks needs the whole step's layout, but {res.launcher} set only "
                    "this task's variables",
                    variable=variable, value=environ.get(variable),
                    fix="run 'slurmenv show --all-ranks' in an srun task (outside torchrun and "
                    "MPI launchers), or compare the ranks with 'slurmenv show --one-line | sort' "
                    "started by the same launcher (srun ..., mpirun ...)",
                )
            table = step_table(res, environ)
            if replay_json is not None:
                table["replay"] = replay_json
            text = json.dumps(table, indent=1) + "\n" if args.json else format_table(table)
        elif args.json:
            data = res.to_dict()
            data["env"], unknown = known_env(res, options.outputs(environ, args.for_))
            if unknown:
                data["unknown"] = {name: {"error": exc.message, "fix": exc.fix}
                                   for name, exc in unknown.items()}
            if replay_json is not None:
                data["replay"] = replay_json
            text = json.dumps(data, indent=1) + "\n"
        else:
            text = _own_task(res, *known_env(res, options.outputs(environ, args.for_)))
    except SlurmEnvError as exc:
        if replay and not args.json:
            sys.stderr.write("\n".join(replay) + "\n")
        if args.one_line:
            write_output(printable(one_line_error(exc, environ)) + "\n")
        print_error(exc)
        return 1
    if replay and not args.json:
        # After the output: a replay's verdict is what a bug report needs to show.
        verdict = "\n".join(replay) + "\n"
        if args.one_line:
            status = write_output(printable(text))
            say(verdict)
            return status
        text += verdict
    return write_output(text if args.json else printable(text))
