"""The tests run this checkout's code: ``import slurmenv`` and the ``slurmenv`` console script
on PATH both load the package from this tree (tests/checkout.py; conftest.py stops the session
before any test when they do not). A second clone elsewhere is noticed, not tested."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import checkout

HERE = Path(__file__).resolve().parent


def test_this_checkout_is_tested() -> None:
    assert checkout.problems() == []
    assert checkout.inside(checkout.imported_file())
    cli, how = checkout.console_script_file()
    assert cli is not None and Path(cli).resolve() == checkout.PACKAGE / "commands" / "main.py", how


def test_path_starts_with_this_interpreters_scripts() -> None:
    first = os.environ["PATH"].split(os.pathsep)[: len(checkout.script_dirs())]
    assert first == checkout.script_dirs()
    script = shutil.which("slurmenv")
    assert script is not None and os.path.dirname(script) in checkout.script_dirs()


def _clone(tmp_path: Path) -> Path:
    """A second clone's package, as another editable install would expose it."""
    clone = tmp_path / "other-clone"
    shutil.copytree(checkout.PACKAGE, clone / "slurmenv",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return clone


def _problems(env: dict[str, str]) -> list[str]:
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import checkout; " \
           "print('\\n'.join(checkout.problems()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.splitlines()


def test_another_clones_import_is_caught(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    found = _problems(env)
    assert any(str(clone / "slurmenv") in line and "`import slurmenv`" in line for line in found)


def test_another_clones_console_script_is_caught(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "slurmenv"  # what pip writes for the other clone, sys.path included
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(clone)!r})\n"
                      "from slurmenv.commands.main import main\nsys.exit(main())\n")
    script.chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join([str(bindir), os.environ["PATH"]])}
    cli, _ = checkout.console_script_file(env)
    assert cli is not None and Path(cli).resolve() == (clone / "slurmenv" / "commands" / "main.py").resolve()
    found = _problems(env)
    assert len(found) == 1 and str(script) in found[0] and "`import slurmenv`" not in found[0]
    assert str(clone / "slurmenv" / "commands" / "main.py") in found[0]
