"""The step check's protocol and report on loopback (slurmenv.stepcheck).

Every task of a synthetic step runs the check in a thread of this process (rank 0 listening on
127.0.0.1 through ``SLURMENV_MASTER_ADDR``); peers that do not speak the protocol are raw
sockets. The real cluster (several nodes, a firewall, srun) is tests/test_real_stepcheck.py.
"""

from __future__ import annotations

import json
import pathlib
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError, resolve, stepcheck

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


def step(counts: list[int], port: int, **per_rank: Mapping[str, str]) -> list[dict[str, str]]:
    """The environments of a synthetic step whose rank 0 is this machine (loopback)."""
    hosts = [f"n{i + 1}" for i in range(len(counts))]
    envs = []
    for rank, env in enumerate(synth.step_envs(hosts, counts)):
        env = {**env, "SLURMENV_MASTER_ADDR": "127.0.0.1", "SLURMENV_PORT": str(port)}
        env.update(per_rank.get(f"r{rank}", {}))
        envs.append(env)
    return envs


def in_threads(jobs: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        results[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def check_step(envs: list[dict[str, str]], timeout: float = 10.0,
               skip: tuple[int, ...] = ()) -> dict[int, tuple[bool, list[str]]]:
    """Run the step check in a thread per task (but those of ``skip``): rank -> result."""
    ranks = [r for r in range(len(envs)) if r not in skip]

    def job(env: dict[str, str]) -> Callable[[], tuple[bool, list[str]]]:
        return lambda: stepcheck.run(resolve(env, ephemeral_range=None, rivals=None), env, {},
                                     timeout)

    results = in_threads([job(envs[r]) for r in ranks])
    return dict(zip(ranks, results))


def test_a_healthy_step_agrees_and_frees_the_port() -> None:
    port = free_port()
    results = check_step(step([2, 2], port))
    ok, lines = results[0]
    assert ok and len(lines) == 1, lines
    assert lines[0].startswith(f"slurmenv step check: 4 of 4 ranks reached 127.0.0.1:{port} in ")
    assert lines[0].endswith(" s, all agree")
    for rank in (1, 2, 3):
        ok, (line,) = results[rank]
        assert ok and line.startswith(f"slurmenv step check: rank {rank}: ok (4 of 4 ranks")
    # the port is free again at once, for the training that follows (as torch binds it)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        s.listen()


def test_a_rank_that_never_comes_is_named_with_its_node() -> None:
    port = free_port()
    results = check_step(step([2, 2], port), timeout=2, skip=(3,))
    ok, lines = results[0]
    assert not ok
    assert lines[0].startswith(f"slurmenv step check: 3 of 4 ranks reached 127.0.0.1:{port}")
    assert "1 rank with problems, the step is not sound" in lines[0]
    assert lines[1:] == [f"  1 rank 3 (expected on n2) never connected to 127.0.0.1:{port}"]
    for rank in (1, 2):
        ok, (line,) = results[rank]
        assert not ok and "the step is not sound" in line and "report on n1" in line


def test_a_node_with_another_port_is_named_with_both_values_and_their_sources() -> None:
    port, other = free_port(), free_port()
    env = {"SLURMENV_PORT": str(other)}
    results = check_step(step([2, 2], port, r2=env, r3=env), timeout=5)
    ok, lines = results[0]
    assert not ok
    given = "given port (--port or SLURMENV_PORT); TensorFlow ports follow it"
    assert lines[1] == (
        f"  2 ranks 2-3 on n2 disagree on MASTER_PORT: {other} ({given}); rank 0 has {port} "
        f"({given})"
    )
    assert len(lines) == 2  # TensorFlow's ports follow MASTER_PORT: not said twice
    assert not results[2][0] and not results[3][0]
    assert results[1][0] is False  # every task learns the step is not sound


def test_a_rank_started_twice_is_named_as_a_duplicate() -> None:
    port = free_port()
    envs = step([2, 2], port)
    envs[3]["SLURM_PROCID"] = "2"  # two tasks of n2 claim rank 2; rank 3 never comes
    envs[3]["SLURM_LOCALID"] = "0"
    results = check_step(envs, timeout=5)
    ok, lines = results[0]
    assert not ok
    assert lines[1] == "  rank 2 started 2 times: by n2 (127.0.0.1), n2 (127.0.0.1) (the step's " \
        "layout puts it on n2)"
    assert lines[2] == f"  1 rank 3 (expected on n2) never connected to 127.0.0.1:{port}"


def test_a_single_task_has_nothing_to_check() -> None:
    env = step([1], free_port())[0]
    ok, lines = stepcheck.run(resolve(env, ephemeral_range=None, rivals=None), env, {}, 1)
    assert ok and "1 of 1 rank" in lines[0]


# -- peers that do not speak the protocol -----------------------------------------------------
def serve_with(port: int, world: int, peer: Callable[[], list[tuple[bool, str]]],
               timeout: float = 5, handshake: float = 5
               ) -> tuple[stepcheck.Outcome, list[tuple[bool, str]]]:
    """rank 0's serve() and finish() while ``peer`` runs in a thread: the outcome, and what
    ``peer`` returned (the verdicts its honest tasks got)."""
    result: list[list[tuple[bool, str]]] = []
    t = threading.Thread(target=lambda: result.append(peer()))
    t.start()
    outcome, listeners = stepcheck.serve([port], world, timeout, handshake)
    stepcheck.finish(outcome.arrivals, listeners, True, {1: "fine"})
    t.join(30)
    return outcome, result[0]


def connect(port: int) -> socket.socket:
    for _ in range(100):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            threading.Event().wait(0.05)
    raise RuntimeError("rank 0 never listened")


FACTS = {"rank": 1, "node": "n2", "world_size": 2}


def hangs_up(s: socket.socket) -> bool:
    """Whether rank 0 closed ``s`` without a word (EOF, or a reset: it left data unread)."""
    s.settimeout(10)
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def hostile_then_honest(port: int, payload: bytes) -> Callable[[], list[tuple[bool, str]]]:
    def peer() -> list[tuple[bool, str]]:
        with connect(port) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
            except OSError:  # rank 0 already hung up (the oversize message)
                pass
            assert hangs_up(s)
        return [stepcheck.join("127.0.0.1", [port], FACTS, 5)]
    return peer


@pytest.mark.parametrize(("payload", "why"), [
    (b"GET / HTTP/1.0\r\n\r\n", "wrong first line"),
    (b"slurmenv-stepcheck 2\n{}\n", "wrong first line"),
    (stepcheck.MAGIC + b"x" * stepcheck.MAX_MESSAGE, f"more than {stepcheck.MAX_MESSAGE} bytes"),
    (stepcheck.MAGIC + b"[1, 2]\n", "not a JSON object"),
    (stepcheck.MAGIC + b"{\"rank\": \"0\"}\n", "no rank in its message"),
    (stepcheck.MAGIC + b"{\"rank\": -1}\n", "no rank in its message"),
    (stepcheck.MAGIC + b"{\"rank\": 1}\nmore", "more than one message"),
    (stepcheck.MAGIC + b"{" * 100000, f"more than {stepcheck.MAX_MESSAGE} bytes"),
    (b"", "closed before saying who it is"),
], ids=["http", "version-2", "oversize", "json-list", "rank-text", "rank-negative", "two-messages",
        "deep-json", "empty"])
def test_a_peer_that_does_not_speak_the_protocol_is_refused(payload: bytes, why: str) -> None:
    port = free_port()
    outcome, verdicts = serve_with(port, 2, hostile_then_honest(port, payload))
    assert outcome.refused_count == 1
    assert why in outcome.refused[0], outcome.refused
    assert [a.facts["rank"] for a in outcome.arrivals] == [1]
    assert verdicts == [(True, "fine")]  # the honest task got rank 0's verdict


def test_a_silent_peer_is_dropped_after_its_handshake_deadline() -> None:
    port = free_port()

    def peer() -> list[tuple[bool, str]]:
        with connect(port) as silent:
            assert hangs_up(silent)
        return [stepcheck.join("127.0.0.1", [port], FACTS, 5)]

    outcome, verdicts = serve_with(port, 2, peer, handshake=0.3)
    assert outcome.refused == ["127.0.0.1: said nothing valid within 0.3 s"]
    assert verdicts == [(True, "fine")]


def test_rank0_keeps_at_most_world_size_connections() -> None:
    port = free_port()

    def peer() -> list[tuple[bool, str]]:
        # ten silent connections against a world of 3: rank 0 keeps 3 at once (the others
        # wait in the kernel's backlog until one is dropped), and drops each in turn
        held = [connect(port) for _ in range(10)]
        assert all(hangs_up(s) for s in held)
        for s in held:
            s.close()
        facts = {**FACTS, "world_size": 3}
        return in_threads([lambda: stepcheck.join("127.0.0.1", [port], facts, 8),
                           lambda: stepcheck.join("127.0.0.1", [port], {**facts, "rank": 2}, 8)])

    outcome, verdicts = serve_with(port, 3, peer, timeout=20, handshake=0.3)
    assert outcome.refused_count == 10
    assert outcome.most_kept <= 3
    assert [ok for ok, _ in verdicts] == [True, True]


def test_a_task_refuses_a_port_held_by_another_program() -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)) as other:
        def answer() -> None:
            conn, _ = other.accept()
            with conn:
                conn.recv(100)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        t = threading.Thread(target=answer)
        t.start()
        ok, line = stepcheck.join("127.0.0.1", [port], FACTS, 3)
        t.join(10)
    assert not ok
    assert line == f"127.0.0.1:{port} answers but not as a slurmenv step check: another " \
        "program holds the port"


