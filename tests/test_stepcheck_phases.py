"""The step check as a protocol on loopback: peers that do not speak it, forged and foreign
hellos, late tasks, links that break between the phases, start-up skews across the whole
timeout (all tasks start or none does), and the open-file limit (slurmenv.doctor.stepcheck)."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
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
    run_tasks,
    task_job,
)

from slurmenv import resolve
from slurmenv.doctor import stepcheck
from slurmenv.doctor.stepcheck import protocol
from slurmenv.doctor.stepcheck import rank0 as server

MAGIC = protocol.MAGIC


def raw_then_real(port: int, payload: bytes, env: dict[str, str]) -> Callable[[], Any]:
    """A peer that sends ``payload`` (and is hung up on), then the real task of ``env``."""
    def peer() -> Any:
        with connect(port) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
            except OSError:  # rank 0 already hung up (the oversize message)
                pass
            assert hangs_up(s)
        return task_job(env, 5)()
    return peer


def hello_of(f: dict[str, Any], **changes: Any) -> bytes:
    return hello({**f, **changes})


PAYLOADS = {
    "http": (b"GET / HTTP/1.0\r\n\r\n", "wrong first line"),
    # the forged message: the first protocol had no identity and no required field
    "version-1": (b'slurmenv-stepcheck 1\n{"rank":1,"node":"n2"}\n', "wrong first line"),
    "oversize": (MAGIC + b"x" * protocol.MAX_MESSAGE, f"more than {protocol.MAX_MESSAGE} bytes"),
    "json-list": (MAGIC + b"[1, 2]\n", "not a JSON object"),
    "no-id": (MAGIC + b'{"kind":"hello","task":"x","facts":{"rank":1,"node":"n2"}}\n',
              "a hello without id or facts"),
    "rank-text": (MAGIC + b'{"kind":"hello","id":{},"task":"x","facts":{"rank":"1"}}\n',
                  "no rank in its message"),
    "rank-negative": (MAGIC + b'{"kind":"hello","id":{},"task":"x","facts":{"rank":-1}}\n',
                      "no rank in its message"),
    "ack-first": (MAGIC + b'{"kind":"ack","id":{},"task":"x"}\n', "a ack message before"),
    "two-messages": (MAGIC + b'{"kind":"hello"}\nmore', "more than one message"),
    "deep-json": (MAGIC + b"{" * 100000, f"more than {protocol.MAX_MESSAGE} bytes"),
    "empty": (b"", "closed before saying who it is"),
}


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_peer_that_does_not_speak_the_protocol_is_refused_never_counted(name: str) -> None:
    payload, why = PAYLOADS[name]
    port = free_port()
    envs = step([1, 1], port)
    results = check_step(envs, skip=(1,), extra=[raw_then_real(port, payload, envs[1])])
    ok, lines = results[0]
    assert ok, lines
    assert lines[0].endswith(", all agree")
    assert lines[1].startswith("  refused 1 connection that did not speak the step check: "
                               "127.0.0.1: ") and why in lines[1], lines
    assert results["extra0"][0] is True  # the real rank 1 started


def rank0_with(envs: list[dict[str, str]], peer: Callable[[], Any], timeout: float = 10,
               handshake: float = 5) -> tuple[bool, list[str], Any, Any]:
    """Rank 0 of ``envs`` (its whole check, with this handshake) while ``peer`` runs:
    (its verdict, its report, its outcome, what ``peer`` returned)."""
    res = resolve(envs[0], ephemeral_range=None, rivals=None)
    own = facts(envs[0])
    (ok, lines, outcome), theirs = in_threads([
        lambda: stepcheck.serve(res, own, timeout, envs[0], handshake), peer])
    return ok, lines, outcome, theirs


def test_a_silent_peer_is_dropped_when_its_place_is_needed() -> None:
    port = free_port()
    envs = step([1, 1], port)

    def peer() -> Any:
        with connect(port) as silent:
            result = in_threads([task_job(envs[1], 10)], delays=[0.5])[0]
            return result, hangs_up(silent)

    ok, _, outcome, ((real_ok, _), hung_up) = rank0_with(envs, peer, handshake=0.3)
    assert ok and real_ok and hung_up
    assert outcome.refused == ["127.0.0.1: said nothing valid within 0.3 s"]


def test_rank0_keeps_at_most_a_place_per_task_and_its_spare_places() -> None:
    port = free_port()
    envs = step([1, 1, 1], port)

    def peer() -> Any:
        # 25 silent connections against a world of 3, then the two tasks: rank 0 holds 3
        # and SPARE_PLACES at once (the others wait in the kernel's backlog), dropping a
        # silent one past its handshake each time its place is needed, and every one by the end
        held = [connect(port) for _ in range(25)]
        verdicts = in_threads([task_job(envs[1], 10), task_job(envs[2], 10)])
        assert all(hangs_up(s) for s in held)
        for s in held:
            s.close()
        return verdicts

    ok, _, outcome, verdicts = rank0_with(envs, peer, timeout=20, handshake=0.3)
    assert ok and [v[0] for v in verdicts] == [True, True]
    assert outcome.refused_count == 25  # each counted: expired, or silent at the end
    assert outcome.most_kept <= 3 + server.SPARE_PLACES


def test_a_hello_without_every_field_is_a_disagreement_not_agreement() -> None:
    # it speaks the protocol and claims rank 1, but says nothing else: counted, and not sound
    port = free_port()
    envs = step([1, 1], port)
    own = facts(envs[0])
    forged = MAGIC + json.dumps({"kind": "hello", "id": protocol.identity(own), "task": "f",
                                 "facts": {"rank": 1, "node": "n2"}}).encode() + b"\n"

    def peer() -> Any:
        with connect(port) as s:
            s.sendall(forged)
            verdict, _ = read_message(s)
        return verdict, task_job(envs[1], 5)()

    results = check_step(envs, skip=(1,), extra=[peer])
    ok, lines = results[0]
    assert not ok
    assert lines[1].startswith("  rank 1 on n2 (127.0.0.1) sent a message with no hostname, "
                               "no node_rank, no nnodes, ")
    verdict, (real_ok, real_lines) = results["extra0"]
    assert verdict["kind"] == "verdict" and verdict["ok"] is False
    assert not real_ok, real_lines  # it came after the verdict: it does not start either


def test_a_task_of_another_step_is_named_and_never_counted() -> None:
    port = free_port()
    envs = step([1, 1], port)
    other = {**envs[1], "SLURM_JOB_ID": "9999", "SLURM_JOBID": "9999"}
    results = check_step(envs, timeout=5, extra=[task_job(other, 5)], delays=[0, 0.5, 0])
    ok, lines = results[0]
    assert ok, lines
    assert lines[1] == (f"  not counted: 1 task of another step reached 127.0.0.1:{port} (two "
                        "steps share it): rank 1 of 2 of job 9999 step 0 on n2 (127.0.0.1)")
    assert results[1][0] is True
    foreign_ok, (line,) = results["extra0"]
    assert not foreign_ok
    assert "two steps share" in line and "job 4242" in line, line


def speaks(port: int, f: dict[str, Any], then: Callable[[socket.socket, Any], Any]) -> Any:
    """A raw task: hello with ``f``, read the verdict, then ``then(socket, verdict)``."""
    s = connect(port)
    s.sendall(hello(f, nonce="raw"))
    verdict, _ = read_message(s)
    return then(s, verdict)


def ack(ident: dict[str, Any]) -> bytes:
    return protocol.encode(protocol.message("ack", ident, task="raw"))


def test_a_task_that_never_acknowledges_stops_every_task(monkeypatch: Any) -> None:
    monkeypatch.setattr(server, "ACK_SECONDS", 1.0)
    port = free_port()
    envs = step([1, 1, 1], port)

    def vanish(s: socket.socket, verdict: Any) -> Any:
        s.close()  # the link breaks after the verdict, before the acknowledgement
        return verdict

    results = check_step(envs, skip=(2,), extra=[lambda: speaks(port, facts(envs[2]), vanish)])
    assert results["extra0"]["ok"] is True
    ok, lines = results[0]
    assert not ok  # rank 0 does not start
    assert lines[1] == ("  all agreed, but 1 rank(s) did not acknowledge the verdict, or lost "
                        "their link after it, within 1 s (a link broke after the gathering): no "
                        "task starts")
    ok1, (line1,) = results[1]
    assert not ok1 and "the step does not start: not every task learnt the verdict" in line1


def test_a_task_whose_link_breaks_after_its_ack_comes_back_for_the_go() -> None:
    # rank 0 sends the go on live links only: it waits for the task to come back (a race
    # before: the go could go out, and the listener close, while the task was away)
    port = free_port()
    envs = step([1, 1, 1], port)
    ident = protocol.identity(facts(envs[2]))

    def ack_then_break(s: socket.socket, verdict: Any) -> Any:
        s.sendall(ack(ident))
        s.close()
        with connect(port) as again:  # the same nonce: rank 0 answers with the decision
            again.sendall(ack(ident))
            decision, _ = read_message(again)
        return decision

    results = check_step(envs, skip=(2,),
                         extra=[lambda: speaks(port, facts(envs[2]), ack_then_break)])
    assert results[0][0] and results[1][0], results
    assert results["extra0"]["kind"] == "go"


def test_a_task_whose_link_breaks_after_its_ack_and_stays_away_stops_every_task(
        monkeypatch: Any) -> None:
    monkeypatch.setattr(server, "ACK_SECONDS", 1.0)
    port = free_port()
    envs = step([1, 1, 1], port)
    ident = protocol.identity(facts(envs[2]))

    def ack_then_vanish(s: socket.socket, verdict: Any) -> Any:
        s.sendall(ack(ident))
        s.close()  # and never comes back: no go may go out while it is away
        return verdict

    results = check_step(envs, skip=(2,),
                         extra=[lambda: speaks(port, facts(envs[2]), ack_then_vanish)])
    ok, lines = results[0]
    assert not ok and "lost their link after it" in lines[1], lines
    ok1, _ = results[1]
    assert not ok1


def test_a_task_back_before_the_verdict_is_counted_once() -> None:
    port = free_port()
    envs = step([1, 1, 1], port)

    def twice() -> Any:
        with connect(port) as s:
            s.sendall(hello(facts(envs[2]), nonce="same"))
        s = connect(port)
        s.sendall(hello(facts(envs[2]), nonce="same"))
        verdict, rest = read_message(s)
        s.sendall(protocol.encode(protocol.message("ack", verdict["id"], task="same")))
        decision, _ = read_message(s, rest)
        s.close()
        return decision

    results = check_step(envs, skip=(2,), extra=[twice], delays=[0, 1.0, 0])
    ok, lines = results[0]
    assert ok and lines == [lines[0]], lines
    assert results["extra0"]["kind"] == "go"


def test_a_task_that_does_not_confirm_the_go_is_named(monkeypatch: Any) -> None:
    monkeypatch.setattr(server, "LINGER_SECONDS", 1.0)
    port = free_port()
    envs = step([1, 1, 1], port)
    ident = protocol.identity(facts(envs[2]))

    def ack_and_hold(s: socket.socket, verdict: Any) -> Any:
        s.sendall(ack(ident))
        threading_wait(2.0)  # it never reads the go nor closes within rank 0's linger
        s.close()
        return verdict

    results = check_step(envs, skip=(2,), extra=[lambda: speaks(port, facts(envs[2]),
                                                                ack_and_hold)])
    ok, lines = results[0]
    assert ok  # the go was sent: rank 0 starts as the others do, and says what it cannot know
    assert lines[1] == ("  1 rank 2 did not confirm the go (a link broke after the last "
                        "acknowledgement): they may not have started")


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)


def test_a_task_of_the_step_after_the_verdict_is_told_and_stops_the_step(
        monkeypatch: Any) -> None:
    # rank 2 holds the acknowledgement phase open; a second task of rank 1 comes meanwhile
    monkeypatch.setattr(server, "ACK_SECONDS", 3.0)
    port = free_port()
    envs = step([1, 1, 1], port)

    def slow_ack(s: socket.socket, verdict: Any) -> Any:
        threading_wait(1.5)
        s.sendall(ack(protocol.identity(facts(envs[2]))))
        decision, _ = read_message(s)
        s.close()
        return decision

    results = check_step(envs, skip=(2,), delays=[0, 0, 0, 1.0], extra=[
        lambda: speaks(port, facts(envs[2]), slow_ack), task_job(envs[1], 5)])
    ok, lines = results[0]
    assert not ok
    assert lines[1].startswith("  1 task of this step reached rank 0 after its verdict (told "
                               "so, they do not start): rank 1 on n2 (127.0.0.1) at "), lines
    assert lines[2] == ("  all agreed, but rank 1 on n2 arrived after the verdict: no task "
                        "starts")
    assert results["extra0"]["kind"] == "abort"
    late_ok, (late,) = results["extra1"]
    assert not late_ok
    assert late.startswith("slurmenv step check: rank 1 on n2: arrived ") and \
        "after its verdict on the 3 ranks it had: this task does not start" in late


# -- start-up skews: all tasks start, or none does -----------------------------------------
def started(tmp: pathlib.Path, world: int) -> list[bool]:
    return [(tmp / f"ran-{r}").exists() for r in range(world)]


SKEWS = {  # timeout, start of rank 0, 1, 2 (seconds), whether they start
    "rank0-midway": (4, [2.0, 0.0, 4.8], True),
    "rank0-first": (4, [0.0, 2.8, 1.2], True),
    "rank2-too-late": (4, [0.0, 0.0, 6.4], False),
    "rank0-too-late": (4, [6.0, 0.0, 0.0], False),
    # the issue's: rank 1 at 0, rank 0 at 15, rank 2 at 31, timeout 20 (0.3.0: a split step)
    "issue36": (20, [15.0, 0.0, 31.0], True),
}


@pytest.mark.parametrize("case", SKEWS)
def test_skews_start_every_task_or_none(case: str, tmp_path: pathlib.Path) -> None:
    timeout, delays, sound = SKEWS[case]
    port = free_port()
    cmd = ["exec", "--preflight", "--step-timeout", str(timeout), "--", "sh", "-c",
           f'touch {tmp_path}/ran-$RANK']
    done = run_tasks(step([1, 1, 1], port), cmd, delays)
    assert started(tmp_path, 3) == [sound] * 3, [p.stderr for p in done]
    assert [p.returncode == 0 for p in done] == [sound] * 3, [p.stderr for p in done]


# -- the open-file limit ---------------------------------------------------------------------
def rank0_process(env: dict[str, str], soft: int, hard: int) -> subprocess.Popen[str]:
    """``slurmenv doctor --step`` under the open-file limits (soft, hard)."""
    code = ("import resource, runpy, sys\n"
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
            "sys.argv = ['slurmenv', 'doctor', '--step', '--step-timeout', '8']\n"
            "runpy.run_module('slurmenv', run_name='__main__')")
    return subprocess.Popen([sys.executable, "-c", code], env={**synth.clean_env(), **env},
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize(("soft", "hard", "sound"), [(40, 4096, True), (40, 40, False)])
def test_the_open_file_limit_is_raised_or_named(soft: int, hard: int, sound: bool) -> None:
    port = free_port()
    envs = step([20, 20, 20], port)
    rank0 = rank0_process(envs[0], soft, hard)
    results = check_step(envs, timeout=8, skip=(0,))
    out, err = rank0.communicate(timeout=60)
    assert (rank0.returncode == 0) is sound, out + err
    assert all(ok is sound for ok, _ in results.values()), results
    if not sound:
        assert "  rank 0 reached its open-file limit (40 descriptors, `ulimit -n`; the step " \
            "needs about 124) and held " in out, out
        # the ranks left in the backlog are not their nodes' fault: no node is blamed
        assert "so it may have waited in the kernel's backlog; not blamed on its node" in out
        assert "nodes at fault" not in out, out


SPIN = """import os, resource, socket, sys
from slurmenv.doctor.stepcheck import rank0 as server
port = int(sys.argv[1])
own = {{"world_size": 3, "job": "1", "step": "0", "master_addr": "127.0.0.1",
        "master_port": port, "launcher": "slurm"}}
rank0 = server.Rank0(own, timeout=1.0)
assert rank0.open(port)
clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]  # in the backlog
calls = [0]
select = rank0.sel.select
def counted(timeout=None):
    calls[0] += 1
    return select(timeout)
rank0.sel.select = counted
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) - 1, hard))
rank0.gather()
print(calls[0], rank0.outcome.fd_limit is not None, len(rank0.outcome.arrivals))
"""


def test_at_the_open_file_limit_rank0_waits_instead_of_spinning() -> None:
    # two tasks wait in the backlog and accept() fails with EMFILE: rank 0 stops watching
    # its listener (0.3.0 spun on it for the whole timeout), and notes the limit
    done = subprocess.run([sys.executable, "-c", SPIN.format(), str(free_port())],
                          env={**synth.clean_env(), "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    calls, limited, arrivals = done.stdout.split()
    assert limited == "True" and arrivals == "0", done.stdout
    assert int(calls) <= 3, done.stdout  # the first wake-up, then one wait to the deadline
