"""GPU binding (slurmenv/gpus.py) on synthetic environments; real Slurm: test_real_gpus.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import gpus
from slurmenv.errors import SlurmEnvError
from slurmenv.resolution import gpus_per_rank

HOSTS = ["g1n1", "g1n2"]


def resolve(env: dict[str, str], **options: object) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=None, threads=False, **options)  # type: ignore[arg-type]


def gpu_env(counts: list[int], rank: int, visible: str, **extra: str) -> dict[str, str]:
    """A task of a step on HOSTS where every task of a node sees ``visible`` (Slurm's default
    for --gres=gpu:N: CUDA_VISIBLE_DEVICES and the others equal, SLURM_GPUS_ON_NODE=N)."""
    n = len(visible.split(",")) if visible else 0
    lists = dict.fromkeys(gpus.VARIABLES, visible)
    return synth.step_env(HOSTS[: len(counts)], counts, rank, distribution="block",
                          SLURM_STEP_GPUS=visible, SLURM_GPUS_ON_NODE=str(n), **{**lists, **extra})


# --- for_local_rank ---------------------------------------------------------------------------

def test_indexes_into_the_list_the_task_has() -> None:
    assert gpus.for_local_rank(["4", "5", "6", "7"], 0, 2) == ["4", "5"]
    assert gpus.for_local_rank(["4", "5", "6", "7"], 1, 2) == ["6", "7"]
    assert [gpus.for_local_rank(["4", "5", "6", "7"], k, 4) for k in range(4)] == [
        ["4"], ["5"], ["6"], ["7"]]


def test_uuids_pass_through() -> None:
    mig = ["MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0", "GPU-aa8f4a2c-1b2c", "MIG-4f1c"]
    assert gpus.for_local_rank(mig, 1, 3) == [mig[1]]


def test_remainder_is_left_unused() -> None:
    shares = [gpus.for_local_rank(["0", "1", "2"], k, 2) for k in range(2)]
    assert shares == [["0"], ["1"]]


def test_fewer_gpus_than_tasks_is_an_error() -> None:
    with pytest.raises(SlurmEnvError) as err:
        gpus.for_local_rank(["0", "1"], 2, 3, variable="ROCR_VISIBLE_DEVICES")
    assert err.value.variable == "ROCR_VISIBLE_DEVICES" and err.value.value == "0,1"
    assert "3 tasks" in str(err.value) and "--gres=gpu" in str(err.value.fix)


def test_local_rank_out_of_range() -> None:
    with pytest.raises(ValueError):
        gpus.for_local_rank(["0", "1"], 2, 2)


@given(st.lists(st.text(st.characters(blacklist_characters=","), min_size=1, max_size=8),
                min_size=1, max_size=16, unique=True), st.data())
@settings(max_examples=300)
def test_shares_are_equal_disjoint_and_in_order(visible: list[str], data: st.DataObject) -> None:
    tasks = data.draw(st.integers(1, len(visible)))
    shares = [gpus.for_local_rank(visible, k, tasks) for k in range(tasks)]
    assert {len(share) for share in shares} == {len(visible) // tasks}
    flat = [gpu for share in shares for gpu in share]
    assert flat == visible[: len(flat)]  # disjoint, in local-rank order, only the remainder left
    assert len(visible) - len(flat) == len(visible) % tasks


# --- plan: when to bind, when to leave alone ----------------------------------------------------

def test_every_gpu_list_is_narrowed_alike() -> None:
    env = gpu_env([2, 2], 1, "4,5,6,7")
    got = gpus.plan(env, 1, 2, bind=True)
    assert got.env == dict.fromkeys(gpus.VARIABLES, "6,7")
    assert got.gpus == ("6", "7")
    assert "LOCAL_RANK=1" in got.source and "CUDA_VISIBLE_DEVICES=4,5,6,7" in got.source


def test_only_the_lists_that_are_set() -> None:
    env = {"ROCR_VISIBLE_DEVICES": "0,1,2,3", "SLURM_GPUS_ON_NODE": "4"}
    assert gpus.plan(env, 0, 4, bind=True).env == {"ROCR_VISIBLE_DEVICES": "0"}


def test_not_divisible_notes_the_unused_gpus() -> None:
    got = gpus.plan({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 1, 2, bind=True)
    assert got.env == {"CUDA_VISIBLE_DEVICES": "1"}
    assert any("2 left unused" in note for note in got.notes)


@pytest.mark.parametrize(("extra", "why"), [
    ({"CUDA_VISIBLE_DEVICES": "1", "SLURM_GPUS_ON_NODE": "4"}, "SLURM_GPUS_ON_NODE=4"),  # --gpu-bind
    ({"CUDA_VISIBLE_DEVICES": "1", "SLURM_GPUS_ON_NODE": "2"}, "SLURM_GPUS_ON_NODE=2"),  # per task
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_GPUS_PER_TASK": "2"}, "SLURM_GPUS_PER_TASK=2"),
])
def test_left_alone_when_slurm_bound_per_task(extra: dict[str, str], why: str) -> None:
    got = gpus.plan(extra, 1, 2, bind=True)
    assert got.env == {}
    assert got.gpus == tuple(extra["CUDA_VISIBLE_DEVICES"].split(","))
    assert why in got.source and "left alone" in got.source
    assert got.notes and why in got.notes[0]


def test_binding_twice_changes_nothing_more() -> None:
    env = gpu_env([4], 2, "0,1,2,3,4,5,6,7")
    first = gpus.plan(env, 2, 4, bind=True)
    again = gpus.plan({**env, **first.env}, 2, 4, bind=True)
    assert first.env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert again.env == {} and again.gpus == ("4", "5")


def test_one_task_per_node_keeps_all() -> None:
    got = gpus.plan({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 0, 1, bind=True)
    assert got.env == {} and got.gpus == ("0", "1", "2", "3")


def test_no_list_with_several_tasks_is_an_error() -> None:
    with pytest.raises(SlurmEnvError) as err:
        gpus.plan({"SLURM_GPUS_ON_NODE": "4"}, 0, 2, bind=True)
    assert err.value.variable == "CUDA_VISIBLE_DEVICES" and err.value.value is None
    assert "--gpu-bind=none" in str(err.value)
    # a single task, or no binding asked: nothing to complain about
    assert gpus.plan({}, 0, 1, bind=True).gpus is None
    assert gpus.plan({}, 0, 2).gpus is None


@pytest.mark.parametrize(("value", "message"), [
    ("0,,1", "empty entry"), ("0,1,0", "twice"), ("NoDevFiles", "share 0 GPU"),
    ("", "share 0 GPU"), ("0", "share 1 GPU"),
])
def test_bad_lists(value: str, message: str) -> None:
    with pytest.raises(SlurmEnvError) as err:
        gpus.plan({"CUDA_VISIBLE_DEVICES": value}, 0, 2, bind=True)
    assert message in str(err.value) and err.value.variable == "CUDA_VISIBLE_DEVICES"


def test_lists_that_disagree_are_an_error() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1,2,3"}
    with pytest.raises(SlurmEnvError) as err:
        gpus.plan(env, 0, 2, bind=True)
    assert err.value.variable == "ROCR_VISIBLE_DEVICES"


@given(st.dictionaries(st.sampled_from([*gpus.VARIABLES, "SLURM_GPUS_ON_NODE",
                                        "SLURM_GPUS_PER_TASK"]),
                       st.text(alphabet="0123,- GPUNoDevFiles", max_size=10)),
       st.integers(1, 5), st.data())
@settings(max_examples=400)
def test_garbage_gives_an_error_or_a_share_of_the_list(
    env: dict[str, str], tasks: int, data: st.DataObject
) -> None:
    local = data.draw(st.integers(0, tasks - 1))
    described = gpus.plan(env, local, tasks)  # without binding: never raises, changes nothing
    assert described.env == {}
    try:
        got = gpus.plan(env, local, tasks, bind=True)
    except SlurmEnvError as err:
        assert err.variable and err.fix
        return
    for name, value in got.env.items():
        have = [x.strip() for x in env[name].split(",")]
        share = value.split(",")
        assert len(share) == len(have) // tasks
        assert share == have[local * len(share): (local + 1) * len(share)]


# --- through resolve() and the command line ----------------------------------------------------

def test_resolve_binds_every_rank_of_a_two_node_step() -> None:
    for rank in range(4):
        res = resolve(gpu_env([2, 2], rank, "4,5,6,7"), bind_gpus=True)
        want = ["4,5", "6,7"][res.local_rank]
        assert res.env("all")["CUDA_VISIBLE_DEVICES"] == want
        assert res.env("torch")["ROCR_VISIBLE_DEVICES"] == want
        assert res.gpus == tuple(want.split(","))
        assert "share" in res.sources["CUDA_VISIBLE_DEVICES"]
        assert "PET_NNODES" not in res.env("torch")


def test_off_by_default_and_by_variable() -> None:
    env = gpu_env([2], 1, "0,1")
    for res in (resolve(env), resolve({**env, "SLURMENV_BIND_GPUS": "0"}),
                resolve({**env, "SLURMENV_BIND_GPUS": "1"}, bind_gpus=False)):
        assert "CUDA_VISIBLE_DEVICES" not in res.env("all")
        assert res.gpus == ("0", "1") and "not bound" in res.gpu_source
    assert resolve({**env, "SLURMENV_BIND_GPUS": "yes"}).env("all")["CUDA_VISIBLE_DEVICES"] == "1"


def test_binding_errors_stop_the_resolution() -> None:
    with pytest.raises(SlurmEnvError, match="share 1 GPU"):
        resolve(gpu_env([2, 2], 3, "0"), bind_gpus=True)


def test_apply_replaces_the_shared_list() -> None:
    env = gpu_env([2], 1, "0,1,2,3")
    target = dict(env)
    applied = resolve(env, bind_gpus=True).apply(target)
    assert target["CUDA_VISIBLE_DEVICES"] == applied["CUDA_VISIBLE_DEVICES"] == "2,3"
    # and resolving again from the new environment leaves it alone
    assert resolve(target, bind_gpus=True).env("all").get("CUDA_VISIBLE_DEVICES") is None


def test_per_rank_for_show() -> None:
    env = gpu_env([2, 2], 0, "0,1,2,3")
    assert gpus_per_rank(resolve(env, bind_gpus=True), env) == [
        ("0", "1"), ("2", "3"), None, None]
    assert gpus_per_rank(resolve(env), env) == [("0", "1", "2", "3")] * 2 + [None, None]
    assert gpus_per_rank(resolve(synth.step_env(HOSTS, [1, 1], 0)), synth.step_env(
        HOSTS, [1, 1], 0)) is None


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmenv", *args], capture_output=True,
                          text=True, env={**synth.clean_env(), **env}, check=False, timeout=60)


def test_command_line_flags() -> None:
    env = gpu_env([2, 2], 2, "0,1,2,3")
    out = cli(env, "export", "--bind-gpus", "--for", "torch").stdout
    assert "export CUDA_VISIBLE_DEVICES='0,1';" in out
    out = cli({**env, "SLURMENV_BIND_GPUS": "1"}, "export", "--no-bind-gpus").stdout
    assert "CUDA_VISIBLE_DEVICES" not in out and "RANK" in out
    shown = cli(env, "show", "--bind-gpus", "--for", "torch")
    assert "GPUs: 0,1\n    from share 1 of 2 (LOCAL_RANK=0)" in shown.stdout, shown.stderr


def test_command_line_error_names_the_variable() -> None:
    proc = cli(gpu_env([2], 0, "7"), "export", "--bind-gpus")
    assert proc.returncode == 1
    assert "2 tasks on this node share 1 GPU" in proc.stderr
    assert "CUDA_VISIBLE_DEVICES='7'" in proc.stderr and "fix:" in proc.stderr
    assert "export" not in proc.stdout


def test_os_environ_untouched() -> None:
    before = dict(os.environ)
    resolve(gpu_env([2], 0, "0,1"), bind_gpus=True)
    assert dict(os.environ) == before
