"""What each task gets of its node: GPUs and CPU threads."""

from __future__ import annotations

from .. import gpus, threads
from ..errors import SlurmEnvError, is_number, to_int
from .context import Context
from .registry import check
from .report import OK, WARNING, Check


@check(
    "gpus", "GPUs",
    "the GPUs visible to this task against the tasks on its node: shared and picked by "
    "`LOCAL_RANK`, bound one per task (use `cuda:0`), idle GPUs, tasks sharing a GPU, a list "
    "unset by the job script",
    resolution=True,
)
def _check_gpus(ctx: Context) -> Check:
    res = ctx.resolved
    env = ctx.environ
    tasks = res.local_world_size
    found = [(n, env[n]) for n in gpus.VARIABLES if n in env]
    on_node = gpus.node_gpus(env)
    if not found:
        if env.get("SLURM_STEP_GPUS") or on_node:
            return Check(
                "gpus", WARNING,
                f"the step has GPUs here (SLURM_STEP_GPUS={env.get('SLURM_STEP_GPUS')}, "
                f"SLURM_GPUS_ON_NODE={on_node}) but CUDA_VISIBLE_DEVICES is unset: was it unset "
                "by the job script?",
                "do not unset CUDA_VISIBLE_DEVICES; Slurm sets it in each task",
            )
        return Check("gpus", OK, "no GPU given to this task (CUDA_VISIBLE_DEVICES unset)")
    name, value = found[0]
    count = gpus.count_list(value) if value not in gpus.NO_DEVICES else 0
    seen = f"{name}={value}"
    node_note = f" (SLURM_GPUS_ON_NODE={on_node})" if on_node is not None else ""
    if name in res.bindings:  # --bind-gpus: the task gets its share of the node's list
        share = res.bindings[name]
        use = ": use device 0 (cuda:0)" if gpus.count_list(share) == 1 else ""
        return Check("gpus", OK, f"{seen} shared by the {tasks} task(s) on {ctx.node}; slurmenv's "
                     f"GPU binding gives this task {name}={share}{use}")
    if count == 0:
        return Check("gpus", WARNING, f"{seen}: no GPU visible to this task",
                     "request GPUs for the step: srun --gpus-per-task=1 or --gres=gpu:N")
    if gpus.bound_per_task(env) or (on_node is None and count == 1 and tasks > 1):
        if count == 1:
            return Check(
                "gpus", OK,
                f"{seen}: one GPU of its own for this task{node_note}: use device 0 (cuda:0), "
                "not cuda:LOCAL_RANK",
            )
        return Check(
            "gpus", WARNING,
            f"{seen}: {count} GPUs of its own for this task{node_note}: with one process per "
            f"GPU, {count - 1} would sit idle",
            "give one GPU per task (srun --gpus-per-task=1) unless one process drives several",
        )
    where = f"the {tasks} task(s) on {ctx.node}"
    if count == tasks:
        return Check(
            "gpus", OK,
            f"{seen}: {count} GPU(s) shared by {where}: each task must pick the one of its "
            "LOCAL_RANK (torch.cuda.set_device(LOCAL_RANK))",
        )
    if count > tasks:
        return Check(
            "gpus", WARNING,
            f"{seen}: {count} GPUs visible to {where}: {count - tasks} would sit idle with one "
            "process per GPU",
            f"start one task per GPU: srun --ntasks-per-node={count} (or --gpus-per-task=1)",
        )
    return Check("gpus", WARNING,
                 f"{seen}: {where} share {count} GPU(s)",
                 f"request one GPU per task: srun --gpus-per-task=1 (or --gres=gpu:{tasks})")


