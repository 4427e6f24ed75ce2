"""The command line, run for real: ``slurmenv export`` evaluated by real dash and bash,
``slurmenv exec``, ``slurmenv show``, and what a failure prints."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st
from test_resolve import BAD, bad_env

import slurmenv
from slurmenv import SlurmEnvError, render
from slurmenv.commands import main as cli

_script = Path(sysconfig.get_path("scripts")) / "slurmenv"
SLURMENV = str(_script) if _script.exists() else shutil.which("slurmenv")
DASH = shutil.which("dash")
BASH = shutil.which("bash")
SHELLS = [pytest.param(DASH, id="dash"), pytest.param(BASH, id="bash")]
# Prints the named variables as the *environment* of a child sees them (so they were exported).
DUMP = (
    f"{sys.executable} -c 'import json, os, sys; "
    "print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))' "
)
HOSTS = ["rack1-n09", "rack1-n10", "rack2-n09"]
COUNTS = [2, 3, 2]


def test_tools_present() -> None:
    assert SLURMENV and DASH and BASH, "slurmenv (pip install -e .), dash and bash are needed"


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without Slurm/training variables, with this Python first on PATH."""
    env = synth.clean_env()
    env.pop("ENV", None)
    env.pop("BASH_ENV", None)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.path.dirname(SLURMENV or
                                   ""), env.get("PATH", "/usr/bin:/bin")])
    env.update(extra or {})
    return env


def step(rank: int, **extra: str) -> dict[str, str]:
    return base_env(synth.step_env(HOSTS, COUNTS, rank, distribution="cyclic",
                                   job_id=777123, step_id=4, **extra))


def run(argv: Sequence[str], env: Mapping[str, str], stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), env=dict(env), input=stdin, capture_output=True, text=True, timeout=60, check=False,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def expected_values(env: Mapping[str, str], for_: str = "all") -> dict[str, str]:
    return slurmenv.resolve(env).env(for_)


