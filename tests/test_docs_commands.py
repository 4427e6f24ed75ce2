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


# -- no text a user reads shows a form that fails open ---------------------------------------------
# Every command line any page, the README, the example batch script, a command's --help, the
# package docstring, a fix text or doctor's advice shows must start no training when slurmenv
# is missing on the node or refuses, and kill the step on a failed task:
#
# * ``eval $(slurmenv …)`` (quoted or not, csh's backquotes, fish's parentheses) fails open:
#   when slurmenv is not on the node's PATH the substitution is empty, ``eval`` of nothing
#   succeeds and the next command runs without a rank. The closed forms take the output first
#   (``env=$(slurmenv export) && eval "$env" && exec …``; fish: ``set env (slurmenv …); and
#   eval $env; and exec …``; csh: ``eval `slurmenv … || echo exit 1```; tests/test_shells.py runs
#   each with slurmenv missing);
# * any other ``$(slurmenv …)`` whose emptiness goes unnoticed (not ``NAME=$(slurmenv …) &&``
#   nor ``|| exit``, nor with an ``|| echo`` fallback inside);
# * ``srun`` without ``-K`` before a training command (python, torchrun, a shell, ``exec``, …).
#
# A page may quote a fail-open form as what not to do only in a paragraph (a table row, a list
# item) or on a code line (its comment) that says it "fails open".
MARKED = re.compile(r"\bfail(?:s|ing)? open\b", re.IGNORECASE)
#: slurmenv as a command: by name, by a path, or as ``python -m slurmenv``
COMMAND = r"(?:python[\d.]*\s+-m\s+|[\w.~/-]*/)?slurmenv(?:-[\w-]+)?\b"
EVAL_DIRECT = re.compile(r"\b(?:eval\s+(?:\"?\$\(|`|\()|(?:\.|source)\s+<\()\s*" + COMMAND
                         + r"([^)`]*)")
SUBSTITUTION = re.compile(r"\$\(\s*" + COMMAND + r"([^)]*)\)")
TAKEN_FIRST = re.compile(r"\b[A-Za-z_]\w*=\"?$")
CHECKED_AFTER = re.compile(r"^\"?\s*(?:&&|\|\|\s*exit\b)")
#: a command that starts the training (or the user's program) after srun's options
TRAINING = re.compile(r"\b(?:python\d*(?:\.\d+)?|torchrun|train\.py|exec|accelerate|deepspeed|"
                      r"CMD|COMMAND|PROGRAM|apptainer|singularity|ch-run|enroot)\b|"
                      r"\b(?:ba|z|tc|c|da)?sh -c\b|\bfish -c\b")
SRUN = re.compile(r"(?<![\w./$-])srun(?=\s)")
SRUN_END = re.compile(r"[),;:]$|\.$")


def fail_open(text: str) -> list[str]:
    """The fail-open ``eval`` and unchecked ``$(slurmenv …)`` forms in ``text``."""
    found = []
    for match in EVAL_DIRECT.finditer(text):
        args = match.group(1)
        if args.lstrip().startswith("completion") or re.search(r"\|\|\s*echo\s+['\"]?exit", args):
            continue  # completion starts nothing; `|| echo exit 1` makes eval leave the script
        found.append(match.group(0).strip())
    for match in SUBSTITUTION.finditer(text):
        before, after = text[:match.start()], text[match.end():]
        args = match.group(1)
        if args.lstrip().startswith("completion") or "|| echo" in args or re.search(
                r"\beval\s+\"?$", before):
            continue  # the eval itself is counted above
        if TAKEN_FIRST.search(before) and CHECKED_AFTER.match(after):
            continue
        found.append(match.group(0))
    return found


def srun_snippets(text: str) -> list[str]:
    """Each ``srun …`` command line in free text (a help text, a fix, a code span): its words
    up to the end of the clause (a ``)``, ``,``, ``;`` or ``.`` outside quotes)."""
    found = []
    for match in SRUN.finditer(text):
        words = []
        for word in re.findall(r"'[^']*'|\"[^\"]*\"|\S+", text[match.start():]):
            words.append(word)
            if (word in ("or", "and", "then") or word.startswith("(")) and len(words) > 1:
                words.pop()
                break
            if SRUN_END.search(word) and not word.startswith(("'", '"')):
                words[-1] = word.rstrip(".,;)")
                break
        found.append(" ".join(words))
    return found


