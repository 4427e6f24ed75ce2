"""``slurmenv export --shell ...`` and ``--format ...`` read back by the real programs.

Every shell format round-trips arbitrary values (quotes, ``$``, backquotes, backslashes,
``!``, glob characters, blanks, newlines, unicode) through the real shell, evaluated exactly
the way the README's usage line for that shell does; a failed export stops a script before its
next command but leaves an interactive shell running. dash and bash have more tests in
test_export_cli.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import dotenv
import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import render
from slurmenv.errors import SlurmEnvError

ROOT = Path(__file__).resolve().parent.parent
#: program -> the Debian package that installs it. Debian's ``csh`` package is BSD csh
#: (``/bin/bsd-csh``), and the ``csh`` alternative prefers it to tcsh (priority 30 against 20):
#: with both installed, as tests/run.sh does, ``csh`` runs BSD csh and ``tcsh`` runs tcsh.
DEBIAN_SHELLS = {"fish": "fish", "tcsh": "tcsh", "zsh": "zsh", "bsd-csh": "csh"}

#: The README's usage line for each shell, and the program that runs it (kept in sync with
#: docs/shells.md by test_readme_shows_these_lines).
USAGE = {
    "sh": ("dash", "eval $(slurmenv export)"),
    "bash": ("bash", "eval $(slurmenv export)"),
    "zsh": ("zsh", "eval $(slurmenv export --shell zsh)"),
    "fish": ("fish", "eval (slurmenv export --shell fish)"),
    "csh": ("csh", "eval `slurmenv export --shell csh`"),
    "tcsh": ("tcsh", "eval `slurmenv export --shell tcsh`"),
}
# Other forms that work too (fish users often know `| string collect`; quoting in sh).
EXTRA_FORMS = {
    "sh": 'eval "$(slurmenv export)"',
    "fish": "eval (slurmenv export --shell fish | string collect)",
    "csh": 'eval "`slurmenv export --shell csh`"',
}
#: The form docs/shells.md teaches in a task's shell, ``{program}`` for the program: it starts
#: the program only with the variables set, whether slurmenv refuses or is missing on the node
#: (the plain ``eval`` lines above fail open then: ``eval`` of nothing succeeds).
TASK_FORMS = {
    "sh": ("dash", 'env=$(slurmenv export) && eval "$env" && exec {program}'),
    "bash": ("bash", 'env=$(slurmenv export) && eval "$env" && exec {program}'),
    "zsh": ("zsh", 'env=$(slurmenv export --shell zsh) && eval "$env" && exec {program}'),
    "fish": ("fish", "set env (slurmenv export --shell fish); and eval $env; and exec {program}"),
    "csh": ("csh", "eval `slurmenv export --shell csh || echo exit 1`; exec {program}"),
    "tcsh": ("tcsh", "eval `slurmenv export --shell tcsh || echo exit 1`; exec {program}"),
}
SPECIAL = "'\"$`\\!*?[]{}%~#&;|<>()^=,:- \t\n\r"
VALUES = st.text(
    st.one_of(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
              st.sampled_from(SPECIAL)),
    max_size=24,
)


def _install_missing_shells() -> None:
    missing = [pkg for name, pkg in DEBIAN_SHELLS.items() if shutil.which(name) is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install "
                       f"-y -qq {' '.join(missing)}", shell=True, check=True)


_install_missing_shells()


def test_shells_are_installed() -> None:
    missing = [p for p, _ in USAGE.values() if shutil.which(p) is None]
    assert not missing, f"install them (Debian packages {' '.join(DEBIAN_SHELLS.values())}): {missing}"


def test_csh_is_bsd_csh_and_tcsh_is_tcsh() -> None:
    """The csh tests run BSD csh, as Debian's csh package installs it, and the tcsh tests tcsh
    (when csh were tcsh, BSD csh's limits would go untested)."""
    csh = os.path.realpath(shutil.which("csh") or "csh")
    assert os.path.basename(csh) == "bsd-csh", (
        f"csh is {csh}: install Debian's csh package (BSD csh), which the csh alternative "
        "prefers to tcsh, or point the alternative at it: update-alternatives --auto csh")
    version = subprocess.run(["tcsh", "--version"], capture_output=True, text=True, timeout=10,
                             check=False)
    assert version.stdout.startswith("tcsh "), version.stdout


def interpreter(shell: str, interactive: bool = False) -> list[str]:
    """argv of ``shell`` without user start-up files."""
    program = USAGE[shell][0]
    norc = {"bash": ["--norc"], "zsh": ["-f"], "csh": ["-f"], "tcsh": ["-f"],
            "fish": ["--no-config"]}.get(shell, [])
    return [program, *norc, *(["-i"] if interactive else [])]


def base_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = synth.clean_env()
    for name in ("ENV", "BASH_ENV", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(name, None)
    bindir = os.path.dirname(shutil.which("slurmenv") or sys.executable)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), bindir, env.get("PATH", "")])
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"),
               XDG_DATA_HOME=str(home / "data"), LANG="C.UTF-8")
    env.update(extra or {})
    return env


