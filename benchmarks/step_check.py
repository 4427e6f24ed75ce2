#!/usr/bin/env python3
"""The step check (``srun slurmenv exec --preflight``) against the number of ranks.

Full run: the tests' real Slurm cluster (tests/slurm_harness.py: four nodes of 8 CPUs, each in
its own network namespace; needs root), steps of 2 to 32 tasks over its nodes. For each size,
side by side: ``srun slurmenv exec -- true`` (what every step pays already: N slurmenv
processes) and ``srun slurmenv exec --preflight -- true`` (the same with the step check before
the command); and the check's own time as rank 0 reports it (from the moment it listens to the
moment the last rank said who it is, start-up skew of the tasks included).

Short run (CI): a step of 2 processes on this machine (loopback, synthetic Slurm
environments), rank 0's figure only; fails on a wrong answer, never on a slow one.

Then step_check_scale.py: 1,000, 4,000 and 10,000 tasks on this machine beside torch's
``TCPStore`` (short run: 200).

    python benchmarks/step_check.py [--short] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence

import sections
import step_check_scale
from harness import WrongAnswer, table, with_spread
from step_check_scale import REPORT, ROOT, loopback

FULL_SIZES = (2, 4, 8, 16, 32)
SHORT_SIZES = (2,)


def seconds(value: float) -> str:
    """Rank 0's figure, as precise as its report (a tenth of a second)."""
    return f"{value:.1f} s"


def wall(value: float) -> str:
    """A step's wall time (or a difference of two: it may be negative), in seconds."""
    return f"{value:.2f} s"


def _reported(text: str, world: int) -> float:
    """Rank 0's figure from its report; WrongAnswer unless the step passed whole."""
    for line in text.splitlines():
        line = line.split(": ", 1)[1] if re.match(r"^ *\d+: ", line) else line  # srun --label
        found = REPORT.match(line)
        if found:
            if (int(found.group(1)), int(found.group(2))) != (world, world):
                raise WrongAnswer(f"step of {world}: {line}")
            return float(found.group(3))
    raise WrongAnswer(f"step of {world}: no report of a sound step in:\n{text[-2000:]}")


# -- full run: the real cluster ---------------------------------------------------------------
def bench_cluster(sizes: Sequence[int], rounds: int) -> tuple[list[list[str]], list[str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from slurm_harness import SlurmCluster

    python = [sys.executable, "-m", "slurmenv"]
    env = {"PYTHONPATH": str(ROOT)}
    rows = []
    with SlurmCluster() as cluster:
        nodes = len(cluster.nodes)
        for world in sizes:
            args = [f"-N{min(nodes, world)}", f"-n{world}", "-c1"]
            export, check, own = [], [], []
            for r in range(rounds + 1):  # the first round warms the caches, not counted
                order = ["export", "check"] if r % 2 else ["check", "export"]
                for name in order:
                    cmd = [*python, "exec", "--", "true"] if name == "export" else \
                        [*python, "exec", "--preflight", "--", "true"]
                    start = time.perf_counter()
                    res = cluster.srun(args, cmd, env=env, timeout=300)
                    elapsed = time.perf_counter() - start
                    if res.returncode != 0:
                        raise WrongAnswer(f"{' '.join(cmd)} over {world} tasks: exit status "
                                          f"{res.returncode}\n{res.stderr[-2000:]}")
                    if r == 0:
                        continue
                    if name == "export":
                        export.append(elapsed)
                    else:
                        check.append(elapsed)
                        own.append(_reported(res.stderr, world))  # exec: on stderr
            extra = [c - e for c, e in zip(check, export)]
            rows.append([str(world), str(min(nodes, world)), with_spread(export, wall),
                         with_spread(check, wall), with_spread(extra, wall),
                         with_spread(own, seconds)])
    notes = [
        (f"Median of {rounds} steps per size (the first of each not counted), `srun -N<nodes> "
        "-n<ranks> -c1` on the tests' cluster: four nodes in network namespaces of one machine "
        f"of {os.cpu_count()} CPUs, so every task of every node shares those CPUs. "
        "`rank 0's figure` is what the report says (`in X s`): from the moment rank 0 listens "
        "to the moment the last rank arrived, which is mostly the other tasks still starting "
        "their Python. `the check adds` is the step's wall time over `exec -- true`'s, "
        "round by round.")]
    return rows, notes


# -- short run: processes of this machine ---------------------------------------------------
def bench_loopback(sizes: Sequence[int], rounds: int) -> tuple[list[list[str]], list[str]]:
    rows = []
    for world in sizes:
        own = []
        for _ in range(rounds):
            envs = loopback.step([world // 2, world - world // 2], loopback.free_port())
            procs = [subprocess.Popen(
                [sys.executable, "-m", "slurmenv", "doctor", "--step", "--step-timeout", "60"],
                env=loopback.process_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True) for env in envs]
            outs = [p.communicate(timeout=120) for p in procs]
            if any(p.returncode for p in procs):
                raise WrongAnswer(f"step of {world} on loopback: {outs}")
            own.append(_reported(outs[0][0], world))
        rows.append([str(world), "1 (loopback)", "-", "-", "-", with_spread(own, seconds)])
    notes = [(f"Short run: {rounds} steps per size of processes of this machine on loopback "
             "(synthetic Slurm environments); no cluster.")]
    return rows, notes


def run(short: bool, rounds: int | None = None) -> tuple[list[list[str]], list[str]]:
    """The table's rows and notes (the cluster when it can start, else loopback)."""
    if short:
        return bench_loopback(SHORT_SIZES, rounds or 3)
    return bench_cluster(FULL_SIZES, rounds or 5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="a tiny case on loopback")
    parser.add_argument("--rounds", type=int, help="steps per size (default 5, short 3)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows, notes = run(args.short, args.rounds)
    print(sections.STEP_CHECK.heading() + "\n")
    print(table(sections.STEP_CHECK.tables[0], rows))
    for note in notes:
        print(f"\n{note}")
    rows, notes = step_check_scale.run(args.short)
    print("\n" + sections.STEP_SCALE.heading() + "\n")
    print(table(sections.STEP_SCALE.tables[0], rows))
    for note in notes:
        print(f"\n{note}")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
