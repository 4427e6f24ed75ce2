"""The examples in README.md and docs/ are what slurmenv prints today, and every link resolves.

The convention (also described in docs/README.md, "Examples in these pages"): an example
output is a fenced block whose lines starting with ``$ `` are ``slurmenv`` command lines, each
followed by what it prints (stdout and stderr, as a terminal shows them). An HTML comment on
the line before the fence names the environment the commands run in::

    <!-- env: tests/dumps/healthy-rank5.json -->
    ```console
    $ slurmenv export --for torch
    export RANK='5';
    ...
    ```

``env:`` takes a source and optional changes to it:

* ``tests/dumps/NAME.json``: the task environment recorded on the real test cluster (the
  dump's ``environ``, with its host file if any), with the process's CPU affinity set to the
  recorded task's CPU count (thread counts follow it);
* ``none``: no Slurm or launcher variable at all (outside Slurm), CPU affinity of one CPU;
* then ``NAME=VALUE`` sets a variable and ``-NAME`` removes one (shlex syntax).

Commands with ``--from FILE`` replay a dump themselves; give them ``<!-- env: none -->``.
Every command runs as ``python -m slurmenv`` from this checkout, at the repository's root,
with ``PATH`` limited to this Python's directory and the system's default path.

What is normalised, because it truly varies from machine to machine:

* ``env: none`` only: the free local port a single process picks (``MASTER_PORT`` and the
  ``127.0.0.1:PORT`` TensorFlow address) is compared as ``PORT``;
* the program ``slurmenv torchrun --dry-run`` prints first (the ``torchrun`` found on
  ``PATH``, or ``python -m torch.distributed.run``) is compared as ``torchrun``;
* trailing blank lines of an output.

Nothing else may depend on the machine: doctor examples replay a dump (``--from``), whose
node facts (the master's address, interfaces, listening ports, whether Lightning is installed)
are the recorded node's, so ``--update`` gives the same pages on a machine without Lightning.

A fenced block without the marker must not show a command line mentioning ``slurmenv``
(``$ slurmenv ...``, ``$ srun ... slurmenv ...``) followed by output: such output would escape
this check. Show it through a replayed dump instead.

Regenerate the outputs after a behaviour change (then read the diff), with every other
generated part of the docs (tests/regen.py)::

    python tests/regen.py
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Pages that other branches are writing; links to them are accepted until they exist. The lead
# empties this list when merging them (test_pending_pages_do_not_exist_yet fails otherwise).
PENDING: set[str] = set()

# Pages merged into another: the changelog, which keeps what was true then, may still link them
# (the lead points such links at the new page when writing the changelog).
MOVED = {"docs/completion.md": "docs/shells.md", "docs/proofs.md": "docs/testing.md"}

MARKER = re.compile(r"^\s*<!--\s*env:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
PROMPT = "$ "
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&"}
REGENERATE = "python tests/regen.py"


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


class Block(NamedTuple):
    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    end: int  # 1-based line of the closing fence
    lines: list[str]  # the block's content, without the fence's indentation
    indent: str
    env: str | None  # the marker's text, None without a marker

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


class Example(NamedTuple):
    block: Block
    number: int  # which command of the block
    line: str  # the command line as written, after the prompt
    argv: list[str]
    expected: str


def blocks(path: pathlib.Path, text: str | None = None) -> Iterator[Block]:
    """The fenced blocks of a Markdown page (its ``text`` if given), each with the ``env:``
    marker before it.

    A ``markdown`` block shows page source: the blocks inside it are checked like any other.
    """
    if text is None:
        text = path.read_text(encoding="utf-8")
    yield from _blocks(path, text.splitlines(), 0)


def _blocks(path: pathlib.Path, lines: list[str], offset: int) -> Iterator[Block]:
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        indent = match.group(1)
        content = [line.removeprefix(indent) for line in lines[i + 1:j]]
        env = marker.group(1) if marker else None
        if match.group(3) in ("markdown", "md"):
            yield from _blocks(path, content, offset + i + 1)
        else:
            yield Block(path, offset + i + 1, offset + j + 1, content, indent, env)
        i = j + 1


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def examples(block: Block) -> list[Example]:
    """The commands of a marked block with the output written under each."""
    found: list[Example] = []
    current: str | None = None
    output: list[str] = []

    def close() -> None:
        if current is not None:
            while output and not output[-1].strip():
                output.pop()
            argv = shlex.split(current, comments=True)
            found.append(Example(block, len(found), current, argv, "\n".join(output)))

    for line in block.lines:
        if line.startswith(PROMPT):
            close()
            current, output = line[len(PROMPT):], []
        elif current is None:
            if line.strip():
                raise AssertionError(f"{block.where}: output before any '$ slurmenv' line")
        else:
            output.append(line)
    close()
    return found


def marked_examples() -> list[Example]:
    return [ex for block in all_blocks() if block.env is not None for ex in examples(block)]


# -- running an example ---------------------------------------------------------------------
SLURM_LIKE = re.compile(
    r"^(SLURM|SLURMD|SLURMENV|PET|TORCHELASTIC|OMPI|PMI|PMIX|MPI|HYDRA|FLUX)_|"
    r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|NODE_RANK|GROUP_RANK|NNODES|MASTER_ADDR|"
    r"MASTER_PORT|TF_CONFIG|OMP_NUM_THREADS|MKL_NUM_THREADS|OPENBLAS_NUM_THREADS|"
    r"CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ZE_AFFINITY_MASK|"
    r"NCCL_SOCKET_IFNAME|GLOO_SOCKET_IFNAME|HOSTNAME)$|proxy$",
    re.IGNORECASE,
)


def base_environ() -> dict[str, str]:
    """A plain environment: no Slurm, launcher, GPU, thread or proxy variable of this machine."""
    env = {name: value for name, value in os.environ.items() if not SLURM_LIKE.search(name)}
    env = {k: v for k, v in env.items() if not k.startswith(("PYTHON", "COV_", "PYTEST"))}
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.defpath}"
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleave as in a terminal
    env["LC_ALL"] = "C.UTF-8"
    env.pop("NO_COLOR", None)  # not a terminal: no colour anyway
    return env


#: outputs already run in this process, by (environment, command line): the pages' tests and
#: tests/test_regen.py's up-to-date check share them
_OUTPUTS: dict[tuple[str | None, str], str] = {}


def run(example: Example) -> str:
    """What the example's command prints in its environment, stdout and stderr together."""
    key = (example.block.env, example.line)
    if key not in _OUTPUTS:
        _OUTPUTS[key] = _run(example)
    return _OUTPUTS[key]


