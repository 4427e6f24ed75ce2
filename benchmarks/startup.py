"""Start-up of one task: whole processes, and where ``slurmenv export``'s time goes.

* :func:`processes`: ``slurmenv export`` against a bare interpreter (``python -c pass``),
  against ``python -c "import re"`` (what any pip-generated console script costs before it does
  anything: the practical floor), against a script doing only the unavoidable work (expanding
  the node list, building TF_CONFIG, writing the lines) and against the shell recipe that
  resolves the master with ``scontrol show hostnames`` (``scontrol`` expands node lists without
  any controller, given a minimal ``slurm.conf`` in ``SLURM_CONF``).
* :func:`where_the_time_goes`: the modules ``export`` imports (``-X importtime``), the parts of
  its work timed in the process, and what the modules it avoids would cost.
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from harness import CPU, WrongAnswer, alternate, paired_ratio, paired_ratios, quartiles, ratios
from install import JOB_ID, Setup, host, nodelist, split_nodelist

BARE = "python -c pass"
FLOOR = 'python -c "import re"'
UNAVOIDABLE_NAME = "the unavoidable work (a script)"
PROLOG = "slurmenv-task-prolog"
TARGET_RATIO_NODES = 4096

# What many job scripts do in every task, with scontrol expanding the job's node list.
RECIPE = (
    "export RANK=$SLURM_PROCID; export LOCAL_RANK=$SLURM_LOCALID; "
    "export WORLD_SIZE=$SLURM_NTASKS; "
    "export MASTER_PORT=$(expr 10000 + $(echo -n $SLURM_JOBID | tail -c 4)); "
    'master_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1); '
    "export MASTER_ADDR=$master_addr"
)
RECIPE_CHECK = RECIPE + '; printf "%s %s %s\\n" "$RANK" "$MASTER_ADDR" "$MASTER_PORT"'

# The least any tool must do for a task of a step with one task per node: expand the node
# list (python-hostlist), build TF_CONFIG and write the sh lines export writes (same names,
# same quoting; its ports are simpler). No checks, no options, no other launcher. It ends as
# export ends, without the interpreter's teardown, which no tool needs to pay either.
UNAVOIDABLE = """\
import os, sys
import hostlist
env = os.environ
hosts = hostlist.expand_hostlist(env["SLURM_STEP_NODELIST"])
rank, size = int(env["SLURM_PROCID"]), len(hosts)
port = 10000 + int(env["SLURM_JOB_ID"]) % 10000
workers = ",".join(['"%s:%d"' % (h, port + 1) for h in hosts])
tf = '{"cluster":{"worker":[' + workers + ']},"task":{"type":"worker","index":%d}}' % rank
values = {"RANK": rank, "LOCAL_RANK": env["SLURM_LOCALID"], "WORLD_SIZE": size,
          "LOCAL_WORLD_SIZE": 1, "NODE_RANK": env["SLURM_NODEID"],
          "GROUP_RANK": env["SLURM_NODEID"], "NNODES": size, "MASTER_ADDR": hosts[0],
          "MASTER_PORT": port, "TF_CONFIG": tf}
sys.stdout.write("".join("export %s='%s';\\n" % (k, str(v).replace("[", "'\\\\['"))
                         for k, v in values.items()))