def run(argv: Sequence[str], env: Mapping[str, str], cwd: Path, stdin: str | None = None
        ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), env=dict(env), cwd=cwd, capture_output=True, timeout=60,
                          check=False, input=None if stdin is None else stdin.encode(),
                          stdin=subprocess.DEVNULL if stdin is None else None)


def exported(stdout: bytes, names: Sequence[str]) -> dict[str, str | None]:
    """The variables ``names`` from ``env -0`` output (None: not exported)."""
    found = dict(item.split(b"=", 1) for item in stdout.split(b"\0") if b"=" in item)
    return {n: None if n.encode() not in found else found[n.encode()].decode() for n in names}


def with_file(line: str, path: str) -> str:
    """``line`` with the slurmenv command replaced by ``cat path`` (same evaluation)."""
    return re.sub(r"slurmenv export[^)`|\"]*", f"cat {path}", line).replace("cat out  ", "cat out")


def adversarial_files(cwd: Path, text: str) -> None:
    """Files that a glob in ``text``'s words would match once unescaped, so a pathname
    expansion the renderer failed to prevent changes the result."""
    for word in set(text.split()):
        name = word.replace("\\", "").replace("/", "_")
        if name and name not in (".", "..") and len(name.encode()) < 255:
            try:
                (cwd / name).touch()
            except OSError:
                pass


def round_trip(shell: str, line: str, values: Mapping[str, str], tmp: Path) -> None:
    fmt = shell if shell != "sh" else "sh"
    text = render.render(values, fmt)
    work = tmp / "w"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "out").write_text(text, encoding="utf-8", errors="surrogateescape")
    adversarial_files(work, text)
    script = f"{with_file(line, 'out')}; env -0"
    proc = run([*interpreter(shell), "-c", script], base_env(tmp), work)
    assert proc.returncode == 0, (proc.stderr.decode(errors="replace"), text)
    assert exported(proc.stdout, list(values)) == dict(values), text


# --- renderers: arbitrary values through each real shell --------------------------------------

