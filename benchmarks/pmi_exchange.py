#!/usr/bin/env python3
"""The PMI exchange (``SLURMENV_PMI=1`` under ``srun --mpi=pmi2``) against the number of tasks.

On the tests' real Slurm cluster (tests/slurm_harness.py: four nodes of 8 CPUs in network
namespaces; needs root), steps of 4 to 64 tasks over the four nodes. For each size, side by
side and interleaved: ``slurmenv export`` as every step pays it, and the same with the
exchange (init, one put per node, the fence, one get per node). Each task times its own
``slurmenv export`` (``date +%s%N`` around it, so srun's own start-up is not counted); the
figures are the median over every task of every round of the per-task time, and the slowest
task's median (the fence waits for the last task to start, so start-up skew shows there).

Not in ``bench.py --short``: it needs root and a cluster (tens of seconds per size).

    python benchmarks/pmi_exchange.py [--rounds N] [--sizes 4,8,...] [--release 26.05.3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (4, 8, 16, 32, 64)
#: Each task: the process's whole ``slurmenv export`` (interpreter start-up included, under
#: the load of all the step's tasks starting at once on 2 cores), then ``resolve()`` in process
#: (the exchange's own cost, fence wait for the other tasks included).
SCRIPT = ('t=$(date +%s%N); slurmenv export >/dev/null || exit 1; '
          'echo "ms $(( ($(date +%s%N) - t) / 1000 ))"')
INPROC = ("import time, slurmenv; t = time.perf_counter(); slurmenv.resolve(); "
          "print('ms', int((time.perf_counter() - t) * 1e6))")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--release", default=None, help="a built release (default: Debian's)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from slurm_harness import SlurmCluster

    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    header = ("tasks", "export process (median task)", "with PMI", "resolve() (median task)",
              "with PMI", "resolve() (slowest task)", "with PMI")
    rows = []
    with SlurmCluster(nodes=("b1", "b2", "b3", "b4"), cpus_per_node=16,
                      release=args.release) as cluster:
        for world in map(int, args.sizes.split(",")):
            got: dict[str, list[float]] = {}
            for r in range(args.rounds + 1):  # the first round warms the caches, not counted
                for pmi in ("01" if r % 2 else "10"):
                    for kind, command in (("process", ["sh", "-c", SCRIPT]),
                                          ("resolve", [sys.executable, "-c", INPROC])):
                        res = cluster.srun(["--mpi=pmi2", "-N4", f"-n{world}", "-O"], command,
                                           env={"PATH": path, "SLURMENV_PMI": pmi}, timeout=300)
                        times = [int(lines[-1].split()[1]) / 1000
                                 for lines in res.per_task.values()
                                 if lines and lines[-1].startswith("ms ")]
                        if res.returncode != 0 or len(times) != world:
                            print(res.stdout[-2000:], res.stderr[-2000:], file=sys.stderr)
                            raise SystemExit(f"a step of {world} tasks failed ({kind}, "
                                             f"SLURMENV_PMI={pmi})")
                        if r:
                            got.setdefault(kind + pmi, []).extend(times)
                            if kind == "resolve":
                                got.setdefault("slowest" + pmi, []).append(max(times))
            keys = ("process0", "process1", "resolve0", "resolve1", "slowest0", "slowest1")
            rows.append((str(world), *(f"{statistics.median(got[k]):.1f} ms" for k in keys)))
            print(" | ".join(rows[-1]), flush=True)
    widths = [max(len(c) for c in col) for col in zip(header, *rows)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
