"""One task of a step: jax.distributed.initialize through slurmenv.jax, then a cross-process
all-gather of each process's (id + 1); prints JSON."""

import json
import os
import socket

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import numpy as np
from jax.experimental import multihost_utils

import slurmenv.jax

args = slurmenv.jax.initialize_args()
slurmenv.jax.initialize()
gathered = multihost_utils.process_allgather(np.array([jax.process_index() + 1.0]))
line = json.dumps({
    "args": args, "process_count": jax.process_count(), "process_index": jax.process_index(),
    "gathered": np.asarray(gathered).ravel().tolist(), "devices": len(jax.devices()),
    "host": socket.gethostname(), "ompi_rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1")),
})
os.write(1, (line + "\n").encode())
# a barrier too: each process waits here until every other one shuts down (the coordination
# service's shutdown barrier), so none leaves while a peer still talks to it
jax.distributed.shutdown()
