"""Every generated part of the docs, rewritten from the code by one command::

    python tests/regen.py            # rewrite the pages that are out of date
    python tests/regen.py --check    # only list them (exit status 1 if any)

What it regenerates, and where each comes from:

* the generated blocks (``<!-- generated: NAME ... -->``, tests/doc_tables.py): the launcher
  tables (the ``CLAIMS`` of slurmenv/launchers/*.py), the doctor table (the ``@check``
  registrations) and the API signatures in docs/api.md (``inspect.signature``);
* docs/options.md, the whole page (the table in slurmenv/options.py, then each command's own
  options from its parser and the other SLURMENV variables: tests/doc_tables.py);
* the example outputs (fenced blocks after an ``<!-- env: ... -->`` marker,
  tests/test_docs_examples.py): what slurmenv prints today.

tests/test_regen.py fails, naming this command, when any page is out of date.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMAND = "python tests/regen.py"
for _path in (str(ROOT), str(ROOT / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import doc_tables  # (tests/ is on sys.path now)
import test_docs_examples

#: pages generated whole: relative path -> what renders it
WHOLE = {"docs/options.md": doc_tables.options_page}


def pages(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def regenerated(page: pathlib.Path, text: str, root: pathlib.Path = ROOT,
                examples: bool = True) -> str:
    """``text`` (the page ``page``) as the code generates it now."""
    whole = WHOLE.get(page.relative_to(root).as_posix())
    if whole is not None:
        return whole()
    text = doc_tables.regenerated(text)
    return test_docs_examples.regenerated(page, text) if examples else text


def stale(root: pathlib.Path = ROOT, examples: bool = True) -> dict[pathlib.Path, str]:
    """The pages out of date, each with its text regenerated."""
    found = {}
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        new = regenerated(page, text, root, examples)
        if new != text:
            found[page] = new
    return found


def main(argv: list[str]) -> int:
    root = ROOT
    if argv[:1] == ["--root"] and len(argv) >= 2:  # a copy of the pages (tests/test_regen.py)
        root, argv = pathlib.Path(argv[1]).resolve(), argv[2:]
    if argv not in ([], ["--check"]):
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    found = stale(root)
    for page, new in found.items():
        name = page.relative_to(root)
        if argv:
            print(f"out of date: {name}")
        else:
            page.write_text(new, encoding="utf-8")
            print(f"rewrote {name}")
    print(f"{len(found)} pages {'out of date' if argv else 'rewritten'}")
    return 1 if argv and found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
