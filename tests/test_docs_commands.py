"""The command lines the README and docs/ show are the safe forms these pages teach.

* every ``srun`` command line of a code block carries ``--kill-on-bad-exit`` (or ``-K``),
  or says on the line why not (a comment with ``no -K:``): without it one failed task leaves
  the others waiting (torchrun's agents 300 s, ``init_process_group`` its whole timeout);
* no page, in a code block or in the text, shows a form the docs call unsafe:

  - a ``--task-prolog=`` whose path can be empty or relative: the bare
    ``"$(command -v slurmenv-task-prolog)"`` (empty when the prolog is not on ``PATH``: the task
    starts with nothing set) or a relative path (Slurm 22.05.1 and later kill the task);
    docs/task-prolog.md gives the closed form, ``"$(command -v slurmenv-task-prolog || echo
    /slurmenv-task-prolog-not-on-PATH)"``;
  - ``eval "$(slurmenv export …)" || exit``: the ``|| exit`` cannot catch a missing slurmenv
    (``eval`` of nothing succeeds); take the output first (``v=$(slurmenv export) && eval
    "$v"``).

``tests/test_real_docs_prolog.py`` runs every ``--task-prolog`` line on the real cluster.
"""

from __future__ import annotations

import re

import pytest
import test_docs_examples as docs

#: The changelog keeps what was true then.
SKIP = ("docs/CHANGELOG.md",)
#: Code blocks that are not command lines.
NOT_COMMANDS = ("python", "py", "json", "yaml", "toml", "zsh-completion", "text")
KILL = re.compile(r"(?:\s)(?:--kill-on-bad-exit(?:=1)?|-K(?:1)?)(?=\s|$)")
WHY_NOT = re.compile(r"#.*\bno -K:")
ASSIGNMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
CLOSED_PROLOG = '"$(command -v slurmenv-task-prolog || echo /slurmenv-task-prolog-not-on-PATH)"'
PROLOG_VALUE = re.compile(r"--task-prolog=(\"\$\([^)]*\)\"|\S+)")


def pages() -> list:
    return [p for p in docs.pages() if p.relative_to(docs.ROOT).as_posix() not in SKIP]


def command_lines() -> list[tuple[str, str]]:
    """(page:line, command) for every line of a shell code block, continuation lines joined,
    a ``$ `` prompt and leading ``NAME=value`` assignments removed."""
    found = []
    for page in pages():
        for block in docs.blocks(page):
            fence = page.read_text(encoding="utf-8").splitlines()[block.line - 1]
            language = fence.strip().lstrip("`~").strip()
            if language in NOT_COMMANDS:
                continue
            joined: list[tuple[int, str]] = []
            for n, line in enumerate(block.lines):
                if joined and joined[-1][1].endswith("\\"):
                    joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
                else:
                    joined.append((n, line))
            for n, line in joined:
                text = line.strip().removeprefix("$ ")
                found.append((f"{block.where.split(':')[0]}:{block.line + 1 + n}",
                              ASSIGNMENT.sub("", text)))
    return found


def srun_lines() -> list[tuple[str, str]]:
    return [(where, line) for where, line in command_lines() if line.startswith("srun ")]


def test_there_are_srun_lines_on_many_pages() -> None:
    where = {w.split(":")[0] for w, _ in srun_lines()}
    assert len(srun_lines()) >= 20 and {"README.md", "docs/containers.md"} <= where


#: Lines another branch rewrites: the step check's section of docs/debugging.md moves to
#: docs/step-check.md (its own page). The lead empties this at the merge.
PENDING_LINES: set[str] = set()


def unkilled(lines: list[tuple[str, str]]) -> list[str]:
    return [f"{where}: {line}" for where, line in lines
            if not KILL.search(line.split(" #")[0]) and not WHY_NOT.search(line)
            and line.split(" #")[0].strip() not in PENDING_LINES]


def test_every_srun_line_kills_the_step_on_a_failed_task() -> None:
    assert unkilled(srun_lines()) == []


