"""Each guarantee docs/step-check.md makes, with the test that fails without the code behind
it (issue 42, items 5 and 6; the faults a mutation run let through, benchmarks/mutants.py):
strangers' connections never cost a task its place nor blame a healthy node; a task obeys
only its own step's sound verdict and go, in turn; the go waits for every live acknowledgement;
the port is the training's once the go is out; a hello needs its nonce, and a slow one is kept
while there is room; the open-file limit is raised to the hard cap, restored for the command,
and accepting resumes once a descriptor is free."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import synth
from loopback import ROOT, free_port, step
from stepcheck_util import (
    check_step,
    connect,
    facts,
    hangs_up,
    hello,
    in_threads,
    read_message,
    task_job,
)

from slurmenv import resolve
from slurmenv.doctor import stepcheck
from slurmenv.doctor.stepcheck import protocol
from slurmenv.doctor.stepcheck import rank0 as server
from slurmenv.doctor.stepcheck.task import join

MAGIC = protocol.MAGIC


def wait(seconds: float) -> None:
    threading.Event().wait(seconds)


def rank0_with(envs: list[dict[str, str]], peers: list[Callable[[], Any]], timeout: float = 10,
               handshake: float = server.HANDSHAKE_SECONDS) -> tuple[bool, list[str], Any, Any]:
    """Rank 0's whole check while each of ``peers`` runs: (ok, report, outcome, theirs)."""
    res = resolve(envs[0], ephemeral_range=None, rivals=None)
    own = facts(envs[0])
    results = in_threads([lambda: stepcheck.serve(res, own, timeout, envs[0], handshake),
                          *peers])
    ok, lines, outcome = results[0]
    return ok, lines, outcome, results[1:]


# -- strangers: no task's place taken, no healthy node blamed --------------------------------
def strangers(port: int, silent: int, slow: int, until: threading.Event) -> Callable[[], int]:
    """Connections opened before the step's tasks: ``silent`` say nothing, ``slow`` send the
    first line one byte a second (the issue's case); all held until ``until``."""
    def run() -> int:
        held = [connect(port) for _ in range(silent + slow)]
        for i in range(len(MAGIC)):
            for s in held[silent:]:
                try:
                    s.sendall(MAGIC[i:i + 1])
                except OSError:
                    pass
            if until.wait(1.0):
                break
        until.wait(60)
        for s in held:
            s.close()
        return len(held)
    return run


def test_silent_and_slow_strangers_opened_first_cost_no_task_its_place() -> None:
    port = free_port()
    envs = step([2, 2], port)
    done = threading.Event()
    tasks = [task_job(envs[r], 20) for r in (1, 2, 3)]

    def step_tasks() -> Any:
        wait(0.5)  # after the strangers
        try:
            return in_threads(tasks)
        finally:
            done.set()

    ok, lines, outcome, (held, results) = rank0_with(
        envs, [strangers(port, 8, 6, done), step_tasks], timeout=20)
    assert held == 14
    assert ok and [r[0] for r in results] == [True] * 3, (lines, results)
    assert outcome.seconds < server.HANDSHAKE_SECONDS  # nobody waited for a stranger to expire
    assert outcome.refused_count == 14 and outcome.crowded == 0
    assert not any("nodes at fault" in line for line in lines), lines


def held(outcome: Any) -> str:
    return (f": rank 0 was held by {outcome.crowded} connections that did not say who they "
            "were (refused, below), so it may have waited behind them; not blamed on its node")


def test_strangers_holding_every_place_are_named_and_no_node_is_blamed() -> None:
    # more strangers than rank 0 has places: the step's tasks wait in the backlog until the
    # check times out. The report says what held rank 0, not that their node failed.
    port = free_port()
    envs = step([2, 2], port)
    done = threading.Event()
    places = 4 + server.SPARE_PLACES

    def step_tasks() -> Any:
        wait(0.5)
        try:
            return in_threads([task_job(envs[r], 3) for r in (1, 2, 3)])
        finally:
            done.set()

    ok, lines, outcome, (_, results) = rank0_with(
        envs, [strangers(port, places + 4, 0, done), step_tasks], timeout=2)
    assert not ok and not any(r[0] for r in results)
    assert outcome.crowded >= places - 1
    missing = [line for line in lines if "never connected" in line]
    assert missing == [
        f"  1 rank 1 (expected on n1) never connected to 127.0.0.1:{port}{held(outcome)}",
        f"  2 ranks 2-3 (expected on n2) never connected to 127.0.0.1:{port}{held(outcome)}",
    ], lines
    assert not any("nodes at fault" in line for line in lines), lines
    assert any(line.startswith("  refused ") for line in lines), lines


