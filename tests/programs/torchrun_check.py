"""A torchrun worker: join with torchrun's variables (env://), all_reduce, print JSON."""

import json
import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
line = "RESULT " + json.dumps({
    "rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": value.item(),
    "host": socket.gethostname(), "env": {n: os.environ.get(n) for n in names},
})
# One write(2) per line: lines of workers sharing a pipe never interleave.
os.write(1, (line + "\n").encode())
dist.barrier()  # no rank tears its group down while another still talks to it
dist.destroy_process_group()
