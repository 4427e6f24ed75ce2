"""One task of a step under a topology: what Slurm told it, where it really runs, and what
``slurmenv export --format json`` exported (or its refusal), as one line ``TOPO {json}``."""

import json
import os
import socket
import subprocess

NAMES = ("PROCID", "LOCALID", "NODEID", "GTIDS", "STEP_NODELIST", "STEP_TASKS_PER_NODE",
         "DISTRIBUTION", "STEP_ID", "TOPOLOGY_ADDR", "TOPOLOGY_ADDR_PATTERN", "JOB_SLUID",
         "CONF", "STEP_NUM_NODES")

out: dict[str, object] = {
    "hostname": socket.gethostname(),
    "slurm": {name: os.environ.get(f"SLURM_{name}") for name in NAMES},
    "nodename": os.environ.get("SLURMD_NODENAME"),
}
run = subprocess.run(["slurmenv", "export", "--format", "json"], capture_output=True, text=True,
                     check=False)
out["rc"] = run.returncode
if run.returncode == 0:
    out["exported"] = json.loads(run.stdout)
else:
    out["error"] = run.stderr.strip()
os.write(1, ("TOPO " + json.dumps(out) + "\n").encode())