def test_a_few_strangers_do_not_excuse_a_rank_that_never_came() -> None:
    # rank 0 always had room: the rank that never came did not connect, and its node is named
    port = free_port()
    envs = step([1, 1, 1], port)
    done = threading.Event()

    def rank1() -> Any:
        try:
            return task_job(envs[1], 5)()
        finally:
            done.set()

    ok, lines, outcome, _ = rank0_with(envs, [strangers(port, 2, 0, done), rank1], timeout=3)
    assert not ok and outcome.crowded == 0
    assert f"  1 rank 2 (expected on n3) never connected to 127.0.0.1:{port}" in lines, lines
    assert any(line.startswith("  nodes at fault: n3;") for line in lines), lines


# -- a task obeys only its own step's replies, in turn ---------------------------------------
def fake_rank0(port: int, replies: Callable[[dict[str, Any]], list[dict[str, Any]]]
               ) -> Callable[[], list[Any]]:
    """A rank 0 that answers the first hello with ``replies(hello)``, reading what the task
    sends between them; returns the messages it received."""
    listener = socket.create_server(("127.0.0.1", port))

    def run() -> list[Any]:
        got: list[Any] = []
        with listener:
            listener.settimeout(20)
            conn, _ = listener.accept()
            with conn:
                first, rest = read_message(conn)
                got.append(first)
                assert first is not None
                for reply in replies(first):
                    try:
                        conn.sendall(protocol.encode(reply))
                    except OSError:
                        break
                    if reply["kind"] == "verdict":
                        msg, rest = read_message(conn, rest)
                        got.append(msg)
                        if msg is None:
                            break
                wait(0.3)
        return got
    return run


def reply(kind: str, task_hello: dict[str, Any], **changes: Any) -> dict[str, Any]:
    ident = {**task_hello["id"], **{k: v for k, v in changes.items() if k in protocol.ID_FIELDS}}
    fields: dict[str, Any] = {"line": f"{kind} line", "task": task_hello["task"]}
    if kind == "verdict":
        fields["ok"] = True
    fields.update({k: v for k, v in changes.items() if k not in protocol.ID_FIELDS})
    return protocol.message(kind, ident, **{k: v for k, v in fields.items() if v is not None})


ANSWERS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "own": lambda h: [reply("verdict", h), reply("go", h)],
    "verdict-of-another-job": lambda h: [reply("verdict", h, job="9999"), reply("go", h)],
    "verdict-of-another-step": lambda h: [reply("verdict", h, step="7"), reply("go", h)],
    "go-of-another-job": lambda h: [reply("verdict", h), reply("go", h, job="9999")],
    "go-of-another-step": lambda h: [reply("verdict", h), reply("go", h, step="7")],
    "go-of-another-world": lambda h: [reply("verdict", h), reply("go", h, world_size=8)],
    "go-of-another-port": lambda h: [reply("verdict", h), reply("go", h, master_port=1)],
    "go-of-another-addr": lambda h: [reply("verdict", h), reply("go", h, master_addr="x")],
    "verdict-of-another-task": lambda h: [reply("verdict", h, task="other"), reply("go", h)],
    "go-of-another-task": lambda h: [reply("verdict", h), reply("go", h, task="other")],
    "go-without-task": lambda h: [reply("verdict", h), reply("go", h, task=None)],
    "go-before-verdict": lambda h: [reply("go", h)],
    "verdict-twice": lambda h: [reply("verdict", h), reply("verdict", h), reply("go", h)],
}


@pytest.mark.parametrize("case", ANSWERS)
def test_a_task_obeys_only_its_own_steps_verdict_and_go_in_turn(case: str) -> None:
    port = free_port()
    env = step([1, 1], port)[1]
    peer = fake_rank0(port, ANSWERS[case])
    own = facts(env)
    (ok, line), got = in_threads([lambda: join("127.0.0.1", [port], own, 5), peer])
    assert ok is (case == "own"), (case, line)
    acked = [m for m in got[1:] if m is not None and m.get("kind") == "ack"]
    # a sound verdict not its own is never acknowledged
    assert bool(acked) is (case in ("own", "verdict-twice") or case.startswith("go-of")
                           or case == "go-without-task"), (case, got)
    if case != "own":
        assert any(why in line for why in ("does not start", "two steps share it")), line


# -- the go waits for every live acknowledgement; the port is the training's after it --------
def test_the_go_waits_for_a_live_task_that_has_not_acknowledged(monkeypatch: Any) -> None:
    monkeypatch.setattr(server, "ACK_SECONDS", 1.0)
    port = free_port()
    envs = step([1, 1, 1], port)

    def silent_after_verdict() -> Any:
        with connect(port) as s:
            s.sendall(hello(facts(envs[2]), nonce="live"))
            verdict, rest = read_message(s)
            decision, _ = read_message(s, rest)  # the link stays up; no acknowledgement
            return verdict, decision

    results = check_step(envs, skip=(2,), extra=[silent_after_verdict])
    verdict, decision = results["extra0"]
    assert verdict["ok"] is True and decision["kind"] == "abort"
    assert results[0][0] is False and results[1][0] is False
    assert "did not acknowledge the verdict" in results[0][1][1], results[0][1]


