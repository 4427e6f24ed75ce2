"""One task of a step started with ``eval $(slurmenv export)``: Accelerate's Accelerator on
CPU, then a gather of every process's (index + 1); prints JSON."""

import json
import os
import socket

import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
gathered = accelerator.gather(torch.tensor([accelerator.process_index + 1.0]))
line = json.dumps({
    "process_index": accelerator.process_index, "num_processes": accelerator.num_processes,
    "local_process_index": accelerator.local_process_index,
    "distributed_type": str(accelerator.distributed_type), "gathered": gathered.tolist(),
    "host": socket.gethostname(),
})
os.write(1, (line + "\n").encode())
accelerator.wait_for_everyone()  # no process tears its group down while another still talks to it
accelerator.end_training()  # destroys the process group