def eval_and_dump(shell: str, env: Mapping[str, str], names: Sequence[str], quoted: bool
                  ) -> dict[str, str | None]:
    subst = '"$(slurmenv export)"' if quoted else "$(slurmenv export)"
    proc = run([shell, "-c", f"eval {subst} && {DUMP} {' '.join(names)}"], env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


# --- export evaluated by real shells ------------------------------------------------------

@pytest.mark.parametrize("quoted", [False, True], ids=["eval-unquoted", "eval-quoted"])
@pytest.mark.parametrize("shell", SHELLS)
def test_export_round_trips(shell: str, quoted: bool) -> None:
    env = step(5)
    want = expected_values(env)
    assert want["RANK"] == "5" and want["TF_CONFIG"].count('"') > 4
    assert eval_and_dump(shell, env, list(want), quoted) == want


def test_console_script_and_module_print_the_same() -> None:
    env = step(3)
    script = run([SLURMENV, "export"], env)  # type: ignore[list-item]
    module = run([sys.executable, "-m", "slurmenv", "export"], env)
    assert script.returncode == module.returncode == 0
    assert script.stdout == module.stdout
    assert "export RANK='3';" in script.stdout.splitlines()
    as_json = run([sys.executable, "-m", "slurmenv", "export", "--format", "json"], env)
    assert json.loads(as_json.stdout) == expected_values(env)


ODD = "it's \"q\" $HOME `id` \\back\\  two  spaces\ttab\nnew line ! * ? [a] ~ ; & | < > # é"


@pytest.mark.parametrize("quoted", [False, True], ids=["eval-unquoted", "eval-quoted"])
@pytest.mark.parametrize("shell", SHELLS)
def test_odd_characters_through_hand_set_values(shell: str, quoted: bool) -> None:
    # outside Slurm, a hand-set TF_CONFIG is reported as it is: inject odd characters there
    # (an address never holds them: a MASTER_ADDR like ODD is refused, see below)
    tf = {"cluster": {"worker": [ODD + ":1", "b:2"]}, "task": {"type": "worker", "index": 0}}
    env = base_env({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                    "MASTER_ADDR": "h0", "MASTER_PORT": "23456",
                    "TF_CONFIG": json.dumps(tf)})
    want = expected_values(env)
    assert json.loads(want["TF_CONFIG"]) == tf
    assert eval_and_dump(shell, env, list(want), quoted) == want
    env["MASTER_ADDR"] = ODD
    subst = '"$(slurmenv export)"' if quoted else "$(slurmenv export)"
    proc = run([shell, "-c", f"eval {subst} && echo {GUARD_WORD}"], env)
    assert proc.returncode != 0 and GUARD_WORD not in proc.stdout
    assert "variable: MASTER_ADDR=" in proc.stderr and "not a host name" in proc.stderr


GUARD_WORD = "SHOULD-NOT-RUN"


@pytest.mark.parametrize("shell", SHELLS)
def test_odd_characters_through_the_address_template(shell: str) -> None:
    # a template that makes no host name is refused before any address is built
    template = "{host}'x $y \"*?[z]! \\"
    env = step(4, SLURMENV_ADDR_TEMPLATE=template)
    with pytest.raises(SlurmEnvError) as err:
        expected_values(env)
    assert (err.value.variable, err.value.value) == ("SLURMENV_ADDR_TEMPLATE", template)
    proc = run([shell, "-c", f"eval $(slurmenv export) && echo {GUARD_WORD}"], env)
    assert proc.returncode != 0 and GUARD_WORD not in proc.stdout
    assert "variable: SLURMENV_ADDR_TEMPLATE=" in proc.stderr


NASTY = ["", " ", "  ", "\n", "\n\n", "a\n", "\t", " \t\n ", "'", "''", '"', "\\", "\\'",
         "$HOME", "${x}", "$(id)", "`id`", "!", "!!", "*", "?", "[", "]", "[a]", "[!a]",
         "a*b", "~", "~root", "#x", "x#", ";", "&&", "|", "%", "%s", "\\n", "\\012", "é",
         "\x01", "\x7f", "\r", "{a,b}", "a=b", "-n", "--", "'\\''", "\"'\"", "a  *  b"]
VALUES = st.text(
    alphabet=st.one_of(st.sampled_from(list(" \t\n'\"\\$`!*?[]{}~#;&|<>%é")),
                       st.characters(blacklist_categories=["Cs"], blacklist_characters="\0")),
    max_size=20,
)


def eval_rendered(shell: str, values: Sequence[str], quoted: bool) -> list[str]:
    text = render.render({f"V{i}": v for i, v in enumerate(values)}, "sh")
    subst = '"$(cat)"' if quoted else "$(cat)"
    names = " ".join(f'"$V{i}"' for i in range(len(values)))
    proc = subprocess.run(
        [shell, "-c", f"eval {subst} && printf '%s\\0' {names}"], input=text.encode(),
        capture_output=True, timeout=60, check=False, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                              "LC_ALL": "C.UTF-8"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("quoted", [False, True], ids=["eval-unquoted", "eval-quoted"])
@pytest.mark.parametrize("shell", SHELLS)
def test_render_nasty_values(shell: str, quoted: bool) -> None:
    assert eval_rendered(shell, NASTY, quoted) == NASTY


@pytest.mark.parametrize("shell", SHELLS)
def test_unquoted_eval_survives_nullglob_and_failglob(shell: str, tmp_path: Path) -> None:
    # matching files in the working directory and bash's nullglob/failglob must not change
    # TF_CONFIG's brackets
    (tmp_path / "a").touch()
    values = ["[a]", "*", "x[ab]y", '{"worker":["n1:1"]}']
    text = render.render({f"V{i}": v for i, v in enumerate(values)}, "sh")
    opts = "shopt -s nullglob; " if shell == BASH else ""
    for extra in (opts, opts.replace("nullglob", "failglob")):
        proc = subprocess.run(
            [shell, "-c", f'{extra}eval $(cat) && printf "%s\\0" "$V0" "$V1" "$V2" "$V3"'],
            input=text, capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
        )
        assert proc.stdout.split("\0")[:-1] == values, proc.stderr


@given(st.lists(VALUES, min_size=1, max_size=6))
@settings(max_examples=25, deadline=None)
def test_render_round_trips_any_value(values: list[str]) -> None:
    for shell in (DASH, BASH):
        for quoted in (False, True):
            assert eval_rendered(shell, values, quoted) == values  # type: ignore[arg-type]


# --- failure: stop a script, not an interactive shell -----------------------------------------

def batch_env() -> dict[str, str]:
    env = step(0)
    for name in list(env):
        if name.startswith("SLURM_STEP") or name in ("SLURM_GTIDS", "SLURM_LOCALID"):
            del env[name]
    return env


@pytest.mark.parametrize("shell", SHELLS)
def test_documented_form_stops_on_failure(shell: str) -> None:
    proc = run([shell, "-c", "eval $(slurmenv export); echo RAN"], batch_env())
    assert "RAN" not in proc.stdout
    assert proc.returncode != 0
    assert "srun -K slurmenv exec" in proc.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_documented_form_runs_on_success(shell: str) -> None:
    proc = run([shell, "-c", 'eval $(slurmenv export); echo "RAN $RANK $WORLD_SIZE"'], step(6))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "RAN 6 7\n"


def test_failure_prints_nothing_that_sets_variables() -> None:
    proc = run([SLURMENV, "export"], batch_env())  # type: ignore[list-item]
    assert proc.returncode == 1
    assert "export" not in proc.stdout and "=" not in proc.stdout
    assert proc.stdout == render.FAILURE["sh"]


@pytest.mark.parametrize("shell", SHELLS)
def test_interactive_shell_survives_the_failure_line(shell: str) -> None:
    # an salloc session: the user types the documented line in an interactive shell
    env = batch_env()
    norc = ["--norc"] if shell == BASH else []
    proc = run([shell, *norc, "-i", "-c", "eval $(slurmenv export); echo ALIVE"], env)
    assert "ALIVE" in proc.stdout, proc.stderr
    # and commands typed one after another keep running afterwards
    proc = run([shell, *norc, "-i"], env,
               stdin="eval $(slurmenv export)\necho ALIVE after\nexit 7\n")
    assert "ALIVE after" in proc.stdout, proc.stderr
    assert proc.returncode == 7


def test_failure_line_exits_a_script_but_not_an_interactive_shell() -> None:
    line = render.FAILURE["sh"].strip()
    env = base_env()
    for shell in (DASH, BASH):
        script = run([shell, "-c", f"eval $(printf '%s' '{line}'); echo RAN"], env)  # type: ignore[list-item]
        assert (script.returncode, script.stdout) == (1, "")
        interactive = run([shell, "-i", "-c", f"{line}; echo RAN"], env)  # type: ignore[list-item]
        assert interactive.stdout == "RAN\n"


def test_unexpected_error_still_prints_the_failure_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **options: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "resolve", broken)
    monkeypatch.delenv("SLURMENV_DEBUG", raising=False)
    assert cli.main(["export"]) == 70  # a bug: reported as one, no traceback (cli.main)
    assert capsys.readouterr().out == render.FAILURE["sh"]


@pytest.mark.parametrize(("variable", "value"), BAD)
def test_malformed_input_cli(
    variable: str, value: str | None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(os, "environ", bad_env(variable, value))
    assert cli.main(["export"]) == 1
    out, err = capsys.readouterr()
    assert "export" not in out and out == render.FAILURE["sh"]
    assert variable in err and err.startswith("slurmenv: error: ")


def test_malformed_input_real_process() -> None:
    for variable, value in (("SLURM_PROCID", "4"), ("SLURM_STEP_NODELIST", "n[1-2")):
        env = base_env(bad_env(variable, value))
        for argv in ([SLURMENV, "export"], [sys.executable, "-m", "slurmenv", "export"]):
            proc = run(argv, env)  # type: ignore[arg-type]
            assert proc.returncode == 1 and "export" not in proc.stdout
            assert f"{variable}={value!r}" in proc.stderr


# --- exec and show ------------------------------------------------------------------------

def test_exec_sets_the_variables() -> None:
    proc = run([SLURMENV, "exec", "--", "sh", "-c", 'echo "$RANK $LOCAL_RANK $MASTER_ADDR"'],  # type: ignore[list-item]
               step(4))
    assert proc.returncode == 0, proc.stderr
    want = synth.expected(HOSTS, COUNTS, 4, "cyclic")
    assert proc.stdout == f"4 {want['LOCAL_RANK']} {want['MASTER_NODE']}\n"


def test_exec_does_not_run_the_command_on_failure() -> None:
    proc = run([SLURMENV, "exec", "--", "sh", "-c", "echo RAN"], batch_env())  # type: ignore[list-item]
    assert proc.returncode == 1 and proc.stdout == ""
    assert "srun" in proc.stderr
    proc = run([SLURMENV, "exec"], step(0))  # type: ignore[list-item]
    assert proc.returncode == 2 and "needs a command" in proc.stderr


def test_show_lists_every_variable_with_its_source() -> None:
    env = step(2)
    proc = run([SLURMENV, "show"], env)  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stderr
    res = slurmenv.resolve(env)
    lines = proc.stdout.splitlines()
    for name, value in res.env("all").items():
        index = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        assert value in lines[index]
        assert "from " + res.sources[name] in lines[index + 1]
    assert "SLURM_PROCID=2" in proc.stdout and "SLURM_STEP_NODELIST=" in proc.stdout


# --- TF_CONFIG over 128 KiB ---------------------------------------------------------------------

def big_step() -> dict[str, str]:
    hosts = [f"n{i:05d}" for i in range(1, 20001)]
    return base_env(synth.step_env(hosts, [1] * 20000, 17, nodelist="n[00001-20000]"))


def test_tf_config_over_128k_refused_torch_still_works() -> None:
    env = big_step()
    proc = run([SLURMENV, "export"], env)  # type: ignore[list-item]
    assert proc.returncode == 1 and "export" not in proc.stdout
    assert "TF_CONFIG" in proc.stderr and "slurmenv.resolve().tf_config" in proc.stderr
    assert "--for torch" in proc.stderr
    proc = run([SLURMENV, "export", "--for", "torch"], env)  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stderr
    assert "export RANK='17';" in proc.stdout and "TF_CONFIG" not in proc.stdout
    assert "export MASTER_ADDR='n00001';" in proc.stdout


# --- help only when asked; every refusal prints the failure text --------------------------

@pytest.mark.parametrize("argv", [["--help"], ["help"], ["help", "export"], ["help", "show"],
                                  ["help", "torchrun"], ["export", "--help"]])
def test_help_goes_to_stdout_when_asked(argv: list[str]) -> None:
    proc = run([SLURMENV, *argv], base_env())  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: slurmenv") and proc.stderr == ""


@pytest.mark.parametrize("argv", [[], ["exprot"], ["--shell", "bash"], ["help", "exprot"],
                                  ["export", "--bnd-gpus"], ["export", "--shell", "sh",
                                  "--format", "json"], ["exec"], ["show", "--bogus"],
                                  ["torchrun"]])
def test_a_refused_command_line_prints_only_the_failure_text(argv: list[str]) -> None:
    proc = run([SLURMENV, *argv], base_env())  # type: ignore[list-item]
    assert proc.returncode == 2
    assert proc.stdout == render.FAILURE["sh"]  # no help text for eval to run
    assert "error: " in proc.stderr


@pytest.mark.parametrize("shell", ["sh", "bash", "zsh", "fish", "csh", "tcsh"])
def test_the_failure_text_is_the_named_shells(shell: str) -> None:
    for argv in (["export", "--shell", shell, "--bogus"], ["exprot", f"--shell={shell}"],
                 ["exec", "--shell", shell]):
        proc = run([SLURMENV, *argv], base_env())  # type: ignore[list-item]
        assert proc.returncode == 2 and proc.stdout == render.FAILURE[shell], argv


def test_a_data_format_gets_no_shell_text() -> None:
    proc = run([SLURMENV, "export", "--format", "json", "--bogus"], base_env())  # type: ignore[list-item]
    assert proc.returncode == 2 and proc.stdout == ""
    proc = run([SLURMENV, "export", "--format=dotenv"], batch_env())  # type: ignore[list-item]
    assert proc.returncode == 1 and proc.stdout == ""


def test_a_terminal_gets_no_failure_text() -> None:
    # Nobody evaluates what a terminal shows: a person who mistypes sees the error alone.
    import pty

    for argv, env in (([SLURMENV, "exprot"], base_env()), ([SLURMENV, "export"], batch_env())):
        leader, follower = pty.openpty()
        try:
            proc = subprocess.run(argv, env=env, stdout=follower, stderr=subprocess.PIPE,  # type: ignore[arg-type]
                                  stdin=subprocess.DEVNULL, timeout=60, check=False)
            os.close(follower)
            shown = b""
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # EIO: the terminal's other end is closed
                    break
                if not chunk:
                    break
                shown += chunk
        finally:
            os.close(leader)
        assert proc.returncode in (1, 2) and b"slurmenv: error" in proc.stderr
        assert shown == b"", shown


def test_a_bug_in_any_command_prints_the_failure_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from slurmenv import pipeline

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pipeline, "resolve", broken)
    monkeypatch.setattr(os, "environ", {**step(0), "SLURMENV_DEBUG": ""})
    for argv in (["export", "--shell", "fish"], ["exec", "--", "true"], ["show"], ["dump", "-o", "-"]):
        assert cli.main(argv) == 70, argv
        want = render.FAILURE["fish"] if "fish" in argv else render.FAILURE["sh"]
        out, err = capsys.readouterr()
        assert out.endswith(want) and "internal error: RuntimeError: a bug" in err, argv


def test_export_verbose_says_on_stderr_which_inherited_value_is_kept() -> None:
    """``export --verbose``: the notes ``show`` prints go to stderr (one ``slurmenv: note:``
    line each), stdout stays the lines to evaluate, the same as without --verbose."""
    env = {**step(2), "MASTER_PORT": "29500"}
    quiet = run([SLURMENV, "export"], env)
    loud = run([SLURMENV, "export", "--verbose"], env)
    assert quiet.returncode == loud.returncode == 0 and quiet.stdout == loud.stdout
    assert "export MASTER_PORT='29500';" in loud.stdout.splitlines()
    assert quiet.stderr == ""
    assert [line for line in loud.stderr.splitlines() if "MASTER_PORT" in line] == [(
        "slurmenv: note: MASTER_PORT=29500 was already set (inherited): kept as your choice, "
        "not derived for this step; a step of this job running at the same time with its rank 0 "
        "on the same node would take the same port (unset it to get one per step)")]
    plain = run([SLURMENV, "export", "--verbose"], step(2))
    assert plain.returncode == 0 and "MASTER_PORT" not in plain.stderr
