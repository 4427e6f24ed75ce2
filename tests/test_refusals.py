"""Refusals the README promises that no other test pinned down: a ``SLURM_GTIDS`` naming the
wrong set of ranks, an inherited ``LOCAL_RANK`` or ``WORLD_SIZE`` that disagrees with the
task, and the ``bin/`` shims run for real outside the cluster (they must run their command
with the variables set, and nothing when resolution fails). docs/testing.md maps every
promised refusal to its test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import synth
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_resolve import EPHEMERAL

import slurmenv
from slurmenv import SlurmEnvError

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "bin"
DISTRIBUTIONS = [None, "block", "cyclic", "plane"]


def resolve(env: dict[str, str]) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=EPHEMERAL)


# --- SLURM_GTIDS: the set of ranks on this task's node ------------------------------------------

@pytest.mark.parametrize("rank", [0, 3])
def test_gtids_naming_the_wrong_ranks_is_refused(rank: int) -> None:
    """Block step, 2 tasks on each of 2 nodes: node 0 runs 0,1 and node 1 runs 2,3. "0,3" has
    the right size and holds the task's own rank, but names the wrong ranks: accepted, rank 3
    would be put on the wrong host in TF_CONFIG."""
    hosts, counts = ["n1", "n2"], [2, 2]
    good = synth.step_env(hosts, counts, rank, distribution="block")
    assert resolve(good).tf_config["cluster"]["worker"][3].startswith("n2:")  # control
    with pytest.raises(SlurmEnvError) as info:
        resolve({**good, "SLURM_GTIDS": "0,3"}).env("all")
    err = info.value
    # SLURM_NODEID and SLURM_LOCALID agree with the block layout: the rank set is at fault
    assert err.variable == "SLURM_GTIDS"
    assert err.value == "0,3"
    assert "0,3" in str(err) and "do not set it by hand" in err.fix


@st.composite
def wrong_gtids(draw: st.DrawFn) -> tuple[dict[str, str], str]:
    """A step and one of its tasks whose SLURM_GTIDS is replaced by another set of ranks of
    the same size that still holds the task's own rank (what a size check cannot see)."""
    nnodes = draw(st.integers(2, 12))
    counts = draw(st.lists(st.integers(1, 6), min_size=nnodes, max_size=nnodes))
    hosts = [f"h{i:03d}" for i in range(nnodes)]
    dist = draw(st.sampled_from(DISTRIBUTIONS))
    plane = draw(st.integers(1, 4)) if dist == "plane" else None
    ntasks = sum(counts)
    rank = draw(st.integers(0, ntasks - 1))
    env = synth.step_env(hosts, counts, rank, distribution=dist, plane=plane)
    right = [int(r) for r in env["SLURM_GTIDS"].split(",")]
    assume(0 < len(right) < ntasks)
    others = draw(st.lists(st.integers(0, ntasks - 1).filter(lambda r: r != rank),
                           min_size=len(right) - 1, max_size=len(right) - 1, unique=True))
    wrong = sorted([rank, *others])
    assume(wrong != right)
    return env, ",".join(map(str, wrong))


@given(wrong_gtids())
@settings(max_examples=150, deadline=None)
def test_any_wrong_gtids_set_is_refused(case: tuple[dict[str, str], str]) -> None:
    env, gtids = case
    resolve(env).env("all")  # the step as Slurm wrote it resolves
    with pytest.raises(SlurmEnvError) as info:
        resolve({**env, "SLURM_GTIDS": gtids}).env("all")
    assert info.value.variable == "SLURM_GTIDS"
    assert info.value.value == gtids
    assert gtids in str(info.value)


# --- inherited LOCAL_RANK / WORLD_SIZE ----------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "rank"), [
    # the batch script exported LOCAL_RANK=$SLURM_LOCALID: 0 for every task
    ("LOCAL_RANK", "0", 1),
    ("LOCAL_RANK", "0", 3),
    ("LOCAL_RANK", "2", 0),
    # the batch script exported WORLD_SIZE=$SLURM_NTASKS of the job (8), the step runs 4
    ("WORLD_SIZE", "8", 0),
    ("WORLD_SIZE", "8", 2),
    ("WORLD_SIZE", "3", 3),
])
def test_inherited_value_that_disagrees_is_an_error(name: str, value: str, rank: int) -> None:
    env = synth.step_env(["n1", "n2"], [2, 2], rank, SLURM_NTASKS="8", **{name: value})
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    err = info.value
    assert err.variable == name and err.value == value
    assert "batch script" in str(err) and f"unset {name}" in (err.fix or "")
    # the same variable, agreeing with this task, is accepted and noted
    want = synth.expected(["n1", "n2"], [2, 2], rank)
    res = resolve({**env, name: str(want[name])})
    assert (res.rank, res.local_rank, res.world_size) == (rank, want["LOCAL_RANK"], 4)
    assert any(f"{name}={want[name]}" in note for note in res.notes)