sys.stdout.flush()
os._exit(0)
"""


class Install(Protocol):
    """slurmenv installed one way (install.Setup, install.FreshVenv)."""

    def python(self) -> list[str]: ...
    def export(self, *args: str) -> list[str]: ...
    def task_prolog(self) -> list[str]: ...
    def env(self, nodes: int, node_list: str | None = None) -> dict[str, str]: ...


def run(cmd: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=120)


def export_lines(text: str) -> dict[str, str]:
    """``{name: line}`` of sh export lines."""
    return {line.split("=", 1)[0]: line for line in text.splitlines() if line.startswith("export ")}


# --- checks: a wrong answer is a bug, never noise ------------------------------------------------

def verify(install: Install, sizes: Sequence[int], unavoidable: Path | None) -> list[str]:
    """Check ``slurmenv export`` (and the unavoidable-work script) answer right at every size;
    return notes."""
    notes: list[str] = []
    for nodes in sizes:
        env = install.env(nodes)
        rank = nodes // 2
        big = nodes > TARGET_RATIO_NODES
        out = run(install.export(*(("--for", "torch") if big else ())), env)
        if out.returncode != 0 or f"export MASTER_ADDR='{host(0, nodes)}'" not in out.stdout \
                or f"export RANK='{rank}'" not in out.stdout:
            raise WrongAnswer(f"slurmenv export at {nodes} nodes is wrong:\n{out.stdout}"
                              f"{out.stderr}")
        if big:
            full = run(install.export(), env)
            if full.returncode == 0 or "TF_CONFIG" not in full.stderr:
                raise WrongAnswer("TF_CONFIG over 128 KiB was not refused")
            notes.append(
                f"At {nodes:,} nodes TF_CONFIG would be over Linux's 128 KiB limit for one "
                "variable: `slurmenv export` refuses it (exit 1), so `--for torch` is measured."
            )
        else:
            check_prolog(install, env, out.stdout)
            if unavoidable is not None:
                check_unavoidable(install, unavoidable, env, out.stdout)
    return notes


def check_prolog(install: Install, env: dict[str, str], export: str) -> None:
    """The task prolog sets what export sets, with the same values (Slurm's protocol:
    ``export NAME=value``, the value taken literally), and its marker of the step and names it
    set, ``SLURMENV_SET_BY`` (docs/task-prolog.md)."""
    import shlex

    out = run(install.task_prolog(), env)
    got = dict(line[len("export "):].split("=", 1) for line in out.stdout.splitlines()
               if line.startswith("export "))
    marker = got.pop("SLURMENV_SET_BY", "")
    want = {name: value for line in export_lines(export).values()
            for name, value in [shlex.split(line[len("export "):].rstrip(";"))[0].split("=", 1)]}
    if out.returncode != 0 or got != want or marker.partition(":")[2] != ",".join(want):
        raise WrongAnswer(f"slurmenv-task-prolog differs from slurmenv export:\n{out.stdout}"
                          f"{out.stderr}\nexport:\n{export}")


def check_unavoidable(install: Install, script: Path, env: dict[str, str], export: str) -> None:
    """The unavoidable-work script writes what export writes (but its ports): the same lines,
    and a TF_CONFIG of the same length."""
    out = run([*install.python(), str(script)], env)
    ours, theirs = export_lines(out.stdout), export_lines(export)
    same = all(theirs.get(name) == line for name, line in ours.items()
               if name not in ("export MASTER_PORT", "export TF_CONFIG"))
    tf = "export TF_CONFIG"
    if out.returncode != 0 or not same or len(ours) != 10 \
            or len(ours.get(tf, "")) != len(theirs.get(tf, "-")):
        raise WrongAnswer(f"the unavoidable-work script is not export's work:\n{out.stdout[:500]}"
                          f"{out.stderr[-500:]}")


def verify_recipe(setup: Setup, sizes: Sequence[int]) -> dict[int, str]:
    """The shell recipe's status per size: "" when it works, else why not."""
    status: dict[int, str] = {}
    for nodes in sizes:
        if setup.scontrol_problem:
            status[nodes] = setup.scontrol_problem
            continue
        check = run(["sh", "-c", RECIPE_CHECK], setup.env(nodes))
        expected = f"{nodes // 2} {host(0, nodes)} {10000 + int(JOB_ID[-4:])}"
        if check.stdout.strip() == expected:
            status[nodes] = ""
        else:
            err = " ".join(check.stderr.split())[:120]
            status[nodes] = (
                f"wrong: MASTER_ADDR={check.stdout.split()[1:2] or ['(empty)']} "
                f"(exit status {check.returncode}; scontrol: {err})"
            )
    return status


# --- whole processes -----------------------------------------------------------------------------

