"""Which slurmenv the tests run: this checkout's, never another clone's or an installed copy.

The session (conftest.py) puts this interpreter's script directories first on PATH, then
checks with :func:`problems` that both ``import slurmenv`` and the ``slurmenv`` console script
found on PATH load the package from this tree; tests/test_checkout.py asserts the same, so the
run fails (never skips) when they do not.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "slurmenv"
# python -v names the file of every module it imports: "# code object from '.../commands/main.py'" or
# "# .../__pycache__/main.cpython-311.pyc matches .../commands/main.py"
_CLI_FILE = re.compile(r"(/\S*/slurmenv/commands/main\.py)\b")


def script_dirs() -> list[str]:
    """Where this interpreter's console scripts live: its own directory (a venv's bin/) and the
    install scheme's scripts directory (pip install -e writes ``slurmenv`` there)."""
    dirs = [os.path.dirname(sys.executable), sysconfig.get_path("scripts")]
    return list(dict.fromkeys(d for d in dirs if d))


def put_first_on_path(environ: dict[str, str] | os._Environ[str]) -> None:
    """This interpreter's script directories first on ``environ["PATH"]``."""
    rest = [p for p in environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if p not in script_dirs()]
    environ["PATH"] = os.pathsep.join([*script_dirs(), *rest])


def inside(path: str | os.PathLike[str], root: Path = PACKAGE) -> bool:
    return Path(path).resolve().is_relative_to(root)


def imported_file() -> str:
    """The file ``import slurmenv`` loads in this interpreter."""
    import slurmenv

    return str(slurmenv.__file__)


def console_script_file(environ: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(the slurmenv/commands/main.py that the ``slurmenv`` found on PATH really runs, what it printed).

    Runs the console script itself, with Python's verbose import trace, from a neutral
    directory, so that whatever interpreter and sys.path its shebang gives it are the ones
    that count."""
    env = dict(os.environ if environ is None else environ)
    script = shutil.which("slurmenv", path=env.get("PATH"))
    if script is None:
        return None, "no slurmenv on PATH"
    env["PYTHONVERBOSE"] = "1"
    out = subprocess.run([script, "--help"], env=env, cwd="/", capture_output=True, text=True,
                         timeout=120, check=False)
    found = _CLI_FILE.findall(out.stderr)
    return (found[-1] if found else None), f"{script}: exit {out.returncode}"


def problems() -> list[str]:
    """Why the tests would not be testing this checkout (empty: they are)."""
    found = []
    module = imported_file()
    if not inside(module):
        found.append(f"`import slurmenv` loads {module}, not this checkout's {PACKAGE} "
                     f"(fix: {sys.executable} -m pip install -e {ROOT})")
    cli, how = console_script_file()
    script = shutil.which("slurmenv")
    if cli is None or not inside(cli):
        found.append(f"the `slurmenv` on PATH ({script}; {how}) runs {cli}, not this "
                     f"checkout's {PACKAGE / 'commands' / 'main.py'} (fix: {sys.executable} -m pip install "
                     f"-e {ROOT}, and run pytest with that interpreter)")
    elif script is not None and os.path.dirname(script) not in script_dirs():
        found.append(f"the `slurmenv` on PATH ({script}) is not this interpreter's "
                     f"({', '.join(script_dirs())})")
    return found
