"""``slurmenv torchrun``: one ``torchrun`` per node of a Slurm step, its options filled in
(``--nnodes``, ``--nproc-per-node``, a c10d rendezvous on rank 0's node, ``--local-addr``: see
``_INTRO``, its help). An option given on the command line or as torchrun's own
``PET_<OPTION>`` wins. With ``--rdzv-backend=static`` slurmenv fills ``--node-rank``,
``--master-addr`` and ``--master-port`` instead; ``--node-rank`` is not passed with c10d
(torchrun ignores it there and numbers the nodes at the rendezvous). The launcher that reads
the workers torchrun starts is ``launchers/torchrun.py``; ``export --for torchrun`` gives the
same values as ``PET_*`` variables.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import _AUTO, options, resolve
from ..errors import SlurmEnvError
from ..lean import NamedTuple
from ..resolution import Resolution, check_one_per_node, filled_values, nproc_per_node
from .console import print_error, usage_error, write_output

if TYPE_CHECKING:
    from ..options import Arg

#: torchrun options that take a value (canonical long name, without the leading ``--``).
VALUE_OPTIONS = (
    "nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf",
    "max-restarts", "monitor-interval", "start-method", "event-log-handler", "role", "log-dir",
    "redirects", "tee", "local-ranks-filter", "duplicate-stdout-filters",
    "duplicate-stderr-filters", "node-rank", "master-addr", "master-port", "local-addr",
    "logs-specs", "numa-binding", "signals-to-handle", "shutdown-timeout",
)
#: torchrun options that are flags.
FLAG_OPTIONS = ("standalone", "module", "no-python", "run-path", "virtual-local-rank", "help")
SHORT_OPTIONS = {"-r": "redirects", "-t": "tee", "-m": "module", "-h": "help"}
#: Options whose value torchrun also reads from ``PET_<NAME>`` (``--help`` excluded).
PET_OPTIONS = tuple(o for o in VALUE_OPTIONS + FLAG_OPTIONS if o not in ("logs-specs",
                                                                       "numa-binding", "help"))

#: Variables another launcher layer may have left; torchrun sets its own for its workers.
LAUNCHER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "NODE_RANK", "NNODES",
)


def pet_name(option: str) -> str:
    """torchrun's environment variable for an option: ``nproc-per-node`` -> ``PET_NPROC_PER_NODE``."""
    return "PET_" + option.replace("-", "_").upper()


# -- the command line ----------------------------------------------------------------------


def _canonical(token: str) -> tuple[str | None, str | None]:
    """``(option, inline value)`` for a torchrun option token (``--a-b``/``--a_b``,
    ``--opt=value``, unique prefixes as argparse takes them, ``-r3``); option None when unknown."""
    if token.startswith("--"):
        name, eq, inline = token[2:].partition("=")
        name = name.replace("_", "-")
        known = VALUE_OPTIONS + FLAG_OPTIONS
        if name in known:
            return name, inline if eq else None
        matches = [option for option in known if option.startswith(name)] if name else []
        return matches[0] if len(matches) == 1 else None, inline if eq else None
    head = token[:2]
    if head in SHORT_OPTIONS:
        rest = token[2:].removeprefix("=")
        return SHORT_OPTIONS[head], rest or None
    return None, None


def scan(args: Sequence[str]) -> tuple[dict[str, str], int]:
    """``({option: value}, index)``: the torchrun options before the training script (flags:
    ``""``) and the script's index (``len(args)`` when there is none)."""
    given: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--" or not token.startswith("-") or token == "-":
            return given, i + 1 if token == "--" else i
        option, inline = _canonical(token)
        if option in VALUE_OPTIONS:
            if inline is None:
                i += 1
                inline = args[i] if i < len(args) else ""
            given[option] = inline
        elif option is not None:
            given[option] = ""
        i += 1
    return given, i


class Launch(NamedTuple):
    """What ``slurmenv torchrun`` runs: the command and its environment."""

    argv: list[str]
    environ: dict[str, str]
    filled: dict[str, str]
    resolution: Resolution


def torchrun_command() -> list[str]:
    """``torchrun`` from ``PATH``, else ``python -m torch.distributed.run`` (this Python)."""
    import shutil

    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def build(args: Sequence[str], environ: Mapping[str, str], *,
          ephemeral_range: tuple[int, int] | None | object = _AUTO, **chosen: Any) -> Launch:
    """Resolve this node (``chosen``: keywords of :func:`slurmenv.resolve`) and build the
    torchrun command line for ``args``, executing nothing; SlurmEnvError when the step cannot
    run torchrun (several tasks per node, outside a step, inside another launcher, ...)."""
    base = {k: v for k, v in environ.items() if k not in LAUNCHER_VARIABLES}
    if environ.get("TORCHELASTIC_RUN_ID"):
        raise SlurmEnvError(
            "already inside torchrun (TORCHELASTIC_RUN_ID is set): torchrun would start "
            "processes inside its processes",
            variable="TORCHELASTIC_RUN_ID", value=environ["TORCHELASTIC_RUN_ID"],
            fix="run slurmenv torchrun from the batch script's srun, not from a training process",
        )
    res = resolve(base, ephemeral_range=ephemeral_range, **chosen)
    opts = options.from_environ(base, **chosen)
    given, _ = scan(args)
    # torchrun's PET_<OPTION> variables are the same choice as the option: they win too.
    for option in PET_OPTIONS:
        value = base.get(pet_name(option))
        if value and option not in given:
            given[option] = value
    if "standalone" in given and given["standalone"] != "0":
        if res.nnodes > 1:
            from_pet = base.get(pet_name("standalone")) and "standalone" not in scan(args)[0]
            raise SlurmEnvError(
                f"torchrun's --standalone{' (PET_STANDALONE)' if from_pet else ''} runs a "
                f"single-node job, but this step spans {res.nnodes} nodes",
                variable="PET_STANDALONE" if from_pet else "SLURM_STEP_NUM_NODES",
                value=base.get("PET_STANDALONE") if from_pet else str(res.nnodes),
                fix="drop --standalone (and PET_STANDALONE): slurmenv fills a c10d rendezvous "
                "on the node of rank 0; or run a one-node step (srun -N1)",
            )
        check_one_per_node(res)
        wanted = {"nproc-per-node": str(nproc_per_node(res)[0])}
    else:
        backend = given.get("rdzv-backend", "c10d")
        wanted = filled_values(res, backend, opts.addr_template)
        if "rdzv-endpoint" in given:
            wanted.pop("rdzv-conf", None)  # is_host is only known for our own endpoint
    filled = {name: value for name, value in wanted.items() if name not in given}
    argv = torchrun_command()
    argv += [f"--{name}={value}" for name, value in filled.items()]
    argv += list(args)
    return Launch(argv, base, filled, res)


