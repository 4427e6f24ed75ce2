"""The resolver over synthetic Slurm environments: every rank of random steps, the context
(local, batch script, interactive step, torchrun), and malformed input."""

from __future__ import annotations

import json
import os
import random
import tempfile

import pytest
import synth
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import SlurmEnvError

EPHEMERAL = (32768, 60999)
TORCH = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
         "NNODES")


def resolve(env: dict[str, str], **options: object) -> slurmenv.Resolution:
    options.setdefault("ephemeral_range", EPHEMERAL)
    return slurmenv.resolve(env, **options)  # type: ignore[arg-type]


def distributed(res: slurmenv.Resolution) -> dict[str, str]:
    """The distributed variables of ``env("torch")`` (without per-task thread/GPU settings)."""
    values = res.env("torch")
    return {name: values[name] for name in (*TORCH, "MASTER_ADDR", "MASTER_PORT")}


# --- random steps ---------------------------------------------------------------------------

@st.composite
def group(draw: st.DrawFn, index: int) -> tuple[str, list[str]]:
    """A node list part like ``rackb[1-2]-n[09-10]-ib`` and its names (written out here)."""
    prefix = draw(st.sampled_from(["n", "node", "rack", "gpu-", "c"])) + "abcdef"[index]
    ranges = []
    for _ in range(draw(st.integers(0, 2))):
        lo = draw(st.integers(0, 110))
        size = draw(st.integers(1, 3))
        width = draw(st.integers(len(str(lo)), 3))
        ranges.append((lo, lo + size - 1, width))
    mid = draw(st.sampled_from(["", "-n", "x"]))
    suffix = draw(st.sampled_from(["", "-ib"]))
    if not ranges:
        return prefix + suffix, [prefix + suffix]
    text = prefix + mid.join(
        f"[{str(lo).zfill(w)}-{str(hi).zfill(w)}]" if hi > lo else f"[{str(lo).zfill(w)}]"
        for lo, hi, w in ranges
    ) + suffix
    names = [""]
    for k, (lo, hi, w) in enumerate(ranges):
        sep = mid if k else ""
        names = [n + sep + str(i).zfill(w) for n in names for i in range(lo, hi + 1)]
    return text, [prefix + n + suffix for n in names]


@st.composite
def steps(draw: st.DrawFn) -> dict[str, object]:
    parts = [draw(group(i)) for i in range(draw(st.integers(1, 3)))]
    hosts = [name for _, names in parts for name in names]
    assume(len(hosts) <= 10 and len(set(hosts)) == len(hosts))
    sep = draw(st.sampled_from([",", " ", "\n"]))
    counts = draw(st.lists(st.integers(1, 4), min_size=len(hosts), max_size=len(hosts)))
    dist = draw(st.sampled_from(
        [None, "block", "cyclic", "plane", "block:cyclic", "cyclic:cyclic,pack", "arbitrary"]
    ))
    plane = draw(st.integers(1, 4)) if dist == "plane" else None
    hostfile = None
    if dist == "arbitrary":
        hostfile = draw(st.permutations([h for h, c in zip(hosts, counts) for _ in range(c)]))
    return {
        "hosts": hosts,
        "counts": counts,
        "nodelist": sep.join(text for text, _ in parts) if draw(st.booleans()) else None,
        "distribution": dist,
        "plane": plane,
        "hostfile_hosts": hostfile,
        "job_id": draw(st.integers(1, 10**8)),
        "step_id": draw(st.integers(0, 300)),
        "template": draw(st.sampled_from([None, "{host}-ib", "{host}.fabric"])),
    }


