"""Helpers of the step check's loopback tests (tests/test_stepcheck*.py): tasks of a loopback
step (tests/loopback.py builds their environments) as threads or processes, and raw peers
speaking the protocol."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import synth
from loopback import ROOT, process_env

from slurmenv import options, resolve
from slurmenv.doctor import stepcheck
from slurmenv.doctor.stepcheck import protocol

# the first resolve() of a process imports the launchers: done here, before any thread does
resolve(synth.step_envs(["n1"], [1])[0], ephemeral_range=None, rivals=None)


def facts(env: Mapping[str, str]) -> dict[str, Any]:
    """What the task of ``env`` tells rank 0 (as stepcheck.run builds it)."""
    opts = options.from_environ(env)._asdict()
    return stepcheck.facts_of(resolve(env, ephemeral_range=None, rivals=None), opts)


def in_threads(jobs: list[Callable[[], Any]], delays: list[float] | None = None) -> list[Any]:
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        if delays:
            threading.Event().wait(delays[i])
        results[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def task_job(env: dict[str, str], timeout: float) -> Callable[[], tuple[bool, list[str]]]:
    return lambda: stepcheck.run(resolve(env, ephemeral_range=None, rivals=None), env, {},
                                 timeout)


def check_step(envs: list[dict[str, str]], timeout: float = 10.0, skip: tuple[int, ...] = (),
               extra: list[Callable[[], Any]] | None = None,
               delays: list[float] | None = None) -> dict[int, Any]:
    """Run the step check in a thread per task (but those of ``skip``), and each of ``extra``
    (raw peers) beside them: rank -> result, then "extra0", "extra1"... -> theirs."""
    ranks = [r for r in range(len(envs)) if r not in skip]
    jobs: list[Callable[[], Any]] = [task_job(envs[r], timeout) for r in ranks]
    jobs += extra or []
    results = in_threads(jobs, delays)
    out: dict[int | str, Any] = dict(zip(ranks, results))
    for i, result in enumerate(results[len(ranks):]):
        out[f"extra{i}"] = result
    return out  # type: ignore[return-value]


def connect(port: int, tries: int = 200) -> socket.socket:
    for _ in range(tries):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            threading.Event().wait(0.05)
    raise RuntimeError("rank 0 never listened")


def hello(task_facts: Mapping[str, Any], nonce: str = "raw") -> bytes:
    """A hello as a task sends it (``task_facts`` of facts(), ``via`` added)."""
    body = {k: v for k, v in {**task_facts, "via": "127.0.0.1"}.items()
            if k not in protocol.ID_FIELDS}
    return protocol.encode(protocol.message("hello", protocol.identity(task_facts), task=nonce,
                                            facts=body))


def read_message(s: socket.socket, buffer: bytes = b"") -> tuple[dict[str, Any] | None, bytes]:
    """The next message rank 0 sends on ``s`` (None at EOF)."""
    s.settimeout(30)
    while True:
        msg, rest = protocol.split(buffer)
        if msg is not None:
            return msg, rest
        chunk = s.recv(65536)
        if not chunk:
            return None, buffer
        buffer += chunk


def hangs_up(s: socket.socket) -> bool:
    """Whether rank 0 closed ``s`` without a word (EOF, or a reset: it left data unread)."""
    s.settimeout(10)
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def run_tasks(envs: list[dict[str, str]], argv: list[str],
              delays: list[float] | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Each task a process of ``slurmenv ARGV`` (started after its delay, in seconds)."""
    procs: list[subprocess.Popen[str] | None] = [None] * len(envs)

    def start(i: int) -> None:
        if delays:
            threading.Event().wait(delays[i])
        procs[i] = subprocess.Popen([sys.executable, "-m", "slurmenv", *argv],
                                    env=process_env(envs[i]), cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    in_threads([lambda i=i: start(i) for i in range(len(envs))])
    out = []
    for p in procs:
        assert p is not None
        stdout, stderr = p.communicate(timeout=180)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out