def _run(example: Example) -> str:
    from slurmenv import dump

    spec = shlex.split(example.block.env or "")
    assert spec, f"{example.block.where}: 'env:' names no source"
    source, changes = spec[0], spec[1:]
    environ = base_environ()
    cpus = 1
    argv = [sys.executable, "-m", "slurmenv", *example.argv[1:]]

    def finish(extra: dict[str, str]) -> str:
        env = {**environ, **extra}
        for change in changes:
            if change.startswith("-"):
                env.pop(change[1:], None)
            else:
                name, equals, value = change.partition("=")
                assert equals, f"{example.block.where}: {change!r} is neither NAME=VALUE nor -NAME"
                env[name] = value
        available = sorted(os.sched_getaffinity(0))
        if len(available) < cpus:
            pytest.skip(f"the recorded task had {cpus} CPUs; this machine gives {len(available)}")
        proc = subprocess.run(
            argv, check=False, cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True, timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, available[:cpus]),
        )
        return proc.stdout

    if source == "none":
        return finish({})
    loaded = dump.load(str(ROOT / source))
    cpus = loaded.cpu_affinity or 1
    with loaded.environment() as recorded:
        return finish(recorded)


TORCHRUN_PROGRAM = re.compile(
    r"^(?:\S*/)?(?:torchrun|python[\d.]* -m torch\.distributed\.run)(?= )", re.MULTILINE
)
FREE_PORT = re.compile(r"(MASTER_PORT(?:='|\s+)|127\.0\.0\.1:)\d+")