@check(
    "threads", "threads",
    "`OMP_NUM_THREADS` against the CPUs per task (`SLURM_CPUS_PER_TASK`, the task's CPU "
    "affinity, `SLURM_CPUS_ON_NODE`), including the value slurmenv itself will set",
    resolution=True,
)
def _check_threads(ctx: Context) -> Check:
    res = ctx.resolved
    env = ctx.environ
    tasks = res.local_world_size
    try:
        cpt = threads.cpus_per_task(env)
    except SlurmEnvError:  # refused by the resolver unless --no-threads: nothing to compare
        cpt = None
    omp_text = env.get("OMP_NUM_THREADS", "")
    omp = threads.omp_threads(omp_text)
    cpus = (ctx.facts or {}).get("cpus") or {}
    affinity = cpus.get("affinity")
    on_node_text = env.get("SLURM_CPUS_ON_NODE", "")
    on_node = to_int(on_node_text) if is_number(on_node_text) else cpus.get("count")
    if "OMP_NUM_THREADS" in res.bindings:
        value = res.bindings["OMP_NUM_THREADS"]
        why = res.sources.get("OMP_NUM_THREADS", "")
        if tasks > 1 and on_node and int(value) * tasks > on_node:
            return Check(
                "threads", WARNING,
                f"OMP_NUM_THREADS unset; slurmenv sets it to {value} from {why}, but {tasks} tasks "
                f"x {value} threads exceed the {on_node} CPUs of {ctx.node}",
                f"give CPUs per task: srun -c {max(1, on_node // tasks)} (SLURM_CPUS_PER_TASK)",
            )
        return Check("threads", OK,
                     f"OMP_NUM_THREADS unset; slurmenv export/exec sets it to {value} from {why}")
    if omp_text and omp is None:
        return Check("threads", WARNING, f"OMP_NUM_THREADS={omp_text!r} is not a number",
                     f"set OMP_NUM_THREADS to the CPUs per task: {threads.FROM_CPUS_PER_TASK}")
    if omp is not None:
        limit = cpt if cpt is not None else (on_node // tasks if on_node else None)
        basis = f"SLURM_CPUS_PER_TASK={cpt}" if cpt is not None else \
            f"{on_node} CPUs on the node / {tasks} task(s)" if on_node else "unknown CPUs"
        if limit is not None and omp > limit:
            return Check(
                "threads", WARNING,
                f"OMP_NUM_THREADS={omp} is more than the CPUs per task ({basis}): threads of the "
                "tasks compete for cores",
                f"export OMP_NUM_THREADS={limit} (or srun -c {omp})",
            )
        if cpt is not None and omp < cpt:
            return Check("threads", WARNING,
                         f"OMP_NUM_THREADS={omp} uses fewer CPUs than the task has ({basis})",
                         threads.FROM_CPUS_PER_TASK)
        return Check("threads", OK, f"OMP_NUM_THREADS={omp} fits the CPUs per task ({basis})")
    if cpt is not None:
        if affinity is not None and affinity <= cpt:
            return Check("threads", OK,
                         f"OMP_NUM_THREADS unset; this task is bound to {affinity} CPU(s) "
                         f"(SLURM_CPUS_PER_TASK={cpt}): OpenMP uses those")
        return Check(
            "threads", WARNING,
            f"OMP_NUM_THREADS unset with SLURM_CPUS_PER_TASK={cpt}: OpenMP and torch start one "
            f"thread per CPU this task may run on ({affinity if affinity else '?'}), "
            f"not {cpt}",
            f"{threads.FROM_CPUS_PER_TASK} before starting the training",
        )
    if tasks > 1 and affinity is not None and on_node and affinity * tasks > on_node:
        return Check(
            "threads", WARNING,
            f"OMP_NUM_THREADS unset and no srun -c: each of the {tasks} tasks on {ctx.node} "
            f"may start {affinity} threads on {on_node} CPUs",
            f"give CPUs per task (srun -c {max(1, on_node // tasks)}) and "
            f"{threads.FROM_CPUS_PER_TASK}",
        )
    return Check("threads", OK, "OMP_NUM_THREADS unset; no CPU oversubscription seen")