@pytest.mark.parametrize("shell", list(USAGE))
@given(values=st.lists(VALUES, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip(shell: str, values: list[str], tmp_path: Path) -> None:
    if shell in ("csh", "tcsh"):
        values = [v for v in values if "\n" not in v] or [""]
    named = {f"SLURMENV_T{i}": v for i, v in enumerate(values)}
    round_trip(shell, USAGE[shell][1], named, tmp_path)


@pytest.mark.parametrize("shell", list(EXTRA_FORMS))
@given(values=st.lists(VALUES, min_size=1, max_size=3))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_other_forms(shell: str, values: list[str], tmp_path: Path) -> None:
    if shell == "csh":
        values = [v for v in values if "\n" not in v] or [""]
    round_trip(shell, EXTRA_FORMS[shell], {f"V{i}": v for i, v in enumerate(values)}, tmp_path)


@pytest.mark.parametrize("value", ["", "a  b", "*", "~", "{a,b}", "[ab]", "$HOME", "`id`",
                                   "!!", "\\", "'", '"', "-n", "%s%%", "a\tb", "x\r", "été",
                                   '{"cluster":{"worker":["n1:1","n2:1"]}}',
                                   # bash 5.2 takes a word with "+(" (or "@(", "!(") for a glob
                                   # pattern: a backslash in it was lost (found by hypothesis)
                                   "\\0+(", "a\\b@(c)", "\\!(x)"])
@pytest.mark.parametrize("shell", list(USAGE))
def test_round_trip_examples(shell: str, value: str, tmp_path: Path) -> None:
    round_trip(shell, USAGE[shell][1], {"V": value, "W": "plain"}, tmp_path)


def test_csh_output_has_nothing_expanded_before_eval() -> None:
    text = render.render({"A": SPECIAL.replace("\n", ""), "B": '{"a":[1]}'}, "csh")
    assert not set(text) & set("*?[{~!$")
    assert not set(render.FAILURE["csh"]) & set("*?[{~!$")


def test_csh_refuses_a_newline() -> None:
    with pytest.raises(SlurmEnvError) as err:
        render.render({"MASTER_ADDR": "a\nb"}, "tcsh")
    assert err.value.variable == "MASTER_ADDR" and "--format json" in str(err.value.fix)


# --- what each csh carries: BSD csh's line limit, tcsh's long values --------------------------

def line_of(value: str, name: str = "TF_CONFIG") -> int:
    """The length of ``value``'s setenv line, without its newline."""
    return len(render.render_tcsh({name: value})) - 1


def value_with_line(length: int, special: bool) -> str:
    """A value whose setenv line is ``length`` characters: plain, or JSON-like (octal escapes)."""
    value = '{"w":"' if special else ""
    while line_of(value + "x") <= length:
        value += "x"
    assert line_of(value) == length, (length, special)
    return value


@pytest.mark.parametrize("special", [False, True], ids=["plain", "escaped"])
@pytest.mark.parametrize("form", [USAGE["csh"][1], EXTRA_FORMS["csh"]])
def test_bsd_csh_reads_back_a_line_at_the_limit(form: str, special: bool, tmp_path: Path) -> None:
    at_limit = value_with_line(render.CSH_LINE_MAX, special)
    round_trip("csh", form, {"TF_CONFIG": at_limit, "OMP_NUM_THREADS": "2"}, tmp_path)


@pytest.mark.parametrize("special", [False, True], ids=["plain", "escaped"])
def test_the_csh_limit_is_bsd_cshs_own(special: bool, tmp_path: Path) -> None:
    """A line one character over render.CSH_LINE_MAX, rendered for tcsh, makes BSD csh fail
    with 'Word too long' in the quoted form (where the whole line is one word; the unquoted
    form takes a few more), and --shell csh refuses it instead."""
    over = value_with_line(render.CSH_LINE_MAX, special) + "x"
    assert line_of(over) == render.CSH_LINE_MAX + 1
    (tmp_path / "out").write_text(render.render_tcsh({"TF_CONFIG": over}), encoding="utf-8")
    proc = run([*interpreter("csh"), "-c", f"{with_file(EXTRA_FORMS['csh'], 'out')}; echo NEXT"],
               base_env(tmp_path), tmp_path)
    assert b"Word too long" in proc.stderr and b"NEXT" not in proc.stdout, proc.stderr
    with pytest.raises(SlurmEnvError) as info:
        render.render({"TF_CONFIG": over}, "csh")
    assert info.value.variable == "TF_CONFIG"
    assert "--shell tcsh" in str(info.value.fix) and "--for torch" in str(info.value.fix)


def test_the_pages_state_the_code_limit() -> None:
    for page in ("docs/shells.md", "docs/fail-closed.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert f"{render.CSH_LINE_MAX:,} characters" in text, page
        assert "csh is tcsh" not in text.replace("if your `csh` is tcsh", ""), page


def test_csh_refusal_stops_the_script_and_names_the_variable(tmp_path: Path) -> None:
    """The documented csh line, given a TF_CONFIG BSD csh cannot carry: a clear refusal naming
    TF_CONFIG, and the script stops; --for torch leaves TF_CONFIG out and works."""
    config = {"cluster": {"worker": [f"n{i}:1" for i in range(400)]},
              "task": {"type": "worker", "index": 0}}
    env = base_env(tmp_path, {**preset("n0"), "TF_CONFIG": json.dumps(config)})
    proc = run([*interpreter("csh"), "-c", f"{USAGE['csh'][1]}; echo NEXT-COMMAND-RAN"], env,
               tmp_path)
    assert b"NEXT-COMMAND-RAN" not in proc.stdout and proc.returncode != 0
    assert b"variable: TF_CONFIG=" in proc.stderr and b"--shell tcsh" in proc.stderr
    torch_only = USAGE["csh"][1].replace("--shell csh", "--shell csh --for torch")
    proc = run([*interpreter("csh"), "-c", f"{torch_only}; printenv RANK"], env, tmp_path)
    assert proc.returncode == 0 and proc.stdout == b"0\n", proc.stderr


@pytest.mark.parametrize("form", [USAGE["tcsh"][1], EXTRA_FORMS["csh"].replace("csh", "tcsh")])
def test_tcsh_carries_a_tf_config_near_the_limit(form: str, tmp_path: Path) -> None:
    """tcsh has no word limit; a value is made by several printf calls, none of whose
    argument reaches Linux's 128 KiB limit for one argument (one printf of a 120 KB TF_CONFIG
    failed with 'Argument list too long', and the backquote gave an empty TF_CONFIG with exit
    status 0)."""
    workers = [f"r{i}n09:12002" for i in range(7000)]
    config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}},
                        separators=(",", ":"))
    assert 100_000 < len(config) < 128 * 1024
    word = render.csh_quote(config)
    assert word.count("`printf ") > 1
    assert all(len(arg) <= render.PRINTF_ARG_MAX for arg in re.findall(r"printf '([^']*)'", word))
    round_trip("tcsh", form, {"TF_CONFIG": config, "B": "-1%"}, tmp_path)


