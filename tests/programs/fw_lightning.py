"""One task of a step: Lightning Fabric or Trainer through slurmenv.lightning.Environment.

Usage: ``fw_lightning.py fabric|trainer [DEVICES NUM_NODES]`` (default: the plugin's
``devices``/``num_nodes``); ``fw_lightning.py builtin DEVICES NUM_NODES`` runs Fabric with
Lightning's own cluster environment instead of the plugin. Prints ``LIGHTNING {json}``.

fabric: all_gather of every rank's global rank. trainer: one epoch of a linear model on 24
random samples, batch 2, DDP over gloo; reports which sample indices this rank trained on
(Lightning's DistributedSampler splits them by the rank and world size it was given) and
the final weights (identical on every rank when the gradients were averaged).
"""

import json
import os
import socket
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from slurmenv.lightning import Environment

mode = sys.argv[1]
env = None if mode == "builtin" else Environment()
devices = int(sys.argv[2]) if len(sys.argv) > 2 else env.devices
num_nodes = int(sys.argv[3]) if len(sys.argv) > 3 else env.num_nodes
common = {
    "accelerator": "cpu", "devices": devices, "num_nodes": num_nodes, "strategy": "ddp",
    "plugins": [] if env is None else [env],
}
out = {
    "host": socket.gethostname(), "procid": int(os.environ.get("SLURM_PROCID", "-1")),
    # under mpirun: the rank Open MPI gave this process (SLURM_PROCID is its daemon's)
    "ompi_rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1")),
}

if mode in ("fabric", "builtin"):
    fabric = L.Fabric(**common)
    fabric.launch()
    gathered = fabric.all_gather(torch.tensor([fabric.global_rank]))
    out.update(
        rank=fabric.global_rank, world=fabric.world_size, local_rank=fabric.local_rank,
        node_rank=fabric.node_rank, gathered=gathered.flatten().tolist(),
        environment=type(fabric.strategy.cluster_environment).__module__,
    )
else:

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.seen: list[int] = []

        def training_step(self, batch, batch_idx):
            x, y, idx = batch
            self.seen.extend(idx.tolist())
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)  # the same data and initial weights in every task
    data = TensorDataset(torch.randn(24, 4), torch.randn(24, 1), torch.arange(24))
    model = Model()
    trainer = L.Trainer(
        **common, max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=2))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    out.update(
        rank=trainer.global_rank, world=trainer.world_size, local_rank=trainer.local_rank,
        node_rank=trainer.node_rank, seen=sorted(model.seen), steps=trainer.global_step,
        weights=[round(w, 6) for w in weights.tolist()],
    )

# One write(2) per line: lines of tasks sharing a pipe never interleave.
os.write(1, ("LIGHTNING " + json.dumps(out) + "\n").encode())

# Shut down cleanly: a process group left to the interpreter's exit can abort a worker
# ("terminate called without an active exception"), which under torchrun fails its node.
if torch.distributed.is_available() and torch.distributed.is_initialized():
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
