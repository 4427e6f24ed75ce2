"""Where this task runs: inside a job step or not, and the step's counts."""

from __future__ import annotations

from ..launchers import base, batch
from .context import Context
from .registry import check
from .report import ERROR, OK, WARNING, Check


@check(
    "step", "step",
    "inside a job step, or the batch script / an `salloc` shell (where every task would get "
    "rank 0), an interactive step, no Slurm at all, or variables set by torchrun",
)
def _check_step(ctx: Context) -> Check:
    env = ctx.environ
    res = ctx.res
    if res is None:
        if ctx.in_batch_script():
            nodes_ = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "?"
            return Check(
                "step", ERROR,
                f"inside job {ctx.job} ({env.get('SLURM_NTASKS', '?')} tasks on {nodes_}) but "
                "outside any job step: the batch script or an salloc shell, where every task "
                "would get rank 0",
                batch.OUTSIDE_STEP_FIX + "; run the doctor there too: srun slurmenv doctor",
            )
        if ctx.job is not None and base.slurm_step_is_own(env):
            return Check("step", OK, f"a task of job step {ctx.job}.{ctx.step} (srun)")
        return ctx.no_resolution("step")
    if res.origin_fix is not None:
        return Check("step", WARNING, res.origin, res.origin_fix)
    if res.in_worker:
        return Check("step", OK, res.origin)
    return Check("step", OK, f"{res.origin}: rank {res.rank} of {res.world_size}")


@check(
    "counts", "counts",
    "the step's counts agree with each other and with this task's `SLURM_NODEID`, "
    "`SLURM_LOCALID`, `SLURM_GTIDS`; no `RANK`/`WORLD_SIZE` left over from the batch script",
    resolution=True, errors=("counts", "options"),
)
def _check_counts(ctx: Context) -> Check:
    res = ctx.resolved
    if res.tasks_per_node is None:
        return Check("counts", OK,
                     f"rank {res.rank} of {res.world_size}, local rank {res.local_rank} of "
                     f"{res.local_world_size}, "
                     + (f"{res.nnodes} node(s)" if not res.unknown else "node count not known here")
                     + f" ({res.launcher})")
    env = ctx.environ
    name = res.layout_name
    layout = f", {name} layout" if name else ""
    counts_from = res.sources.get("LOCAL_WORLD_SIZE", "").partition(" at ")[0]
    own_from = "/".join(
        res.sources.get(key, "").partition("=")[0] for key in ("NODE_RANK", "LOCAL_RANK")
    )
    message = (
        f"{res.world_size} tasks on {res.nnodes} nodes ({counts_from}{layout}); this task: node "
        f"{res.node_rank} ({res.hostname}), local rank {res.local_rank} of "
        f"{res.local_world_size}, as {own_from}"
        + ("/SLURM_GTIDS" if env.get("SLURM_GTIDS") else "") + " say"
    )
    job_tasks = env.get("SLURM_NTASKS")
    if job_tasks and job_tasks != str(res.world_size):
        message += f"; the job has {job_tasks} tasks, this step {res.world_size}"
    if res.notes:
        message += "; " + "; ".join(res.notes)
    return Check("counts", OK, message)