_INTRO = """
Run torchrun with --nnodes, --nproc-per-node and a c10d rendezvous on the node
of rank 0 (--rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf=is_host) filled in from
the Slurm step. Start it once per node:
srun -K --ntasks-per-node=1 -n "$SLURM_JOB_NUM_NODES" slurmenv torchrun train.py

Options you give torchrun (or its PET_<OPTION> variables) win over the filled-in ones.
--nproc-per-node defaults to the GPUs this task sees (CUDA_VISIBLE_DEVICES, else
ROCR_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, ZE_AFFINITY_MASK), else 1. An address template
is also passed to torchrun as --local-addr.

slurmenv options (before the torchrun options; each also has a SLURMENV_* variable):"""


def own_arguments() -> list[Arg]:
    """The options table's rows marked ``torchrun``, and ``--dry-run``."""
    from ..options import TABLE, arguments

    return [*arguments(row for row in TABLE if row.torchrun), ("--dry-run", {
        "dest": "dry_run", "default": None, "action": "store_true",
        "help": "print the command and exit"})]


def usage() -> str:
    """The help of ``slurmenv torchrun``."""
    import textwrap

    own = own_arguments()
    shown = [(flag, f"{flag} {kw['metavar']}" if kw.get("metavar") else flag, kw["help"])
             for flag, kw in own]
    words = [f"[{name}]" for _, name, _ in shown]
    words += ["[--]", "[TORCHRUN OPTIONS]", "SCRIPT", "[ARGS...]"]
    lines, line = [], "usage: slurmenv torchrun"
    for word in words:
        if len(line) + 1 + len(word) > 92:
            lines.append(line)
            line = " " * len("usage: slurmenv torchrun")
        line += " " + word
    lines.append(line)
    lines.append(_INTRO)
    indent = " " * 27
    for _, name, text in shown:
        head = f"  {name:<25}" if len(name) < 25 else f"  {name}\n{indent}"
        lines.append(head + f"\n{indent}".join(textwrap.wrap(text, 92 - 27)))
    return "\n".join(lines) + "\n"


def parse_own(argv: Sequence[str]) -> tuple[dict[str, object], list[str]]:
    """slurmenv's own leading options (exact names only; see own_arguments), by field, then
    the rest for torchrun. ``-h``/``--help`` first: ``{"help": True}``."""
    known = dict(own_arguments())
    own: dict[str, object] = {}
    i = 0
    while i < len(argv):
        name, eq, inline = argv[i].partition("=")
        spec = known.get(name)
        action = None if spec is None else spec.get("action", "store")
        if spec is not None and action == "store":
            if eq:
                own[spec["dest"]] = inline
            elif i + 1 < len(argv):
                i += 1
                own[spec["dest"]] = argv[i]
            else:
                usage_error(f"{name} needs a value (see slurmenv torchrun --help)")
        elif spec is not None and not eq:
            own[spec["dest"]] = action == "store_true"
        elif argv[i] in ("-h", "--help") and i == 0:
            own["help"] = True
        elif argv[i] == "--":
            return own, list(argv[i + 1:])
        else:
            break
        i += 1
    return own, list(argv[i:])


def main(argv: Sequence[str]) -> int:
    """``slurmenv torchrun``: resolve, fill in torchrun's options, exec torchrun."""
    own, rest = parse_own(argv)
    if own.pop("help", False):
        return write_output(usage())
    if scan(rest)[1] >= len(rest) and "help" not in scan(rest)[0]:
        sys.stderr.write(usage())
        usage_error("torchrun needs a training script")
    dry_run = own.pop("dry_run", False)
    try:
        launch = build(rest, os.environ, **own)
    except SlurmEnvError as exc:
        print_error(exc)
        return 1
    if dry_run:
        import shlex

        return write_output(shlex.join(launch.argv) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(launch.argv[0], launch.argv, launch.environ)
    except OSError as exc:
        sys.stderr.write(f"slurmenv: error: cannot run {launch.argv[0]!r}: {exc.strerror}\n")
        return 127
    return 0  # pragma: no cover - execvpe does not return
