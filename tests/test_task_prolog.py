"""slurmenv-task-prolog on synthetic task environments (the real cluster: test_real_task_prolog):
the same values as ``slurmenv export`` in Slurm's prolog protocol, refusals as ``print`` lines
with a non-zero status, nothing at all outside a step of srun tasks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import synth

from slurmenv import SlurmEnvError, options, render, resolve, taskprolog
from slurmenv.launchers import base

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
STEP = {**synth.step_env(HOSTS, [2, 2, 2, 2], 5), "SLURM_STEP_RESV_PORTS": "12001-12003",
        "OMP_NUM_THREADS": "1"}


def parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        assert line.startswith("export "), line
        name, _, value = line[len("export "):].partition("=")
        out[name] = value
    return out


@pytest.mark.parametrize("for_", [None, "torch", "tf", "all"])
def test_the_prolog_sets_what_export_sets(for_: str | None) -> None:
    env = dict(STEP) if for_ is None else {**STEP, "SLURMENV_FOR": for_}
    status, text = taskprolog.run(env)
    assert status == 0
    want = resolve(env, rivals=None).env(options.outputs(env))
    assert parse(text) == want
    assert "TF_CONFIG" in parse(text) or for_ == "torch"


def test_a_value_with_a_line_break_is_refused() -> None:
    with pytest.raises(SlurmEnvError) as info:
        taskprolog.protocol({"RANK": "1", "TF_CONFIG": "a\nexport RANK=0"})
    assert info.value.variable == "TF_CONFIG"
    status, text = taskprolog.run({**STEP, "SLURMENV_FOR": "torch",
                                   "SLURMENV_ADDR_TEMPLATE": "{host}\r"})
    assert status == 1 and text.startswith("print ")


@pytest.mark.parametrize("step", ["", "4294967294", "4294967291", "4294967290"])
def test_outside_a_step_of_srun_tasks_it_sets_nothing_and_never_fails(step: str) -> None:
    env = {**STEP, "SLURM_STEP_ID": step, "SLURM_STEPID": step, "SLURMENV_PORT": "bogus"}
    assert taskprolog.run(env) == (0, "")


def test_a_refusal_is_print_lines_and_a_non_zero_status() -> None:
    status, text = taskprolog.run({**STEP, "SLURMENV_PORT": "bogus"})
    assert status == 1
    lines = text.splitlines()
    assert lines and all(line.startswith("print ") for line in lines)
    assert "print slurmenv: error: not a usable TCP port" in lines
    assert any("SLURMENV_PORT='bogus'" in line for line in lines)
    status, text = taskprolog.run({**STEP, "SLURMENV_FOR": "everything"})
    assert status == 1 and "SLURMENV_FOR" in text


@pytest.mark.parametrize(("error", "status", "says"), [
    (RuntimeError("a slip"), 70, "print slurmenv: internal error: RuntimeError: a slip"),
    (MemoryError(), 1, "print slurmenv: error: out of memory"),
])
def test_an_unexpected_error_stops_the_task_with_a_reason(
    monkeypatch: pytest.MonkeyPatch, error: Exception, status: int, says: str
) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise error

    from slurmenv import launchers

    monkeypatch.setattr(launchers, "resolve", failing)
    got, text = taskprolog.run(STEP)
    assert got == status
    assert text.startswith(says) and "The task was not started." in text
    assert all(line.startswith("print ") for line in text.splitlines())


def test_the_site_shim_skips_the_same_steps_as_the_resolver() -> None:
    shim = (ROOT / "bin" / "slurmenv-site-prolog").read_text()
    listed = re.search(r"case \$\{SLURM_STEP_ID:-\} in ''\|([0-9|]+)\)", shim)
    assert listed is not None
    assert sorted(listed.group(1).split("|")) == sorted(base.SPECIAL_STEPS)


@pytest.mark.parametrize(
    ("extra", "acts"),
    [({}, False), ({"SLURMENV": "0"}, False), ({"SLURMENV": "1"}, True),
     ({"SLURMENV": "1", "SLURM_STEP_ID": "4294967294"}, False)],
)
def test_the_site_shim_acts_only_when_the_job_opted_in(extra: dict[str, str], acts: bool) -> None:
    env = {**synth.clean_env(), **STEP, **extra, "PYTHONPATH": str(ROOT),
           "PATH": f"{ROOT / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run([str(ROOT / "bin" / "slurmenv-site-prolog")], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert bool(out.stdout) == acts
    if acts:
        assert parse(out.stdout)["RANK"] == "5"


def test_the_console_script_and_the_checkout_shim_print_the_protocol() -> None:
    env = {**synth.clean_env(), **STEP}
    for argv in ([str(Path(sys.executable).parent / "slurmenv-task-prolog")],
                 [str(ROOT / "bin" / "slurmenv-task-prolog")]):
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                             check=False)
        assert out.returncode == 0, out.stderr
        assert parse(out.stdout)["MASTER_PORT"] == "12001"


def test_slurmenv_for_is_in_the_options_page() -> None:
    assert options.OUTPUT_SETS == tuple(sorted(render.OUTPUTS))
    assert "`SLURMENV_FOR`" in options.markdown()


@pytest.mark.parametrize("value", ["a\rexport RANK=0", "r1n09\r", "\r", "x\r\ny"])
def test_a_value_with_a_carriage_return_is_refused_never_emitted(value: str) -> None:
    """A carriage return is a line break to Slurm's reader of the protocol too: the value is
    refused naming its variable, and no line of it reaches the task."""
    with pytest.raises(SlurmEnvError) as info:
        taskprolog.protocol({"RANK": "1", "MASTER_ADDR": value})
    assert info.value.variable == "MASTER_ADDR"
    assert taskprolog.protocol({"RANK": "1"}) == "export RANK=1\n"