def canonical(text: str, example: Example) -> str:
    """What the docs show for an output: the torchrun program as ``torchrun``, no trailing blank
    lines."""
    text = text.rstrip("\n").rstrip()
    if example.argv[1:2] == ["torchrun"]:
        text = TORCHRUN_PROGRAM.sub("torchrun", text)
    return text


def comparable(text: str, example: Example) -> str:
    """The output with what varies between machines replaced (see the module docstring)."""
    text = canonical(text, example)
    if shlex.split(example.block.env or "none")[0] == "none":
        text = FREE_PORT.sub(r"\1PORT", text)
    return text


# -- the tests ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "example", marked_examples(), ids=lambda ex: f"{ex.block.where}#{ex.number}"
)
def test_example_output_is_what_slurmenv_prints(example: Example) -> None:
    assert example.argv[:1] == ["slurmenv"], (
        f"{example.block.where}: only 'slurmenv' command lines can be checked: {example.argv}"
    )
    assert not SHELL_OPERATORS & set(example.argv), (
        f"{example.block.where}: no pipes or redirections in a checked command: {example.argv}"
    )
    actual = run(example)
    assert comparable(actual, example) == comparable(example.expected, example), (
        f"{example.block.where}: the page shows an output slurmenv no longer prints; run "
        f"{REGENERATE} and read the diff"
    )


def test_there_are_checked_examples() -> None:
    """The convention is used: the README and most pages show checked output."""
    where = {ex.block.path.name for ex in marked_examples()}
    assert "README.md" in where and len(marked_examples()) >= 10


def unchecked_outputs() -> list[str]:
    found = []
    for block in all_blocks():
        if block.env is not None:
            continue
        for n, line in enumerate(block.lines):
            rest = block.lines[n + 1:]
            shows_output = bool(rest) and bool(rest[0].strip()) and not rest[0].startswith(PROMPT)
            if line.lstrip().startswith(PROMPT) and "slurmenv" in line and shows_output:
                found.append(f"{block.where}: {line.strip()}")
    return found


def test_no_unchecked_output_of_slurmenv() -> None:
    """A '$ ... slurmenv ...' line followed by output needs an 'env:' marker, so it is checked."""
    assert unchecked_outputs() == []


def test_every_marker_precedes_a_block() -> None:
    stray = []
    for page in pages():
        lines = page.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if MARKER.match(line):
                nxt = next((x for x in lines[n + 1:] if x.strip()), "")
                if not FENCE.match(nxt):
                    stray.append(f"{page.relative_to(ROOT)}:{n + 1}")
    assert stray == []


def test_the_convention_catches_a_wrong_output(tmp_path: pathlib.Path) -> None:
    """The checker itself: a changed line in an output is seen, a right one passes."""
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- env: tests/dumps/healthy-rank5.json -->\n```console\n$ slurmenv export --for torch"
        " --no-threads\nexport RANK='5';\n```\n\n```console\n$ slurmenv show\nRANK 0\n```\n"
    )
    marked, unmarked = list(blocks(page))
    (example,) = examples(marked)
    actual = run(example)
    assert actual.startswith("export RANK='5';\nexport LOCAL_RANK='1';\n")
    assert comparable(actual, example) != comparable(example.expected, example)
    right = example._replace(expected=actual)
    assert comparable(actual, right) == comparable(right.expected, right)
    assert unmarked.env is None and unmarked.lines[0] == "$ slurmenv show"


