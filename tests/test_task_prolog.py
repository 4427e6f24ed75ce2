"""slurmenv-task-prolog on synthetic task environments (the real cluster: test_real_task_prolog):
the same values as ``slurmenv export`` in Slurm's prolog protocol, refusals as ``print`` lines
with a non-zero status, nothing at all outside a step of srun tasks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import doc_tables
import pytest
import synth

from slurmenv import SlurmEnvError, options, pipeline, render, resolve, worldguard
from slurmenv.commands import taskprolog
from slurmenv.launchers import base

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
STEP = {**synth.step_env(HOSTS, [2, 2, 2, 2], 5), "SLURM_STEP_RESV_PORTS": "12001-12003",
        "OMP_NUM_THREADS": "1"}


def parse(text: str) -> dict[str, str]:
    """The exports of a prolog that succeeded; its last one is the SLURMENV_SET_BY marker,
    which must name the step and every other name, in order (checked, then left out)."""
    out = {}
    for line in text.splitlines():
        assert line.startswith("export "), line
        name, _, value = line[len("export "):].partition("=")
        out[name] = value
    marker = out.pop(pipeline.SET_BY)
    assert list(out)[-1:] != [pipeline.SET_BY]
    assert marker.partition(":")[2] == ",".join(out), marker
    return out


def refused(text: str) -> list[str]:
    """The print lines of a refusal, checked to be followed by the stop values and nothing."""
    lines = text.splitlines()
    assert lines[0] == "", text  # a refusal starts a line of its own
    prints = [line for line in lines[1:] if line.startswith("print ")]
    stops = lines[1 + len(prints):]
    assert prints and stops == [f"export {name}={taskprolog.STOP_VALUE}"
                                for name in taskprolog.stop_names()], text
    return prints


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
    assert status == 1 and refused(text)


@pytest.mark.parametrize("step", ["", "4294967291", "4294967292", "4294967290", "-5", "-4", "-6"])
def test_outside_a_step_of_srun_tasks_it_sets_nothing_and_never_fails(step: str) -> None:
    env = {**STEP, "SLURM_STEP_ID": step, "SLURM_STEPID": step, "SLURMENV_PORT": "bogus"}
    assert taskprolog.run(env) == (0, "")


def test_a_refusal_is_print_lines_and_a_non_zero_status() -> None:
    status, text = taskprolog.run({**STEP, "SLURMENV_PORT": "bogus"})
    assert status == 1
    lines = refused(text)
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

    from slurmenv import pipeline

    monkeypatch.setattr(pipeline, "resolve", failing)
    got, text = taskprolog.run(STEP)
    assert got == status
    assert refused(text)[0].startswith(says) and "The task was not started." in text


def test_the_site_shim_skips_the_same_steps_as_the_resolver() -> None:
    shim = (ROOT / "bin" / "slurmenv-site-prolog").read_text()
    listed = re.search(r"case \$\{SLURM_STEP_ID:-\} in ''\|([-0-9|]+)\)", shim)
    assert listed is not None
    assert sorted(listed.group(1).split("|")) == sorted(base.SPECIAL_STEPS)


SHIM = ROOT / "bin" / "slurmenv-site-prolog"


def run_shim(shim: Path, extra: dict[str, str], cwd: Path | None = None,
             path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**synth.clean_env(), **STEP, **extra, "PYTHONPATH": str(ROOT),
           "PATH": path or f"{ROOT / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([str(shim)], env=env, capture_output=True, text=True, timeout=60,
                          check=False, cwd=cwd)


def test_the_site_shim_knows_only_slurmenvs_noes_and_its_stop_values() -> None:
    text = SHIM.read_text()
    listed = re.search(r"case \$\{SLURMENV:-\} in ''\|([][A-Za-z0-9|]+)\) exit 0", text)
    assert listed is not None
    words = set()
    for pattern in listed.group(1).split("|"):  # [Ff][Aa]...: each bracket one letter, any case
        letters = re.findall(r"\[(.)(.)\]|(.)", pattern)
        assert all(not single or single.isdigit() for _, _, single in letters), pattern
        assert all(a == b.upper() != b for a, b, single in letters if not single), pattern
        words.add("".join(b or single for _, b, single in letters))
    assert words == set(options.FALSE) - {""}  # '' is the ${SLURMENV:-} of the same case
    names = re.search(r"for name in ([A-Z_ \\\n]+); do", text)
    assert names is not None
    assert tuple(names.group(1).replace("\\", " ").split()) == taskprolog.stop_names()
    assert f"export $name={taskprolog.STOP_VALUE}" in text


SPELLINGS = ["", "0", "no", "OFF", "False", " no ", "\t0\n", "1", "TRUE", "Yes", "on", " 1",
             "yes\n", "y", "2", "maybe", "1 2", "ja", "enable", "-1", "oui", "\u00a0"]


@pytest.mark.parametrize("value", SPELLINGS)
def test_the_site_shim_reads_slurmenv_as_slurmenv_reads_a_flag(value: str) -> None:
    out = run_shim(SHIM, {"SLURMENV": value})
    try:
        acts = options.parse_flag(value, "SLURMENV")
    except SlurmEnvError as exc:  # refused with slurmenv's own message for it
        assert out.returncode == 1, out
        prints = refused(out.stdout)
        assert prints[0] == f"print slurmenv: error: {str(exc).splitlines()[0]}"
    else:
        assert out.returncode == 0, out
        assert (parse(out.stdout)["RANK"] == "5") if acts else out.stdout == ""
    assert out.stderr == ""  # it runs the prolog with stderr on /dev/null


@pytest.mark.parametrize("step", ["", "4294967291", "4294967292", "4294967290", "-5", "-4", "-6"])
def test_the_site_shim_never_fails_outside_a_step_of_srun_tasks(step: str) -> None:
    out = run_shim(SHIM, {"SLURMENV": "maybe", "SLURM_STEP_ID": step, "SLURM_STEPID": step})
    assert (out.returncode, out.stdout) == (0, "")


def test_the_site_shim_runs_only_the_prolog_beside_its_real_path(tmp_path: Path) -> None:
    # a slurmenv-task-prolog on PATH and in the current directory that would set RANK=0
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "slurmenv-task-prolog").write_text("#!/bin/sh\necho export RANK=0\n")
    (decoy / "slurmenv-task-prolog").chmod(0o755)
    path = f"{decoy}{os.pathsep}{os.environ['PATH']}"
    linked, copied = tmp_path / "etc" / "linked-prolog", tmp_path / "etc" / "copied-prolog"
    linked.parent.mkdir()
    linked.symlink_to(SHIM)
    copied.write_bytes(SHIM.read_bytes())
    copied.chmod(0o755)
    ok = run_shim(linked, {"SLURMENV": "1"}, cwd=decoy, path=path)
    assert ok.returncode == 0 and parse(ok.stdout)["RANK"] == "5", ok
    out = run_shim(copied, {"SLURMENV": "1"}, cwd=decoy, path=path)
    assert out.returncode == 1, out
    assert "export RANK=0" not in out.stdout
    assert refused(out.stdout)[0] == (
        "print slurmenv: error: this job opted in (SLURMENV), but "
        f"{copied.parent}/slurmenv-task-prolog is missing or not executable")
    # a prolog there that cannot run (its interpreter gone) or dies: the same, with its status
    (copied.parent / "slurmenv-task-prolog").write_text("#!/nonexistent/python\n")
    (copied.parent / "slurmenv-task-prolog").chmod(0o755)
    out = run_shim(copied, {"SLURMENV": "1"}, cwd=decoy, path=path)
    assert out.returncode == 1 and "could not run or was killed (status 127)" in out.stdout
    assert refused(out.stdout)


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
    assert "`SLURMENV_FOR`" in doc_tables.options_table()


def big_step() -> dict[str, str]:
    """A step whose output (TF_CONFIG of 8,192 nodes) is over what a pipe holds."""
    hosts = [f"n{i:05d}" for i in range(8192)]
    return {**synth.clean_env(PYTHONPATH=str(ROOT)), **synth.step_env(hosts, [1] * 8192, 1)}


def test_an_interrupted_prolog_says_so_and_stops_the_task() -> None:
    import fcntl
    import signal
    import termios
    import time

    def default_sigint() -> None:  # a test run under nohup would pass SIGINT on ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with subprocess.Popen([sys.executable, "-m", "slurmenv.commands.taskprolog"], env=big_step(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          preexec_fn=default_sigint) as proc:  # noqa: PLW1509
        assert proc.stdout is not None and proc.stderr is not None
        capacity = fcntl.fcntl(proc.stdout.fileno(), fcntl.F_GETPIPE_SZ)
        waiting = bytearray(4)
        deadline = time.monotonic() + 60  # a bound on the wait, not a timed assertion
        while True:  # until the pipe is full: the prolog is in its write, past its start-up
            fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, waiting)
            if int.from_bytes(waiting, sys.byteorder) >= capacity:
                break
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.stdout.read().decode(), proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 130
    assert stdout.startswith("export ")  # what it had written before
    said = stdout[stdout.index("\nprint "):]
    assert refused(said) == ["print slurmenv: interrupted. The task was not started."]
    assert stderr == ""  # no traceback


def test_under_slurm_nothing_reaches_stderr(tmp_path: Path) -> None:
    # Slurm 22.05.1+ parses the prolog's stderr as its stdout: under Slurm
    # (SLURM_SCRIPT_CONTEXT=prolog_task) it says nothing there, even what it says elsewhere
    env = {**synth.clean_env(PYTHONPATH=str(ROOT)), **STEP}
    by_hand = "slurmenv: error: cannot write the output: No space left on device\n"
    for context, said in (("", by_hand), ("prolog_task", "")):
        with open("/dev/full", "w") as full:
            out = subprocess.run([sys.executable, "-m", "slurmenv.commands.taskprolog"],
                                 env={**env, "SLURM_SCRIPT_CONTEXT": context}, stdout=full,
                                 stderr=subprocess.PIPE, text=True, timeout=60, check=False)
        assert (out.returncode, out.stderr) == (1, said)


@pytest.mark.parametrize("argv", [["--help"], ["--site", "x"], ["-"]])
def test_an_argument_is_refused_not_ignored(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "slurmenv.commands.taskprolog", *argv],
                         env={**synth.clean_env(PYTHONPATH=str(ROOT)), **STEP},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert refused(out.stdout)[0].startswith(
        "print slurmenv: error: slurmenv-task-prolog takes no arguments")


# -- a srun inside a step whose values the prolog set (srun --pty bash, then srun) -------------
def prolog_values(environ: dict[str, str]) -> dict[str, str]:
    status, text = taskprolog.run(environ)
    assert status == 0, text
    return dict(line[len("export "):].split("=", 1) for line in text.splitlines())


def test_a_srun_inside_a_prolog_step_resolves_its_own_step() -> None:
    # step 0: one task on r1n09 (srun --pty bash), 4 cpus; the prolog set its values there
    outer = {**synth.step_env(["r1n09"], [1], 0, step_id=0), "SLURM_CPUS_PER_TASK": "4"}
    inherited = prolog_values(outer)
    assert inherited["OMP_NUM_THREADS"] == "4"
    assert inherited[pipeline.SET_BY].startswith(f"{outer['SLURM_JOB_ID']}.0:")
    # step 1, started there: rank 3 of 8, one cpu a task; the environment holds step 0's values
    inner = {**inherited, **synth.step_env(HOSTS, [2, 2, 2, 2], 3, step_id=1)}
    want = resolve(synth.step_env(HOSTS, [2, 2, 2, 2], 3, step_id=1)).env("all")
    got = prolog_values(inner)
    assert got[pipeline.SET_BY].startswith(f"{outer['SLURM_JOB_ID']}.1:")
    assert {name: got[name] for name in want} == want
    assert got["RANK"] == "3" and got["MASTER_PORT"] != inherited["MASTER_PORT"]
    assert "OMP_NUM_THREADS" not in want or got["OMP_NUM_THREADS"] != "4"
    notes = resolve(inner).notes
    assert any("set by slurmenv's task prolog for step" in note for note in notes), notes
    # without the marker the same values are the batch script's: refused, as before
    unmarked = {k: v for k, v in inner.items() if k != pipeline.SET_BY}
    with pytest.raises(SlurmEnvError) as info:
        resolve(unmarked)
    assert "probably exported" in str(info.value)
    # a marker for this very step: the values must agree, as any inherited value must
    here = {**inner, pipeline.SET_BY: f"{inner['SLURM_JOB_ID']}.1:RANK"}
    with pytest.raises(SlurmEnvError):
        resolve(here)


def test_the_marker_cannot_remove_a_slurm_variable() -> None:
    env = {**STEP, pipeline.SET_BY: "1.0:SLURM_PROCID,SLURM_NTASKS,PATH"}
    assert worldguard.set_for_another_step(env) is None
    assert resolve(env).rank == 5


def test_a_value_that_an_old_slurm_would_cut_into_a_protocol_line_is_refused() -> None:
    # Slurm before 22.05.1: fgets(buf, 4095), a piece every 4,094 bytes of the line
    head = "export TF_CONFIG="
    for keyword in ("export X=1", "unset RANK", "print hello"):
        value = "a" * (taskprolog.FGETS_PIECE - len(head)) + keyword
        with pytest.raises(SlurmEnvError) as info:
            taskprolog.protocol({"TF_CONFIG": value})
        assert info.value.variable == "TF_CONFIG" and "byte 4094" in str(info.value)
        # one byte further, the piece begins elsewhere: carried
        assert taskprolog.protocol({"TF_CONFIG": "b" + value}).endswith(keyword + "\n")


@pytest.mark.parametrize("value", ["a\rexport RANK=0", "r1n09\r", "\r", "x\r\ny"])
def test_a_value_with_a_carriage_return_is_refused_never_emitted(value: str) -> None:
    """A carriage return is a line break to Slurm's reader of the protocol too: the value is
    refused naming its variable, and no line of it reaches the task."""
    with pytest.raises(SlurmEnvError) as info:
        taskprolog.protocol({"RANK": "1", "MASTER_ADDR": value})
    assert info.value.variable == "MASTER_ADDR"
    assert taskprolog.protocol({"RANK": "1"}) == "export RANK=1\n"