def test_the_kill_check_sees_a_missing_flag() -> None:
    lines = [("a", "srun -N2 python train.py"), ("b", "srun -K python t.py"),
             ("c", "srun --kill-on-bad-exit=1 x"), ("d", "srun -N1 x  # no -K: one task"),
             ("e", "srun --kill-on-bad-exitx y"), ("f", "srun x  # -K later")]
    assert unkilled(lines) == ["a: srun -N2 python train.py", "e: srun --kill-on-bad-exitx y",
                               "f: srun x  # -K later"]


# -- unsafe forms, anywhere on a page --------------------------------------------------------------
def unsafe(text: str) -> list[str]:
    """The unsafe forms in ``text`` (one page, or one line)."""
    found = []
    flat = " ".join(text.split()).replace("\\|", "|")  # a table's escaped pipes
    for value in PROLOG_VALUE.findall(flat):
        value = value.rstrip("`.,;:)")
        if not value or value == CLOSED_PROLOG or value.startswith(("/", "…", '"/')):
            continue
        found.append(f"--task-prolog={value}")
    found += re.findall(r"eval \"\$\(slurmenv export[^)]*\)\" \|\| exit", flat)
    return found


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(docs.ROOT).as_posix())
def test_no_page_shows_an_unsafe_form(page) -> None:  # type: ignore[no-untyped-def]
    assert unsafe(page.read_text(encoding="utf-8")) == []


def test_the_unsafe_check_sees_the_old_forms() -> None:
    assert unsafe('srun --task-prolog="$(command -v slurmenv-task-prolog)" python t.py') == [
        '--task-prolog="$(command -v slurmenv-task-prolog)"']
    assert unsafe("`srun --task-prolog=slurmenv-task-prolog RUNTIME`") == [
        "--task-prolog=slurmenv-task-prolog"]
    assert unsafe("srun bash -c 'eval \"$(slurmenv export --for torch)\" || exit 1") != []
    assert unsafe(f"srun --task-prolog={CLOSED_PROLOG} python t.py") == []
    assert unsafe("for `srun --task-prolog=`: and `--task-prolog=` alone") == []
    assert unsafe("srun --task-prolog=/opt/bin/slurmenv-task-prolog x; `--task-prolog=…/p`") == []


# -- every slurmenv command line a page shows is one slurmenv accepts ------------------------------
INVOCATION = re.compile(
    r"(?<![\w./-])slurmenv (export|exec|show|doctor|dump|completion|help)"
    r"((?: +(?:'[^']*'|[^\s;|&)'\"`<>][^\s;|&)'\"`<>]*))*)")


def invocations() -> list[tuple[str, str, list[str]]]:
    """(page:line, command, its options) for every ``slurmenv COMMAND ...`` of a shell code
    block (up to a shell operator, a quote or ``--``), on every page."""
    found = []
    for where, line in command_lines():
        for command, rest in INVOCATION.findall(line.split(" #")[0]):
            words = [w.strip("'") for w in re.findall(r"'[^']*'|\S+", rest)]
            if "--" in words:
                words = words[:words.index("--")]
            found.append((where, command, words))
    return found


def refused(command: str, words: list[str]) -> str | None:
    """Why slurmenv's parser for ``command`` refuses ``words`` (None: it accepts them)."""
    import contextlib
    import importlib
    import io

    from slurmenv.commands import main as cli

    if command in cli.EXTERNAL:
        parser, argv = importlib.import_module(cli.EXTERNAL[command][0]).build_parser(), words
    else:
        parser, argv = cli.build_parser(), [command, *words]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args(argv)
    except SystemExit as exc:
        return None if exc.code == 0 else stderr.getvalue().strip().splitlines()[-1]
    return None


def test_every_slurmenv_command_line_shown_is_accepted() -> None:
    found = invocations()
    assert len(found) >= 40 and {c for _, c, _ in found} >= {"export", "exec", "show", "doctor",
                                                               "dump", "completion"}
    wrong = [f"{where}: slurmenv {command} {' '.join(words)}: {why}"
             for where, command, words in found
             if (why := refused(command, words)) is not None]
    assert wrong == []


def test_the_command_line_check_sees_a_wrong_option() -> None:
    assert refused("export", ["--bind-gpux"]) is not None
    assert refused("show", ["--one-line"]) is None and refused("doctor", ["--colour"]) is not None