@given(steps())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
def test_every_rank_agrees(step: dict[str, object]) -> None:
    hosts: list[str] = step["hosts"]  # type: ignore[assignment]
    counts: list[int] = step["counts"]  # type: ignore[assignment]
    template: str | None = step["template"]  # type: ignore[assignment]
    dist, plane, hostfile = step["distribution"], step["plane"], step["hostfile_hosts"]
    extra = {} if template is None else {"SLURMENV_ADDR_TEMPLATE": template}
    with tempfile.TemporaryDirectory() as tmp:
        if hostfile is not None:
            path = os.path.join(tmp, "hostfile")
            with open(path, "w") as handle:
                handle.write("\n".join(hostfile) + "\n")  # type: ignore[arg-type]
            extra["SLURM_HOSTFILE"] = path
        envs = synth.step_envs(
            hosts, counts, **{k: v for k, v in step.items() if k not in ("hosts", "counts", "template")},
            **extra,
        )
        results = [resolve(env) for env in envs]
        configs = [res.tf_config for res in results]
    def address(host: str) -> str:
        return host if template is None else template.format(host=host)

    first = results[0]
    for rank, (res, config) in enumerate(zip(results, configs)):
        want = synth.expected(hosts, counts, rank, dist, plane, hostfile)  # type: ignore[arg-type]
        values = res.env("torch")
        assert {name: int(values[name]) for name in TORCH} == {name: want[name] for name in TORCH}
        # everyone agrees on the rendezvous and the worker list
        assert values["MASTER_ADDR"] == address(str(want["MASTER_NODE"])) == first.master_addr
        assert res.master_port == first.master_port
        assert config["cluster"] == configs[0]["cluster"]
        assert config["task"] == {"type": "worker", "index": rank}
        # this rank's own entry is on its own node
        own_host, own_port = config["cluster"]["worker"][rank].rsplit(":", 1)
        assert own_host == address(str(want["HOST"]))
        assert int(own_port) != res.master_port
        assert res.hostname == want["HOST"]
        assert res.is_chief == (rank == 0)
    assert list(first.hosts) == hosts
    node_of, local_of = synth.reference_layout(counts, dist, plane, hosts, hostfile)  # type: ignore[arg-type]
    assert list(first.node_of) == node_of and list(first.local_of) == local_of
    # ports of the tasks sharing a node are distinct
    workers = configs[0]["cluster"]["worker"]
    assert len(set(workers)) == len(workers)


# --- context ----------------------------------------------------------------------------------

def test_not_under_slurm_is_one_local_process() -> None:
    res = resolve(synth.clean_env({"PATH": "/usr/bin", "HOME": "/root"}))
    assert res.launcher == "local"
    assert distributed(res) == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": "0", "GROUP_RANK": "0", "NNODES": "1", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(res.master_port),
    }
    assert 10000 <= res.master_port <= 32767
    assert res.tf_config["cluster"]["worker"][0].startswith("127.0.0.1:")


def batch_script_env(**extra: str) -> dict[str, str]:
    """What a batch script sees: job variables, SLURM_PROCID=0, no step."""
    env = synth.step_env(["n1", "n2"], [4, 4], 0)
    for name in list(env):
        if name.startswith("SLURM_STEP") or name in ("SLURM_GTIDS", "SLURM_LOCALID"):
            del env[name]
    env.update(extra)
    return env


@pytest.mark.parametrize("step", [None, "4294967291", "4294967292", "4294967293", "-5", "-4", "-3"])
def test_batch_script_refused(step: str | None) -> None:
    env = batch_script_env() if step is None else batch_script_env(SLURM_STEP_ID=step)
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    text = str(info.value)
    assert "srun -K slurmenv exec" in text and "rank 0" in text
    assert info.value.variable == "SLURM_STEP_ID"


@pytest.mark.parametrize("step", [None, "4294967291", "-5"])
def test_batch_script_of_one_task_is_one_process_on_every_release(step: str | None) -> None:
    """sbatch -n1: 22.05 leaves SLURM_STEP_ID unset in the batch script, 26.05 sets -5
    (SLURM_BATCH_SCRIPT printed signed) in SLURM_STEP_ID and SLURM_STEPID."""
    env = synth.step_env(["n1"], [1], 0)
    for name in list(env):
        if name.startswith("SLURM_STEP") or name in ("SLURM_GTIDS", "SLURM_LOCALID"):
            del env[name]
    if step is not None:
        env.update(SLURM_STEP_ID=step, SLURM_STEPID=step)
    res = resolve(env)
    assert res.launcher == "slurm-one-task-job"
    assert (res.rank, res.world_size) == (0, 1)


def test_multi_task_batch_script_of_26_05_is_outside_any_step() -> None:
    env = batch_script_env(SLURM_STEP_ID="-5", SLURM_STEPID="-5")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert "outside any job step" in str(info.value)
    assert (info.value.variable, info.value.value) == ("SLURM_STEP_ID", "-5")