def test_a_task_that_cannot_reach_rank0_says_from_where() -> None:
    port = free_port()
    ok, line = stepcheck.join("127.0.0.1", [port], FACTS, 1)
    assert not ok
    assert line == (f"rank 1 on n2: could not reach rank 0 at 127.0.0.1:{port} within 1 s, from "
                    f"lo 127.0.0.1 (127.0.0.1:{port}: Connection refused)")


def test_rank0_whose_port_is_taken_says_so() -> None:
    port = free_port()
    env = step([1, 1], port)[0]
    with socket.create_server(("", port)):
        ok, lines = stepcheck.run(resolve(env, ephemeral_range=None, rivals=None), env, {}, 2)
    assert not ok
    assert lines[0] == (f"slurmenv step check: rank 0 on n1 cannot listen on port {port}: Address "
                        "already in use: something else holds it on this node (a leftover of an "
                        "earlier step?); training would fail there too")


# -- messages ---------------------------------------------------------------------------------
@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_decode_refuses_or_waits_never_fails(data: bytes) -> None:
    for buffer in (data, stepcheck.MAGIC + data):
        try:
            out = stepcheck.decode(buffer)
        except stepcheck.ProtocolError:
            continue
        assert out is None or isinstance(out, dict)


@given(st.dictionaries(st.text(max_size=10), st.one_of(st.integers(), st.text(max_size=20),
                                                         st.none()), max_size=8))
