"""Ports: the job/step formula, reserved ports, overrides and the ephemeral range."""

from __future__ import annotations

from pathlib import Path

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import SlurmEnvError, ports

EPHEMERAL = (32768, 60999)  # Linux's default
HOSTS = ["n1", "n2", "n3"]
COUNTS = [3, 2, 3]


def resolve(env: dict[str, str], **options: object) -> slurmenv.Resolution:
    options.setdefault("ephemeral_range", EPHEMERAL)
    return slurmenv.resolve(env, **options)  # type: ignore[arg-type]


def all_ports(job: int, step: int, tasks: int, port_range: tuple[int, int] = (10000, 32767)
              ) -> set[int]:
    plan = ports.block_ports(job, step, port_range, tasks)
    return {plan.master, *plan.tf}


def test_formula_values() -> None:
    # the documented formula: W = 22768 // 1000 = 22, job block 4242 % 1000 = 242
    plan = ports.block_ports(4242, 0, (10000, 32767), 3)
    assert plan.master == 10000 + 242 * 22
    assert plan.tf == [15325, 15326, 15327]
    # step 5 is offset 5 of the block; TF ports wrap inside the block
    plan = ports.block_ports(4242, 20, (10000, 32767), 3)
    assert plan.master == 15324 + 20
    assert plan.tf == [15324 + 21, 15324 + 0, 15324 + 1]
    assert "4242" in plan.source


def test_every_task_of_a_step_gets_the_same_master_port() -> None:
    envs = synth.step_envs(HOSTS, COUNTS, job_id=987654, step_id=3)
    masters = {resolve(env).master_port for env in envs}
    assert masters == {10000 + 654 * 22 + 3}


JOBS = st.integers(1, 10**9)
TASKS = st.integers(1, 21)


@given(JOBS, st.integers(1, 999), st.integers(0, 10**6), st.integers(0, 10**6), TASKS, TASKS)
@settings(max_examples=300, deadline=None)
def test_jobs_closer_than_1000_never_share_a_port(
    job: int, delta: int, step_a: int, step_b: int, tasks_a: int, tasks_b: int
) -> None:
    assert not all_ports(job, step_a, tasks_a) & all_ports(job + delta, step_b, tasks_b)


@given(JOBS, st.integers(0, 10**6), st.integers(1, 21))
@settings(max_examples=200, deadline=None)
def test_concurrent_steps_never_share_master_port(job: int, step: int, delta: int) -> None:
    # step IDs within the block width (22 by default) of each other
    a = ports.block_ports(job, step, (10000, 32767), 1).master
    b = ports.block_ports(job, step + delta, (10000, 32767), 1).master
    assert a != b


@st.composite
def port_ranges(draw: st.DrawFn) -> tuple[int, int]:
    lo = draw(st.integers(1024, 32768 - 2000))
    hi = draw(st.integers(lo + 1999, 32767))
    return lo, hi


@given(port_ranges(), JOBS, st.integers(0, 10**6), st.integers(1, 21))
@settings(max_examples=300, deadline=None)
def test_ports_stay_in_the_range(rng: tuple[int, int], job: int, step: int, tasks: int) -> None:
    plan = ports.block_ports(job, step, rng, tasks)
    width = (rng[1] - rng[0] + 1) // 1000
    every = [plan.master, *plan.tf]
    assert all(1024 <= rng[0] <= p <= rng[1] < EPHEMERAL[0] for p in every)
    assert len(set(every)) == len(every)  # TF ports distinct and != MASTER_PORT
    assert len(plan.tf) == min(tasks, width - 1)


@given(port_ranges(), JOBS, st.integers(0, 2**32 - 1), st.integers(0, 10**6), TASKS)
@settings(max_examples=300, deadline=None)
def test_a_launch_port_is_in_the_range_and_never_a_port_of_the_jobs_steps(
    rng: tuple[int, int], job: int, launch: int, step: int, tasks: int
) -> None:
    port = ports.launch_ports(job, launch, rng).master
    assert rng[0] <= port <= rng[1]
    assert port not in all_ports(job, step, tasks, rng)


