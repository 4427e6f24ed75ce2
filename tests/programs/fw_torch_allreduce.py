"""One task of a step: join the process group with slurmenv.torch, all_reduce, print JSON."""

import json
import os
import socket

import torch
import torch.distributed as dist

import slurmenv.torch

res = slurmenv.torch.init_process_group()
value = torch.tensor([float(res.rank + 1)])
dist.all_reduce(value)
line = json.dumps({
    "rank": dist.get_rank(), "world_size": dist.get_world_size(),
    "backend": str(dist.get_backend()), "sum": value.item(),
    "resolved_rank": res.rank, "local_rank": res.local_rank, "host": socket.gethostname(),
})
# One write(2) per line: lines of workers sharing a pipe never interleave.
os.write(1, (line + "\n").encode())
dist.barrier()  # no rank tears its group down while another still talks to it
dist.destroy_process_group()