@settings(max_examples=200, deadline=None)
def test_a_message_decodes_to_what_was_encoded(payload: dict[str, Any]) -> None:
    assert stepcheck.decode(stepcheck.encode(payload)) == payload


def test_a_message_over_the_cap_is_not_sent() -> None:
    with pytest.raises(stepcheck.ProtocolError):
        stepcheck.encode({"x": "y" * stepcheck.MAX_MESSAGE})


def test_what_a_task_sends_fits_the_cap_whatever_its_environment() -> None:
    # the longest template the resolver takes, and option text far longer than that
    env = step([3, 3], 20000, r0={"SLURMENV_ADDR_TEMPLATE": "{host}" + ".xxxxxxxxxx" * 20})[0]
    res = resolve(env, ephemeral_range=None, rivals=None)
    facts = stepcheck.facts_of(res, {"addr_template": "{host}" + "-x" * 5000})
    assert len(stepcheck.encode(facts)) <= stepcheck.MAX_MESSAGE


@pytest.mark.parametrize("text", ["0", "-3", "abc", "nan", "inf", "3601", ""])
def test_a_timeout_that_is_not_seconds_is_refused_naming_it(text: str) -> None:
    with pytest.raises(SlurmEnvError) as exc:
        stepcheck.timeout_from({}, text)
    assert exc.value.variable == "--step-timeout"
    with pytest.raises(SlurmEnvError) as exc2:
        stepcheck.timeout_from({stepcheck.TIMEOUT_VARIABLE: text or "x"})
    assert exc2.value.variable == stepcheck.TIMEOUT_VARIABLE