def processes(
    install: Install, sizes: Sequence[int], rounds: dict[int, int], warmup: int, full: bool,
    unavoidable: Path | None, recipe: tuple[Setup, dict[int, str]] | None,
) -> tuple[list[list[str]], dict[str, float], list[str]]:
    """Table rows, ``{"nodes:command": ratio over the floor}`` (and ``:q1``/``:q3``), notes."""
    rows: list[list[str]] = []
    results: dict[str, float] = {}
    notes: list[str] = []
    py = install.python()
    for nodes in sizes:
        env = install.env(nodes)
        big = nodes > TARGET_RATIO_NODES
        export_name = "slurmenv export --for torch" if big else "slurmenv export"
        commands: dict[str, Sequence[str]] = {
            BARE: [*py, "-c", "pass"],
            FLOOR: [*py, "-c", "import re"],
            export_name: install.export(*(("--for", "torch") if big else ())),
        }
        if not big:  # the same resolution through Slurm's task prolog (docs/task-prolog.md)
            commands[PROLOG] = install.task_prolog()
        if full and not big:
            commands["slurmenv export --for torch"] = install.export("--for", "torch")
        if full:
            export = install.export(*(("--for", "torch") if big else ()))
            commands["sh -c 'env=$(slurmenv export) && eval \"$env\"'"] = [
                "sh", "-c", 'env=$("$@") && eval "$env"', "sh", *export]
        if unavoidable is not None and not big:
            commands[UNAVOIDABLE_NAME] = [*py, str(unavoidable)]
        recipe_env = env
        recipe_label = "shell recipe (scontrol show hostnames)"
        setup, recipe_status = recipe if recipe else (None, {})
        if setup is not None and not setup.scontrol_problem:
            if recipe_status[nodes]:
                # Slurm writes n[00000-99999] for 100,000 consecutive nodes, but its own
                # parser refuses ranges over 65,536 names: time the recipe on the same nodes
                # split into ranges it can read.
                recipe_env = install.env(nodes, node_list=split_nodelist(nodes))
                recipe_label += " †"
            commands[recipe_label] = ["sh", "-c", RECIPE]
        # The recipe at the largest size runs in its own environment: measured right after,
        # alternating with the floor again.
        separate = recipe_label in commands and recipe_env is not env
        times = alternate(
            {k: v for k, v in commands.items() if not (separate and k == recipe_label)},
            env, rounds[nodes], warmup,
        )
        if separate:
            times.update(alternate({recipe_label: commands[recipe_label]}, recipe_env,
                                   rounds[nodes], warmup))
            extra = alternate({FLOOR: commands[FLOOR]}, recipe_env, rounds[nodes], warmup)
            times[FLOOR + " again"], times[FLOOR + " again" + CPU] = extra[FLOOR], extra[FLOOR + CPU]
        for name in commands:
            again = separate and name == recipe_label
            base = FLOOR + " again" if again else FLOOR
            rows.append([f"{nodes:,}", name, *ratios(times, name, BARE, base)])
            results[f"{nodes}:{name}"] = paired_ratio(times, name, base)
            q1, _, q3 = quartiles(paired_ratios(times, name, base))
            results[f"{nodes}:{name}:q1"], results[f"{nodes}:{name}:q3"] = q1, q3
        if setup is not None and not setup.scontrol_problem and recipe_status[nodes]:
            notes.append(
                f"† At {nodes:,} nodes Slurm writes the list as `{nodelist(nodes)}`, which "
                f"`scontrol show hostnames` refuses (\"Too many hosts in range\"), exiting 0 "
                f"with nothing on stdout: the recipe's MASTER_ADDR is empty. Timed on "
                f"`{split_nodelist(nodes)}` instead."
            )
    if recipe is not None and recipe[0].scontrol_problem:
        notes.append(f"Shell recipe not measured: {recipe[0].scontrol_problem}.")
    return rows, results, notes


# --- where export's time goes --------------------------------------------------------------------

# Times the parts of export's work in one process (stderr), and writes what export writes.
PHASES = """\
import sys, time
t0 = time.perf_counter()
import re
t1 = time.perf_counter()
from slurmenv.commands.main import main
t2 = time.perf_counter()
import importlib
for name in sys.argv[1:]:
    importlib.import_module(name)
t3 = time.perf_counter()
import slurmenv
from slurmenv import render
res = slurmenv.resolve()
t4 = time.perf_counter()
values = res.env("all")
t5 = time.perf_counter()
text = render.render(values, "sh")
t6 = time.perf_counter()
sys.stdout.write(text)
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, file=sys.stderr)
"""
PHASE_NAMES = (
    "`import re` (the console script's first line; the floor has it too)",
    "`from slurmenv.commands.main import main`: the package and the modules every command needs",
    "the modules export imports on first use",
    "`resolve()`: read the step, expand the node list, place the tasks, derive",
    "`env('all')`: TF_CONFIG's workers as JSON, the thread and GPU variables",
    "`render.render(..., 'sh')`: the quoted lines",
)

