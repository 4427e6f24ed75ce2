"""The command line never shows a traceback (issue 19): a bug prints the shell's failure line
and a short message; encodings, closed pipes, empty or unrunnable commands, long csh words and
escape sequences all give a clean answer."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import synth

from slurmenv import SlurmEnvError, render
from slurmenv.commands import main as cli

HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
STEP = synth.step_env(HOSTS, [2, 2, 2, 2], 5)


def run(args: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    full = {**synth.clean_env(), **env}
    return subprocess.run([sys.executable, "-m", "slurmenv", *args], env=full,
                          capture_output=True, text=True, timeout=60, check=False, **kw)  # type: ignore[call-overload]


def test_a_bug_prints_the_failure_line_and_a_short_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: object) -> int:
        raise ZeroDivisionError("an internal slip")

    monkeypatch.setitem(cli.COMMANDS, "export", broken)
    monkeypatch.delenv("SLURMENV_DEBUG", raising=False)
    assert cli.main(["export", "--shell", "bash"]) == 70
    out, err = capsys.readouterr()
    assert out == render.FAILURE["sh"]
    assert "internal error: ZeroDivisionError: an internal slip" in err
    assert "bug in slurmenv" in err and "issue tracker" in err and "Traceback" not in err
    monkeypatch.setenv("SLURMENV_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["export"])


def test_an_ascii_locale_gets_utf8_values_and_escaped_messages() -> None:
    tf = '{"cluster":{"worker":["h-ü:1"]},"task":{"type":"worker","index":0}}'
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h0", "MASTER_PORT": "29500",
           "TF_CONFIG": tf, "PYTHONIOENCODING": "ascii"}  # a hand-set TF_CONFIG, as it is
    out = run(["export", "--for", "tf"], env)
    assert out.returncode == 0, out.stderr
    assert "h-\\u00fc:1" in out.stdout or "h-ü:1" in out.stdout, out.stdout
    env = {**STEP, "SLURMENV_ADDR_TEMPLATE": "{host}-ü", "PYTHONIOENCODING": "ascii"}
    out = run(["export", "--for", "torch"], env)  # no host name: refused, the value escaped
    assert out.returncode == 1 and "Traceback" not in out.stderr and "\\xfc" in out.stderr
    bad = run(["export"], {**STEP, "SLURM_GTIDS": "ü", "PYTHONIOENCODING": "ascii"})
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "\\xfc" in bad.stderr


@pytest.mark.parametrize("shell", ["sh", "csh", "fish"])
def test_a_closed_pipe_is_no_traceback(shell: str) -> None:
    env = {**synth.clean_env(), **STEP, "PATH": os.environ["PATH"]}
    proc = subprocess.run(
        f"{sys.executable} -m slurmenv export --shell {shell} | head -c 1 >/dev/null",
        shell=True, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_exec_of_an_empty_command_is_a_usage_error() -> None:
    out = run(["exec", "--", ""], STEP)
    assert out.returncode == 2 and "exec needs a command" in out.stderr
    assert "Traceback" not in out.stderr


def test_exec_exit_codes_follow_the_shell(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    assert run(["exec", "--", str(script)], STEP).returncode == 126
    assert run(["exec", "--", str(tmp_path / "absent")], STEP).returncode == 127
    assert run(["exec", "--", str(tmp_path)], STEP).returncode == 126  # a directory


def test_csh_refuses_a_word_bsd_csh_cannot_take() -> None:
    """BSD csh's eval fails with 'Word too long' past render.CSH_LINE_MAX (measured with
    Debian's csh package: tests/test_shells.py); tcsh takes them."""
    value = '{"w":"' + "x" * 5000 + '"}'
    with pytest.raises(SlurmEnvError) as info:
        render.render({"TF_CONFIG": value}, "csh")
    assert info.value.variable == "TF_CONFIG" and "--shell tcsh" in str(info.value.fix)
    assert "TF_CONFIG" in render.render({"TF_CONFIG": value}, "tcsh")
    small = '{"w":"' + "x" * 900 + '"}'
    assert len(render.render_tcsh({"TF_CONFIG": small})) - 1 <= render.CSH_LINE_MAX
    assert render.render({"TF_CONFIG": small}, "csh")


