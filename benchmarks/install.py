"""What the benchmarks run: slurmenv installed two ways, and the step environments.

* :class:`FreshVenv`: slurmenv as users install it, ``python3 -m venv X && X/bin/pip install
  <checkout>`` (not editable, no system site packages, python-hostlist and psutil from the
  package index), started by the console script pip wrote. The headline figures come from
  there. Built once per state of the checkout and Python, then reused from a cache directory.
* :class:`Setup`: the checkout's package copied to a temporary directory with its bytecode
  compiled, run by the interpreter running the benchmarks (with whatever its site-packages
  and ``.pth`` hooks load at start-up) through a copy of pip's console script; also imported
  by the in-process benchmarks.

Step environments come from the tests' builder (``tests/synth.py``): one task per node, the
middle rank measured.
"""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))  # the tests' environment builder, not a copy of it
import synth

JOB_ID = "123456"
# What the checkout's wheel is built from (pyproject.toml names the rest: packages, scripts).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "slurmenv", "bin")
# Variables of the caller's that would change how the venv's interpreter starts.
PYTHON_STARTUP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                  "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONPROFILEIMPORTTIME")

# The pip console script (pip/_vendor/distlib/scripts.py), byte for byte but the interpreter.
CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from slurmenv.commands.main import entry_point
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(entry_point())
"""

SLURM_CONF = "ClusterName=slurmenv-bench\nSlurmctldHost=localhost\n"


# --- step environments -------------------------------------------------------------------------

def width(nodes: int) -> int:
    return max(4, len(str(nodes - 1)))


def host(i: int, nodes: int) -> str:
    return f"n{i:0{width(nodes)}d}"


def nodelist(nodes: int) -> str:
    """What Slurm writes for ``nodes`` consecutive nodes (``scontrol show hostlist``)."""
    return f"n[{0:0{width(nodes)}d}-{nodes - 1:0{width(nodes)}d}]"


def split_nodelist(nodes: int, cap: int = 65536) -> str:
    """The same nodes in ranges of at most ``cap`` names, which scontrol can read back."""
    parts = []
    for lo in range(0, nodes, cap):
        hi = min(nodes, lo + cap) - 1
        parts.append(f"n[{lo:0{width(nodes)}d}-{hi:0{width(nodes)}d}]")
    return ",".join(parts)


@functools.cache
def _step_env(nodes: int, rank: int, node_list: str) -> tuple[tuple[str, str], ...]:
    hosts = [host(i, nodes) for i in range(nodes)]
    env = synth.step_env(hosts, [1] * nodes, rank, job_id=JOB_ID, nodelist=node_list)
    return tuple(env.items())


def step_env(nodes: int, rank: int | None = None, node_list: str | None = None) -> dict[str, str]:
    """Task ``rank`` (default: the middle one) of a step with one task on each of ``nodes``
    nodes named ``n0000``..., listed as ``node_list`` (default: Slurm's ``n[0000-...]``)."""
    rank = nodes // 2 if rank is None else rank
    return dict(_step_env(nodes, rank, node_list or nodelist(nodes)))


def clean_env() -> dict[str, str]:
    """This process's environment without any Slurm, launcher or training variable."""
    return {k: v for k, v in synth.clean_env().items() if not k.startswith("PET_")}


# --- slurmenv for this interpreter ---------------------------------------------------------------

class Setup:
    """A pip-like install of the checkout in ``workdir`` for the running interpreter, and
    scontrol's configuration (for the shell recipe)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.site = workdir / "site"
        shutil.copytree(ROOT / "slurmenv", self.site / "slurmenv",
                        ignore=shutil.ignore_patterns("__pycache__"))
        compileall.compile_dir(str(self.site), quiet=1)
        self.script = workdir / "slurmenv"
        self.script.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
        self.script.chmod(0o755)
        self.prolog = workdir / "slurmenv-task-prolog"
        self.prolog.write_text(CONSOLE_SCRIPT.format(python=sys.executable).replace(
            "from slurmenv.commands.main import", "from slurmenv.commands.taskprolog import"))
        self.prolog.chmod(0o755)
        self.slurm_conf = workdir / "slurm.conf"
        self.slurm_conf.write_text(SLURM_CONF)
        base = clean_env()
        path = os.pathsep.join(filter(None, [str(self.site), base.get("PYTHONPATH")]))
        self.base_env = {**base, "PYTHONPATH": path, "SLURM_CONF": str(self.slurm_conf)}
        self.scontrol = shutil.which("scontrol")
        self.scontrol_problem = self._check_scontrol()
        sys.path.insert(0, str(self.site))

    def env(self, nodes: int, node_list: str | None = None) -> dict[str, str]:
        return {**self.base_env, **step_env(nodes, node_list=node_list)}

    def _check_scontrol(self) -> str | None:
        if self.scontrol is None:
            return "scontrol not installed"
        try:
            out = subprocess.run(
                [self.scontrol, "show", "hostnames", "n[0000-0003]"], env=self.base_env,
                capture_output=True, text=True, timeout=20, check=False,
            )
        except subprocess.TimeoutExpired:
            return "scontrol show hostnames timed out"
        if out.stdout.split() != [host(i, 4) for i in range(4)]:
            return f"scontrol show hostnames failed: {out.stderr.strip()[:200]}"
        return None

    def check_import(self) -> str:
        out = subprocess.run(
            [sys.executable, "-c", "import slurmenv; print(slurmenv.__file__)"],
            env=self.base_env, capture_output=True, text=True, check=True,
        )
        return out.stdout.strip()

    def python(self) -> list[str]:
        return [sys.executable]

    def export(self, *args: str) -> list[str]:
        return [sys.executable, str(self.script), "export", *args]

    def task_prolog(self) -> list[str]:
        return [sys.executable, str(self.prolog)]


# --- slurmenv as users install it ----------------------------------------------------------------

class VenvProblem(Exception):
    """The fresh virtual environment could not be built (no package index, ...): a problem of
    this machine, not of slurmenv."""


def cache_dir() -> Path:
    """Where built virtual environments are kept: ``$SLURMENV_BENCH_CACHE``, else
    ``$XDG_CACHE_HOME/slurmenv-bench`` (``~/.cache/slurmenv-bench``), else a temporary one."""
    given = os.environ.get("SLURMENV_BENCH_CACHE")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for base in (Path(xdg), Path(tempfile.gettempdir())):
        try:
            path = base / "slurmenv-bench"
            path.mkdir(parents=True, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
        except OSError:
            continue
    raise VenvProblem("no writable cache directory (set SLURMENV_BENCH_CACHE)")


def source_files() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            files.extend(p for p in sorted(path.rglob("*"))
                         if p.is_file() and "__pycache__" not in p.parts)
        elif path.is_file():
            files.append(path)
    return files


def source_digest(python: str) -> str:
    """What the venv depends on: the checkout's packaged files and the interpreter."""
    digest = hashlib.sha256()
    version = subprocess.run([python, "-c", "import sys; print(sys.version, sys.prefix)"],
                             capture_output=True, text=True, check=True).stdout
    digest.update(version.encode())
    for path in source_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One builder at a time per cache directory (two benchmark runs may share it)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class FreshVenv:
    """``python3 -m venv X && X/bin/pip install <checkout>``, cached by the checkout's state.

    ``python`` is the interpreter the venv is made from (default: the one running this, or
    the base interpreter of the venv running this).
    """

    READY = "slurmenv-bench-ready"

    def __init__(self, python: str | None = None, cache: Path | None = None) -> None:
        self.base_python: str = python or getattr(sys, "_base_executable", sys.executable)
        self.cache = cache or cache_dir()
        self.digest = source_digest(self.base_python)
        self.root = self.cache / f"venv-{self.digest}"
        self.python_path = str(self.root / "bin" / "python")
        self.script = str(self.root / "bin" / "slurmenv")
        self.built = False  # True when this run built it (else reused from the cache)
        self.seconds = 0.0
        self.packages = ""
        self.base_env = {k: v for k, v in clean_env().items() if k not in PYTHON_STARTUP}

    def ensure(self) -> FreshVenv:
        """Build the venv unless the cache holds it; raises VenvProblem when it cannot."""
        try:
            self.cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VenvProblem(f"cache directory {self.cache}: {exc}") from None
        with locked(self.cache / "lock"):
            if not (self.root / self.READY).is_file():
                self._build()
                self._prune()
            os.utime(self.root / self.READY)  # in use: not pruned by another run
        self.packages = (self.root / self.READY).read_text().strip()
        return self

    def _run(self, cmd: list[str], what: str, **kwargs: object) -> str:
        env = {k: v for k, v in os.environ.items() if k not in PYTHON_STARTUP}
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                                 check=False, **kwargs)  # type: ignore[call-overload]
        except subprocess.TimeoutExpired:
            raise VenvProblem(f"{what} timed out") from None
        if out.returncode != 0:
            tail = " ".join((out.stderr or out.stdout).split())[-400:]
            raise VenvProblem(f"{what} failed (exit status {out.returncode}): {tail}")
        return str(out.stdout)

    def _build(self) -> None:
        started = time.perf_counter()
        shutil.rmtree(self.root, ignore_errors=True)
        self._run([self.base_python, "-m", "venv", str(self.root)], "python3 -m venv")
        with tempfile.TemporaryDirectory(prefix="slurmenv-bench-src-") as tmp:
            # a copy: pip builds in the source tree (build/, *.egg-info), the checkout stays clean
            src = Path(tmp) / "slurmenv"
            for name in SOURCES:
                path = ROOT / name
                if path.is_dir():
                    shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
                elif path.is_file():
                    src.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, src / name)
            self._run([self.python_path, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                       str(src)], "pip install <checkout>", cwd=tmp)
        where = self._run([self.python_path, "-c", "import slurmenv; print(slurmenv.__file__)"],
                          "import slurmenv", cwd=str(self.root)).strip()
        if not where.startswith(str(self.root)) or not os.access(self.script, os.X_OK):
            raise VenvProblem(f"slurmenv in the venv comes from {where}")
        listed = self._run([self.python_path, "-m", "pip", "list", "--format=freeze"],
                           "pip list")
        packages = [line for line in listed.split()
                    if line.lower().replace("_", "-").startswith(("python-hostlist", "psutil",
                                                                   "slurmenv"))]
        (self.root / self.READY).write_text(" ".join(packages) + "\n")
        self.built = True
        self.seconds = time.perf_counter() - started

    def _prune(self) -> None:
        """Remove the venvs of older states of the checkout (a day unused)."""
        for other in self.cache.glob("venv-*"):
            marker = other / self.READY
            if other != self.root and (not marker.exists()
                                       or time.time() - marker.stat().st_mtime > 86400):
                shutil.rmtree(other, ignore_errors=True)

    def env(self, nodes: int, node_list: str | None = None) -> dict[str, str]:
        """This process's environment without any variable that would change how the venv's
        Python starts (PYTHONPATH, ...), and the step's."""
        return {**self.base_env, **step_env(nodes, node_list=node_list)}

    def python(self) -> list[str]:
        return [self.python_path]

    def export(self, *args: str) -> list[str]:
        """``slurmenv export`` as a user runs it: the console script, through its #! line."""
        return [self.script, "export", *args]

    def task_prolog(self) -> list[str]:
        """``slurmenv-task-prolog`` as Slurm runs it: the console script beside ``slurmenv``."""
        return [os.path.join(os.path.dirname(self.script), "slurmenv-task-prolog")]
