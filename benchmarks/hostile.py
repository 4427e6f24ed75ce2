"""Hostile input against the largest valid step (issue 26): no value of at most 128 KiB per
variable may cost more than a few times the largest valid resolution.

In process, CPU time of ``resolve(env).env("all")`` (the work of ``slurmenv export``), median
of the rounds, each case against a valid 1,000-node, 2,000-task step; every case is also
checked for its answer (a refusal naming the expected variable, or a complete environment):
a wrong answer raises :class:`harness.WrongAnswer`, a slow figure never fails.

Run alone: ``python benchmarks/hostile.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import sections
from harness import WrongAnswer, ms, table

HERE = Path(__file__).resolve().parent
NODES = 1000
TASKS_PER_NODE = 2
#: Which variable each hostile case must be refused for (None: resolves completely).
CASES: dict[str, tuple[dict[str, str], str | None]] = {
    "valid 1,000-node step": ({}, None),
    "valid, template {host}-ib": ({"SLURMENV_ADDR_TEMPLATE": "{host}-ib"}, None),
    # the largest TF_CONFIG that fits (127,845 bytes): the costliest valid step of this size
    "valid, largest TF_CONFIG (57-character addresses)": (
        {"SLURMENV_ADDR_TEMPLATE": "{host}-" + "x" * 50}, None),
    "120 KB address template": ({"SLURMENV_ADDR_TEMPLATE": "{host}" + "x" * 120_000},
                                "SLURMENV_ADDR_TEMPLATE"),
    "template of 253-character addresses (TF_CONFIG 520 KB)": (
        {"SLURMENV_ADDR_TEMPLATE": "{host}-" + "x" * 56 + (".x" + "x" * 61) * 3},
        "TF_CONFIG"),
    "128 KiB SLURMENV_MASTER_ADDR": ({"SLURMENV_MASTER_ADDR": "a" * 131_072},
                                     "SLURMENV_MASTER_ADDR"),
    "128 KiB SLURM_PROCID": ({"SLURM_PROCID": "1" * 131_072}, "SLURM_PROCID"),
    "128 KiB SLURM_GTIDS": ({"SLURM_GTIDS": "0," * 65_535 + "1"}, "SLURM_GTIDS"),
    "128 KiB SLURM_STEP_TASKS_PER_NODE": (
        {"SLURM_STEP_TASKS_PER_NODE": "2," * 65_535 + "2"}, "SLURM_STEP_TASKS_PER_NODE"),
    "128 KiB SLURMENV_PORT": ({"SLURMENV_PORT": "1" * 131_072}, "SLURMENV_PORT"),
}


def step(**extra: str) -> dict[str, str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import synth

    hosts = [f"c{i}" for i in range(1, NODES + 1)]
    return synth.step_env(hosts, [TASKS_PER_NODE] * NODES, 3, **extra)


def _answer(env: Mapping[str, str]) -> str | None:
    """None when the environment resolves completely, else the variable refused."""
    import slurmenv

    try:
        slurmenv.resolve(env, ephemeral_range=None).env("all")
    except slurmenv.SlurmEnvError as exc:
        return exc.variable or "?"
    return None


def bench(rounds: int) -> tuple[list[list[str]], dict[str, float]]:
    """Rows ``case | CPU time | over the valid step | answer``, and ``{case: median}``."""
    base = step()
    envs = {name: {**base, **extra} for name, (extra, _) in CASES.items()}
    for name, (_, want) in CASES.items():
        got = _answer(envs[name])
        if got != want:
            raise WrongAnswer(f"{name}: refused {got!r}, expected {want!r}")
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for r in range(rounds):
        names = list(CASES)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            env = dict(envs[name])
            start = time.process_time()
            _answer(env)
            times[name].append(time.process_time() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    largest = max(medians[name] for name, (_, want) in CASES.items() if want is None)
    rows = [
        [name, ms(medians[name]), f"{medians[name] / largest:.2f}",
         "resolved" if want is None else f"refused, naming {want}"]
        for name, (_, want) in CASES.items()
    ]
    return rows, medians


NOTE = ("Every variable is read and checked before anything grows with it: numbers by their "
        "digits (at most 20), addresses and the template as host names (at most 253 "
        "characters), and TF_CONFIG's size from the world size and the shortest address "
        "before it is built (`Resolution.tf_config_bound`).")


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    rows, _ = bench(args.rounds)
    out(table(sections.HOSTILE.tables[0], rows))
    out("\n" + NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