def test_special_step_ids_match_slurm_h() -> None:
    """slurm/slurm.h of 22.05 and 26.05: SLURM_PENDING_STEP 0xfffffffd, SLURM_EXTERN_CONT
    0xfffffffc, SLURM_BATCH_SCRIPT 0xfffffffb, SLURM_INTERACTIVE_STEP 0xfffffffa."""
    from slurmenv.launchers import base

    assert (base.PENDING_STEP, base.EXTERN_STEP, base.BATCH_STEP, base.INTERACTIVE_STEP) == (
        4294967293, 4294967292, 4294967291, 4294967290)
    assert base.printed(base.BATCH_STEP) == ("4294967291", "-5")


@pytest.mark.parametrize("step", [str(synth.INTERACTIVE_STEP_ID), "-6"])
def test_interactive_step_signed_or_not_is_one_process(step: str) -> None:
    env = synth.step_env(["n1"], [1], 0, step_id=step)
    assert resolve(env).launcher == "slurm-interactive-step"


def test_interactive_step_is_one_process() -> None:
    env = synth.step_env(["n1"], [1], 0, step_id=synth.INTERACTIVE_STEP_ID)
    res = resolve(env)
    assert res.launcher == "slurm-interactive-step"
    assert (res.rank, res.world_size, res.master_addr) == (0, 1, "127.0.0.1")
    assert res.step_id == "4294967290"


def test_torchrun_inside_srun_wins_and_is_reported() -> None:
    env = synth.step_env(["n1", "n2"], [1, 1], 1, TORCHELASTIC_RUN_ID="abc", RANK="5",
                         LOCAL_RANK="1", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4", GROUP_RANK="1",
                         GROUP_WORLD_SIZE="2", MASTER_ADDR="n1", MASTER_PORT="29500")
    # the worker shows its agent (issue 42: without it, refused; tests/test_world_of_one.py)
    res = resolve(env, enclosure="torchrun (pid 7) is an ancestor of this process")
    assert res.launcher == "torchrun"
    assert distributed(res) == {
        "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
        "NODE_RANK": "1", "GROUP_RANK": "1", "NNODES": "2", "MASTER_ADDR": "n1",
        "MASTER_PORT": "29500",
    }
    assert any("torchrun" in note for note in res.notes)
    assert "torchrun" in res.sources["RANK"]


