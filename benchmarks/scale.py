"""In process, and in memory: ``slurmenv.resolve()`` and TF_CONFIG from 4 to 100,000 tasks.

``resolve()`` and, separately, building ``TF_CONFIG`` are timed in this process (the checkout's
package as :class:`install.Setup` copied it), one size after the other; the peak memory of a
whole ``slurmenv export`` at 100,000 tasks is measured by GNU time.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from functools import partial
from operator import attrgetter, methodcaller
from pathlib import Path

from harness import CPU, FAULTS, WrongAnswer, in_process, ms, peak_rss_kib, quartiles, with_spread
from install import Setup, host, step_env
from startup import TARGET_RATIO_NODES, Install

REFERENCE = "python strings"


def _host_ports(hosts: list[str]) -> list[str]:
    """What any code does per node for TF_CONFIG, at least: one new string per node."""
    return [host + ":12345" for host in hosts]


def bench_in_process(
    setup: Setup, sizes: Sequence[int], rounds: dict[int, int]
) -> tuple[list[list[str]], dict[str, float], list[str]]:
    """resolve(), resolve() + env('torch'), the TF_CONFIG dict and its JSON at each size:
    table rows, ``{"nodes:key": median}`` (and ``:q1``/``:q3``), notes."""
    import slurmenv

    assert Path(slurmenv.__file__).is_relative_to(setup.site), slurmenv.__file__
    envs = {n: step_env(n) for n in sizes}
    for n in sizes:
        check_resolution(slurmenv, n, envs[n])
    times: dict[str, list[float]] = {}
    for n in sizes:  # one size after the other, so that a large one does not slow a small one
        env = envs[n]
        fns: dict[str, tuple[Callable[[], object], Callable[[object], object]]] = {
            "resolve": (partial(dict, env), slurmenv.resolve),
            "torch": (partial(dict, env), lambda e: slurmenv.resolve(e).env("torch")),
            # TF_CONFIG on a fresh resolution (it is cached on the Resolution)
            "tf dict": (partial(slurmenv.resolve, env), attrgetter("tf_config")),
        }
        if n <= TARGET_RATIO_NODES:
            fns["tf"] = (partial(slurmenv.resolve, env), methodcaller("env", "tf"))
        # the reference for growth: Python itself building one string per node
        hosts = list(slurmenv.resolve(env).hosts)
        fns[REFERENCE] = (partial(list, hosts), _host_ports)
        gc.collect()
        for key, values in in_process(fns, rounds[n]).items():
            times[f"{n}:{key}"] = values
    rows: list[list[str]] = []
    results: dict[str, float] = {}
    for n in sizes:
        def runs(key: str, n: int = n) -> list[float]:
            return times[f"{n}:{key}"][: rounds[n]]

        def per_node(digits: int, n: int = n) -> Callable[[float], str]:
            return lambda s: f"{s / n * 1e6:.{digits}f}"

        for key in ("resolve", "tf dict", REFERENCE, *(k + extra for extra in (CPU, FAULTS)
                                                         for k in ("resolve", "tf dict",
                                                                   REFERENCE))):
            q1, q2, q3 = quartiles(runs(key))
            results[f"{n}:{key}"] = q2
            results[f"{n}:{key}:q1"], results[f"{n}:{key}:q3"] = q1, q3
        rows.append([
            f"{n:,}", with_spread(runs("resolve"), ms), with_spread(runs("resolve"), per_node(3)),
            with_spread(runs("torch"), ms), with_spread(runs("tf dict"), ms),
            with_spread(runs("tf dict"), per_node(2)),
            "refused (> 128 KiB)" if f"{n}:tf" not in times else with_spread(runs("tf"), ms),
        ])
    notes = [
        ("The node-count check (SLURM_STEP_NODELIST vs SLURM_STEP_NUM_NODES) expands the whole "
         "list, with python-hostlist, included in the times above."),
        ("TF_CONFIG columns: building the worker list after `resolve()` (the dict, "
         "`res.tf_config`, and the checked JSON string, `res.env('tf')`)."),
    ]
    return rows, results, notes


def check_resolution(slurmenv: object, nodes: int, env: dict[str, str]) -> None:
    """The in-process answer at ``nodes``: a wrong one (or an exception) is a bug."""
    rank = nodes // 2
    res = slurmenv.resolve(env)  # type: ignore[attr-defined]
    got = (res.rank, res.world_size, res.local_rank, res.node_rank, res.nnodes, res.master_addr)
    want = (rank, nodes, 0, rank, nodes, host(0, nodes))
    if got != want:
        raise WrongAnswer(f"resolve() at {nodes} nodes: {got}, expected {want}")
    workers = res.tf_config["cluster"]["worker"]
    if len(workers) != nodes or workers[rank].split(":")[0] != host(rank, nodes) \
            or res.tf_config["task"] != {"type": "worker", "index": rank}:
        raise WrongAnswer(f"TF_CONFIG at {nodes} nodes is wrong (task {res.tf_config['task']})")
    if len(res.hosts) != nodes or res.hosts[-1] != host(nodes - 1, nodes) \
            or res.node_of[rank] != rank:
        raise WrongAnswer(f"the layout at {nodes} nodes is wrong")


def bench_memory(install: Install, nodes: int) -> tuple[list[list[str]], list[str]]:
    """Peak resident memory of whole processes at ``nodes`` tasks, started from ``install``."""
    env = install.env(nodes)
    py = install.python()
    floor, _ = peak_rss_kib([*py, "-c", "import re"], env)
    export, _ = peak_rss_kib(install.export("--for", "torch"), env)
    whole_code = (
        "import slurmenv; r = slurmenv.resolve(); t = r.tf_config; "
        "assert len(r.hosts) == len(r.node_of) == len(t['cluster']['worker'])"
    )
    whole, _ = peak_rss_kib([*py, "-c", whole_code], env)
    traced_code = (
        "import tracemalloc, slurmenv\n"
        "tracemalloc.start(); r = slurmenv.resolve()\n"
        "a = tracemalloc.get_traced_memory()[1]; t = r.tf_config; h = r.hosts; n = r.node_of\n"
        "print(a, tracemalloc.get_traced_memory()[1])\n"
    )
    _, traced = peak_rss_kib([*py, "-c", traced_code], env)
    resolve_peak, whole_peak = (int(x) for x in traced.split())
    rows = [
        ['python -c "import re"', f"{floor / 1024:.1f} MiB", "-"],
        ["slurmenv export --for torch", f"{export / 1024:.1f} MiB",
         f"{(export - floor) / 1024:+.1f} MiB"],
        ["python: resolve() + tf_config + hosts + node_of", f"{whole / 1024:.1f} MiB",
         f"{(whole - floor) / 1024:+.1f} MiB"],
    ]
    notes = [
        (f"Allocated by Python (tracemalloc peak) at {nodes:,} tasks: `resolve()` "
         f"{resolve_peak / 1024:.0f} KiB; with the whole layout and TF_CONFIG "
         f"{whole_peak / 1024 / 1024:.1f} MiB."),
    ]
    return rows, notes