def test_escape_sequences_reach_no_terminal_raw() -> None:
    evil = "\x1b]0;owned\x07\x1b[2J"
    show = run(["show"], {**STEP, "SLURM_JOB_NAME": evil, "SLURMENV_ADDR_TEMPLATE": "{host}" + evil})
    doctor = run(["doctor"], {**STEP, "SLURMENV_ADDR_TEMPLATE": "{host}" + evil})
    for out in (show, doctor):
        assert "\x1b" not in out.stdout + out.stderr
        assert "\\x1b" in out.stdout + out.stderr


def test_running_out_of_memory_is_the_jobs_limit_not_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def hungry(args: object) -> int:
        raise MemoryError

    monkeypatch.setitem(cli.COMMANDS, "export", hungry)
    monkeypatch.delenv("SLURMENV_DEBUG", raising=False)
    assert cli.main(["export"]) == 1
    out, err = capsys.readouterr()
    assert out == render.FAILURE["sh"]
    assert err.startswith("slurmenv: error: out of memory") and "ulimit -v" in err
    assert "bug" not in err


def test_a_memory_limit_met_while_resolving_100000_nodes() -> None:
    # The limit is set once the interpreter and slurmenv are loaded: 4 MiB more than the
    # process has mapped, less than expanding 100,000 node names takes.
    hosts = [f"n{i:06d}" for i in range(100_000)]
    code = (
        "import resource, sys\n"
        "from slurmenv.commands.main import main\n"
        "pages = int(open('/proc/self/statm').read().split()[0])\n"
        "limit = pages * resource.getpagesize() + (4 << 20)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "sys.exit(main(['export', '--for', 'torch']))\n"
    )
    env = {**synth.clean_env(PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent)),
           **synth.step_env(hosts, [1] * len(hosts), 5)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("slurmenv: error: out of memory"), out.stderr
    assert "export RANK" not in out.stdout


def test_an_interrupt_stops_eval_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "export", interrupted)
    assert cli.main(["export", "--shell", "fish"]) == 130
    out, err = capsys.readouterr()
    assert out == render.FAILURE["fish"]
    assert err == "slurmenv: interrupted. Nothing was exported.\n"


def default_sigint() -> None:
    """In the child before exec: SIGINT's default disposition, whatever the test inherited
    (Python then installs its KeyboardInterrupt handler, as in a terminal)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_real_export() -> None:
    # SIGINT 10 ms into resolving 100,000 nodes, which takes tens of milliseconds
    hosts = [f"n{i:06d}" for i in range(100_000)]
    env = {**synth.clean_env(), **synth.step_env(hosts, [1] * len(hosts), 5),
           "PYTHONPATH": str(pathlib.Path(__file__).resolve().parent.parent)}
    code = ("import os, signal, sys\n"
            "from slurmenv.commands.main import entry_point\n"
            "sys.argv = ['slurmenv', 'export', '--for', 'torch']\n"
            "signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGINT))\n"
            "signal.setitimer(signal.ITIMER_REAL, 0.01)\n"
            "entry_point()\n")
    # A Ctrl-C reaches a process whose SIGINT is not ignored: one started in the background
    # (`nohup ... &`, `&` in a script) inherits it ignored, and then never sees it (exit 0). The
    # child sets its own disposition, so the test passes however the suite was started.
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=False, preexec_fn=default_sigint)
    assert (out.returncode, out.stderr) == (130, "slurmenv: interrupted. Nothing was exported.\n")
    assert out.stdout == render.FAILURE["sh"]


def test_step_timeout_without_the_step_check_is_refused() -> None:
    # not silently ignored: the user thinks a step check runs
    ran = run(["exec", "--step-timeout", "5", "--", sys.executable, "-c", "print('RAN')"], STEP)
    assert ran.returncode == 2 and "RAN" not in ran.stdout, ran
    assert "--step-timeout" in ran.stderr and "--preflight" in ran.stderr
    doctor = run(["doctor", "--step-timeout", "5"], STEP)
    assert doctor.returncode == 2 and "--step" in doctor.stderr, doctor


@pytest.mark.parametrize("shell", ["tcsh", "csh", "", "bash;rm"])
def test_completion_for_an_unknown_shell_writes_nothing_to_the_file(shell: str) -> None:
    # slurmenv completion tcsh > ~/.tcsh_completion: no shell guard in the file
    out = run(["completion", shell], {})
    assert out.returncode == 2 and out.stdout == "", out
    assert "invalid choice" in out.stderr
