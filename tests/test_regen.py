"""One command regenerates every generated part of the docs (tests/regen.py), and one test
fails, naming it, when any page is out of date."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import doc_tables
import regen

ROOT = Path(__file__).resolve().parent.parent


def test_every_generated_page_is_up_to_date() -> None:
    """Launcher tables, the doctor table, the API signatures, docs/options.md and every example
    output are what the code generates now."""
    stale = sorted(str(page.relative_to(ROOT)) for page in regen.stale())
    assert not stale, f"out of date: {', '.join(stale)}; regenerate them: {regen.COMMAND}"


def test_every_generator_names_the_one_command() -> None:
    import test_docs_examples

    assert doc_tables.REGENERATE == test_docs_examples.REGENERATE \
        == regen.COMMAND
    assert regen.COMMAND in doc_tables.options_table()


def test_the_docs_name_only_the_one_command() -> None:
    """docs/design.md's recipes and docs/README.md name tests/regen.py, and no page names the
    per-kind commands it replaced."""
    old = ("doc_tables.py --update", "test_docs_examples.py --update", "options import markdown")
    for page in regen.pages():
        text = page.read_text(encoding="utf-8")
        if page.name != "CHANGELOG.md":
            assert not [o for o in old if o in text], page
    for page in ("docs/design.md", "docs/README.md"):
        assert regen.COMMAND in (ROOT / page).read_text(encoding="utf-8"), page


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "tests" / "regen.py"), "--root", str(root),
                           *args], capture_output=True, text=True, timeout=300, check=False)


def test_the_command_rewrites_every_kind_of_page(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# r\n", encoding="utf-8")
    (tmp_path / "docs" / "options.md").write_text("stale\n", encoding="utf-8")
    table = tmp_path / "docs" / "debugging.md"
    table.write_text(f"x\n{doc_tables.start_marker('doctor-checks')}\n| stale |\n"
                     f"{doc_tables.END}\ny\n", encoding="utf-8")
    example = tmp_path / "docs" / "example.md"
    example.write_text("<!-- env: tests/dumps/healthy-rank5.json -->\n```console\n"
                       "$ slurmenv export --for torch --no-threads\nexport RANK='0';\n```\n",
                       encoding="utf-8")
    untouched = tmp_path / "docs" / "plain.md"
    untouched.write_text("# nothing generated\n", encoding="utf-8")

    check = run(tmp_path, "--check")
    assert check.returncode == 1, check.stderr
    assert check.stdout.count("out of date: ") == 3 and "plain.md" not in check.stdout
    assert run(tmp_path).returncode == 0
    assert (tmp_path / "docs" / "options.md").read_text(encoding="utf-8") == doc_tables.options_page()
    text = table.read_text(encoding="utf-8")
    assert "| stale |" not in text and text.startswith("x\n") and text.endswith("\ny\n")
    assert "export RANK='5';\nexport LOCAL_RANK='1';" in example.read_text(encoding="utf-8")
    assert untouched.read_text(encoding="utf-8") == "# nothing generated\n"
    again = run(tmp_path, "--check")
    assert again.returncode == 0 and "0 pages out of date" in again.stdout, again.stdout


def test_a_wrong_argument_is_a_usage_error(tmp_path: Path) -> None:
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    proc = run(tmp_path, "--update")
    assert proc.returncode == 2 and regen.COMMAND in proc.stderr