def unkilled_training(snippets: list[str]) -> list[str]:
    return [s for s in snippets
            if TRAINING.search(s) and not KILL.search(s.split(" #")[0]) and not WHY_NOT.search(s)]


def page_paragraphs(page) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(page:line, text) for every paragraph of a page outside its code blocks; a table row or
    a list item is a paragraph of its own."""
    lines = page.read_text(encoding="utf-8").splitlines()
    inside = {n for block in docs.blocks(page) for n in range(block.line - 1, block.end)}
    found: list[tuple[str, str]] = []
    start, current = 0, []  # type: ignore[var-annotated]
    for n, line in enumerate([*lines, ""]):
        new_item = re.match(r"\s*(?:\||[-*] |\d+\. )", line) is not None
        if n in inside or not line.strip() or new_item:
            if current:
                found.append((f"{page.relative_to(docs.ROOT).as_posix()}:{start + 1}",
                              " ".join(current)))
            current = []
            if n in inside or not line.strip():
                continue
        if not current:
            start = n
        current.append(line.strip())
    return found


def page_findings(page) -> list[str]:  # type: ignore[no-untyped-def]
    """Every fail-open form and unkilled srun of one page: its prose (code spans included) and
    its code blocks (continuation lines joined)."""
    found = []
    for where, text in page_paragraphs(page):
        flat = text.replace("\\|", "|")
        if not MARKED.search(flat):
            found += [f"{where}: {form}" for form in fail_open(flat)]
        spans = re.findall(r"``(.+?)``|`([^`]+)`", flat)
        for span in (a or b for a, b in spans):
            if span.strip().startswith("srun "):
                found += [f"{where}: {s}" for s in unkilled_training([span.strip()])]
    name = page.relative_to(docs.ROOT).as_posix()
    for where, line in command_lines():
        if where.split(":")[0] != name:
            continue
        comment = line.partition(" #")[2]
        if not MARKED.search(comment):
            found += [f"{where}: {form}" for form in fail_open(line.split(" #")[0])]
    return found


def all_pages() -> list:
    return [*pages(), *sorted((docs.ROOT / "examples").glob("*.sbatch"))]


def help_texts() -> dict[str, str]:
    """Every command's --help, as slurmenv prints it (slurmenv-task-prolog takes no options:
    its text is the module's docstring, checked with the messages)."""
    import subprocess
    import sys

    from slurmenv.commands import main as cli

    names = ["", *cli.COMMANDS, *cli.EXTERNAL]
    return {f"slurmenv {name} --help".replace("  ", " "): subprocess.run(
        [sys.executable, "-m", "slurmenv", *([name] if name else []), "--help"],
        capture_output=True, text=True, check=True, cwd=docs.ROOT).stdout for name in names}


def message_strings() -> dict[str, str]:
    """Every string the package can print: each literal (an f-string's constant parts joined)
    of every module, the docstrings aside (but the package's, which help(slurmenv) shows)."""
    import ast

    found = {}
    for path in sorted((docs.ROOT / "slurmenv").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                           ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        if path.name == "__init__.py" and path.parent.name == "slurmenv":
            docstrings.discard(id(tree.body[0].value))  # type: ignore[attr-defined]
        inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                 for v in node.values}
        for node in ast.walk(tree):
            if id(node) in docstrings or id(node) in inner:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                               for v in node.values)
            else:
                continue
            if "slurmenv" in text or "srun" in text:
                where = f"{path.relative_to(docs.ROOT).as_posix()}:{node.lineno}"
                found[where] = text
    return found


def text_findings(texts: dict[str, str]) -> list[str]:
    return [f"{where}: {form}" for where, text in texts.items()
            for form in [*fail_open(text), *unkilled_training(srun_snippets(text))]]


