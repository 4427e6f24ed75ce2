"""Hostile topology.conf files against the largest valid step (issue 41): a file naming huge
ranges must cost no more than a few times resolving a valid 1,000-node step under a topology.

In process, CPU time of ``resolve(env).env("all")`` for a 1,000-node, 2,000-task block step
of Slurm 26.05 (``SLURM_JOB_SLUID`` set) under ``TopologyPlugin=topology/tree``, median of the
rounds; each case's answer is checked (a refusal naming ``SLURM_CONF``, or a complete
environment): a wrong answer raises :class:`harness.WrongAnswer`, a slow figure never fails.
The step's hosts are ``c1``..``c1000``.

Run alone: ``python benchmarks/topology_files.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness import WrongAnswer, ms, table

HERE = Path(__file__).resolve().parent
NODES = 1000
VALID = "".join(f"SwitchName=s{i} Nodes=c[{i * 100 + 1}-{i * 100 + 100}]\n" for i in range(10))
#: case -> (topology.conf, the variable refused or None)
CASES: dict[str, tuple[str, str | None]] = {
    "valid: 10 leaf switches of 100 nodes": (VALID, None),
    "issue 41's 404 bytes: ten Nodes=x[1-1000000] (Slurm refuses the range)": (
        "".join(f"SwitchName=sw{i:02} Nodes=x[1-1000000]\n" for i in range(10)), "SLURM_CONF"),
    "ten Nodes=x[1-65536] (655,360 names, none like a host)": (
        "".join(f"SwitchName=x{i} Nodes=x[1-65536]\n" for i in range(10)) + VALID, None),
    "ten Nodes=c[1-65536] (the hosts are in the first)": (
        "".join(f"SwitchName=x{i} Nodes=c[1-65536]\n" for i in range(10)), None),
    "15 Nodes=c[2001-67536] before the hosts' leaves (983,040 names)": (
        "".join(f"SwitchName=x{i} Nodes=c[2001-67536]\n" for i in range(15)) + VALID, None),
    "17 Nodes=x[1-65536] (over 1,048,576 names in all)": (
        "".join(f"SwitchName=x{i} Nodes=x[1-65536]\n" for i in range(17)) + VALID,
        "SLURM_CONF"),
}


def _env(folder: Path) -> dict[str, str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import synth

    hosts = [f"c{i}" for i in range(1, NODES + 1)]
    env = synth.step_env(hosts, [2] * NODES, 3, SLURM_JOB_SLUID="s1ABCDEF",
                         SLURM_CONF=str(folder / "slurm.conf"))
    return env


def _answer(env: dict[str, str]) -> str | None:
    import slurmenv

    try:
        slurmenv.resolve(env, ephemeral_range=None).env("all")
    except slurmenv.SlurmEnvError as exc:
        return exc.variable or "?"
    return None


def bench(rounds: int) -> list[list[str]]:
    """Rows ``case | bytes | CPU time | over the valid step | answer``."""
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for i, (name, (text, want)) in enumerate(CASES.items()):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            (folder / "slurm.conf").write_text("TopologyPlugin=topology/tree\n")
            (folder / "topology.conf").write_text(text)
            folders[name] = folder
            got = _answer(_env(folder))
            if got != want:
                raise WrongAnswer(f"{name}: refused {got!r}, expected {want!r}")
        for name, folder in folders.items():
            env = _env(folder)
            times = []
            for _ in range(rounds):
                start = time.process_time()
                _answer(dict(env))
                times.append(time.process_time() - start)
            medians[name] = statistics.median(times)
    base = medians["valid: 10 leaf switches of 100 nodes"]
    return [[name, str(len(CASES[name][0])), ms(medians[name]), f"{medians[name] / base:.2f}",
             "resolved" if CASES[name][1] is None else f"refused, naming {CASES[name][1]}"]
            for name in CASES]


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    out(table(["topology.conf", "bytes", "CPU time", "× valid step", "answer"],
              bench(args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
