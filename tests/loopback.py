"""Synthetic steps whose rank 0 is this machine: the one builder of the step check's loopback
steps, for its tests (tests/stepcheck_util.py) and its benchmarks (benchmarks/step_check*.py).

Imports ``synth`` only, never ``slurmenv``: the benchmarks import it before they choose which
slurmenv they measure."""

from __future__ import annotations

import pathlib
import random
import socket
from collections.abc import Mapping, Sequence

import synth

ROOT = pathlib.Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A port below the ephemeral range that nothing listens on here."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port")


def hosts(counts: Sequence[int]) -> list[str]:
    """The step's nodes: ``n1``, ``n2``... (rank 0 on ``n1``)."""
    return [f"n{i + 1}" for i in range(len(counts))]


def step_env(counts: Sequence[int], port: int, rank: int) -> dict[str, str]:
    """Task ``rank``'s environment in a step of ``counts[i]`` tasks on node ``n{i+1}`` whose
    rank 0 listens on 127.0.0.1:``port``."""
    env = synth.step_env(hosts(counts), counts, rank)
    return {**env, "SLURMENV_MASTER_ADDR": "127.0.0.1", "SLURMENV_PORT": str(port)}


def step(counts: Sequence[int], port: int, **per_rank: Mapping[str, str]) -> list[dict[str, str]]:
    """Every task's environment (``step_env``) in rank order, ``per_rank["r<rank>"]`` added."""
    return [{**step_env(counts, port, rank), **per_rank.get(f"r{rank}", {})}
            for rank in range(sum(counts))]


def process_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a task process: this process's environment without Slurm's or a launcher's
    variables, and this checkout's slurmenv first on the path."""
    return {**synth.clean_env(), **env, "PYTHONPATH": str(ROOT)}