def test_nothing_listens_on_the_port_once_the_go_is_out() -> None:
    port = free_port()
    envs = step([1, 1], port)

    def ack_then_probe() -> Any:
        s = connect(port)
        s.sendall(hello(facts(envs[1]), nonce="p"))
        verdict, rest = read_message(s)
        s.sendall(protocol.encode(protocol.message("ack", verdict["id"], task="p")))
        decision, _ = read_message(s, rest)
        try:  # rank 0 lingers for this task's close: its listener must be closed already
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            probe = "accepted"
        except ConnectionRefusedError:
            probe = "refused"
        s.close()
        return decision["kind"], probe

    results = check_step(envs, skip=(1,), extra=[ack_then_probe])
    assert results[0][0] is True
    assert results["extra0"] == ("go", "refused")


# -- hellos: the nonce is required; a slow one is kept while there is room --------------------
def test_a_hello_without_its_nonce_is_refused_and_the_real_task_counted() -> None:
    port = free_port()
    envs = step([1, 1], port)
    body = protocol.split(hello(facts(envs[1])))[0]
    assert body is not None
    del body["task"]

    def forged_then_real() -> Any:
        with connect(port) as s:
            s.sendall(protocol.encode(body))
            assert hangs_up(s)
        return task_job(envs[1], 5)()

    ok, lines, outcome, (real,) = rank0_with(envs, [forged_then_real])
    assert ok and real[0] is True, (lines, real)
    assert outcome.refused == ["127.0.0.1: a hello without its task nonce"]
    assert len(outcome.arrivals) == 1


def test_a_hello_slower_than_the_handshake_is_kept_while_there_is_room() -> None:
    port = free_port()
    envs = step([1, 1, 1], port)

    def slow_task() -> Any:
        with connect(port) as s:
            wait(1.0)  # well past the handshake (0.3 s): there is room, it is not dropped
            s.sendall(hello(facts(envs[2]), nonce="slow"))
            verdict, rest = read_message(s)
            s.sendall(protocol.encode(protocol.message("ack", verdict["id"], task="slow")))
            decision, _ = read_message(s, rest)
            return decision["kind"]

    ok, lines, outcome, (real, slow) = rank0_with(
        envs, [task_job(envs[1], 10), slow_task], handshake=0.3)
    assert ok and real[0] is True and slow == "go", (lines, real, slow)
    assert outcome.refused_count == 0


