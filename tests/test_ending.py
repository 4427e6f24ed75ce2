"""How the console scripts write their output and end (``commandline.write_output``, ``end``).

``slurmenv export`` runs in every task of a step, so its process ends without the interpreter's
teardown once its output is written, unless something may still need the teardown (an atexit
handler, another thread). The witness of the teardown is an object whose ``__del__`` writes to
stderr: the teardown runs it, ``os._exit`` does not. Interpreters run with ``-S`` where the
test is about the ending, so that no site hook of this machine registers an atexit handler.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import synth

ROOT = Path(__file__).resolve().parent.parent

WITNESS = (
    "import os, sys\n"
    "class Witness:\n"
    "    def __del__(self):\n"
    "        os.write(2, b'teardown ran\\n')\n"
    "witness = Witness()\n"
    "from slurmenv.commands.console import end\n"
)


def ending(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``WITNESS + code`` in a fresh interpreter without site hooks."""
    env = synth.clean_env(PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-S", "-c", WITNESS + code], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_end_writes_buffered_output_and_skips_the_teardown() -> None:
    out = ending("sys.stdout.write('buffered, not yet flushed')\nend(0)")
    assert (out.returncode, out.stdout) == (0, "buffered, not yet flushed")
    assert "teardown ran" not in out.stderr


def test_the_witness_sees_an_ordinary_teardown() -> None:
    # the control: without end(), the same program's teardown runs the witness
    out = ending("sys.stdout.write('x')\nsys.exit(0)")
    assert (out.returncode, out.stdout) == (0, "x")
    assert "teardown ran" in out.stderr


@pytest.mark.parametrize(("status", "code", "stderr"), [
    ("None", 0, ""), ("0", 0, ""), ("3", 3, ""), ("'refused: reason'", 1, "refused: reason\n"),
])
def test_end_keeps_the_exit_status(status: str, code: int, stderr: str) -> None:
    out = ending(f"end({status})")
    assert (out.returncode, out.stderr) == (code, stderr)


def test_an_atexit_handler_gets_the_ordinary_teardown() -> None:
    out = ending("import atexit\natexit.register(lambda: os.write(2, b'handler ran\\n'))\n"
                 "end(0)")
    assert out.returncode == 0
    assert "handler ran" in out.stderr and "teardown ran" in out.stderr


def test_atexit_is_looked_at_only_once_imported() -> None:
    # a handler needs the atexit module: when no one imported it, there is none, and ending
    # does not import it (export's path would pay for it); imported without a handler, the
    # teardown is skipped all the same (a handler registered: the test above)
    out = ending("import slurmenv.commands.console as c\n"
                 "print(c._needs_teardown(), 'atexit' in sys.modules)\n"
                 "import atexit\nprint(c._needs_teardown())\nend(0)")
    assert (out.returncode, out.stdout) == (0, "False False\nFalse\n")
    assert "teardown ran" not in out.stderr


def test_a_running_thread_is_waited_for() -> None:
    out = ending("import threading, time\n"
                 "threading.Thread(target=lambda: (time.sleep(0.3), os.write(1, b'thread done'))"
                 ").start()\nend(0)")
    assert (out.returncode, out.stdout) == (0, "thread done")


# --- through the commands, as a user runs them ---------------------------------------------------
def step(nodes: int, unbuffered: bool = False) -> dict[str, str]:
    hosts = [f"n{i:05d}" for i in range(nodes)]
    env = {**synth.clean_env(PYTHONPATH=str(ROOT)), **synth.step_env(hosts, [1] * nodes, 1)}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:  # stdout's buffer is then the raw file, whose writes may be partial
        env["PYTHONUNBUFFERED"] = "1"
    return env


COMMANDS = [["slurmenv", "export"], ["slurmenv.commands.taskprolog"]]
BUFFERING = [pytest.param(False, id="buffered"), pytest.param(True, id="PYTHONUNBUFFERED")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_is_an_error_not_a_traceback(command: list[str]) -> None:
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", *command], env=step(4), stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert out.returncode == 1
    assert out.stderr == "slurmenv: error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("unbuffered", BUFFERING)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_reader_that_goes_away_ends_the_command_quietly(command: list[str],
                                                          unbuffered: bool) -> None:
    # 8,192 nodes: TF_CONFIG alone is over the 64 KiB a pipe holds, so the write meets the
    # closed pipe whatever the timing
    with subprocess.Popen([sys.executable, "-m", *command], env=step(8192, unbuffered),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(7) == b"export "
        proc.stdout.close()
        stderr = proc.stderr.read()
        assert proc.wait(timeout=60) == 1
    assert stderr == b""


@pytest.mark.parametrize("unbuffered", BUFFERING)
@pytest.mark.parametrize("command", COMMANDS)
def test_output_cut_short_by_a_file_size_limit_is_an_error(
    command: list[str], unbuffered: bool, tmp_path: Path
) -> None:
    # The write stops at the limit (100,000 of about 123,000 bytes) and says how much it
    # wrote; the next write fails (EFBIG). Unbuffered, the first write's count was once
    # ignored: a truncated file and exit status 0.
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    target = tmp_path / "env.sh"
    with target.open("wb") as handle:
        out = subprocess.run([sys.executable, "-m", *command], env=step(8192, unbuffered),
                             stdout=handle, stderr=subprocess.PIPE, text=True, timeout=60,
                             check=False, preexec_fn=limit)
    assert out.returncode == 1
    assert out.stderr == "slurmenv: error: cannot write the output: File too large\n"
    assert target.stat().st_size == 100_000


@pytest.mark.parametrize("unbuffered", BUFFERING)
def test_the_whole_output_reaches_a_slow_reader(unbuffered: bool) -> None:
    proc = subprocess.run(
        ["sh", "-c", f"{sys.executable} -m slurmenv export | (sleep 0.3; cat)"],
        env=step(8192, unbuffered), capture_output=True, text=True, timeout=60, check=True)
    assert len(proc.stdout) > 120_000 and proc.stdout.endswith("';\n")


def test_the_command_prints_everything_main_returns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmenv.commands.main import main

    env = step(4096)
    out = subprocess.run([sys.executable, "-m", "slurmenv", "export"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["export"]) == 0
    assert out.stdout == capsys.readouterr().out
    assert len(out.stdout) > 50_000


@pytest.mark.parametrize("command", [
    "slurmenv export", "slurmenv export --format json", "slurmenv show", "slurmenv doctor",
    "slurmenv dump -o -", "slurmenv torchrun --help", "slurmenv torchrun --dry-run train.py",
    "slurmenv.commands.taskprolog",
])
def test_a_closed_stdout_is_an_error_not_a_bug_report(command: str) -> None:
    out = subprocess.run(["sh", "-c", f'exec "$0" -m {command} >&-', sys.executable],
                         env=step(4), capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1
    assert out.stderr.endswith("slurmenv: error: cannot write the output: stdout is closed\n")
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr


def test_exec_runs_its_command_with_stdout_closed() -> None:
    out = subprocess.run(
        ["sh", "-c", 'exec "$0" -m slurmenv exec -- sh -c \'echo "rank $RANK" >&2\' >&-',
         sys.executable], env=step(4), capture_output=True, text=True, timeout=60, check=False)
    assert (out.returncode, out.stderr) == (0, "rank 1\n")


@pytest.mark.parametrize(("command", "extra", "code"), [
    ("slurmenv export", {}, 0),
    ("slurmenv export", {"SLURM_PROCID": "x"}, 1),
    ("slurmenv dump -o {tmp}/dump.json", {}, 0),  # it says "wrote ..." on stderr
    ("slurmenv.commands.taskprolog", {}, 0),
    ("slurmenv.commands.taskprolog", {"SLURM_PROCID": "x"}, 1),
])
def test_a_closed_stderr_keeps_the_exit_status(command: str, extra: dict[str, str], code: int,
                                               tmp_path: Path) -> None:
    command = command.format(tmp=tmp_path)
    out = subprocess.run(["sh", "-c", f'exec "$0" -m {command} 2>&-', sys.executable],
                         env={**step(4), **extra}, capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == code
    # (a refusal of the task prolog exports the stop value, not a rank)
    written = (tmp_path / "dump.json").exists() or (
        "RANK" in out.stdout and "slurmenv-refused" not in out.stdout)
    assert written == (code == 0)


def test_a_profiler_gets_to_report() -> None:
    # python -m cProfile prints its table after the command returns: no os._exit under it.
    # -S: no site hook may register an atexit handler (which would end it normally anyway).
    import hostlist

    env = {**step(4), "PYTHONPATH": os.pathsep.join([str(ROOT), os.path.dirname(hostlist.__file__)])}
    out = subprocess.run([sys.executable, "-S", "-m", "cProfile", "-m", "slurmenv", "export"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "export RANK='1';" in out.stdout and "function calls" in out.stdout


HELP = [["--help"], ["--version"], ["help"], ["help", "show"], ["show", "--help"],
        ["doctor", "--help"], ["dump", "--help"], ["export", "--help"], ["torchrun", "--help"]]


@pytest.mark.parametrize("unbuffered", BUFFERING)
@pytest.mark.parametrize("args", HELP, ids=" ".join)
def test_help_to_a_full_disk_is_an_error(args: list[str], unbuffered: bool) -> None:
    """Output written outside write_output (argparse's help and version, which ignore a failed
    write) to a full disk: the reason on stderr and status 1, never 0 with nothing written."""
    with open("/dev/full", "w") as full:
        out = subprocess.run(["slurmenv", *args], env=step(4, unbuffered), stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert out.returncode == 1, out.stderr
    assert out.stderr == "slurmenv: error: cannot write the output: No space left on device\n"


def test_end_does_not_exit_0_when_stdout_cannot_be_flushed() -> None:
    # main returned 0 with the output still in the buffer; the disk is full
    out = ending("sys.stdout = open('/dev/full', 'w', buffering=8192)\n"
                 "sys.stdout.write('export RANK=0\\n')\nend(0)")
    assert out.returncode == 1, out
    assert "cannot write the output" in out.stderr
