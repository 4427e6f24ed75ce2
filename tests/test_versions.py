"""Every version the docs call proven is the one the real-cluster tests run.

tests/versions.txt lists the builds: tests/run.sh installs each pip and wheel line at exactly
that version, and builds each Slurm release of a source line; Debian's packages (Slurm, Open
MPI 4, MPICH 4) are what the distribution ships.
Here: the installed versions are the listed ones, and every version of those products that a
page or a launcher's CLAIMS names is one of them.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import launcher_table as table
import mpi_builds
import pytest

ROOT = Path(__file__).resolve().parent.parent


class Pin(NamedTuple):
    kind: str  # pip (this interpreter), wheel (an MPI venv of tests/mpi_builds.py), debian,
    # source (a Slurm release tests/build_slurm.sh builds: tests/slurm_releases.py)
    package: str
    version: str
    product: str


def pins() -> list[Pin]:
    found = []
    for line in (ROOT / "tests" / "versions.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            kind, package, version, product = line.split(None, 3)
            found.append(Pin(kind, package, version, product.strip()))
    return found


PINS = pins()


def upstream(debian_version: str) -> str:
    """``22.05.8`` of ``22.05.8-4+deb12u3`` (no epoch, no Debian revision)."""
    return debian_version.split(":", 1)[-1].rsplit("-", 1)[0]


def installed(pin: Pin) -> str | None:
    """The version installed for ``pin`` (a local tag such as ``+cpu`` left out), or None."""
    if pin.kind == "pip":
        try:
            return importlib.metadata.version(pin.package).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            return None
    if pin.kind == "wheel":
        venv = next(v for v, package, _ in mpi_builds.BUILDS.values() if package == pin.package)
        python = mpi_builds.PREFIX / venv / "bin" / "python"
        if not python.exists():
            return None
        code = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
        proc = subprocess.run(
            [str(python), "-c", code, pin.package],
            capture_output=True, text=True, timeout=60, check=False)
        return proc.stdout.strip().split("+")[0] or None
    if pin.kind == "source":  # a Slurm release tests/build_slurm.sh built here
        from slurm_harness import release_built, release_dir

        if not release_built(pin.version):
            return None
        proc = subprocess.run([str(release_dir(pin.version) / "sbin" / "slurmd"), "-V"],
                              capture_output=True, text=True, timeout=60, check=False)
        return proc.stdout.split()[-1] if proc.stdout.startswith("slurm ") else proc.stdout
    assert pin.kind == "debian", pin
    if shutil.which("dpkg-query") is None:
        return None
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", pin.package],
                          capture_output=True, text=True, timeout=60, check=False)
    if not proc.stdout.startswith("install ok installed "):
        return None
    return upstream(proc.stdout.rsplit(" ", 1)[-1])


@pytest.mark.parametrize("pin", PINS, ids=lambda p: f"{p.kind}-{p.package}")
def test_the_installed_version_is_the_listed_one(pin: Pin) -> None:
    have = installed(pin)
    if have is None:
        how = ("builds it from ../shared/slurm-src" if pin.kind == "source" else "installs it")
        pytest.skip(f"{pin.package} {pin.version} is not installed (tests/run.sh {how}; its "
                    "tests skip)")
    assert have == pin.version, (
        f"{pin.package} {have} is installed, tests/versions.txt says {pin.version}: "
        + ("run sh tests/run.sh, which installs the listed version"
           if pin.kind != "debian" else
           "Debian ships another version: run the real-cluster tests and update the line, "
           "the claims and the docs that name it"))


def test_the_list_covers_every_build_the_tests_run() -> None:
    assert {p.package for p in PINS if p.kind == "wheel"} == {
        package for _, package, _ in mpi_builds.BUILDS.values()}
    assert {p.package for p in PINS if p.kind == "debian"} >= {"slurmd", "openmpi-bin", "mpich"}
    run_sh = (ROOT / "tests" / "run.sh").read_text(encoding="utf-8")
    assert "tests/versions.txt" in run_sh
    assert '$1 == "source" && $2 == "slurm"' in run_sh  # every Slurm release is built
    assert {p.kind for p in PINS} == {"pip", "wheel", "debian", "source"}
    for pin in PINS:
        if pin.kind == "pip":
            assert f" {pin.package}" in run_sh, f"tests/run.sh does not install {pin.package}"


# -- the versions the docs name ---------------------------------------------------------------
PRODUCTS = sorted({p.product for p in PINS}, key=len, reverse=True)
MENTION = re.compile(r"\b(" + "|".join(map(re.escape, PRODUCTS)) + r") v?(\d+(?:\.(?:\d+|x))+)")
PACKAGED = re.compile(r"(\d+(?:\.\d+)+) \((PyPI|Debian) `([\w.-]+)`\)")


def matches(written: str, version: str) -> bool:
    """``written`` (``22.05``, ``4.x``, ``2.13.0``) names ``version`` or a prefix of it."""
    parts = written.split(".")
    have = version.split(".")
    return len(parts) <= len(have) and all(p in ("x", h) for p, h in zip(parts, have))


def texts() -> list[tuple[str, str]]:
    """(where, text) of every page and every launcher claim's fields."""
    found = [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
             for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
             if path.name != "CHANGELOG.md"]  # the changelog keeps what was true then
    for claim in table.claims():
        found.append((f"CLAIMS of {claim.module}: {claim.name}",
                      " ".join(str(value) for value in claim._asdict().values())))
    return found


def wrong_versions() -> list[str]:
    wrong = []
    for where, text in texts():
        text = " ".join(text.split())
        for product, written in MENTION.findall(text):
            if not any(matches(written, p.version) for p in PINS if p.product == product):
                wrong.append(f"{where}: {product} {written}")
        for written, source, package in PACKAGED.findall(text):
            kinds = ("debian",) if source == "Debian" else ("pip", "wheel")
            listed = [p.version for p in PINS if p.package == package and p.kind in kinds]
            if listed != [written]:
                wrong.append(f"{where}: {written} of {source} `{package}` (listed: {listed})")
    return wrong


def test_every_version_the_docs_name_is_the_one_run() -> None:
    wrong = wrong_versions()
    assert not wrong, ("a page or a claim names a version tests/versions.txt does not list "
                       f"(fix the text, or the list, then python tests/regen.py): {wrong}")


def test_the_check_sees_the_mentions() -> None:
    """The check reads what the pages write: it finds the proven builds, and a wrong one."""
    found = {(product, written) for _, text in texts()
             for product, written in MENTION.findall(" ".join(text.split()))}
    assert {("Slurm", "22.05.8"), ("Intel MPI", "2021.18.1"), ("MPICH", "5.0.2")} <= found
    assert MENTION.findall("proven with Intel MPI 2021.19") == [("Intel MPI", "2021.19")]
    assert not matches("2021.19", "2021.18.1") and matches("22.05", "22.05.8")
    assert matches("4.x", "4.1.4") and not matches("5.x", "4.1.4")
    assert PACKAGED.findall("2021.19 (PyPI `impi-rt`)") == [("2021.19", "PyPI", "impi-rt")]
