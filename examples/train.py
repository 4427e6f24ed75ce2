"""A tiny data-parallel training run: 2 nodes x 2 tasks on CPUs (gloo), or on GPUs (NCCL).

Started by examples/train.sbatch (``srun ... slurmenv exec -- python train.py``): slurmenv has
set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in this task, which
``init_process_group``'s default ``env://`` reads. Needs only torch.
"""

import os

import torch
import torch.distributed as dist

cuda = torch.cuda.is_available()
if cuda:
    # a task sees either all its node's GPUs (--gres=gpu:N: pick by LOCAL_RANK) or only its
    # own (--gpus-per-task=1, --bind-gpus: that one is cuda:0); the modulo covers both
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
dist.init_process_group("nccl" if cuda else "gloo")  # env:// reads the variables
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda" if cuda else "cpu")

torch.manual_seed(0)  # every rank starts from the same model; DDP checks it
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(rank)  # each rank its own batches
for step in range(20):
    x = torch.randn(32, 8, generator=data).to(device)
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()  # DDP averages the gradients over all ranks here
    optimizer.step()

# every rank holds the same weights after training: check it
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.empty_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
same = all(torch.equal(weights, other) for other in gathered)
print(f"rank {rank}/{world} on {os.uname().nodename}: loss {loss.item():.4f}, "
      f"weights {'identical on every rank' if same else 'DIFFER'}", flush=True)
dist.barrier()  # no rank tears its group down while another still talks to it
# DDP's reducer holds the process group: drop it first, so that the group is torn down here,
# not by the interpreter's exit in an order gloo's threads do not survive
del model, optimizer
dist.destroy_process_group()
if not same:
    raise SystemExit(1)
