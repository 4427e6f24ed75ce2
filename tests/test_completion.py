"""``slurmenv completion bash|zsh|fish``, tried in the real shells.

Each script is installed where its shell looks for it by itself (bash-completion's user
directory, a directory of zsh's ``$fpath``, fish's completions directory) and the shell is
asked to complete: bash through bash-completion's loader and ``COMP_WORDS``/``COMPREPLY``,
zsh interactively in a pseudo-terminal (a TAB, with ``compadd`` recording the matches), fish
with ``complete -C``. Every option of the options table must be offered by every command that
takes it: the scripts are generated from the parsers, so a new row is completed with no other
change (and this test fails if it is not).
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmenv import options, render
from slurmenv.commands.completion import commands, script

ROOT = Path(__file__).resolve().parent.parent
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")

#: Every flag of the options table and --for: what every resolving command must complete.
TABLE_FLAGS = sorted({*(row.flag for row in options.TABLE),
                      *(options.negative_flag(row) for row in options.TABLE if row.negative),
                      options.FOR[0]})
RESOLVING = ("export", "exec", "show", "doctor", "dump")
#: What a resolving command parses only to refuse it, hidden from its help: never offered.
REFUSED = {"dump": {options.FOR[0]}}  # a dump records every output (test_dump.py)


def offered(command: str) -> list[str]:
    """The table's flags (and --for) that ``command`` completes."""
    return [flag for flag in TABLE_FLAGS if flag not in REFUSED.get(command, set())]
TORCHRUN_FLAGS = sorted(row.flag for row in options.TABLE if row.torchrun)
COMMANDS = {"export", "exec", "show", "doctor", "dump", "torchrun", "completion", "help"}


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "BASH_COMPLETION"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "share"),
               XDG_CONFIG_HOME=str(home / "config"), TERM="dumb")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _install(shell: str, home: Path) -> Path:
    """Write ``slurmenv completion SHELL`` where the shell finds it by itself."""
    where = {"bash": home / "share/bash-completion/completions/slurmenv",
             "zsh": home / "zfunc/_slurmenv",
             "fish": home / "config/fish/completions/slurmenv.fish"}[shell]
    where.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-m", "slurmenv", "completion", shell],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stderr == ""
    where.write_text(out.stdout)
    return where


