"""Rank 0 of an ``mpirun``: ``resolve()`` with and without its look for rival launches among
the node's processes (``slurmenv/rivals.py``), with other launches' ranks running beside it."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

from harness import WrongAnswer, in_process, ms, with_spread
from install import JOB_ID, Setup


def mpi_env(family: int, rank: int) -> dict[str, str]:
    """A rank of an Open MPI launch of two ranks on one node, in job JOB_ID."""
    return {
        "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "OMPI_MCA_ess_base_jobid": str(family << 16 | 1), "SLURM_JOB_ID": JOB_ID,
        "SLURM_JOB_NODELIST": "n1", "SLURMD_NODENAME": "n1",
    }


def bench_rivals(setup: Setup, others: int, rounds: int) -> tuple[list[list[str]], list[str]]:
    """resolve() of an mpirun's rank 0 with and without the look at the node's processes,
    while ``others`` processes of other launches run (half their rank 0, half rank 1)."""
    import slurmenv

    assert Path(slurmenv.__file__).is_relative_to(setup.site), slurmenv.__file__
    ours = mpi_env(1, 0)
    path = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    procs = [subprocess.Popen(["sleep", "600"], env={**mpi_env(2 + i // 2, i % 2), **path})
             for i in range(others)]
    try:
        plain, looked = slurmenv.resolve(ours, rivals=()), slurmenv.resolve(ours)
        if (looked.rank, looked.master_port) != (0, plain.master_port):
            raise WrongAnswer(f"rank 0 of an mpirun resolved to {looked!r}, expected {plain!r}")
        scanned = sum(1 for name in os.listdir("/proc") if name.isdigit())
        times = in_process({
            "without": (partial(dict, ours), partial(slurmenv.resolve, rivals=())),
            "with": (partial(dict, ours), slurmenv.resolve),
        }, rounds)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    extra = [b - a for a, b in zip(times["without"], times["with"])]
    rows = [[f"{scanned:,} ({others:,} of other launches)", with_spread(times["without"], ms),
             with_spread(times["with"], ms), with_spread(extra, ms),
             with_spread([e / scanned for e in extra], ms)]]
    notes = [("Only rank 0 of a launch with a launch key (Open MPI's mpirun, PBS PALS mpiexec, "
              "a Flux job) looks, once; an srun task never imports the module "
              "(tests/test_rivals.py checks it). Here every process of another launch has an "
              "environment of its own, half of them a rank 0: the worst case (children that "
              "inherited an environment are read once).")]
    return rows, notes