def test_the_timeout_defaults_to_thirty_seconds() -> None:
    assert stepcheck.timeout_from({}) == 30.0
    assert stepcheck.timeout_from({stepcheck.TIMEOUT_VARIABLE: " 5 "}) == 5.0
    assert stepcheck.timeout_from({stepcheck.TIMEOUT_VARIABLE: "5"}, "7.5") == 7.5


# -- the commands -------------------------------------------------------------------------
def run_tasks(envs: list[dict[str, str]], argv: list[str]) -> list[subprocess.CompletedProcess[str]]:
    procs = [subprocess.Popen([sys.executable, "-m", "slurmenv", *argv],
                              env={**synth.clean_env(), **env}, cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for env in envs]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def test_exec_preflight_starts_the_command_only_in_a_sound_step(tmp_path: pathlib.Path) -> None:
    port = free_port()
    envs = step([1, 1], port)
    cmd = ["exec", "--preflight", "--step-timeout", "10", "--", "sh", "-c",
           f'echo "$RANK $MASTER_PORT" > {tmp_path}/ran-$RANK']
    done = run_tasks(envs, cmd)
    assert [p.returncode for p in done] == [0, 0], done
    assert (tmp_path / "ran-0").read_text() == f"0 {port}\n"
    assert (tmp_path / "ran-1").read_text() == f"1 {port}\n"
    assert done[0].stderr.startswith("slurmenv step check: 2 of 2 ranks reached")
    assert done[1].stderr.startswith("slurmenv step check: rank 1: ok (2 of 2 ranks")
    assert done[0].stdout == done[1].stdout == ""  # stdout belongs to the command

    # rank 1 never comes: rank 0 does not start the command
    (tmp_path / "ran-0").unlink()
    alone = ["exec", "--preflight", *cmd[4:]]  # the timeout from SLURMENV_STEP_TIMEOUT
    (done0,) = run_tasks([{**envs[0], stepcheck.TIMEOUT_VARIABLE: "1"}], alone)
    assert done0.returncode == 1
    assert not (tmp_path / "ran-0").exists()
    assert "1 rank 1 (expected on n2) never connected" in done0.stderr
    assert done0.stderr.endswith("slurmenv: the step check failed: 'sh' was not started\n")


def test_doctor_step_prints_the_report_and_exits_1_when_not_sound() -> None:
    port = free_port()
    envs = step([1, 1], port)
    done = run_tasks(envs, ["doctor", "--step", "--step-timeout", "10"])
    assert [p.returncode for p in done] == [0, 0], done
    assert done[0].stdout.startswith(f"slurmenv step check: 2 of 2 ranks reached 127.0.0.1:{port}")
    (alone,) = run_tasks(envs[1:], ["doctor", "--step", "--step-timeout", "1"])
    assert alone.returncode == 1
    assert alone.stdout.startswith(f"slurmenv step check: rank 1 on n2: could not reach rank 0 "
                                   f"at 127.0.0.1:{port} within 1 s, from lo 127.0.0.1")
    (bad,) = run_tasks(envs[:1], ["doctor", "--step", "--step-timeout", "x"])
    assert bad.returncode == 1 and "--step-timeout='x'" in bad.stderr


def test_doctor_step_refuses_where_no_master_is_known() -> None:
    env = {**step([1, 1], free_port())[1], "SLURM_STEP_NUM_TASKS": "abc"}
    (done,) = run_tasks([env], ["doctor", "--step", "--step-timeout", "1"])
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("slurmenv: error:"), done.stderr


def test_the_facts_are_json_of_what_the_resolution_says() -> None:
    env = step([2, 2], 20000)[3]
    res = resolve(env, ephemeral_range=None, rivals=None)
    facts = stepcheck.facts_of(res, {"port": 20000, "threads": True})
    assert json.loads(json.dumps(facts)) == facts
    assert (facts["rank"], facts["world_size"], facts["node"], facts["master_port"]) == \
        (3, 4, "n2", 20000)
    assert facts["options"] == {"threads": "True"}  # the port is compared as MASTER_PORT
    assert facts["sources"]["MASTER_PORT"] == res.sources["MASTER_PORT"]


def test_a_node_with_another_tensorflow_layout_is_named() -> None:
    port = free_port()
    env = {"SLURMENV_TF_CHIEF": "1"}  # set on n2 only: its tasks build another TF_CONFIG
    results = check_step(step([1, 1], port, r1=env), timeout=5)
    ok, lines = results[0]
    assert not ok
    assert lines[1].startswith("  1 rank 1 on n2 disagree on TF_CONFIG workers: ")
    assert lines[2] == "  1 rank 1 on n2 disagree on options: tf_chief=True; rank 0 has " \
        "tf_chief=False"


def test_a_duplicate_names_where_each_task_came_from() -> None:
    env = step([1, 2], 20000)[0]
    res = resolve(env, ephemeral_range=None, rivals=None)
    own = stepcheck.facts_of(res, {})
    outcome = stepcheck.Outcome()
    with socket.socket() as a, socket.socket() as b:
        for sock, via, seen in ((a, "127.0.0.1", "127.0.0.1"), (b, "10.0.0.5", "192.0.2.1")):
            facts = {**stepcheck.facts_of(res, {}), "rank": 1, "node": "n2", "via": via}
            outcome.arrivals.append(stepcheck.Arrival(sock, seen, facts, 0.1))
        ok, lines = stepcheck.report(res, own, outcome)
    assert not ok
    assert lines[1] == "  rank 1 started 2 times: by n2 (127.0.0.1), n2 (10.0.0.5, seen as " \
        "192.0.2.1) (the step's layout puts it on n2)"
    assert lines[2] == "  1 rank 2 (expected on n2) never connected to 127.0.0.1:20000"


def test_a_rank_outside_the_step_is_named() -> None:
    env = step([1, 2], 20000)[0]
    res = resolve(env, ephemeral_range=None, rivals=None)
    own = stepcheck.facts_of(res, {})
    outcome = stepcheck.Outcome()
    with socket.socket() as a, socket.socket() as b:
        for sock, rank in ((a, 1), (b, 7)):  # all it says agrees with rank 0 but its rank
            facts = {**own, "rank": rank, "node": "n2"}
            outcome.arrivals.append(stepcheck.Arrival(sock, "127.0.0.1", facts, 0.1))
        ok, lines = stepcheck.report(res, own, outcome)
    assert not ok
    assert lines[1:] == ["  1 task claimed rank 7, not a rank of this step of 3",
                         "  1 rank 2 (expected on n2) never connected to 127.0.0.1:20000"]
