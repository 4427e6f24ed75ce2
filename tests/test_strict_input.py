"""Every value parsed strictly and bounded before use (issue 26): numbers as Slurm writes them
(ASCII digits, no sign, blank, line break or leading zero), addresses as host names or IP
literals, whatever variable or option they come from."""

from __future__ import annotations

import json
from typing import Any

import pytest
import synth

import slurmenv
from slurmenv import SlurmEnvError
from slurmenv.errors import host_problem, is_number

HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
COUNTS = [2, 2, 2, 2]


def refusal(env: dict[str, str], **options: Any) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as err:
        slurmenv.resolve(env, ephemeral_range=None, **options).env("all")
    return err.value


@pytest.mark.parametrize("text", ["1", "0", "12", "4294967294"])
def test_numbers_as_slurm_writes_them(text: str) -> None:
    assert is_number(text)


@pytest.mark.parametrize("text", [" 1", "1 ", "01", "00", "1\n", "\n1", "+1", "-1", "1_0", "٤",
                                  "²", "", "1" * 21, "0x1", "1.0"])
def test_other_spellings_are_not_numbers(text: str) -> None:
    assert not is_number(text)


@pytest.mark.parametrize("value", [" 1", "01", "1\n", "+1", "1 "])
@pytest.mark.parametrize("name", ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                                  "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES",
                                  "SLURM_STEP_ID", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK"])
def test_a_slurm_number_with_a_blank_or_leading_zero_is_refused(name: str, value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1)
    real = env.get(name, "1")
    env[name] = value.replace("1", real) if name != "SLURM_CPUS_PER_TASK" else value
    if name == "SLURM_STEP_ID":
        env["SLURM_STEPID"] = env[name]
    if name == "SLURM_JOB_ID":
        env["SLURM_JOBID"] = env[name]
    err = refusal(env)
    assert err.variable == name and err.value == env[name], str(err)


@pytest.mark.parametrize("gtids", ["0, 1", " 0,1", "0,01", "0,1\n", "00,1", "0,+1"])
def test_gtids_are_read_strictly(gtids: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1, distribution="block")
    assert env["SLURM_GTIDS"] == "0,1"
    env["SLURM_GTIDS"] = gtids
    err = refusal(env)
    assert (err.variable, err.value) == ("SLURM_GTIDS", gtids)


@pytest.mark.parametrize("counts", [" 2(x4)", "2(x4) ", "02(x4)", "2(x04)", "2(x4),\n"])
def test_task_counts_are_read_strictly(counts: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1)
    env["SLURM_STEP_TASKS_PER_NODE"] = counts
    assert refusal(env).variable == "SLURM_STEP_TASKS_PER_NODE"


@pytest.mark.parametrize("name,value", [("SLURMENV_PORT", " 23456"), ("SLURMENV_PORT", "023456"),
                                        ("SLURMENV_PORT", "23456\n"),
                                        ("SLURMENV_PORT_RANGE", "20000-30000 "),
                                        ("SLURMENV_PORT_RANGE", "020000-30000"),
                                        ("MASTER_PORT", " 23456"),
                                        ("SLURM_STEP_RESV_PORTS", "12000 -12003")])
def test_ports_are_read_strictly(name: str, value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1, **{name: value})
    assert (refusal(env).variable, refusal(env).value) == (name, value)


@pytest.mark.parametrize("value", ["1 ", " 1", "01"])
def test_an_inherited_rank_is_compared_as_it_is(value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1, RANK=value)
    assert (refusal(env).variable, refusal(env).value) == ("RANK", value)


def test_every_real_dump_still_parses() -> None:
    # the values real Slurm wrote on the test cluster (tests/dumps) pass the strict rules
    from pathlib import Path

    for path in sorted((Path(__file__).parent / "dumps").glob("*.json")):
        data = json.loads(path.read_text())
        env = data["environ"]
        for name, value in env.items():
            if name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID",
                        "SLURM_JOB_ID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES",
                        "SLURM_NTASKS", "SLURM_NNODES", "SLURM_CPUS_ON_NODE"):
                assert is_number(value), (path.name, name, value)
            if name == "SLURM_GTIDS":
                assert all(is_number(x) for x in value.split(",")), (path.name, value)
        if "env" in data["resolution"]:  # resolved there: the same values here
            res = slurmenv.resolve(env, ephemeral_range=None)
            got = res.env("all")
            assert {k: got[k] for k in data["resolution"]["env"]} == data["resolution"]["env"]


# -- addresses ----------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["n1", "r1n09", "node_01", "c1-ib", "n1.fabric.example.org",
                                  "n1.example.org.", "10.1.2.17", "fd00::7", "::1", "x" * 63,
                                  ".".join(["x" * 63] * 3) + ".x" * 31])
def test_host_names_and_ip_literals(text: str) -> None:
    assert host_problem(text) is None


@pytest.mark.parametrize("text", ["", " ", "a b", "a;b", "$HOME", "*", "a..b", ".a", "-a",
                                  "a-", "x" * 64, "a." + "x" * 64, "é", "a\n", "h:x", "a/b",
                                  ".".join(["x" * 63] * 4) + ".xx", "x" * 120_000])
def test_not_host_names(text: str) -> None:
    assert host_problem(text) is not None