@pytest.mark.parametrize("page", all_pages(), ids=lambda p: p.relative_to(docs.ROOT).as_posix())
def test_no_page_shows_a_form_that_fails_open(page) -> None:  # type: ignore[no-untyped-def]
    assert [f for f in page_findings(page) if unnumbered(f) not in PENDING_FINDINGS] == []


def unnumbered(finding: str) -> str:
    """A finding without its line number (``page: form``): pending ones survive edits above."""
    return re.sub(r"^([^:]+):\d+: ", r"\1: ", finding)


#: Findings on pages another branch owns (docs/testing.md, docs/releases.md record the commands
#: the real-cluster tests run, which still use the one-liner): their owners rewrite them, and
#: the lead empties this at the merge (test_pending_findings_are_still_there says when).
PENDING_FINDINGS: set[str] = set()


def test_pending_findings_are_still_there() -> None:
    found = {unnumbered(f) for page in all_pages() for f in page_findings(page)}
    assert PENDING_FINDINGS - found == set(), "fixed: remove them from PENDING_FINDINGS"


def test_no_help_text_shows_a_form_that_fails_open() -> None:
    texts = help_texts()
    assert {"slurmenv --help", "slurmenv export --help", "slurmenv doctor --help",
            "slurmenv torchrun --help", "slurmenv completion --help"} <= set(texts)
    assert text_findings(texts) == []


def test_no_message_shows_a_form_that_fails_open() -> None:
    """Fix texts, doctor's advice, the package docstring: every literal that names slurmenv
    or srun."""
    texts = message_strings()
    assert len(texts) > 100 and "slurmenv/__init__.py:1" in texts
    assert text_findings(texts) == []


def test_the_fail_open_check_sees_the_old_forms() -> None:
    old = [
        "srun bash -c 'eval $(slurmenv export); python train.py'",
        "srun -K bash -c 'eval \"$(slurmenv doctor --export-ifname)\"; python train.py'",
        "eval `slurmenv export --shell tcsh`; python train.py",
        "eval (slurmenv export --shell fish); python train.py",
        "srun -K sh -c 'MASTER_ADDR=$(slurmenv show --master-addr) python train.py'",
        "srun -K bash -c 'source <(slurmenv export); exec python train.py'",
        "srun -K bash -c 'eval \"$(~/venvs/t/bin/slurmenv export)\" && python train.py'",
        "srun -K sh -c 'eval $(python3 -m slurmenv export); python train.py'",
    ]
    assert [len(fail_open(text)) for text in old] == [1] * len(old)
    closed = [
        "srun -K sh -c 'env=$(slurmenv export) && eval \"$env\" && exec python train.py'",
        "vars=$(slurmenv export --for torch) && eval \"$vars\" || exit 1",
        "set env (slurmenv export --shell fish | string collect); and eval $env; and exec x",
        "eval `slurmenv export --shell tcsh || echo exit 1`; exec python train.py",
        "eval \"$(slurmenv completion bash)\"",
        f"srun -K --task-prolog={CLOSED_PROLOG} python t.py",
    ]
    assert [fail_open(text) for text in closed] == [[]] * len(closed)


def test_the_srun_check_sees_a_training_command_without_k() -> None:
    text = ("fix: evaluate slurmenv inside the job step: srun bash -c 'eval x; python train.py' "
            "(single quotes) or srun slurmenv exec -- python train.py; run the doctor there "
            "too: srun slurmenv doctor. Reserve ports (srun --resv-ports=3), or run "
            "srun -K slurmenv exec -- python t.py.")
    assert unkilled_training(srun_snippets(text)) == [
        "srun bash -c 'eval x; python train.py'", "srun slurmenv exec -- python train.py"]


def test_a_marked_quote_is_allowed_and_an_unmarked_one_is_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    page = docs.ROOT / "docs" / "_probe.md"
    try:
        page.write_text("Never `eval $(slurmenv export); python t.py`: it fails open.\n\n"
                        "Or `eval $(slurmenv export); python t.py`.\n\n"
                        "- `srun python t.py` here\n- `srun -K python t.py` there\n",
                        encoding="utf-8")
        assert page_findings(page) == ["docs/_probe.md:3: eval $(slurmenv export",
                                       "docs/_probe.md:5: srun python t.py"]
    finally:
        page.unlink()
