"""Thread counts (slurmenv/threads.py); real Slurm tasks: test_real_gpus.py."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
import synth

import slurmenv
from slurmenv import threads
from slurmenv.errors import SlurmEnvError

ALL3 = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def step(**extra: str) -> dict[str, str]:
    return synth.step_env(["n1", "n2"], [2, 2], 1, **extra)


def never() -> int:
    raise AssertionError("the CPU affinity was read although SLURM_CPUS_PER_TASK is set")


def test_from_cpus_per_task() -> None:
    got = threads.plan(step(SLURM_CPUS_PER_TASK="4"), affinity=never)
    assert got.env == dict.fromkeys(ALL3, "4") and got.number == 4
    assert got.source == "SLURM_CPUS_PER_TASK=4"


def test_from_affinity_when_cpus_per_task_unset() -> None:
    got = threads.plan(step(), affinity=lambda: 3)
    assert got.env == dict.fromkeys(ALL3, "3")
    assert "CPU affinity" in got.source


def test_resolve_takes_a_given_cpu_count() -> None:
    # resolve(cpus=N) stands for the task's CPU affinity (a replay gives the recorded one);
    # SLURM_CPUS_PER_TASK still comes first.
    env = step()
    env.pop("SLURM_CPUS_PER_TASK", None)
    env.pop("OMP_NUM_THREADS", None)
    assert slurmenv.resolve(env, cpus=5, ephemeral_range=None).env()["OMP_NUM_THREADS"] == "5"
    env["SLURM_CPUS_PER_TASK"] = "3"
    assert slurmenv.resolve(env, cpus=5, ephemeral_range=None).env()["OMP_NUM_THREADS"] == "3"


def test_user_omp_wins_and_nothing_else_is_set() -> None:
    got = threads.plan(step(SLURM_CPUS_PER_TASK="8", OMP_NUM_THREADS="1"), affinity=never)
    assert got.env == {} and got.number is None
    assert "OMP_NUM_THREADS=1" in got.notes[0]


def test_user_mkl_kept_others_set() -> None:
    got = threads.plan(step(SLURM_CPUS_PER_TASK="2", MKL_NUM_THREADS="6"))
    assert got.env == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    assert "MKL_NUM_THREADS=6" in got.notes[0]


def test_empty_counts_as_unset() -> None:
    assert threads.plan(step(SLURM_CPUS_PER_TASK="2", OMP_NUM_THREADS="")).env["OMP_NUM_THREADS"] \
        == "2"


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_bad_cpus_per_task(value: str) -> None:
    with pytest.raises(SlurmEnvError) as err:
        threads.plan(step(SLURM_CPUS_PER_TASK=value))
    assert err.value.variable == "SLURM_CPUS_PER_TASK" and err.value.value == value


def test_affinity_is_psutils_answer() -> None:
    assert threads.affinity_count() == len(psutil.Process().cpu_affinity())


def _in_child(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to narrow")
def test_affinity_follows_a_narrowed_cpu_set() -> None:
    # a real narrowed affinity (what task/affinity does to a task), in a child process
    out = _in_child(
        "import os, psutil; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from slurmenv import threads; "
        "print(threads.affinity_count(), len(psutil.Process().cpu_affinity()))"
    )
    assert out.split() == ["1", "1"]


def test_psutil_fallback_where_os_lacks_sched_getaffinity() -> None:
    # macOS and others: no os.sched_getaffinity; psutil (real) answers instead
    out = _in_child(
        "import os, sys; n = len(os.sched_getaffinity(0)); del os.sched_getaffinity; "
        "from slurmenv import threads; print(threads.affinity_count() == n, "
        "'psutil' in sys.modules)"
    )
    assert out.split() == ["True", "True"]


def test_export_path_does_not_import_psutil() -> None:
    out = _in_child(
        "import sys, io, contextlib; from slurmenv.commands import main as cli\n"
        "with contextlib.redirect_stdout(io.StringIO()) as buf: code = cli.main(['export'])\n"
        "print(code, 'OMP_NUM_THREADS' in buf.getvalue(), 'psutil' in sys.modules)"
    )
    assert out.split() == ["0", "True", "False"]


# --- through resolve() and the command line ------------------------------------------------------

def test_on_by_default_off_by_option_or_variable() -> None:
    env = step(SLURM_CPUS_PER_TASK="3")
    on = slurmenv.resolve(env, ephemeral_range=None)
    assert {name: on.env("all")[name] for name in ALL3} == dict.fromkeys(ALL3, "3")
    assert on.sources["OMP_NUM_THREADS"] == "SLURM_CPUS_PER_TASK=3"
    for off in (slurmenv.resolve(env, ephemeral_range=None, threads=False),
                slurmenv.resolve({**env, "SLURMENV_THREADS": "0"}, ephemeral_range=None)):
        assert not set(ALL3) & set(off.env("all"))
    forced = slurmenv.resolve({**env, "SLURMENV_THREADS": "0"}, ephemeral_range=None, threads=True)
    assert forced.env("tf")["OMP_NUM_THREADS"] == "3"


def test_bad_flag_value() -> None:
    with pytest.raises(SlurmEnvError) as err:
        slurmenv.resolve(step(SLURMENV_THREADS="maybe"), ephemeral_range=None)
    assert err.value.variable == "SLURMENV_THREADS"


def test_apply_never_overrides_the_user() -> None:
    env = step(SLURM_CPUS_PER_TASK="3", OPENBLAS_NUM_THREADS="1")
    target = dict(env)
    slurmenv.resolve(env, ephemeral_range=None).apply(target)
    assert (target["OMP_NUM_THREADS"], target["OPENBLAS_NUM_THREADS"]) == ("3", "1")


def test_torchrun_output_set_has_no_thread_counts() -> None:
    # one torchrun per node starts several workers: it sets OMP_NUM_THREADS itself
    env = synth.step_env(["n1", "n2"], [1, 1], 1, SLURM_CPUS_PER_TASK="3")
    res = slurmenv.resolve(env, ephemeral_range=None)
    assert "OMP_NUM_THREADS" in res.env("all")
    torchrun = res.env("torchrun")
    assert "PET_NNODES" in torchrun and not set(ALL3) & set(torchrun)


def test_command_line() -> None:
    env = {**synth.clean_env(), **step(SLURM_CPUS_PER_TASK="5")}

    def export(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "slurmenv", "export", *args], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "export OMP_NUM_THREADS='5';" in export()
    assert "export MKL_NUM_THREADS='5';" in export("--threads")
    assert "NUM_THREADS" not in export("--no-threads")
    env["SLURMENV_THREADS"] = "0"
    assert "NUM_THREADS" not in export()
    assert "export OPENBLAS_NUM_THREADS='5';" in export("--threads")


@pytest.mark.parametrize("blank", ["", " ", "\t", " \n"])
def test_a_blank_flag_keeps_the_default_on(blank: str) -> None:
    """SLURMENV_THREADS=' ' is unset, not 'no': a blank value must not turn a default-on flag
    off (nor be refused)."""
    env = step(SLURM_CPUS_PER_TASK="3", SLURMENV_THREADS=blank)
    res = slurmenv.resolve(env, ephemeral_range=None)
    assert {name: res.env("all")[name] for name in ALL3} == dict.fromkeys(ALL3, "3")
    from slurmenv import options

    assert options.from_environ({"SLURMENV_THREADS": blank}).threads is True