# What export's path does without, each timed cold in the same venv after `import re`:
# (what, set-up not timed, timed statement).
AVOIDED = (
    ("`import typing`", "", "import typing"),
    ("`import json`", "", "import json"),
    ("`import socket`", "", "import socket"),
    ("`import subprocess`", "", "import subprocess"),
    ("argparse: import, slurmenv's parser, parsing `export`", "from slurmenv.commands import main as cli",
     "cli.build_parser().parse_args(['export'])"),
    ("the options parsed without argparse (what export does)", "from slurmenv.commands import main as cli",
     "cli._fast_args(['export'])"),
    ("python-hostlist: import and expand `{list}`", "",
     "import hostlist; hostlist.expand_hostlist('{list}')"),
    ("slurmenv's expansion of `{list}` (what export does)", "from slurmenv import nodes",
     "nodes.expand('{list}', 'SLURM_STEP_NODELIST')"),
    ("`import _json` (json's C encoder)", "", "import _json"),
    ("compiling a regular expression (the one sh quoting used)", "",
     "re.compile(r'[ \\t\\n*?\\[(]')"),
)
TIMED = """\
import re, sys, time
{setup}
t = time.perf_counter()
{stmt}
print(time.perf_counter() - t)
"""


def importtime(cmd: Sequence[str], env: dict[str, str]) -> list[tuple[str, int]]:
    """``(module, self µs)`` in import order, from ``-X importtime`` (PYTHONPROFILEIMPORTTIME)."""
    out = run(cmd, {**env, "PYTHONPROFILEIMPORTTIME": "1"})
    if out.returncode != 0:
        raise WrongAnswer(f"{' '.join(cmd)}: exit status {out.returncode}: {out.stderr[-500:]}")
    found = []
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            self_us, _, name = line[len("import time:"):].split("|")
            found.append((name.strip(), int(self_us)))
    return found


def where_the_time_goes(
    venv: Install, workdir: Path, nodes: int, runs: int,
) -> tuple[list[list[str]], list[list[str]], list[list[str]], list[str]]:
    """Three tables (module import costs, the parts of the work, what is avoided) and notes."""
    env = venv.env(nodes)
    py = venv.python()
    export = venv.export()
    floor_modules = {name for name, _ in importtime([*py, "-c", "import re"], env)}
    cli_modules = {name for name, _ in importtime([*py, "-c", "import re, slurmenv.commands.main"], env)}
    self_us: dict[str, list[int]] = {}
    for _ in range(runs):
        for name, us in importtime(export, env):
            if name not in floor_modules:
                self_us.setdefault(name, []).append(us)
    on_first_use = [name for name in self_us if name not in cli_modules]
    medians = {name: statistics.median(us) for name, us in self_us.items()}
    modules = [[f"`{name}`" + (" ¹" if name in on_first_use else ""), f"{us / 1000:.2f} ms"]
               for name, us in sorted(medians.items(), key=lambda item: -item[1])]
    modules.append([f"all {len(medians)} modules", f"{sum(medians.values()) / 1000:.2f} ms"])

    driver = workdir / "phases.py"
    driver.write_text(PHASES)
    expected = run(export, env)
    parts: list[list[float]] = []
    for _ in range(runs):
        out = run([*py, str(driver), *on_first_use], env)
        if out.returncode != 0 or out.stdout != expected.stdout:
            raise WrongAnswer(f"the timed parts of export do not write what export writes:\n"
                              f"{out.stderr[-500:]}")
        parts.append([float(x) for x in out.stderr.split()])
    phases = [[what, f"{statistics.median(col) * 1000:.2f} ms"]
              for what, col in zip(PHASE_NAMES, zip(*parts))]
    phases.append(["sum of slurmenv's parts (all but `import re`)",
                   f"{statistics.median(sum(p[1:]) for p in parts) * 1000:.2f} ms"])

    listed = nodelist(nodes)
    timed = workdir / "timed.py"
    avoided_runs: dict[str, list[float]] = {what: [] for what, _, _ in AVOIDED}
    for r in range(runs):
        order = AVOIDED if r % 2 else AVOIDED[::-1]
        for what, setup, stmt in order:
            timed.write_text(TIMED.format(setup=setup, stmt=stmt.format(list=listed)))
            out = run([*py, str(timed)], env)
            if out.returncode != 0:
                raise WrongAnswer(f"{stmt}: {out.stderr[-500:]}")
            avoided_runs[what].append(float(out.stdout))
    avoided = [[what.format(list=listed), f"{statistics.median(avoided_runs[what]) * 1000:.2f} ms"]
               for what, _, _ in AVOIDED]
    machinery = import_machinery(venv, workdir, env, [n for n in medians if n.startswith("slurmenv")],
                                 runs)
    notes = [(
        f"¹ imported on first use, not by `import slurmenv.commands.main`: {', '.join(on_first_use)}. "
        "Import times are self times (a module's own loading and top-level code, not the "
        f"modules it imports) from `python -X importtime`, median of {runs} runs of "
        f"`slurmenv export` at {nodes:,} nodes; modules `python -c \"import re\"` also "
        "imports are left out. `-X importtime` adds a little to each."
    ), machinery]
    return modules, phases, avoided, notes