def test_doctor_examples_replay_a_dump() -> None:
    """What doctor says of this machine (its DNS, interfaces, sockets, installed Lightning)
    differs from machine to machine, and so would the page regenerated there: a checked doctor
    example replays a dump's node facts (--from), and no checked dump probes this machine."""
    live = []
    for ex in marked_examples():
        command, words = ex.argv[1:2], ex.argv[2:]
        replays = any(w == "--from" or w.startswith("--from=") for w in words)
        if (command == ["doctor"] and not replays) or (command == ["dump"] and "--probe" in words):
            live.append(f"{ex.block.where}: {ex.line}")
    assert live == []
    assert any(ex.argv[1:2] == ["doctor"] for ex in marked_examples())


def test_free_port_is_the_only_thing_normalised_outside_slurm() -> None:
    block = Block(ROOT / "README.md", 1, 1, [], "", "none")
    example = Example(block, 0, "slurmenv export", ["slurmenv", "export"], "")
    one = "export RANK='0';\nexport MASTER_PORT='13119';\nexport TF_CONFIG='[\"127.0.0.1:13120\"]';"
    other = "export RANK='0';\nexport MASTER_PORT='10007';\nexport TF_CONFIG='[\"127.0.0.1:10008\"]';"
    assert comparable(one, example) == comparable(other, example)
    assert comparable(one, example) != comparable(one.replace("RANK='", "RANK='1"), example)
    in_a_step = example._replace(block=block._replace(env="tests/dumps/proxy.json"))
    assert comparable(one, in_a_step) != comparable(other, in_a_step)


# -- links ----------------------------------------------------------------------------------
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links() -> list[tuple[str, str]]:
    """(page:line, repository-relative target) for every relative link outside code blocks.

    The target keeps its ``#anchor``, if any (a link to a section of this page is ``PAGE#a``).
    """
    found = []
    for page in pages():
        in_block: str | None = None
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fence = FENCE.match(line)
            if fence and (in_block is None or line.strip().startswith(in_block)):
                in_block = None if in_block else fence.group(2)
                continue
            if in_block:
                continue
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                file, _, anchor = target.partition("#")
                path = (page.parent / file).resolve() if file else page
                name = path.relative_to(ROOT).as_posix()
                found.append((f"{page.relative_to(ROOT)}:{n}", name + (f"#{anchor}" if anchor else "")))
    return found