@given(port_ranges(), JOBS, st.integers(0, 2**32 - 1), st.integers(1, 2**32 - 1))
@settings(max_examples=300, deadline=None)
def test_two_launches_of_a_job_meet_only_when_their_ids_are_equal_modulo_the_span(
    rng: tuple[int, int], job: int, launch: int, delta: int
) -> None:
    span = rng[1] - rng[0] + 1 - (rng[1] - rng[0] + 1) // 1000
    a = ports.launch_ports(job, launch, rng).master
    b = ports.launch_ports(job, launch + delta, rng).master
    assert (a == b) == (delta % span == 0)


def test_launch_port_values() -> None:
    # 22768 ports, job 4242's block 15324-15345 left out: 22746 ports; launch 70000 -> index
    # 70000 % 22746 = 1762, below the block: 11762; launch 6000 -> 16000, after the block: +22
    assert ports.launch_ports(4242, 70000, (10000, 32767)).master == 11762
    assert ports.launch_ports(4242, 5324, (10000, 32767)).master == 15324 + 22
    assert ports.launch_ports(4242, 5323, (10000, 32767)).master == 15323
    assert ports.launch_ports(4242, 22745, (10000, 32767)).master == 32767


def test_tf_ports_distinct_per_node_and_not_master() -> None:
    envs = synth.step_envs(HOSTS, COUNTS, distribution="cyclic")
    res = resolve(envs[0])
    workers = res.tf_config["cluster"]["worker"]
    for host in HOSTS:
        here = [int(w.rsplit(":", 1)[1]) for w in workers if w.rsplit(":", 1)[0] == host]
        assert len(here) == COUNTS[HOSTS.index(host)]
        assert len(set(here)) == len(here)
        assert res.master_port not in here


def test_master_port_inside_ephemeral_range_refused() -> None:
    env = synth.step_env(HOSTS, COUNTS, 0)
    # the default range is below Linux's default ephemeral range
    assert resolve(env, ephemeral_range=EPHEMERAL).master_port < EPHEMERAL[0]
    # an explicit port inside it is refused
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, port=40000)
    # the given port is at fault (issue 10: errors name the variable really at fault)
    assert "ephemeral" in str(info.value) and info.value.variable == "--port"
    assert "below 32768" in str(info.value.fix)
    # ephemeral_range=None skips the check
    assert resolve(env, port=40000, ephemeral_range=None).master_port == 40000


@pytest.mark.parametrize("job", [4242, 999])  # one port below 32768 either way
@pytest.mark.parametrize(
    ("port_range", "ephemeral"),
    [
        ("30000-40000", EPHEMERAL),          # custom range reaching into the ephemeral range
        (None, (20000, 60999)),              # custom ephemeral range overlapping the default
    ],
)
def test_range_overlapping_ephemeral_refused_whatever_the_job(
    job: int, port_range: str | None, ephemeral: tuple[int, int]
) -> None:
    env = synth.step_env(HOSTS, COUNTS, 0, job_id=job)
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, port_range=port_range, ephemeral_range=ephemeral)
    text = str(info.value)
    assert "ephemeral" in text and f"{ephemeral[0]}-{ephemeral[1]}" in text
    assert info.value.variable == "SLURMENV_PORT_RANGE"


def test_ephemeral_range_read_from_proc_format(tmp_path: Path) -> None:
    good = tmp_path / "range"
    good.write_text("40000\t50000\n")
    assert ports.ephemeral_range(str(good)) == (40000, 50000)
    bad = tmp_path / "bad"
    bad.write_text("nonsense\n")
    assert ports.ephemeral_range(str(bad)) is None
    assert ports.ephemeral_range(str(tmp_path / "missing")) is None


def test_resv_ports_used() -> None:
    for rank in range(sum(COUNTS)):
        env = synth.step_env(HOSTS, COUNTS, rank, SLURM_STEP_RESV_PORTS="12000-12003")
        res = resolve(env)
        assert res.master_port == 12000
        assert "SLURM_STEP_RESV_PORTS" in res.sources["MASTER_PORT"]
    workers = res.tf_config["cluster"]["worker"]
    assert workers == ["n1:12001", "n1:12002", "n1:12003", "n2:12001", "n2:12002",
                       "n3:12001", "n3:12002", "n3:12003"]


def test_resv_port_list_with_commas() -> None:
    env = synth.step_env(["a"], [2], 1, SLURM_STEP_RESV_PORTS="12000,12005-12006")
    res = resolve(env)
    assert res.master_port == 12000
    assert res.tf_config["cluster"]["worker"] == ["a:12005", "a:12006"]


