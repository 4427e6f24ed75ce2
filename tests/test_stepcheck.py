"""The step check's report and messages on loopback (slurmenv.doctor.stepcheck).

Every task of a synthetic step runs the check in a thread of this process (rank 0 listening on
127.0.0.1 through ``SLURMENV_MASTER_ADDR``); peers that do not speak the protocol are raw
sockets. The phases (all or none, skews, late and foreign tasks) are
tests/test_stepcheck_phases.py; the real cluster (several nodes, a firewall, srun) is
tests/test_real_stepcheck.py.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import free_port, step
from stepcheck_util import check_step, run_tasks

from slurmenv import SlurmEnvError, resolve
from slurmenv.doctor import stepcheck
from slurmenv.doctor.stepcheck import protocol


def exclude(hosts: str) -> str:
    return (f"  nodes at fault: {hosts}; run again without them: srun --exclude={hosts} ... (in "
            f"an allocation with other nodes), or sbatch --exclude={hosts} ...")


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
    results = check_step(step([2, 2], port), timeout=6, skip=(3,))
    ok, lines = results[0]
    assert not ok
    assert lines[0].startswith(f"slurmenv step check: 3 of 4 ranks reached 127.0.0.1:{port}")
    assert "1 rank with problems, the step is not sound" in lines[0]
    assert lines[1:] == [f"  1 rank 3 (expected on n2) never connected to 127.0.0.1:{port}",
                         exclude("n2")]
    for rank in (1, 2):
        ok, (line,) = results[rank]
        assert not ok and "the step is not sound" in line and "report on n1" in line


def test_a_node_with_another_port_is_named_with_both_values_and_their_sources() -> None:
    port, other = free_port(), free_port()
    envs = step([2, 2], port, r2={"SLURMENV_PORT": str(other)}, r3={"SLURMENV_PORT": str(other)})
    for rank, env in enumerate(envs):  # the step's port is Slurm's; n2 overrides it
        env["SLURM_STEP_RESV_PORTS"] = f"{port}-{port + 2}"
        if rank < 2:
            del env["SLURMENV_PORT"]
    results = check_step(envs, timeout=5)
    ok, lines = results[0]
    assert not ok
    given = "given port (--port or SLURMENV_PORT); TensorFlow ports follow it"
    assert lines[1] == (
        f"  2 ranks 2-3 on n2 disagree on MASTER_PORT: {other} ({given}); rank 0 has {port} "
        f"(SLURM_STEP_RESV_PORTS={port}-{port + 2} (reserved by Slurm))"
    )
    assert lines[2:] == [exclude("n2")]  # TensorFlow's ports follow MASTER_PORT: said once
    assert not results[2][0] and not results[3][0]
    assert results[1][0] is False  # every task learns the step is not sound


def test_rank0_listens_on_its_own_port_only() -> None:
    # rank 0's port is overridden too: it does not also listen on the port of the formula
    # (two steps with the same ids on one machine met there), so n2 never reaches it
    port, other = free_port(), free_port()
    env = {"SLURMENV_PORT": str(other)}
    results = check_step(step([2, 2], port, r2=env, r3=env), timeout=6)
    ok, lines = results[0]
    assert not ok
    assert lines[1] == f"  2 ranks 2-3 (expected on n2) never connected to 127.0.0.1:{port}"
    ok2, (line2,) = results[2]
    assert not ok2
    assert line2.startswith(f"slurmenv step check: rank 2 on n2: could not reach rank 0 at "
                            f"127.0.0.1:{other} within 6 s")
    assert "Connection refused" in line2


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
    assert lines[2:] == [f"  1 rank 3 (expected on n2) never connected to 127.0.0.1:{port}",
                         exclude("n2")]


def test_a_single_task_has_nothing_to_check() -> None:
    env = step([1], free_port())[0]
    ok, lines = stepcheck.run(resolve(env, ephemeral_range=None, rivals=None), env, {}, 1)
    assert ok and "1 of 1 rank" in lines[0]


# -- messages ---------------------------------------------------------------------------------
@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_split_refuses_or_waits_never_fails(data: bytes) -> None:
    for buffer in (data, stepcheck.MAGIC + data):
        try:
            out, _ = protocol.split(buffer)
        except stepcheck.ProtocolError:
            continue
        assert out is None or isinstance(out, dict)


@given(st.dictionaries(st.text(max_size=10), st.one_of(st.integers(), st.text(max_size=20),
                                                         st.none()), max_size=8))
@settings(max_examples=200, deadline=None)
def test_a_message_decodes_to_what_was_encoded(payload: dict[str, Any]) -> None:
    assert protocol.split(stepcheck.encode(payload)) == (payload, b"")


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
    assert stepcheck.timeout_from({stepcheck.TIMEOUT_VARIABLE: "5"}) == 5.0
    assert stepcheck.timeout_from({stepcheck.TIMEOUT_VARIABLE: "5"}, "7") == 7.0


@pytest.mark.parametrize("text", [" 5 ", "7.5", "05", "+5", "1e1", "1_0", "\u0661\u0660"])
def test_the_timeout_follows_the_one_number_rule(text: str) -> None:
    # the step check's own parser, not only the command line's: one rule for every number
    with pytest.raises(SlurmEnvError):
        stepcheck.parse_timeout(text)


# -- the commands -------------------------------------------------------------------------
def test_exec_preflight_starts_the_command_only_in_a_sound_step(tmp_path: Any) -> None:
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
    assert exclude("n2") + "\n" in done0.stderr
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


def judged(counts: list[int], *claims: dict[str, Any], port: int = 20000,
           environ: dict[str, str] | None = None) -> tuple[bool, list[str]]:
    """Rank 0's report on a step of ``counts`` where the tasks that arrived said ``claims``
    (each: rank 0's facts with those changes; ``via`` as rank 0 saw it unless given)."""
    env = step(counts, port)[0]
    res = resolve(env, ephemeral_range=None, rivals=None)
    own = stepcheck.facts_of(res, {})
    outcome = stepcheck.Outcome()
    for claim in claims:
        seen = claim.pop("seen", "127.0.0.1")
        told = {**own, "via": seen, **claim}
        told = {k: v for k, v in told.items() if v is not DROP}
        outcome.arrivals.append(stepcheck.Arrival(None, seen, told, 0.1))
    return stepcheck.report(res, own, outcome, environ)


DROP = object()  # a field left out of a claim


def test_a_duplicate_names_where_each_task_came_from() -> None:
    ok, lines = judged([1, 2], {"rank": 1, "node": "n2"},
                       {"rank": 1, "node": "n2", "via": "10.0.0.5", "seen": "192.0.2.1"})
    assert not ok
    assert lines[1] == "  rank 1 started 2 times: by n2 (127.0.0.1), n2 (10.0.0.5, seen as " \
        "192.0.2.1) (the step's layout puts it on n2)"
    assert lines[2:] == ["  1 rank 2 (expected on n2) never connected to 127.0.0.1:20000",
                         exclude("n2")]


@pytest.mark.parametrize("rank", [3, 4, 7])  # 3 = WORLD_SIZE: the first rank outside
def test_a_rank_outside_the_step_is_named(rank: int) -> None:
    # all it says agrees with rank 0 but its rank
    ok, lines = judged([1, 2], {"rank": 1, "node": "n2"}, {"rank": rank, "node": "n3"})
    assert not ok
    assert lines[1:] == [f"  1 task claimed rank {rank}, not a rank of this step of 3",
                         "  1 rank 2 (expected on n2) never connected to 127.0.0.1:20000",
                         exclude("n[2-3]")]


def test_a_rank_on_another_node_than_the_layouts_is_named() -> None:
    ok, lines = judged([1, 1, 1], {"rank": 1, "node": "n3"}, {"rank": 2, "node": "n3"})
    assert not ok
    assert lines[1:] == ["  rank 1 runs on n3, but the step's layout puts it on n2",
                         exclude("n3")]


@pytest.mark.parametrize("field", sorted(protocol.FIELDS))
@pytest.mark.parametrize("how", ["missing", "null"])
def test_a_field_missing_or_null_is_never_agreement(field: str, how: str) -> None:
    value = DROP if how == "missing" else None
    claim: dict[str, Any] = {"rank": 1, "node": "n2", field: value}
    if field == "rank":  # no rank: the message is refused before it is counted
        assert protocol.hello_facts({"kind": "hello", "id": {}, "task": "x",
                                     "facts": {k: v for k, v in claim.items()
                                               if v is not DROP}})[0] is None
        return
    ok, lines = judged([1, 1], claim)
    assert not ok, lines
    said = f"no {field}" if how == "missing" else f"{field} null"
    assert any(said in line and "not trusted" in line for line in lines), lines


@pytest.mark.parametrize(("field", "value"), [("nnodes", "2"), ("nnodes", True),
                                              ("tf_digest", 0), ("options", {"a": 1}),
                                              ("world_size", "2"), ("master_port", 1.5)])
def test_a_field_of_another_type_is_never_agreement(field: str, value: Any) -> None:
    ok, lines = judged([1, 1], {"rank": 1, "node": "n2", field: value})
    assert not ok and "not trusted" in lines[1], lines


def test_text_from_a_peer_stays_on_one_line() -> None:
    forged = "n2\nslurmenv step check: 2 of 2 ranks reached 127.0.0.1:20000 in 0.1 s, all agree"
    ok, lines = judged([1, 1], {"rank": 1, "node": forged, "launcher": "slurm\r\x1b[2J"})
    assert not ok
    assert all("\n" not in line and "\r" not in line and "\x1b" not in line for line in lines)
    assert lines[1] == ("  rank 1 runs on n2\\nslurmenv step check: 2 of 2 ranks reached "
                        "127.0.0.1:20000 in 0.1 s, all agree, but the step's layout puts it on n2")
    assert len(lines) == 3  # the disagreement on the launcher, no host list of such a name


def test_the_nodes_at_fault_are_one_host_list() -> None:
    ok, lines = judged([1, 1, 1, 1, 1, 1], {"rank": 1, "node": "n2"},
                       {"rank": 3, "node": "n4", "master_port": 20001})
    assert not ok
    assert lines[-1] == exclude("n[3-6]")  # n3, n5, n6 missing; n4 disagrees


def test_a_topology_plugin_is_named_when_ranks_never_came() -> None:
    environ = {"SLURM_TOPOLOGY_ADDR_PATTERN": "switch.switch.node",
               "SLURM_TOPOLOGY_ADDR": "top.s1.n1"}
    ok, lines = judged([1, 1], environ=environ)
    assert not ok
    assert lines[2] == ("  a topology plugin is on (SLURM_TOPOLOGY_ADDR_PATTERN=switch.switch.node, "
                        "this node's SLURM_TOPOLOGY_ADDR=top.s1.n1): Slurm 26.05 lays tasks out "
                        "in topology order, so the node rank 0 was expected on may be wrong")
    _, plain = judged([1, 1], environ={"SLURM_TOPOLOGY_ADDR_PATTERN": "node"})
    assert not any("topology" in line for line in plain)
    _, fine = judged([1, 1], {"rank": 1, "node": "n2"}, environ=environ)
    assert fine == [fine[0]]  # every rank came: nothing to say


def test_a_task_that_cannot_reach_rank0_names_the_topology_plugin() -> None:
    env = {**step([1, 1], free_port())[1], "SLURM_TOPOLOGY_ADDR_PATTERN": "block.node",
           "SLURM_TOPOLOGY_ADDR": "b1.n2"}
    ok, lines = stepcheck.run(resolve(env, ephemeral_range=None, rivals=None), env, {}, 1)
    assert not ok
    assert "could not reach rank 0" in lines[0]
    assert lines[1] == ("  a topology plugin is on (SLURM_TOPOLOGY_ADDR_PATTERN=block.node, this "
                        "node's SLURM_TOPOLOGY_ADDR=b1.n2): Slurm 26.05 lays tasks out in "
                        "topology order, so the node rank 0 was expected on may be wrong")