def anchors(path: pathlib.Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page."""
    found = set()
    for block_free in re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8")).splitlines():
        if block_free.startswith("#"):
            title = block_free.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_relative_links_resolve() -> None:
    broken = []
    for where, target in relative_links():
        file, _, anchor = target.partition("#")
        if file in PENDING:
            continue
        if file in MOVED and where.startswith("docs/CHANGELOG.md:"):
            assert (ROOT / MOVED[file]).exists() and not (ROOT / file).exists(), file
            continue
        if not (ROOT / file).exists():
            broken.append(f"{where} -> {target}")
        elif anchor and file.endswith(".md") and anchor not in anchors(ROOT / file):
            broken.append(f"{where} -> {target} (no such section)")
    assert broken == []


def test_pending_pages_do_not_exist_yet() -> None:
    """Once a pending page is merged, remove it from PENDING so its links are checked."""
    assert sorted(p for p in PENDING if (ROOT / p).exists()) == []


def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "slurmenv export" in text and "sh tests/run.sh" in text
    linked = {target.partition("#")[0] for where, target in relative_links()
              if where.startswith("README.md")}
    for page in ("docs/README.md", "docs/ports.md", "docs/troubleshooting.md"):
        assert page in linked


def test_the_readme_shows_the_example_as_shipped() -> None:
    """The README's complete example is examples/train.sbatch as shipped, and the output it
    shows has the form tests/test_real_examples.py checks in the real job's output."""
    import test_real_examples as real

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (ROOT / "examples" / "train.sbatch").read_text(encoding="utf-8") in readme
    assert "](examples/train.py)" in readme
    section = readme.split("## A complete example", 1)[1].split("\n## ", 1)[0]
    (shown,) = [b for b in blocks(ROOT / "README.md", section) if b.lines[0].startswith("rank=")]
    lines = [line for line in shown.lines if line.strip()]
    assert [bool(real.SHOWN.fullmatch(line)) for line in lines] == [True] * 4 + [False] * 8
    checked = [real.CHECKED.fullmatch(line) for line in lines[4:8]]
    assert all(checked) and sorted(m.group(1) or "0" for m in checked if m) == ["0", "1", "2", "3"]
    assert len(real.TRAINED.findall("\n".join(lines[8:]))) == 4


# -- regenerating ---------------------------------------------------------------------------
def regenerated(page: pathlib.Path, text: str) -> str:
    """``text`` (the page ``page``) with every marked block's outputs what slurmenv prints now;
    an output that differs only where it is normalised is kept as written."""
    lines = text.splitlines()
    for block in reversed(list(blocks(page, text))):
        if block.env is None:
            continue
        body: list[str] = []
        for example in examples(block):
            actual = run(example)
            same = comparable(actual, example) == comparable(example.expected, example)
            if body:
                body.append("")
            body.append(PROMPT + example.line)
            body.extend((example.expected if same else canonical(actual, example)).splitlines())
        body = [block.indent + line if line else line for line in body]
        lines[block.line:block.end - 1] = body
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(f"the example outputs are rewritten with every generated page: {REGENERATE}")


def test_every_test_the_launcher_table_names_exists() -> None:
    """docs/launchers.md's launcher × version table says "proven" by naming tests: each named
    test function exists in the file named, so a renamed or removed proof fails here."""
    import re as _re

    named = []
    for line in (ROOT / "docs" / "launchers.md").read_text().splitlines():
        path = None
        for file, name in _re.findall(r"`(?:(tests/[\w/]+\.py))?::(\w+)", line):
            path = file or path  # `::name` alone: a test of the file named before it
            assert path, line
            named.append((path, name))
    assert len(named) >= 8
    for path, name in named:
        source = (ROOT / path).read_text()
        assert f"def {name}(" in source, f"docs/launchers.md names {path}::{name}"


def test_the_design_page_names_every_launcher_and_module() -> None:
    """docs/design.md's module map and registry follow the code: every registered launcher
    (the registry's list there is generated: tests/doc_tables.py) and every module of the
    package are named there."""
    import re as _re

    from slurmenv import launchers

    text = (ROOT / "docs" / "design.md").read_text()
    for name in launchers.REGISTRY:
        assert f"**{name}**" in text, f"docs/design.md: launcher {name} not in the registry list"
    for folder in sorted({init.parent for init in (ROOT / "slurmenv").rglob("__init__.py")}):
        assert folder.name in text, f"docs/design.md: package {folder}"
        for path in sorted(folder.glob("*.py")):
            if path.stem.startswith("_"):
                continue
            assert _re.search(rf"\b{path.stem}(\.py|/|\b)", text), f"docs/design.md: {path}"


def test_no_page_repeats_a_heading() -> None:
    """Two headings alike on a page give two sections one anchor (GitHub adds -1)."""
    repeated = []
    for page in pages():
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        headings = [line.strip() for line in text.splitlines() if line.startswith("#")]
        repeated += [f"{page.relative_to(ROOT)}: {h}" for h in sorted(set(headings))
                     if headings.count(h) > 1]
    assert repeated == []


def test_debugging_md_stays_short() -> None:
    assert len((ROOT / "docs" / "debugging.md").read_text(encoding="utf-8").splitlines()) < 350


def test_the_index_lists_every_page() -> None:
    """docs/README.md "lists every page": each page of docs/ (the framework pages through
    frameworks/README.md, which lists each of them) is linked from it."""
    def linked(index: str) -> set[str]:
        return {target.partition("#")[0] for where, target in relative_links()
                if where.startswith(index + ":")}

    top, frameworks = linked("docs/README.md"), linked("docs/frameworks/README.md")
    missing = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs").rglob("*.md"))
               if p.name != "README.md" or p.parent.name == "frameworks"]
    missing = [p for p in missing if p not in top and p not in frameworks
               and not (p == "docs/frameworks/README.md" and "docs/frameworks" in top)]
    assert missing == []