# -- the open-file limit ---------------------------------------------------------------------
def in_process(code: str, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, timeout=60,
                          env={**synth.clean_env(), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


RAISE = """import resource
from slurmenv.doctor.stepcheck.rank0 import raise_fd_limit, restore_fd_limit
resource.setrlimit(resource.RLIMIT_NOFILE, (40, 100))
old = raise_fd_limit(1000)
print(*resource.getrlimit(resource.RLIMIT_NOFILE), *old)
restore_fd_limit(old)
print(*resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_the_open_file_limit_is_raised_up_to_the_hard_cap_and_restored() -> None:
    assert in_process(RAISE) == ["100", "100", "40", "100", "40", "100"]


PREFLIGHT = """import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (40, 4096))
sys.argv = ['slurmenv', 'exec', '--preflight', '--step-timeout', '8', '--', 'sh', '-c',
            'echo limit=$(ulimit -n)']
runpy.run_module('slurmenv', run_name='__main__')
"""


def test_the_command_after_the_check_gets_the_open_file_limit_it_had() -> None:
    port = free_port()
    envs = step([1, 1], port)
    rank0 = subprocess.Popen([sys.executable, "-c", PREFLIGHT], cwd=ROOT, text=True,
                             env={**synth.clean_env(), **envs[0], "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = check_step(envs, timeout=8, skip=(0,))
    out, err = rank0.communicate(timeout=60)
    assert rank0.returncode == 0 and results[1][0] is True, err
    assert out.strip() == "limit=40", out + err


RESUME = """import os, resource, socket, sys, threading
from slurmenv.doctor.stepcheck import protocol, rank0 as server
port = int(sys.argv[1])
own = {"world_size": 2, "job": "1", "step": "0", "master_addr": "127.0.0.1",
       "master_port": port, "launcher": "slurm"}
rank0 = server.Rank0(own, timeout=6.0)
assert rank0.open(port)
stranger = socket.create_connection(("127.0.0.1", port))  # accepted: the last descriptor
task = socket.create_connection(("127.0.0.1", port))  # waits in the backlog: EMFILE
hello = protocol.message("hello", {**own, "master_port": port}, task="t", facts={"rank": 1})
task.sendall(protocol.encode(hello))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")), hard))
threading.Timer(1.0, stranger.close).start()  # a descriptor is freed
rank0.gather()
print(rank0.outcome.fd_limit is not None, len(rank0.outcome.arrivals),
      round(rank0.outcome.seconds) < 5)
"""


def test_accepting_resumes_once_a_descriptor_is_free_after_emfile() -> None:
    assert in_process(RESUME, str(free_port())) == ["True", "1", "True"]


# -- the report: what held rank 0, and at most 20 problem lines ------------------------------
def judged(counts: list[int], ranks: list[int], **outcome_fields: Any) -> tuple[bool, list[str]]:
    """Rank 0's report on a step of ``counts`` where ``ranks`` arrived, agreeing in all, and
    the outcome had ``outcome_fields`` (no network)."""
    env = step(counts, 20000)[0]
    res = resolve(env, ephemeral_range=None, rivals=None)
    own = stepcheck.facts_of(res, {})
    outcome = stepcheck.Outcome()
    for field, value in outcome_fields.items():
        setattr(outcome, field, value)
    hosts = res.hosts
    for rank in ranks:
        told = {**own, "rank": rank, "node": hosts[res.node_of[rank]], "via": "127.0.0.1"}
        outcome.arrivals.append(stepcheck.Arrival(None, "127.0.0.1", told, 0.1))
    return stepcheck.report(res, own, outcome, {})


@pytest.mark.parametrize(("fields", "why"), [
    ({"crowded": 7}, "rank 0 was held by 7 connections that did not say who they were"),
    ({"fd_limit": 40, "most_kept": 35}, "rank 0 met its open-file limit (below)"),
])
def test_ranks_that_never_came_behind_strangers_or_the_limit_blame_no_node(
    fields: dict[str, Any], why: str
) -> None:
    ok, lines = judged([1, 1, 1], [1], **fields)
    assert not ok
    assert lines[1].startswith("  1 rank 2 (expected on n3) never connected to 127.0.0.1:20000: "
                               + why), lines
    assert lines[1].endswith("; not blamed on its node")
    assert not any("nodes at fault" in line for line in lines), lines
    # and a task that came only after the verdict, from the backlog, is not blamed either
    env = step([1, 1, 1], 20000)[2]
    late = stepcheck.Arrival(None, "127.0.0.1", {**facts(env), "via": "127.0.0.1"}, 9.0)
    ok, lines = judged([1, 1, 1], [1], verdict=False, decision="abort", late=[late], **fields)
    assert any("after its verdict" in line for line in lines), lines
    assert not any("nodes at fault" in line for line in lines), lines


def test_without_strangers_a_rank_that_never_came_blames_its_node() -> None:
    ok, lines = judged([1, 1, 1], [1])
    assert not ok
    assert lines[1:] == ["  1 rank 2 (expected on n3) never connected to 127.0.0.1:20000",
                         ("  nodes at fault: n3; run again without them: srun --exclude=n3 ... "
                          "(in an allocation with other nodes), or sbatch --exclude=n3 ...")]


def test_the_report_lists_at_most_twenty_problems_then_a_count() -> None:
    ok, lines = judged([1] * 30, [])  # 29 nodes with a rank missing: one line each
    assert not ok
    problems = [line for line in lines[1:] if not line.startswith("  nodes at fault")]
    assert len(problems) == 21 and problems[-1] == "  ... and 9 more", lines


def test_a_task_back_after_the_decision_learns_it() -> None:
    # rank 2's link breaks before the verdict: the step is not sound, decided at once; back
    # within rank 0's linger with its nonce, it is told that decision, not left to guess
    port = free_port()
    envs = step([1, 1, 1], port)

    def break_then_return() -> Any:
        with connect(port) as s:
            s.sendall(hello(facts(envs[2]), nonce="back"))
        wait(1.5)
        with connect(port) as again:
            again.sendall(hello(facts(envs[2]), nonce="back"))
            decision, _ = read_message(again)
        return decision

    results = check_step(envs, skip=(2,), extra=[break_then_return], delays=[0, 0.5, 0])
    assert results[0][0] is False and results[1][0] is False
    decision = results["extra0"]
    assert decision is not None and decision["kind"] == "verdict" and decision["ok"] is False
    assert decision["line"] == "slurmenv step check: rank 2: the step is not sound (" \
        + decision["line"].split("(", 1)[1]
    assert "rank 0's report on n1 says why" in decision["line"]
