"""One task of a step started with ``eval $(slurmenv export)``: deepspeed.init_distributed
with gloo (CPU), then an all_reduce of every rank's (rank + 1); prints JSON."""

import json
import os
import socket

import deepspeed
import torch
import torch.distributed as dist

deepspeed.init_distributed(dist_backend="gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
line = json.dumps({
    "rank": dist.get_rank(), "world_size": dist.get_world_size(),
    "backend": str(dist.get_backend()), "sum": value.item(), "host": socket.gethostname(),
})
os.write(1, (line + "\n").encode())
dist.barrier()  # no rank tears its group down while another still talks to it
dist.destroy_process_group()