@pytest.mark.parametrize("value", ["a;b", "$HOME", "*", "a..b", "x" * 64, " n1", "a b"])
def test_master_addr_option_is_checked(value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1, SLURMENV_MASTER_ADDR=value)
    err = refusal(env)
    assert (err.variable, err.value) == ("SLURMENV_MASTER_ADDR", value)
    assert "host name" in err.message and err.fix
    with pytest.raises(SlurmEnvError) as api:  # the Python API's keyword: the same rule
        slurmenv.resolve(synth.step_env(HOSTS, COUNTS, 1), master_addr=value,
                         ephemeral_range=None)
    assert api.value.value == value


@pytest.mark.parametrize("template", ["{host} x", "{host};id", "{host}..ib", ".{host}",
                                      "{host}-", "{host}." + "x" * 64, "$HOME{host}",
                                      "{host}" + "x" * 120_000])
def test_templates_that_make_no_host_name_are_refused(template: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 1, SLURMENV_ADDR_TEMPLATE=template)
    err = refusal(env)
    assert (err.variable, err.value) == ("SLURMENV_ADDR_TEMPLATE", template)
    assert len(str(err)) < 2000  # the value shortened for display


def test_a_template_over_a_long_node_name_is_refused_naming_the_template() -> None:
    # each label fits alone; node name + suffix passes 63 characters
    hosts = ["n" * 60, "m" * 60]
    env = synth.step_env(hosts, [1, 1], 1, SLURMENV_ADDR_TEMPLATE="{host}-ibx")
    err = refusal(env)
    assert err.variable == "SLURMENV_ADDR_TEMPLATE" and "n" * 60 in err.message


def test_a_node_name_over_63_characters_is_refused() -> None:
    hosts = ["n1", "x" * 64]
    for rank in (0, 1):  # rank 0's node is n1: the other node's name is refused by TF_CONFIG
        env = synth.step_env(hosts, [1, 1], rank)
        res = slurmenv.resolve(env, ephemeral_range=None)
        assert res.env("torch")["MASTER_ADDR"] == "n1"
        with pytest.raises(SlurmEnvError) as err:
            res.env("tf")
        assert err.value.variable == "TF_CONFIG" and "x" * 64 in err.value.message
    env = synth.step_env(list(reversed(hosts)), [1, 1], 0)
    err = refusal(env)
    assert err.variable == "MASTER_ADDR" and "x" * 64 in err.message


@pytest.mark.parametrize("value", ["a;b", "$HOME", "*", "a..b", "x" * 64])
def test_a_launchers_master_addr_is_checked(value: str) -> None:
    # torchrun's worker, a hand-set world: MASTER_ADDR comes from the launcher's variables
    preset = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
              "NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": value, "MASTER_PORT": "23456"}
    torchrun = {**preset, "TORCHELASTIC_RUN_ID": "x", "GROUP_RANK": "1", "NNODES": "2"}
    for env in (preset, torchrun):
        err = refusal(env)
        assert (err.variable, err.value) == ("MASTER_ADDR", value), str(err)


# -- one number rule for every number (issue 36) -------------------------------------------------
@pytest.mark.parametrize("count", ["04", "+4", "4_0", "٤", " 4x", "4e0"])
def test_tf_job_counts_follow_the_number_rule(count: str) -> None:
    step = synth.step_env(HOSTS, COUNTS, 0)
    err = refusal({**step, "SLURMENV_TF_JOBS": f"chief=1,worker={count}"})
    assert (err.variable, err.value) == ("SLURMENV_TF_JOBS", f"chief=1,worker={count}")


@pytest.mark.parametrize("text", ["١٠", "1_0", "+5", "1e1", "05", "2.5", " 5"])
@pytest.mark.parametrize("where", ["flag", "variable"])
def test_step_timeouts_follow_the_number_rule(text: str, where: str) -> None:
    from slurmenv.doctor.stepcheck import timeout_from as step_timeout

    with pytest.raises(SlurmEnvError) as info:
        if where == "flag":
            step_timeout({}, text)
        else:
            step_timeout({"SLURMENV_STEP_TIMEOUT": text}, None)
    name = "--step-timeout" if where == "flag" else "SLURMENV_STEP_TIMEOUT"
    assert (info.value.variable, info.value.value) == (name, text)
    assert step_timeout({"SLURMENV_STEP_TIMEOUT": "10"}, None) == 10.0
    assert step_timeout({}, "3600") == 3600.0


def test_tf_jobs_refusals_name_the_flag_when_the_command_line_gave_them() -> None:
    step = synth.step_env(HOSTS, COUNTS, 0)
    by_flag = refusal(step, tf_jobs="chief=1,worker=3")  # the step has 8 tasks
    assert (by_flag.variable, by_flag.value) == ("--tf-jobs", "chief=1,worker=3")
    by_variable = refusal({**step, "SLURMENV_TF_JOBS": "chief=1,worker=3"})
    assert by_variable.variable == "SLURMENV_TF_JOBS"
    # the flag wins over the variable, and is the one at fault
    both = refusal({**step, "SLURMENV_TF_JOBS": "chief=1,worker=7"}, tf_jobs="chief=1,worker=3")
    assert both.variable == "--tf-jobs"
    chief = refusal(step, tf_jobs="chief=1,worker=7", tf_chief=True)
    assert chief.variable == "--tf-jobs"


def test_a_wrong_gtids_length_is_refused_naming_slurm_gtids() -> None:
    step = synth.step_env(HOSTS, COUNTS, 2)  # node 1 runs ranks 2 and 3
    for gtids in ("2", "2,3,4", "2,3,3"):
        err = refusal({**step, "SLURM_GTIDS": gtids})
        assert (err.variable, err.value) == ("SLURM_GTIDS", gtids), str(err)