# Writes (to argv[1]) the code of the modules named after it, in that order (the order they
# finished importing in export, so that each one's imports ran before it), as one marshal blob.
BLOB = """\
import importlib.util, marshal, sys
codes = []
for name in sys.argv[2:]:
    spec = importlib.util.find_spec(name)
    with open(spec.origin, encoding="utf-8") as source:
        code = compile(source.read(), spec.origin, "exec")
    codes.append((name, spec.submodule_search_locations is not None, spec.origin, code))
with open(sys.argv[1], "wb") as out:
    marshal.dump(codes, out)
"""
# Loads such a blob: a module object each, their code run in order; no finder, no loader.
FROM_BLOB = """\
import marshal, types
with open({blob!r}, "rb") as f:
    codes = marshal.loads(f.read())  # marshal.load(f) reads object by object: slower
for name, is_package, origin, code in codes:
    module = types.ModuleType(name)
    module.__file__ = origin
    module.__package__ = name if is_package else name.rpartition(".")[0]
    if is_package:
        module.__path__ = [origin.rpartition("/")[0]]
    sys.modules[name] = module
for name, _, _, _ in codes:
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, sys.modules[name])
for name, _, _, code in codes:
    exec(code, sys.modules[name].__dict__)
"""


def import_machinery(venv: Install, workdir: Path, env: dict[str, str], names: list[str],
                     runs: int) -> str:
    """A note: what the number of modules on export's path costs. Whole processes, side by
    side with the floor: ``slurmenv export``; the same command with the code of its slurmenv
    modules loaded from one file, with no finder or loader (the most that merging every
    module of the path into one could give); and as many empty modules of a package."""
    py = venv.python()
    blob = workdir / "path.blob"
    out = run([*py, "-c", BLOB, str(blob), *names], env)
    if out.returncode != 0:
        raise WrongAnswer(f"cannot write export's modules as one blob: {out.stderr[-500:]}")
    merged = ("import re, sys\n" + FROM_BLOB.format(blob=str(blob))
              + "from slurmenv.commands.main import entry_point\n"
              "sys.argv = ['slurmenv', 'export']\nentry_point()\n")
    if run([*py, "-c", merged], env).stdout != run(venv.export(), env).stdout:
        raise WrongAnswer("export with its modules loaded from one blob writes other lines")
    empty = workdir / "emptymods"
    empty.mkdir(exist_ok=True)
    (empty / "__init__.py").write_text("")
    for i in range(len(names) - 1):
        (empty / f"m{i}.py").write_text("")
    run([*py, "-m", "compileall", "-q", str(empty)], env)
    imports = "".join(f"; import emptymods.m{i}" for i in range(len(names) - 1))
    commands = {
        FLOOR: [*py, "-c", "import re"],
        "export": venv.export(),
        "merged": [*py, "-c", merged],
        "empty": [*py, "-c", (f"import re, sys; sys.path.insert(0, {str(workdir)!r}); "
                              f"import emptymods{imports}")],
    }
    rounds = max(10, 2 * runs)
    times = alternate(commands, env, rounds, 2)
    ratio = {name: paired_ratio(times, name, FLOOR) for name in commands}
    added = statistics.median(b - a for a, b in zip(times[FLOOR], times["empty"])) * 1000
    return (f"What the number of modules costs: with the code of its {len(names)} slurmenv "
            f"modules loaded from one file, with no finder or loader (the most that merging "
            f"every module of its path into one could give), `slurmenv export` is "
            f"{ratio['merged']:.2f}× `python -c \"import re\"`, against {ratio['export']:.2f}× "
            f"as installed, in the same rounds; {len(names)} empty modules of a package add "
            f"{added:.2f} ms to the floor (whole processes side by side, median of {rounds} "
            f"rounds).")
