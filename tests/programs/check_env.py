"""One task of a step: slurmenv's resolution of this task, as one line ``ENV {json}``.

No framework: what every task computed (ranks, master, TF_CONFIG, the whole layout) beside where
it really runs (``hostname``) and what Slurm told it, for the test to compare across tasks.
"""

import json
import os
import socket

import slurmenv

SLURM = ("JOB_ID", "STEP_ID", "PROCID", "LOCALID", "NODEID", "GTIDS", "STEP_NODELIST",
         "STEP_TASKS_PER_NODE", "DISTRIBUTION", "STEP_RESV_PORTS")

out: dict[str, object] = {
    "hostname": socket.gethostname(),
    "slurm": {name: os.environ.get(f"SLURM_{name}") for name in SLURM},
}
try:
    r = slurmenv.resolve()
    out["resolution"] = r.to_dict()
    try:
        out["hosts"], out["node_of"], out["local_of"] = r.hosts, r.node_of, r.local_of
    except slurmenv.SlurmEnvError as exc:
        out["layout_error"] = str(exc)
except slurmenv.SlurmEnvError as exc:
    out["error"] = str(exc)
os.write(1, ("ENV " + json.dumps(out) + "\n").encode())