def test_too_few_resv_ports_refuses_tf_but_not_torch() -> None:
    env = synth.step_env(HOSTS, COUNTS, 0, SLURM_STEP_RESV_PORTS="12000-12001")
    res = resolve(env)
    assert res.env("torch")["MASTER_PORT"] == "12000"
    with pytest.raises(SlurmEnvError) as info:
        res.env("all")
    assert "TF_CONFIG needs 3 ports per node" in str(info.value)


@pytest.mark.parametrize("value", ["12003-12000", "0-3", "x", "12000-", "70000", "1-2000",
                                   "12000,,12001", "\u00b9\u00b2000"])
def test_bad_resv_ports(value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 0, SLURM_STEP_RESV_PORTS=value)
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "SLURM_STEP_RESV_PORTS"
    assert repr(value) in str(info.value)


def test_override_order() -> None:
    env = synth.step_env(HOSTS, COUNTS, 4, SLURM_STEP_RESV_PORTS="12000-12003")
    assert resolve(env).master_port == 12000
    env["MASTER_PORT"] = "23456"
    res = resolve(env)
    assert res.master_port == 23456 and "MASTER_PORT=23456" in res.sources["MASTER_PORT"]
    env["SLURMENV_PORT"] = "24567"
    assert resolve(env).master_port == 24567
    res = resolve(env, port=25678)
    assert res.master_port == 25678
    # TF ports follow the given port, one per local rank, the same on every node
    assert res.tf_config["cluster"]["worker"][:3] == ["n1:25679", "n1:25680", "n1:25681"]


def test_port_as_string_option_is_checked() -> None:
    env = synth.step_env(HOSTS, COUNTS, 0)
    assert resolve(env, port="21000").master_port == 21000
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, port="80")
    assert info.value.variable == "--port"


def test_custom_range() -> None:
    env = synth.step_env(HOSTS, COUNTS, 0, job_id=1234, step_id=2)
    res = resolve(env, port_range="20000-31999")  # W = 12
    assert res.master_port == 20000 + 234 * 12 + 2
    env["SLURMENV_PORT_RANGE"] = "2000-3999"  # W = 2: one TF port only
    res = resolve(env)
    assert res.master_port == 2000 + 234 * 2 + 0
    assert res.env("torch")["MASTER_PORT"] == str(res.master_port)
    with pytest.raises(SlurmEnvError):
        res.env("tf")


@pytest.mark.parametrize("value", ["100-5000", "20000-20100", "abc", "20000", "30000-70000",
                                   "\u00b2-20000", "5000-3000"])
def test_bad_ranges(value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 0, SLURMENV_PORT_RANGE=value)
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "SLURMENV_PORT_RANGE"
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", ["80", "65536", "0", "x", "\u00b2", "-1"])
def test_bad_ports(value: str) -> None:
    for name in ("SLURMENV_PORT", "MASTER_PORT"):
        env = synth.step_env(HOSTS, COUNTS, 0, **{name: value})
        with pytest.raises(SlurmEnvError) as info:
            resolve(env)
        assert info.value.variable == name
        assert repr(value) in str(info.value)


@pytest.mark.parametrize(("port_range", "ephemeral"), [
    ("20000-32768", (32768, 60999)),   # its upper end is the first ephemeral port
    ("60999-65000", (32768, 60999)),   # its lower end is the last one
    ("1024-5000", (5000, 5000)),       # a range of one port
])
def test_a_range_touching_the_ephemeral_range_by_one_port_is_refused(
    port_range: str, ephemeral: tuple[int, int]
) -> None:
    """Overlap by a single port is overlap: ranges are inclusive at both ends."""
    env = synth.step_env(HOSTS, [1, 1, 1], 0, job_id=4242)
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, port_range=port_range, ephemeral_range=ephemeral)
    assert info.value.variable == "SLURMENV_PORT_RANGE" and "ephemeral" in info.value.message
    lo = int(port_range.split("-")[0])
    below = f"{lo}-{ephemeral[0] - 1}" if lo < ephemeral[0] else None
    if below:  # one port less and it is accepted
        slurmenv.resolve(env, port_range=below, ephemeral_range=ephemeral)