# -- bash --------------------------------------------------------------------------------------
def bash_complete(home: Path, words: list[str], load: str | None = None) -> list[str]:
    """What bash completes for ``words`` (the last one being completed), with the script
    loaded by bash-completion's on-demand loader from the user's completions directory, or by
    the shell code ``load``."""
    if not shutil.which("bash") or (load is None and not BASH_COMPLETION.exists()):
        pytest.skip("bash and the bash-completion package are needed (tests/run.sh installs them)")
    line = " ".join(words)
    # bash splits --opt=value at '=' (COMP_WORDBREAKS), as readline does
    split: list[str] = []
    for word in words:
        head, eq, tail = word.partition("=")
        split += [head, "=", tail] if eq and head.startswith("--") else [word]
    loader = load or (f". {BASH_COMPLETION}\n"
                      "__load_completion slurmenv || { echo 'no completion loaded' >&2; exit 3; }")
    code = (
        f"{loader}\n"
        "complete -p slurmenv >&2\n"
        f"COMP_WORDS=({' '.join(_sq(w) for w in split)})\n"
        f"COMP_CWORD={len(split) - 1}\nCOMP_LINE={_sq(line)}\nCOMP_POINT={len(line)}\n"
        '_slurmenv slurmenv "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", code], env=_env(home), cwd=home,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "complete -F _slurmenv slurmenv" in out.stderr
    return [w for w in out.stdout.splitlines() if w]


def _sq(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


# -- zsh ---------------------------------------------------------------------------------------
ZSH_SETUP = r"""
fpath=({zfunc} $fpath)
autoload -U compinit && compinit -u -d {home}/.zcompdump
zstyle ':completion:*' list-prompt ''
zstyle ':completion:*' select-prompt ''
# compadd records the matches it is given that fit the word (the calls with -O, -A or -D only
# filter for the completion functions and are passed on)
compadd() {{
  if [[ ${{@[1,(i)(-|--)]}} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
  local -a __hits
  builtin compadd -A __hits "$@"
  (( $#__hits )) && print -rl -- $__hits >> {out}
  builtin compadd "$@"
}}
_slurmenv_test_done() {{ print -r -- '<done>' >> {out} }}
comppostfuncs=(_slurmenv_test_done)
bindkey '^I' complete-word
print -r -- ready > {ready}
"""


def zsh_complete(home: Path, words: list[str], source: Path | None = None) -> list[str]:
    """What zsh offers after ``words`` and a TAB, in an interactive zsh whose $fpath holds
    ``_slurmenv`` (autoloaded by compinit from its ``#compdef`` line)."""
    if not shutil.which("zsh"):
        pytest.skip("zsh is needed (tests/run.sh installs it)")
    out, ready = home / "zsh-matches", home / "zsh-ready"
    for path in (out, ready):
        path.unlink(missing_ok=True)
    setup = ZSH_SETUP.format(zfunc=home / "zfunc", home=home, out=out, ready=ready)
    if source is not None:  # sourced after compinit instead of found in $fpath
        setup = setup.replace(f"fpath=({home / 'zfunc'} $fpath)", "").replace(
            "bindkey", f"source {source}\nbindkey")
    (home / "setup.zsh").write_text(setup)
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(home)
        os.execvpe("zsh", ["zsh", "-f", "-i"], _env(home))
    try:
        _type(fd, f". {home}/setup.zsh\n".encode(), lambda: ready.exists())
        line = " ".join(words)
        _type(fd, line.encode() + b"\t",
              lambda: out.exists() and "<done>" in out.read_text())
        return [w for w in out.read_text().splitlines() if w != "<done>"]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def _type(fd: int, text: bytes, done: object) -> None:
    """Type ``text`` into the terminal and read what the shell writes until ``done()``."""
    os.write(fd, text)
    deadline = time.monotonic() + 60  # a hang fails the test instead of blocking the suite
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"zsh did not complete {text!r}"
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                os.read(fd, 65536)
            except OSError:
                break


# -- fish --------------------------------------------------------------------------------------
def fish_complete(home: Path, words: list[str]) -> list[str]:
    """fish's ``complete -C``: its candidates (descriptions dropped), the script autoloaded
    from ``$XDG_CONFIG_HOME/fish/completions``."""
    if not shutil.which("fish"):
        pytest.skip("fish is needed (tests/run.sh installs it)")
    line = " ".join(words)
    out = subprocess.run(["fish", "-c", f"complete -C {_sq(line)}"], env=_env(home), cwd=home,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [w.split("\t")[0] for w in out.stdout.splitlines() if w]


COMPLETE = {"bash": bash_complete, "zsh": zsh_complete, "fish": fish_complete}


@pytest.fixture(scope="module", params=["bash", "zsh", "fish"])
def shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp(f"home-{request.param}")
    _install(request.param, home)
    (home / "step-12.json").write_text("{}")  # file names to complete: the shell runs here
    (home / "train.py").write_text("")

    def complete(*words: str) -> list[str]:
        return COMPLETE[request.param](home, list(words))

    complete.name = request.param  # type: ignore[attr-defined]
    return complete


def _words(found: list[str]) -> set[str]:
    """Matches as words (zsh gives a value of --opt= with its option: keep the value)."""
    return {w.split("=", 1)[-1] if w.startswith("--") and "=" in w else w for w in found}


def test_commands(shell) -> None:
    assert COMMANDS <= set(shell("slurmenv", "")), "every command"
    assert set(shell("slurmenv", "ex")) == {"export", "exec"}
    assert set(shell("slurmenv", "comp")) == {"completion"}


@pytest.mark.parametrize("command", RESOLVING)
def test_every_option_of_the_table(shell, command: str) -> None:
    """Every flag of the options table (and --for) is offered by every resolving command: the
    scripts are made from the parsers, which are made from the table."""
    found = set(shell("slurmenv", command, "--"))
    missing = [flag for flag in offered(command) if flag not in found]
    assert missing == [], f"{shell.name}: {command} does not complete {missing}"
    refused = REFUSED.get(command, set()) & found
    assert not refused, f"{shell.name}: {command} offers {refused}, which it refuses"


def test_torchrun_options(shell) -> None:
    found = set(shell("slurmenv", "torchrun", "--"))
    assert set(TORCHRUN_FLAGS) | {"--dry-run"} <= found
    assert "--tf-chief" not in found  # not an option of slurmenv torchrun


def test_command_own_options(shell) -> None:
    assert {"--all-ranks", "--one-line", "--json", "--from"} <= set(shell("slurmenv", "show", "--"))
    assert {"--export-ifname", "--color", "--quiet"} <= set(shell("slurmenv", "doctor", "--"))
    assert {"--output", "--force", "--probe"} <= set(shell("slurmenv", "dump", "--"))
    assert "--shell" in set(shell("slurmenv", "export", "--sh"))


@pytest.mark.parametrize(("words", "expected"), [
    (("export", "--shell", ""), set(render.SHELLS)),
    (("export", "--shell", "t"), {"tcsh"}),
    (("export", "--format", ""), set(render.FORMATS)),
    (("exec", "--for", ""), set(render.OUTPUTS)),
    (("show", "--for", "to"), {"torch", "torchrun"}),
    (("doctor", "--color", ""), {"auto", "always", "never"}),
    (("completion", ""), {"bash", "zsh", "fish"}),
])
def test_values(shell, words: tuple[str, ...], expected: set[str]) -> None:
    assert _words(shell("slurmenv", *words)) == expected


def test_value_after_equals(shell) -> None:
    assert _words(shell("slurmenv", "export", "--shell=z")) == {"zsh"}


def test_files_and_commands(shell) -> None:
    assert "step-12.json" in shell("slurmenv", "show", "--from", "step")
    assert "step-12.json" in shell("slurmenv", "dump", "--output", "st")
    assert "train.py" in shell("slurmenv", "torchrun", "--dry-run", "tr")
    # exec: after --, a command; after the command, its arguments (files)
    assert "python3" in shell("slurmenv", "exec", "--", "python")
    assert "train.py" in shell("slurmenv", "exec", "--port", "12345", "--", "python3", "tr")


def test_a_value_is_not_taken_for_an_option(shell) -> None:
    """After --port, the next word is a port: nothing is offered (no option, no file)."""
    assert shell("slurmenv", "export", "--port", "") == []


def test_script_is_the_parsers(tmp_path: Path) -> None:
    """The scripts name every option every command's parser takes (the table's rows among
    them), and nothing is written for an option by hand."""
    cmds = {c.name: c for c in commands()}
    assert set(cmds) == COMMANDS
    for name in RESOLVING:
        flags = {n for o in cmds[name].options for n in o.names}
        assert set(offered(name)) <= flags and not flags & REFUSED.get(name, set()), name
    for shell_name in ("bash", "zsh", "fish"):
        text = script(shell_name)
        for flag in TABLE_FLAGS:
            assert (flag if shell_name != "fish" else f"-l {flag[2:]}") in text


@pytest.mark.parametrize("argv", [["completion"], ["completion", "tcsh"]])
def test_refuses_a_shell_it_has_no_script_for(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "slurmenv", *argv], capture_output=True,
                         text=True, cwd=ROOT, check=False)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "bash" in out.stderr


def test_bash_without_bash_completion(tmp_path: Path) -> None:
    """docs/shells.md (Completion): eval "$(slurmenv completion bash)" in ~/.bashrc, no bash-completion."""
    load = f'eval "$({sys.executable} -m slurmenv completion bash)"'
    assert set(bash_complete(tmp_path, ["slurmenv", "export", "--sh"], load)) == {"--shell"}
    assert set(bash_complete(tmp_path, ["slurmenv", "show", "--for", ""], load)) == \
        set(render.OUTPUTS)


def test_zsh_sourced_after_compinit(tmp_path: Path) -> None:
    """docs/shells.md (Completion): source <(slurmenv completion zsh) after compinit."""
    if not shutil.which("zsh"):
        pytest.skip("zsh is needed (tests/run.sh installs it)")
    script_file = tmp_path / "slurmenv.zsh"
    script_file.write_text(script("zsh"))
    (tmp_path / "zfunc").mkdir()  # empty: nothing to autoload
    found = zsh_complete(tmp_path, ["slurmenv", "export", "--shell", ""], source=script_file)
    assert _words(found) == set(render.SHELLS)
