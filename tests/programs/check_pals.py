"""One task of ``srun --mpi=cray_shasta``: what Slurm says, and what slurmenv resolves with
every Slurm variable hidden (only PALS_*, PMI_* and the rest remain) and with them all.

Slurm's cray_shasta plugin removes the apinfo file when the step ends, so the file is parsed
here, inside the running task. Prints one line ``PALS {json}``.
"""

import json
import os
import socket

import slurmenv
from slurmenv.errors import SlurmEnvError

SLURM = ("SLURM_", "SLURMD_", "SRUN_")
TRUTH = ("SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID", "SLURMD_NODENAME", "SLURM_GTIDS",
         "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_RESV_PORTS", "SLURM_JOB_ID",
         "SLURM_STEP_ID", "PMI_CONTROL_PORT", "PALS_RANKID", "PALS_NODEID", "PALS_APID")


def resolved(environ):
    try:
        res = slurmenv.resolve(environ)
        torch_env = res.env("torch")
    except SlurmEnvError as exc:
        return {"error": str(exc), "variable": exc.variable}
    layout = {}
    try:
        layout["hosts"] = list(res.hosts)
        layout["node_of"], layout["local_of"] = list(res.node_of), list(res.local_of)
        layout["workers"] = res.tf_config["cluster"]["worker"]
    except SlurmEnvError as exc:
        layout["layout_error"] = str(exc)
    return {
        "launcher": res.launcher, "env": torch_env, **layout,
        "sources": {k: res.sources.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                    "MASTER_PORT")},
    }


hidden = {k: v for k, v in os.environ.items() if not k.startswith(SLURM)}
record = {
    "host": socket.gethostname(),
    "truth": {name: os.environ.get(name) for name in TRUTH},
    "hidden": resolved(hidden),
    "full": resolved(dict(os.environ)),
}
os.write(1, ("PALS " + json.dumps(record) + "\n").encode())
