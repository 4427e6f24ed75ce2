"""Stands in for a notebook: connects to an ipyparallel controller, waits for the engines,
and runs the cells of docs/frameworks/notebooks.md in every engine (``%%px`` does the same):
each engine sets its distributed environment with slurmenv, joins a torch gloo group,
all-reduces ``rank + 1`` and leaves; then a second cell does it again.

Usage: ``python notebook_client.py MODE PROFILE_DIR ENGINES``; MODE ``connect`` joins a running
controller whose engines were started by ``srun ipengine``; ``slurm`` and ``mpi`` start a
cluster with ipyparallel's own Slurm or MPI engine launcher (``ipp.Cluster(engines=...)``), as a
notebook would. Prints one ``RESULT {json}`` line per engine and cell.
"""

import json
import socket
import sys

import ipyparallel as ipp

mode, profile_dir, engines = sys.argv[1], sys.argv[2], int(sys.argv[3])
# the Slurm engine job: engines on two nodes, two per node (the launcher's own template with
# the node counts added)
SLURM_TEMPLATE = """#!/bin/sh
#SBATCH --export=ALL
#SBATCH --job-name=ipengine-{cluster_id}
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
srun --kill-on-bad-exit=1 {program_and_args}
"""
cluster = None
if mode == "connect":
    rc = ipp.Client(profile_dir=profile_dir, timeout=120)
else:
    cluster = ipp.Cluster(engines=mode, n=engines, profile_dir=profile_dir, controller_ip="*",
                          controller_location=socket.gethostname())
    if mode == "slurm":
        cluster.config.SlurmEngineSetLauncher.batch_template = SLURM_TEMPLATE
    else:
        cluster.config.MPIEngineSetLauncher.mpi_cmd = ["mpirun"]
    rc = cluster.start_and_connect_sync()
rc.wait_for_engines(engines, timeout=180)
view = rc[:]

import slurmenv.notebook

try:
    places = slurmenv.notebook.check_engines(view)
except slurmenv.SlurmEnvError as exc:
    print("REFUSED " + json.dumps({"message": exc.message, "variable": exc.variable}), flush=True)
    rc.close()
    if cluster is not None:
        cluster.stop_cluster_sync()
    sys.exit(3)
print("PLACES " + json.dumps(places), flush=True)


def cell(run: int) -> dict:
    # what a %%px cell runs in each engine
    import socket

    import torch
    import torch.distributed as dist

    import slurmenv

    res = slurmenv.resolve()
    res.apply(for_="torch")
    dist.init_process_group("gloo")
    value = torch.tensor([float(res.rank + 1)])
    dist.all_reduce(value)
    out = {"run": run, "rank": res.rank, "world": dist.get_world_size(),
           "local_rank": res.local_rank, "host": socket.gethostname(),
           "master": f"{res.master_addr}:{res.master_port}", "sum": value.item(),
           "launcher": res.launcher}
    dist.barrier()  # no engine tears its group down while another still talks to it
    dist.destroy_process_group()
    return out


try:
    for run in (1, 2):
        for result in view.apply_sync(cell, run):
            print("RESULT " + json.dumps(result), flush=True)
finally:
    rc.close()
    if cluster is not None:
        cluster.stop_cluster_sync()
