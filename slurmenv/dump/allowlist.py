"""What a dump may hold of a task's environment: the allow-list.

The variables slurmenv reads and nothing else: every registered launcher's ``VARIABLES`` and
``PREFIXES`` (``launchers/base.py``), the Slurm, node, proxy and output variables below, and
every ``SLURMENV_*``; credentials redacted (``launchers.base.redact``). And the variables
naming files a launcher reads, whose content a dump records (:data:`FILE_VARIABLES`).
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import launchers
from ..launchers import base

#: Slurm variables read besides the launchers' own (each launcher module declares its
#: VARIABLES and PREFIXES, see launchers/base.py): the cluster, the allocation doctor compares
#: with the step, CPUs and GPUs.
SLURM_VARIABLES = (
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE",
    # what Lightning's own SLURMEnvironment reads (doctor's Lightning check)
    "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NAME",
    "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
    "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_NODE", "SLURM_GPU_BIND",
    "SLURMD_TRES_BIND",
    # the task prolog keeps stderr empty under Slurm (SLURM_SCRIPT_CONTEXT=prolog_task)
    "SLURM_SCRIPT_CONTEXT",
    # the step check's report names a topology plugin's pattern and this node's place in it
    "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN",
)  # fmt: skip

#: Devices, threads and network choices (GPU binding, thread counts, doctor).
NODE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
)  # fmt: skip

#: Proxy variables: gRPC reads the lowercase ones; other HTTP clients the uppercase ones too.
PROXY_VARIABLES = (
    "grpc_proxy", "https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY",
    "no_grpc_proxy", "no_proxy", "NO_PROXY",
)  # fmt: skip

#: Values already set that the outputs compare with or replace.
OUTPUT_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "NNODES", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG",
)  # fmt: skip


_LAUNCHERS = launchers.modules()
#: Every variable a dump may hold (the allow-list: every registered launcher's VARIABLES and
#: TASK_VARIABLES, which the stray check reads, and the lists above), plus those of PREFIXES.
VARIABLES = tuple(dict.fromkeys((
    *(name for m in _LAUNCHERS for name in (*m.VARIABLES, *getattr(m, "TASK_VARIABLES", ()))),
    *SLURM_VARIABLES, *OUTPUT_VARIABLES, *NODE_VARIABLES, *PROXY_VARIABLES)))
PREFIXES = ("SLURMENV_", *(prefix for m in _LAUNCHERS for prefix in m.PREFIXES))
REDACTED = base.REDACTED
redact_proxy = base.redact_proxy


def is_read(name: str) -> bool:
    """Whether slurmenv reads the variable ``name`` (so a dump keeps it)."""
    return name in VARIABLES or name.startswith(PREFIXES)


def select(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that slurmenv reads, sorted by name, with credentials
    (``*_TOKEN``, ``OMPI_MCA_orte_precondition_transports``, ...) and proxy passwords
    redacted (``launchers.base.redact``)."""
    return {
        name: base.redact(name, str(environ[name])) for name in sorted(environ) if is_read(name)
    }


#: Variables naming files a launcher reads to lay out the task: the launcher modules' FILES.
FILE_VARIABLES = ("SLURM_HOSTFILE", "PALS_APINFO", "PBS_NODEFILE", "LSB_DJOB_RANKFILE")