def test_hand_set_values_outside_slurm_are_reported() -> None:
    env = synth.clean_env({}, RANK="1", WORLD_SIZE="2", MASTER_ADDR="10.0.0.1",
                          MASTER_PORT="23456", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    res = resolve(env)
    assert res.launcher == "preset"
    assert (res.rank, res.world_size, res.master_addr, res.master_port) == (1, 2, "10.0.0.1",
                                                                            23456)


def test_inherited_rank_that_disagrees_is_an_error() -> None:
    # the batch script exported RANK=$SLURM_PROCID (0) for every task
    env = synth.step_env(["n1", "n2"], [2, 2], 3, RANK="0", WORLD_SIZE="4",
                         MASTER_ADDR="n1", MASTER_PORT="23456")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "RANK" and info.value.value == "0"
    assert "batch script" in str(info.value)
    # the same variables agreeing with this task are accepted and noted
    env["RANK"] = "3"
    res = resolve(env)
    assert res.rank == 3 and any("RANK=3" in note for note in res.notes)


def test_job_level_values_never_leak_into_the_step() -> None:
    hosts, counts = ["s1", "s2"], [3, 1]
    conflicting: dict[str, str | None] = {
        "SLURM_NTASKS": "999", "SLURM_NPROCS": "999", "SLURM_NNODES": "50",
        "SLURM_JOB_NUM_NODES": "50", "SLURM_JOB_NODELIST": "other[1-50]",
        "SLURM_NODELIST": "other[1-50]", "SLURM_TASKS_PER_NODE": "20(x50)",
        "SLURM_JOB_CPUS_PER_NODE": "20(x50)",
    }
    for rank in range(4):
        res = resolve(synth.step_env(hosts, counts, rank, **conflicting))
        want = synth.expected(hosts, counts, rank)
        assert {k: int(v) for k, v in res.env("torch").items() if k in TORCH} == {
            k: want[k] for k in TORCH}
        assert res.master_addr == "s1"
        workers = res.tf_config["cluster"]["worker"]
        assert [w.split(":")[0] for w in workers] == ["s1", "s1", "s1", "s2"]
    assert "other" not in str(res.to_dict())


@st.composite
def arbitrary_with_duplicates(draw: st.DrawFn) -> tuple[list[str], list[int], list[str]]:
    """-m arbitrary, where Slurm allows a host name many times (one host file line per task),
    interleaved in any order, on up to 40 nodes."""
    nnodes = draw(st.integers(1, 40))
    hosts = [f"n{i:02d}" for i in range(nnodes)]
    counts = draw(st.lists(st.integers(1, 5), min_size=nnodes, max_size=nnodes))
    lines = draw(st.permutations([h for h, c in zip(hosts, counts) for _ in range(c)]))
    assume(len(set(lines)) < len(lines))  # some host named more than once
    return hosts, counts, lines


@given(arbitrary_with_duplicates(), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_host_file_with_repeated_names(
    case: tuple[list[str], list[int], list[str]], rng: random.Random
) -> None:
    hosts, counts, lines = case
    node_of, local_of = synth.reference_layout(counts, "arbitrary", None, hosts, lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hostfile")
        with open(path, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        ntasks = len(lines)
        for rank in sorted({0, ntasks - 1, rng.randrange(ntasks)}):
            env = synth.step_env(hosts, counts, rank, "arbitrary", hostfile_hosts=lines,
                                 SLURM_HOSTFILE=path)
            res = resolve(env)
            want = synth.expected(hosts, counts, rank, "arbitrary", None, lines)
            assert {n: int(v) for n, v in res.env("torch").items() if n in TORCH} == {
                n: want[n] for n in TORCH}
            assert res.master_addr == lines[0] == want["MASTER_NODE"]
            workers = res.tf_config["cluster"]["worker"]
            assert [w.rsplit(":", 1)[0] for w in workers] == lines
            assert len(set(workers)) == len(workers)
            assert (list(res.node_of), list(res.local_of)) == (node_of, local_of)


def test_step_node_list_naming_a_node_twice_is_refused() -> None:
    # Slurm never lists a node twice for a step; accepting it gave two ranks one host:port.
    env = synth.step_env(["n1", "n1"], [2, 2], 0, nodelist="n1,n1")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "SLURM_STEP_NODELIST"
    assert "n1,n1" in str(info.value)
    assert "do not set them by hand" in str(info.value)


def test_step_node_list_repeating_a_node_in_a_range_is_refused() -> None:
    env = synth.step_env(["n1", "n2", "n1"], [1, 1, 1], 0, nodelist="n[1-2],n1")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "SLURM_STEP_NODELIST"
    assert "names 3 nodes but only 2 different ones" in str(info.value)


def test_topology_ordered_layout_is_detected() -> None:
    # Slurm 26.05 with a topology plugin: block layout in another node order. This task's own
    # SLURM_NODEID says rank 0 is on the second node; slurmenv must not guess.
    env = synth.step_env(["a", "b"], [2, 2], 0, SLURM_NODEID="1", SLURMD_NODENAME="b",
                         SLURM_GTIDS="0,1")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "SLURM_DISTRIBUTION"
    # -m block is laid out the same way: the fix names layouts that are not
    assert "-m cyclic" in str(info.value) and "-m block" not in str(info.value)
    assert "where it puts ranks 0,1" in str(info.value)  # the ranks of the node it names


# --- malformed input ----------------------------------------------------------------------------

HOSTS, COUNTS = ["n1", "n2"], [2, 2]

BAD = [
    ("SLURM_STEP_NODELIST", "n[1-2"),
    ("SLURM_STEP_NODELIST", "n[2-1]"),
    ("SLURM_STEP_NODELIST", "n[1-3]"),        # 3 nodes, SLURM_STEP_NUM_NODES=2
    ("SLURM_STEP_NODELIST", ""),
    ("SLURM_STEP_NODELIST", None),
    ("SLURM_STEP_NUM_NODES", "two"),
    ("SLURM_STEP_NUM_NODES", "0"),
    ("SLURM_STEP_NUM_NODES", None),
    ("SLURM_STEP_NUM_TASKS", "-4"),
    ("SLURM_STEP_NUM_TASKS", None),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x0)"),
    ("SLURM_STEP_TASKS_PER_NODE", "0"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x3)"),   # 3 nodes
    ("SLURM_STEP_TASKS_PER_NODE", "3,2"),     # 5 tasks
    ("SLURM_STEP_TASKS_PER_NODE", None),
    ("SLURM_PROCID", "4"),
    ("SLURM_PROCID", "-1"),
    ("SLURM_PROCID", "x"),
    ("SLURM_PROCID", None),
    ("SLURM_LOCALID", "2"),
    ("SLURM_LOCALID", None),
    ("SLURM_NODEID", "2"),
    ("SLURM_NODEID", None),
    ("SLURM_GTIDS", "2,3,9"),
    ("SLURM_GTIDS", "2,x"),
    ("SLURMD_NODENAME", "elsewhere"),
    ("SLURM_DISTRIBUTION", "spread"),
    ("SLURM_DIST_PLANESIZE", "0"),            # with SLURM_DISTRIBUTION=plane, below
    ("SLURM_JOB_ID", "abc"),
    ("SLURM_STEP_ID", "x"),
    ("SLURMENV_PORT", "80"),
    ("SLURMENV_PORT_RANGE", "1-2"),
    ("SLURMENV_ADDR_TEMPLATE", "{nohost}"),
    ("SLURMENV_ADDR_TEMPLATE", "{host.upper}"),
    ("SLURMENV_ADDR_TEMPLATE", "{host:>999999999999}"),
    ("SLURMENV_TF_CHIEF", "maybe"),
    ("SLURMENV_RESOLVE_ADDR", "perhaps"),
    ("MASTER_PORT", "99999"),
    ("SLURM_STEP_RESV_PORTS", "x"),
]


def bad_env(variable: str, value: str | None) -> dict[str, str]:
    extra: dict[str, str | None] = {variable: value}
    if variable == "SLURM_DIST_PLANESIZE":
        extra["SLURM_DISTRIBUTION"] = "plane"
    if variable == "SLURM_STEP_ID":
        extra["SLURM_STEPID"] = None
    if variable == "SLURM_JOB_ID":
        extra["SLURM_JOBID"] = None
    return synth.step_env(HOSTS, COUNTS, 2, **extra)


@pytest.mark.parametrize(("variable", "value"), BAD)
def test_malformed_input_names_variable_and_value(variable: str, value: str | None) -> None:
    with pytest.raises(SlurmEnvError) as info:
        resolve(bad_env(variable, value)).env("all")
    err = info.value
    assert err.variable == variable
    shown = "(unset)" if not value else repr(value)
    assert f"{variable}={shown}" in str(err) or f"{variable}=''" in str(err)
    assert err.fix


@given(
    st.sampled_from([
        "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
        "SLURM_GTIDS", "SLURM_DISTRIBUTION", "SLURM_DIST_PLANESIZE", "SLURM_JOB_ID",
        "SLURM_STEP_ID", "SLURMENV_PORT", "SLURMENV_PORT_RANGE", "SLURMENV_ADDR_TEMPLATE",
        "SLURM_STEP_RESV_PORTS", "MASTER_PORT", "SLURMD_NODENAME", "SLURMENV_TF_CHIEF",
    ]),
    st.one_of(
        st.text(alphabet=st.sampled_from("0123456789,-()[]x{}:=host n\n\u00b2\u0663 "),
                max_size=12),
        # numbers and ranges, which many of these variables accept: the answer is checked
        st.from_regex(r"\s?[0-9]{1,6}(-[0-9]{1,6})?(,[0-9]{1,5})?\s?", fullmatch=True),
        st.sampled_from(["{host}-ib", "x{host}", "1", "yes", "20000-20010", "1024-4023",
                         "n2", "block", "cyclic", "plane", "block:block", "0,1", "2,3"]),
    ),
)
@settings(max_examples=500, deadline=None)
def test_garbage_gives_a_clear_error_or_a_consistent_answer(variable: str, value: str) -> None:
    env = synth.step_env(HOSTS, COUNTS, 2, **{variable: value})
    try:
        res = resolve(env)
        values = res.env("all")
    except SlurmEnvError as err:
        assert err.variable and err.fix
        return
    # accepted: then it must still be this task's correct answer
    assert values["RANK"] == "2" and values["WORLD_SIZE"] == "4"
    # every output, and the layout, as the reference and the documented rules give them
    want = reference_outputs(variable, value)
    baseline = resolve(synth.step_env(HOSTS, COUNTS, 2)).env("all")
    assert set(values) == set(baseline)
    for name in set(values) - set(want):  # thread counts: from this machine, not the step
        want[name] = baseline[name]
    assert {k: v for k, v in values.items() if k != "TF_CONFIG"} == {
        k: v for k, v in want.items() if k != "TF_CONFIG"}
    assert json.loads(values["TF_CONFIG"]) == json.loads(want["TF_CONFIG"])
    node_of, local_of = synth.reference_layout(COUNTS, None, None, HOSTS)
    assert (list(res.hosts), list(res.node_of), list(res.local_of)) == (HOSTS, node_of, local_of)
    assert list(res.local_of) == [local_of[r] for r in range(sum(COUNTS))]


def reference_ports(variable: str, value: str) -> tuple[int, list[int]]:
    """(MASTER_PORT, the TensorFlow port of each local rank) for rank 2 of HOSTS/COUNTS with
    ``variable=value``, by the README's rules ("How the port is chosen"), not slurmenv's code.
    An empty value counts as unset (the SLURM_JOBID/SLURM_STEPID spellings then hold the
    defaults). A value these rules give no meaning to fails the test."""
    text = value.strip()
    per_node = max(COUNTS)
    if text and variable in ("SLURMENV_PORT", "MASTER_PORT"):
        port = int(text)
        return port, [port + 1 + k for k in range(per_node)]
    if text and variable == "SLURM_STEP_RESV_PORTS":
        reserved: list[int] = []
        for part in text.split(","):
            first, _, last = part.partition("-")
            reserved += range(int(first), int(last or first) + 1)
        return reserved[0], reserved[1: 1 + per_node]
    lo, hi = 10000, 32767
    if text and variable == "SLURMENV_PORT_RANGE":
        lo, hi = (int(x) for x in text.split("-"))
    job = int(text) if text and variable == "SLURM_JOB_ID" else synth.DEFAULT_JOB_ID
    step = int(text) if text and variable == "SLURM_STEP_ID" else synth.DEFAULT_STEP_ID
    width = (hi - lo + 1) // 1000
    block = lo + (job % 1000) * width
    return block + step % width, [block + (step + 1 + k) % width for k in range(per_node)]


def reference_outputs(variable: str, value: str) -> dict[str, str]:
    """Every distributed output of rank 2 of HOSTS/COUNTS with ``variable=value`` accepted."""
    text = value.strip()
    want = synth.expected(HOSTS, COUNTS, 2)
    node_of, local_of = synth.reference_layout(COUNTS, None, None, HOSTS)
    master_port, tf_ports = reference_ports(variable, value)
    template = text if variable == "SLURMENV_ADDR_TEMPLATE" and text else "{host}"
    workers = [f"{template.format(host=HOSTS[n])}:{tf_ports[k]}"
               for n, k in zip(node_of, local_of)]
    chief = variable == "SLURMENV_TF_CHIEF" and text.lower() in ("1", "true", "yes", "on")
    cluster = {"chief": workers[:1], "worker": workers[1:]} if chief else {"worker": workers}
    task = {"type": "worker", "index": 1 if chief else 2}
    return {
        **{name: str(want[name]) for name in TORCH},
        "MASTER_ADDR": template.format(host=want["MASTER_NODE"]),
        "MASTER_PORT": str(master_port),
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": task}),
    }


def test_reference_outputs_match_a_plain_step() -> None:
    """The reference above against a hand-written answer (job 4242, step 0: block 15324)."""
    want = reference_outputs("SLURM_JOB_ID", "")
    assert want["MASTER_PORT"] == "15324"
    assert json.loads(want["TF_CONFIG"])["cluster"]["worker"] == [
        "n1:15325", "n1:15326", "n2:15325", "n2:15326"]
    assert reference_outputs("SLURMENV_PORT", "3274")["MASTER_PORT"] == "3274"
    assert reference_ports("SLURM_STEP_RESV_PORTS", "20000-20002") == (20000, [20001, 20002])
    assert reference_ports("SLURM_STEP_ID", "23") == (15324 + 1, [15324 + 2, 15324 + 3])