def test_inherited_values_that_disagree_are_refused_by_the_command_line() -> None:
    """What the user sees: nothing exported, the variable and the fix on stderr."""
    env = {**synth.clean_env(), **synth.step_env(["n1", "n2"], [2, 2], 1, LOCAL_RANK="0")}
    out = subprocess.run([sys.executable, "-m", "slurmenv", "export"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0
    assert "export LOCAL_RANK" not in out.stdout and "export RANK" not in out.stdout
    assert "LOCAL_RANK='0'" in out.stderr and "unset LOCAL_RANK" in out.stderr


# --- the bin/ shims, run for real ---------------------------------------------------------------

SHOW = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES",
        "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG")
PRINT_ENV = ("import json, os, sys; "
             "print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))")
HOSTS, COUNTS = ["r1n09", "r1n10", "r2n09"], [2, 3, 2]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(an interpreter with no slurmenv installed, a directory holding only python-hostlist):
    a fresh virtual environment, so that no install of slurmenv (this checkout's or another
    clone's) can stand in for what the shims must find by themselves."""
    import hostlist

    tmp = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")],
                   check=True, timeout=120)
    deps = tmp / "deps"
    deps.mkdir()
    shutil.copy(hostlist.__file__, deps / "hostlist.py")
    python = str(tmp / "venv" / "bin" / "python")
    check = subprocess.run([python, "-c", "import slurmenv"], env={"PYTHONPATH": str(deps)},
                           cwd="/", capture_output=True, check=False)
    assert check.returncode != 0  # no slurmenv to find but through the shim
    return python, str(deps)


@pytest.fixture()
def shim_env(bare_python: tuple[str, str]) -> Callable[..., dict[str, str]]:
    return partial(_shim_env, *bare_python)


def _shim_env(python: str, deps: str, rank: int | None, **extra: str) -> dict[str, str]:
    """A task of a cyclic step (or, with ``rank=None``, the batch script) for an interpreter
    without slurmenv, this checkout on no path: the shims must find it themselves."""
    env = synth.clean_env()
    env["PYTHONPATH"] = deps
    env["PATH"] = "/usr/bin:/bin"
    env["PYTHON"] = python
    if rank is not None:
        env.update(synth.step_env(HOSTS, COUNTS, rank, distribution="cyclic", job_id=777123,
                                  step_id=4))
    else:
        env.update({"SLURM_JOB_ID": "777123", "SLURM_JOBID": "777123",
                    "SLURM_JOB_NODELIST": "r1n[09-10],r2n09", "SLURM_NNODES": "3",
                    "SLURM_NTASKS": "7"})
    env.update(extra)
    return env


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("rank", range(sum(COUNTS)))
def test_slurmenv_exec_shim_runs_the_command_with_the_variables(
    rank: int, shim_env: Callable[..., dict[str, str]]
) -> None:
    env = shim_env(rank)
    out = run([str(BIN / "slurmenv-exec"), sys.executable, "-c", PRINT_ENV, *SHOW], env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    want = slurmenv.resolve(env).env("all")  # the library, in this process
    assert got == {name: want[name] for name in SHOW}
    exp = synth.expected(HOSTS, COUNTS, rank, "cyclic")
    assert int(got["RANK"]) == rank and int(got["LOCAL_RANK"]) == exp["LOCAL_RANK"]
    assert got["MASTER_ADDR"] == "r1n09" and int(got["WORLD_SIZE"]) == 7
    worker = json.loads(got["TF_CONFIG"])["cluster"]["worker"][rank]
    assert worker.split(":")[0] == exp["HOST"]


def test_slurmenv_exec_shim_passes_arguments_and_exit_status(
    shim_env: Callable[..., dict[str, str]]
) -> None:
    out = run([str(BIN / "slurmenv-exec"), "sh", "-c", 'printf "%s|" "$@" "$RANK"; exit 7',
               "sh", "a b", "", "*"], shim_env(2))
    assert out.returncode == 7, out.stderr
    assert out.stdout == "a b||*|2|"


def test_slurmenv_exec_shim_runs_nothing_when_resolution_fails(
    tmp_path: Path, shim_env: Callable[..., dict[str, str]]
) -> None:
    marker = tmp_path / "ran"
    out = run([str(BIN / "slurmenv-exec"), "touch", str(marker)], shim_env(None))
    assert out.returncode != 0 and not marker.exists()
    assert "outside any job step" in out.stderr and "srun" in out.stderr
    usage = run([str(BIN / "slurmenv-exec")], shim_env(0))
    assert usage.returncode == 2 and "usage: slurmenv-exec COMMAND" in usage.stderr


def test_slurmenv_shim_runs_this_checkout(shim_env: Callable[..., dict[str, str]]) -> None:
    """bin/slurmenv sets PYTHONPATH to this checkout: its export is the library's answer, from
    this tree's code whatever the current directory."""
    env = shim_env(5)
    out = run([str(BIN / "slurmenv"), "export", "--format", "json"], env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == slurmenv.resolve(env).env("all")
    traced = run([str(BIN / "slurmenv"), "export"], {**env, "PYTHONVERBOSE": "1"})
    loaded = [line for line in traced.stderr.splitlines() if "slurmenv/commands/main.py" in line]
    assert loaded and all(str(ROOT / "slurmenv" / "commands" / "main.py") in line for line in loaded)
    failed = run([str(BIN / "slurmenv"), "export"], shim_env(None))
    assert failed.returncode != 0 and "export RANK" not in failed.stdout


def test_shims_are_executable_posix_sh() -> None:
    for shim in ("slurmenv", "slurmenv-exec"):
        path = BIN / shim
        assert os.access(path, os.X_OK)
        assert path.read_text().startswith("#!/bin/sh\n")
