#!/usr/bin/env python3
"""The step check at 1,000, 4,000 and 10,000 tasks on this machine, beside torch's own
``TCPStore`` rendezvous of the same world size.

Rank 0 is a real ``slurmenv doctor --step`` process (a synthetic step of 8 tasks per node,
loopback), started with the common soft open-file limit of 1,024 (it raises it towards the
step's size, up to the hard limit). The other tasks are asyncio clients in a few worker
processes (this machine cannot start 10,000 Pythons), speaking the protocol as a task does:
hello, verdict, acknowledgement, go. They start first and wait for rank 0's port, so the
figures are rank 0's: its process from start to exit (Python's start and imports included),
the gathering as its report says, and its peak memory.

torch's side: a ``TCPStore(..., is_master=True, wait_for_workers=True)`` process (what
``init_process_group`` does in rank 0 with ``env://``), timed from after ``import torch`` to
the moment every worker has joined, and its peak memory (torch's import included), with the
clients as threads in worker processes started first.

Both sides run under the same conditions, one side at a time: every client process of either
side, and torch's master, start with the soft open-file limit at the hard limit, which is the
most slurmenv's rank 0 raises its own to (torch does not raise it: under a soft limit of 1,024
its master cannot accept more connections than that). And, where this process may (root,
``unshare`` and ``ip``), each side runs in a network namespace of its own with only loopback
up: torch's client names its socket with a reverse lookup of ``0.0.0.0`` (``getnameinfo``, for
a log line), which on a machine whose DNS server does not answer waits up to 5 s per client;
that, not torch's store, was the 106 s once printed here for 1,000 clients. slurmenv looks
nothing up.

    python benchmarks/step_check_scale.py [--short] [--sizes 1000,4000]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import sections
from harness import WrongAnswer, table

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))  # the tests' loopback steps, not a copy of them
import loopback

SIZES = (1000, 4000, 10000)
SHORT_SIZES = (200,)
#: torch's side at every size (none when short)
TORCH_SIZES = SIZES
PER_NODE = 8
WORKERS = 4
SOFT_LIMIT = 1024  # the common default: rank 0 raises it
REPORT = re.compile(r"^slurmenv step check: (\d+) of (\d+) ranks reached \S+ in (\d+\.\d) s, "
                    r"all agree$")


def step_env(world: int, rank: int, port: int) -> dict[str, str]:
    """Task ``rank``'s process environment in a loopback step of ``world`` tasks."""
    return loopback.process_env(loopback.step_env([PER_NODE] * (world // PER_NODE), port, rank))


# -- the clients (run as: step_check_scale.py --worker WORLD PORT FIRST STEP) ----------------
async def _task(port: int, hello: bytes, ack: bytes) -> bool:
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.05)

    async def read() -> dict[str, object]:
        await reader.readline()  # the magic line
        return dict(json.loads(await reader.readline()))

    writer.write(hello)
    await writer.drain()
    verdict = await read()
    if verdict.get("kind") != "verdict" or verdict.get("ok") is not True:
        return False
    writer.write(ack)
    await writer.drain()
    go = await read()
    writer.close()
    return go.get("kind") == "go"


def worker(world: int, port: int, first: int, step: int) -> int:
    sys.path.insert(0, str(ROOT))
    from slurmenv import options, resolve
    from slurmenv.doctor.stepcheck import facts_of, protocol

    env = step_env(world, 1, port)
    template = facts_of(resolve(env, ephemeral_range=None, rivals=None),
                        options.from_environ(env)._asdict())
    ident = protocol.identity(template)
    messages = []
    for rank in range(1 + first, world, step):
        facts = {**template, "rank": rank, "node": f"n{rank // PER_NODE + 1}",
                 "node_rank": rank // PER_NODE, "via": "127.0.0.1"}
        body = {k: v for k, v in facts.items() if k not in protocol.ID_FIELDS}
        nonce = f"bench-{rank}"
        messages.append((protocol.encode(protocol.message("hello", ident, task=nonce,
                                                          facts=body)),
                         protocol.encode(protocol.message("ack", ident, task=nonce))))
    print("ready", flush=True)

    async def all_tasks() -> list[bool]:
        return await asyncio.gather(*(_task(port, h, a) for h, a in messages))

    results = asyncio.run(all_tasks())
    print(f"{sum(results)} of {len(results)} started", flush=True)
    return 0 if all(results) else 1


def _at_hard_limit() -> None:
    """This process's soft open-file limit at the hard limit, which every client process of
    both sides and torch's master inherit (slurmenv's rank 0 starts at SOFT_LIMIT and raises
    its own, up to the same hard limit)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _workers(argv: Sequence[str], count: int) -> list[subprocess.Popen[str]]:
    procs = [subprocess.Popen([sys.executable, __file__, *argv, str(i), str(count)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(count)]
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise WrongAnswer(f"a worker did not start: {p.communicate()}")
    return procs


def _timed(cmd: list[str], report: Path) -> list[str]:
    """``cmd`` under GNU time, which writes its peak memory to ``report`` (measured from this
    process, a child's ru_maxrss would include what it inherits before its exec)."""
    gnu_time = shutil.which("time", path="/usr/bin:/bin")
    if gnu_time is None:
        raise RuntimeError("GNU time (/usr/bin/time) is not installed")
    return [gnu_time, "-f", "%M %U %S", "-o", str(report), *cmd]


def _peak_mib(report: Path) -> float:
    return int(report.read_text().split()[-3]) / 1024


def _cpu(report: Path) -> float:
    return sum(float(x) for x in report.read_text().split()[-2:])


def bench_slurmenv(world: int) -> tuple[float, float, float, float]:
    """(rank 0's process seconds, its gathering seconds, its CPU seconds, its peak MiB)."""
    port = loopback.free_port()
    workers = _workers(["--worker", str(world), str(port)], min(WORKERS, world - 1))
    code = ("import resource, runpy, sys\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            f"resource.setrlimit(resource.RLIMIT_NOFILE, (min({SOFT_LIMIT}, hard), hard))\n"
            "sys.argv = ['slurmenv', 'doctor', '--step', '--step-timeout', '300']\n"
            "runpy.run_module('slurmenv', run_name='__main__')")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        rank0 = subprocess.run(_timed([sys.executable, "-c", code], Path(tmp, "rss")),
                               env=step_env(world, 0, port), capture_output=True, text=True,
                               check=False)
        elapsed = time.perf_counter() - start
        out, err, status, mib = rank0.stdout, rank0.stderr, rank0.returncode, \
            _peak_mib(Path(tmp, "rss"))
        cpu = _cpu(Path(tmp, "rss"))
    said = [w.communicate(timeout=300) for w in workers]
    found = REPORT.match(out.splitlines()[0]) if out else None
    if status != 0 or not found or any(w.returncode for w in workers):
        raise WrongAnswer(f"step check of {world}: {out[-2000:]}{err[-2000:]}{said}")
    return elapsed, float(found.group(3)), cpu, mib


# -- torch ----------------------------------------------------------------------------------
TORCH_MASTER = """import datetime, sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", {port}, {world}, True, datetime.timedelta(seconds=300),
                      wait_for_workers=False)
print("listening", flush=True)
sys.stdin.readline()
start, cpu = time.perf_counter(), time.process_time()
while store.add("joined", 0) < {world} - 1:
    time.sleep(0.005)
print(time.perf_counter() - start, time.process_time() - cpu, flush=True)
"""
TORCH_WORKER = """import datetime, sys
from concurrent.futures import ThreadPoolExecutor
import torch.distributed as dist
first, step = int(sys.argv[1]), int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
def join(_):
    store = dist.TCPStore("127.0.0.1", {port}, {world}, False, datetime.timedelta(seconds=300))
    store.add("joined", 1)
    return store
with ThreadPoolExecutor(64) as pool:
    stores = list(pool.map(join, range(first, {world} - 1, step)))
sys.stdin.read()  # hold every connection until the master is done
"""


def _started(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != word:
        raise WrongAnswer(f"a torch process did not start: {proc.communicate()}")


def bench_torch(world: int) -> tuple[float, float, float] | None:
    """(seconds from "go" until every worker joined the master's store and said so, the
    master's CPU seconds meanwhile, its peak MiB), None without torch."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # not imported here: see _timed
        return None
    port = loopback.free_port()
    count = min(WORKERS, world - 1)
    code = {"port": port, "world": world}
    workers = [subprocess.Popen([sys.executable, "-c", TORCH_WORKER.format(**code), str(i),
                                 str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for i in range(count)]
    with tempfile.TemporaryDirectory() as tmp:
        master = subprocess.Popen(_timed([sys.executable, "-c", TORCH_MASTER.format(**code)],
                                         Path(tmp, "rss")), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in workers:
            _started(w, "ready")
        _started(master, "listening")
        for proc in (master, *workers):
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        out, err = master.communicate(timeout=600)
        mib = _peak_mib(Path(tmp, "rss"))
    for w in workers:
        w.communicate(input="", timeout=300)
    if master.returncode != 0 or not out.strip():
        raise WrongAnswer(f"TCPStore of {world}: exit {master.returncode}: {out}{err}")
    return float(out.split()[0]), float(out.split()[1]), mib


@functools.cache
def _namespaced() -> bool:
    """Whether a side can run in a network namespace of its own (loopback only)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "--net", "--", "ip", "link", "set", "lo", "up"],
                          capture_output=True, check=False).returncode == 0


def side(name: str, world: int) -> tuple[float, ...] | None:
    """One side's figures (bench_slurmenv's or bench_torch's), in a network namespace of its
    own when this process may make one (see the module's docstring), else here."""
    if not _namespaced():
        return bench_slurmenv(world) if name == "slurmenv" else bench_torch(world)
    proc = subprocess.run(["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"',
                           "sh", sys.executable, __file__, "--side", name, str(world)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise WrongAnswer(f"the {name} side of {world}: exit {proc.returncode}: "
                          f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    figures = json.loads(proc.stdout.splitlines()[-1])
    return None if figures is None else tuple(figures)


def run(short: bool, sizes: Sequence[int] | None = None,
        torch_sizes: Sequence[int] | None = None) -> tuple[list[list[str]], list[str]]:
    """The rows (and notes); torch's side for ``torch_sizes`` only (default TORCH_SIZES)."""
    if torch_sizes is None:
        torch_sizes = () if short else TORCH_SIZES
    _at_hard_limit()
    rows = []
    for world in sizes or (SHORT_SIZES if short else SIZES):
        ours = side("slurmenv", world)
        assert ours is not None
        elapsed, gathered, cpu, mib = ours
        theirs = side("torch", world) if world in torch_sizes else None
        rows.append([f"{world:,}", f"{elapsed:.2f} s", f"{gathered:.1f} s", f"{cpu:.2f} s",
                     f"{mib:.0f} MiB",
                     *([f"{theirs[0]:.2f} s", f"{theirs[1]:.2f} s", f"{theirs[2]:.0f} MiB"]
                       if theirs else ["-", "-", "-"])])
        print("  " + " | ".join(rows[-1]), file=sys.stderr, flush=True)  # progress
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    notes = [(f"One run per size on this machine ({os.cpu_count()} CPUs), loopback, "
              f"{PER_NODE} tasks per node; rank 0 started with a soft open-file limit of "
              f"{SOFT_LIMIT} (hard {hard}) and raised it itself; torch's master and every "
              f"client process of both sides started with the soft limit at the hard limit "
              f"({hard}), so both sides run under the same limits, one side at a time"
              + (", each in a network namespace of its own (loopback only: no name lookup "
                 "waits on a DNS server)" if _namespaced() else "") + ". The other tasks are "
              f"asyncio "
              f"clients in {WORKERS} processes started first; torch's clients are TCPStore "
              "objects in threads of as many processes, each joining then adding 1 to a "
              "counter the master polls. slurmenv's figures are rank 0's whole process "
              "(Python's start and imports included: 0.1 s of CPU, 20 MiB), from its start to "
              "its exit after every task's go; torch's start when the clients are told to join "
              "(the store already listening) and end when the counter is full; its memory "
              "includes `import torch`. Every process shares this machine's CPUs, so the wall "
              "times follow the clients' load and whatever else runs on the machine; the CPU "
              "times are rank 0's own.")]
    return rows, notes


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--worker":
        world, port, first, step = map(int, args[1:5])
        return worker(world, port, first, step)
    if args and args[0] == "--side":
        name, world = args[1], int(args[2])
        _at_hard_limit()
        figures = bench_slurmenv(world) if name == "slurmenv" else bench_torch(world)
        print(json.dumps(figures))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="200 tasks only")
    parser.add_argument("--sizes", help="comma-separated task counts")
    parser.add_argument("--torch-sizes", help="the sizes torch's side runs at (default: all)")
    parsed = parser.parse_args(args)
    sizes = [int(s) for s in parsed.sizes.split(",")] if parsed.sizes else None
    torch_sizes = [int(s) for s in parsed.torch_sizes.split(",")] if parsed.torch_sizes \
        else None
    rows, notes = run(parsed.short, sizes, torch_sizes)
    print(sections.STEP_SCALE.heading() + "\n")
    print(table(sections.STEP_SCALE.tables[0], rows))
    for note in notes:
        print(f"\n{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