@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), VALUES))
@settings(max_examples=300)
def test_json_round_trip(values: dict[str, str]) -> None:
    assert json.loads(render.render(values, "json")) == values


@given(values=st.lists(VALUES, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_dotenv_round_trip(values: list[str], tmp_path: Path) -> None:
    named = {f"V{i}": v for i, v in enumerate(values)}
    (tmp_path / "task.env").write_text(render.render(named, "dotenv"), encoding="utf-8")
    proc = run(["sh", "-c", "set -a; . ./task.env; set +a; env -0"], base_env(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert exported(proc.stdout, list(named)) == named
    # python-dotenv reads the same file when no value holds a quote, a backslash or a control
    # character (it reads "\r" as a newline)
    if not any("'" in v or "\\" in v or any(ord(c) < 32 for c in v) for v in values):
        assert dotenv.dotenv_values(tmp_path / "task.env") == named


# --- the usage lines, exactly as documented, with the real slurmenv ---------------------------

def preset(odd: str, master_addr: str = "h0") -> dict[str, str]:
    """Hand-set torch variables, ``odd`` in TF_CONFIG's worker (the preset launcher passes a
    hand-set TF_CONFIG through as it is; an address is checked as a host name)."""
    config = {"cluster": {"worker": [f"{odd}:1"]}, "task": {"type": "worker", "index": 0}}
    return {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": master_addr, "MASTER_PORT": "29500",
            "TF_CONFIG": json.dumps(config), "SLURM_CPUS_PER_TASK": "3"}


@pytest.mark.parametrize("shell", list(USAGE))
@given(addr=VALUES.filter(lambda v: v.strip() != ""))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_usage_line_sets_every_variable(shell: str, addr: str, tmp_path: Path) -> None:
    if shell in ("csh", "tcsh") and "\n" in addr:
        addr = addr.replace("\n", "")
    env = base_env(tmp_path, preset(addr))
    want = slurmenv.resolve(env).env("all")
    assert want["OMP_NUM_THREADS"] == "3"
    assert json.loads(want["TF_CONFIG"])["cluster"]["worker"] == [f"{addr}:1"]
    proc = run([*interpreter(shell), "-c", f"{USAGE[shell][1]}; env -0"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert exported(proc.stdout, list(want)) == want


def batch_env(home: Path) -> dict[str, str]:
    """The batch script of a two-task job: inside a job, outside any step; export refuses it
    (a job of exactly one task resolves there: tests/test_fail_closed.py)."""
    env = synth.step_env(["n1", "n2"], [1, 1], 0)
    step_only = [n for n in env if n.startswith("SLURM_STEP") or n in ("SLURM_GTIDS", "SLURM_LOCALID")]
    for name in step_only:
        del env[name]
    return base_env(home, env)


@pytest.mark.parametrize("shell", list(USAGE))
def test_failure_stops_a_script_before_its_next_command(shell: str, tmp_path: Path) -> None:
    script = tmp_path / f"job.{shell}"
    script.write_text(f"{USAGE[shell][1]}\necho NEXT-COMMAND-RAN\n")
    proc = run([*interpreter(shell), str(script)], batch_env(tmp_path), tmp_path)
    assert b"NEXT-COMMAND-RAN" not in proc.stdout
    assert proc.returncode == 1  # docs/shells.md: the script exits with status 1
    assert b"slurmenv: error: inside Slurm job" in proc.stderr


@pytest.mark.parametrize("shell", list(USAGE))
def test_failure_leaves_an_interactive_shell_running(shell: str, tmp_path: Path) -> None:
    stdin = f"{USAGE[shell][1]}\necho STILL-HERE\nexit 7\n"
    proc = run(interpreter(shell, interactive=True), batch_env(tmp_path), tmp_path, stdin=stdin)
    assert b"STILL-HERE" in proc.stdout, proc.stderr.decode(errors="replace")
    assert proc.returncode == 7
    assert b"slurmenv: error: inside Slurm job" in proc.stderr


@pytest.mark.parametrize("shell", ["csh", "tcsh"])
def test_csh_newline_value_is_a_failure_not_a_wrong_value(shell: str, tmp_path: Path) -> None:
    # an address with a line break is no host name: refused before csh's rule is needed
    # (render's own refusal of a newline for csh: test_csh_refuses_a_newline)
    env = base_env(tmp_path, preset("n1", master_addr="n1\nn2"))
    proc = run([*interpreter(shell), "-c", f"{USAGE[shell][1]}; echo NEXT-COMMAND-RAN"], env,
               tmp_path)
    assert b"NEXT-COMMAND-RAN" not in proc.stdout and proc.returncode != 0
    assert b"variable: MASTER_ADDR='n1\\nn2'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("shell", list(USAGE))
def test_a_typo_in_the_options_stops_the_script(shell: str, tmp_path: Path) -> None:
    line = USAGE[shell][1].replace("slurmenv export", "slurmenv export --bnd-gpus")
    proc = run([*interpreter(shell), "-c", f"{line}; echo NEXT-COMMAND-RAN"],
               base_env(tmp_path), tmp_path)
    assert b"NEXT-COMMAND-RAN" not in proc.stdout and proc.returncode != 0
    assert b"unrecognized arguments: --bnd-gpus" in proc.stderr


def test_format_json_and_dotenv_from_the_command_line(tmp_path: Path) -> None:
    addr = "a 'b' \"c\" $d `e` \\f\n!*?[{"
    env = base_env(tmp_path, preset(addr))
    want = slurmenv.resolve(env).env("all")
    out = run(["slurmenv", "export", "--format", "json"], env, tmp_path)
    assert json.loads(out.stdout) == want
    (tmp_path / "task.env").write_bytes(
        run(["slurmenv", "export", "--format", "dotenv"], env, tmp_path).stdout)
    proc = run(["sh", "-c", "set -a; . ./task.env; set +a; env -0"], base_env(tmp_path),
               tmp_path)
    assert exported(proc.stdout, list(want)) == want


def test_readme_shows_these_lines() -> None:
    """The shell page (docs/shells.md, split out of the README) shows exactly the task forms."""
    page = (ROOT / "docs" / "shells.md").read_text(encoding="utf-8")
    missing = [line.format(program="python train.py") for _, line in TASK_FORMS.values()
               if line.format(program="python train.py") not in page]
    assert not missing, f"docs/shells.md must show the tested usage lines: {missing}"


# --- the task forms: the program starts only with the variables set ---------------------------

def task_form(shell: str, program: str) -> list[str]:
    return [*interpreter(shell), "-c", TASK_FORMS[shell][1].format(program=program)]


@pytest.mark.parametrize("shell", list(TASK_FORMS))
@given(addr=VALUES.filter(lambda v: v.strip() != "" and "\n" not in v))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_task_form_sets_every_variable(shell: str, addr: str, tmp_path: Path) -> None:
    env = base_env(tmp_path, preset(addr))
    want = slurmenv.resolve(env).env("all")
    proc = run(task_form(shell, "env -0"), env, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert exported(proc.stdout, list(want)) == want


@pytest.mark.parametrize("shell", list(TASK_FORMS))
def test_task_form_starts_nothing_when_slurmenv_refuses(shell: str, tmp_path: Path) -> None:
    proc = run(task_form(shell, "echo PROGRAM-RAN"), batch_env(tmp_path), tmp_path)
    assert b"PROGRAM-RAN" not in proc.stdout and proc.returncode == 1
    assert b"slurmenv: error: inside Slurm job" in proc.stderr


@pytest.mark.parametrize("shell", list(TASK_FORMS))
def test_task_form_starts_nothing_when_slurmenv_is_missing(shell: str, tmp_path: Path) -> None:
    env = {**base_env(tmp_path, preset("n1")), "PATH": "/usr/bin:/bin"}
    assert shutil.which("slurmenv", path=env["PATH"]) is None
    proc = run(task_form(shell, "echo PROGRAM-RAN"), env, tmp_path)
    assert b"PROGRAM-RAN" not in proc.stdout
    # the missing command's status where the shell keeps it; csh only knows its own exit 1
    assert proc.returncode == (1 if shell in ("csh", "tcsh") else 127)


def test_the_plain_eval_line_fails_open_when_slurmenv_is_missing(tmp_path: Path) -> None:
    """Why the pages teach the task forms: the plain line runs the next command anyway."""
    env = {**batch_env(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = run(["bash", "-c", f"{USAGE['bash'][1]}; echo PROGRAM-RAN RANK=$RANK"], env, tmp_path)
    assert proc.returncode == 0 and b"PROGRAM-RAN RANK=\n" in proc.stdout


# --- every error of the command line stops the script (issue 10, item 1) ---------------------

#: Command lines slurmenv refuses, none naming a shell: the failure text must then suit the
#: shell that runs slurmenv (its parent process).
REFUSED = {
    "no command": "slurmenv",
    "misspelled command": "slurmenv exprot",
    "export: unknown option": "slurmenv export --bnd-gpus",
    "export: bad choice": "slurmenv export --for bogus",
    "exec: unknown option": "slurmenv exec --bogus -- true",
    "exec: no command": "slurmenv exec",
    "show: unknown option": "slurmenv show --bogus",
    "doctor: unknown option": "slurmenv doctor --bogus",
    "dump: unknown option": "slurmenv dump --bogus",
    "torchrun: option without its value": "slurmenv torchrun --port",
    "torchrun: no script": "slurmenv torchrun",
    "a bug in export": "slurmenv export",  # with the broken slurmenv (see broken_slurmenv)
    "a bug in show": "slurmenv show",
    "export refused in a batch script": "slurmenv export",  # see refused_env
}
BROKEN = """#!{python}
import sys
import slurmenv.pipeline
def broken(*args, **kwargs):
    raise RuntimeError("a forced bug")
slurmenv.pipeline.resolve = broken
from slurmenv.commands.main import main
sys.exit(main())
"""


def refused_env(case: str, home: Path) -> dict[str, str]:
    """The environment for ``case``: a slurmenv with a bug first on PATH for the bug cases."""
    env = batch_env(home) if "batch" in case else base_env(home)
    if case.startswith("a bug"):
        bindir = home / "broken-bin"
        bindir.mkdir(exist_ok=True)
        (bindir / "slurmenv").write_text(BROKEN.format(python=sys.executable))
        (bindir / "slurmenv").chmod(0o755)
        env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


def eval_line(shell: str, command: str) -> str:
    """The shell's usage line (USAGE) with ``command`` in place of ``slurmenv export ...``."""
    return re.sub(r"slurmenv export[^)`]*", command, USAGE[shell][1])


def refused_message(case: str) -> bytes:
    if "batch" in case:
        return b"slurmenv: error: inside Slurm job"
    return b"RuntimeError: a forced bug" if case.startswith("a bug") else b"error: "


@pytest.mark.parametrize("shell", list(USAGE))
@pytest.mark.parametrize("case", list(REFUSED))
def test_every_refusal_stops_a_script(shell: str, case: str, tmp_path: Path) -> None:
    line = eval_line(shell, REFUSED[case])
    proc = run([*interpreter(shell), "-c", f"{line}; echo SHOULD-NOT-RUN"],
               refused_env(case, tmp_path), tmp_path)
    assert b"SHOULD-NOT-RUN" not in proc.stdout, (line, proc.stderr)
    assert proc.returncode != 0
    assert refused_message(case) in proc.stderr


@pytest.mark.parametrize("shell", list(USAGE))
@pytest.mark.parametrize("case", list(REFUSED))
def test_every_refusal_leaves_an_interactive_shell_running(
    shell: str, case: str, tmp_path: Path
) -> None:
    stdin = f"{eval_line(shell, REFUSED[case])}\necho STILL-HERE\nexit 7\n"
    proc = run(interpreter(shell, interactive=True), refused_env(case, tmp_path), tmp_path,
               stdin=stdin)
    assert b"STILL-HERE" in proc.stdout, proc.stderr.decode(errors="replace")
    assert proc.returncode == 7
    assert refused_message(case) in proc.stderr
