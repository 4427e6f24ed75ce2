"""One task of a step: torch.distributed gloo over env:// (the variables slurmenv exported).

Every rank all-reduces ``rank + 1``; the sum is ``n(n+1)/2`` only if all ``n`` ranks joined
with distinct ranks. Prints one line ``CHECK {json}``; exits 1 if the sum is wrong.

Two knobs for the tests, neither changes what is proven:

* ranks other than 0 wait until rank 0 listens on ``MASTER_ADDR:MASTER_PORT`` before joining
  (speed only: torch's store client backs off for seconds when it starts first, which it does
  when rank 0 shares a loaded node with other ranks);
* with ``CHECK_MEET_DIR`` and ``CHECK_MEET_COUNT``, rank 0 joins, writes a file there (named
  ``CHECK_MEET_NAME``, default ``step-<SLURM_STEP_ID>``) and waits
  until ``CHECK_MEET_COUNT`` steps have done the same before the all_reduce: the steps then hold
  their ``MASTER_PORT`` open at the same time, so equal ports on one node could not both work.
"""

import datetime
import json
import os
import socket
import time

import torch
import torch.distributed as dist

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
         "NNODES", "MASTER_ADDR", "MASTER_PORT")
# CHECK_TIMEOUT: a loaded 2-core machine may need longer than a minute to start many ranks
TIMEOUT = float(os.environ.get("CHECK_TIMEOUT", "60"))

start = time.monotonic()
if os.environ["RANK"] != "0":
    master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    while time.monotonic() - start < TIMEOUT:
        try:
            socket.create_connection(master, timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)

dist.init_process_group(
    "gloo", init_method="env://", timeout=datetime.timedelta(seconds=TIMEOUT)
)
rank, world = dist.get_rank(), dist.get_world_size()
meet = os.environ.get("CHECK_MEET_DIR")
met = None
if meet and rank == 0:
    step = os.environ.get("SLURM_STEP_ID", "?")
    # CHECK_MEET_NAME: ranks 0 of two mpirun on the batch node have no SLURM_STEP_ID to tell
    name = os.environ.get("CHECK_MEET_NAME") or f"step-{step}"
    with open(os.path.join(meet, name), "w") as mark:
        mark.write(os.environ["MASTER_PORT"])
    want = int(os.environ.get("CHECK_MEET_COUNT", "2"))
    while len(os.listdir(meet)) < want and time.monotonic() - start < TIMEOUT:
        time.sleep(0.05)
    met = sorted(os.listdir(meet))
value = torch.tensor([rank + 1], dtype=torch.int64)
dist.all_reduce(value)
expected = world * (world + 1) // 2
line = "CHECK " + json.dumps({
    "rank": rank, "world": world, "host": socket.gethostname(), "sum": int(value.item()),
    "expected": expected, "env": {name: os.environ.get(name) for name in NAMES},
    "step": os.environ.get("SLURM_STEP_ID"), "resv": os.environ.get("SLURM_STEP_RESV_PORTS"),
    "met": met,
})
# One write(2) per line: lines of tasks sharing a pipe never interleave.
os.write(1, (line + "\n").encode())
dist.barrier()  # no rank tears its group down while another still talks to it
dist.destroy_process_group()
raise SystemExit(0 if value.item() == expected else 1)
