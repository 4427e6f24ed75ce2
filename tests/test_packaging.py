"""The package is ready for an index (issue 35): one version string, the metadata an index
shows. Building it (``python -m build``, then ``twine check --strict``) needs the network for
the build backend, so this test reads the declarations the build uses instead."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import slurmenv

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info < (3, 11):
    pytest.skip("tomllib is Python 3.11 and later", allow_module_level=True)
import tomllib


def project() -> dict:  # type: ignore[type-arg]
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)  # type: ignore[no-any-return]


def test_the_version_is_written_once() -> None:
    config = project()
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "slurmenv.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", slurmenv.__version__)
    written = [p for p in (ROOT / "slurmenv").rglob("*.py")
               if re.search(r"^__version__ = ", p.read_text(encoding="utf-8"), re.MULTILINE)]
    assert written == [ROOT / "slurmenv" / "__init__.py"]


def test_the_metadata_an_index_shows() -> None:
    meta = project()["project"]
    assert meta["license"] == "GPL-2.0-or-later" and meta["readme"] == "README.md"
    assert not [c for c in meta["classifiers"] if c.startswith("License ::")]  # PEP 639
    oldest = meta["requires-python"].removeprefix(">=")
    versions = [c.rsplit(" ", 1)[1] for c in meta["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert versions[0] == oldest
    assert set(meta["dependencies"]) == {"python-hostlist", "psutil"}
    assert set(meta["scripts"]) == {"slurmenv", "slurmenv-task-prolog"}
