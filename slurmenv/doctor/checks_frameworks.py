"""What a framework makes of the step: TensorFlow's TF_CONFIG, Lightning's own environment."""

from __future__ import annotations

from typing import Any

from .. import tfconfig
from ..errors import SlurmEnvError
from .context import Context, from_error
from .registry import check
from .report import ERROR, OK, SKIPPED, WARNING, Check


@check(
    "tf-config", "TF_CONFIG",
    "its size against Linux's 128 KiB limit for one variable; a different `TF_CONFIG` left in "
    "the environment",
)
def _check_tf_config(ctx: Context) -> Check:
    if ctx.for_ in ("torch", "torchrun"):
        return Check("tf-config", SKIPPED, "not asked for (--for torch)")
    if ctx.err is not None and ctx.err_category() == "tf-config":
        return from_error("tf-config", ctx.err)
    res = ctx.res
    if res is None:
        return ctx.no_resolution("tf-config")
    if not res.layout_known and "TF_CONFIG" not in res.fixed:
        return Check(
            "tf-config", SKIPPED,
            f"no TF_CONFIG for a task of {res.label}: {res.launcher} tells each task its own "
            "place only, not where every task runs, which TF_CONFIG lists",
        )
    try:
        config = res.tf_config
    except SlurmEnvError as exc:
        return from_error("tf-config", exc)
    text = tfconfig.dumps(config, check_size=False)
    size, limit = len(text), tfconfig.MAX_VALUE
    workers = sum(len(v) for v in config.get("cluster", {}).values())
    message = f"{size} bytes for {workers} workers (limit {limit})"
    if size > limit:
        return Check(
            "tf-config", ERROR,
            f"{message}: every program started with it would fail (Argument list too long)",
            "build the resolver in Python (slurmenv.resolve().tf_config) or export --for torch",
        )
    inherited = ctx.environ.get("TF_CONFIG")
    if inherited and "TF_CONFIG" not in res.fixed and _json(inherited) != config:
        return Check(
            "tf-config", WARNING,
            f"TF_CONFIG is already set and differs from this step's ({message})",
            "unset TF_CONFIG in the batch script; slurmenv export sets the right one per task",
        )
    if size > limit // 2:
        return Check("tf-config", WARNING, f"{message}: over half the limit",
                     "build the resolver in Python (slurmenv.resolve().tf_config) for larger steps")
    return Check("tf-config", OK, message)


@check(
    "lightning", "Lightning",
    "when Lightning is installed, what its own `SLURMEnvironment` would make of this step: rank"
    " and world size from `SLURM_PROCID`/`SLURM_NTASKS`, `SLURM_NTASKS_PER_NODE` against the "
    "step's tasks per node, tasks spread unevenly over nodes, a job named `bash` or "
    "`interactive` (then Lightning numbers ranks itself); the fix is "
    "`slurmenv.lightning.Environment()`",
)
def _check_lightning(ctx: Context) -> Check:
    """What Lightning's own cluster environment would make of this step (checked unless the
    probe found Lightning is not installed on the node, never the replaying machine)."""
    from ..lightning import tasks_per_node

    if (ctx.facts or {}).get("lightning") is False:
        return Check("lightning", OK, "Lightning is not installed here: nothing to check")
    res, env = ctx.res, ctx.environ
    if res is None:
        return ctx.no_resolution("lightning")
    job_name = env.get("SLURM_JOB_NAME")
    interactive = job_name in ("bash", "interactive")
    fix = "if this step runs Lightning, pass plugins=[slurmenv.lightning.Environment()] to " \
        "Fabric or Trainer (docs/frameworks/lightning.md)"
    if res.world_size < 2 or env.get("TORCHELASTIC_RUN_ID"):
        return Check("lightning", OK, "Lightning's own environment fits this process")
    if "SLURM_NTASKS" not in env or "SLURM_PROCID" not in env:
        return Check("lightning", OK, "not a Slurm step: Lightning's SLURMEnvironment stays out")
    # Lightning's SLURMEnvironment takes SLURM_PROCID and SLURM_NTASKS as rank and world size
    # (with int(), which strips blanks: the strip below is Lightning's reading, not slurmenv's).
    if not interactive and (env["SLURM_PROCID"].strip(), env["SLURM_NTASKS"].strip()) != (
        str(res.rank), str(res.world_size)
    ):
        return Check(
            "lightning", WARNING,
            f"if this step runs Lightning: its SLURMEnvironment would take rank "
            f"SLURM_PROCID={env['SLURM_PROCID']} of SLURM_NTASKS={env['SLURM_NTASKS']}, not "
            f"rank {res.rank} of {res.world_size} ({res.launcher})",
            fix,
        )
    if job_name is None:
        return Check("lightning", OK, "SLURM_JOB_NAME unset (a replayed dump?): not checked")
    if "NNODES" in res.unknown:
        return Check("lightning", OK, f"not checked: {res.sources.get('NNODES', 'NNODES unknown')}")
    counts = tasks_per_node(res)
    per = res.local_world_size
    even = len(set(counts)) == 1 if counts else res.world_size == res.nnodes * per
    problems = []
    if not even:
        shown = ",".join(map(str, counts)) if counts else "?"
        problems.append(
            f"its {res.world_size} tasks are spread unevenly over {res.nnodes} nodes ({shown}) "
            "and Lightning needs devices x num_nodes = world size"
        )
    if interactive:
        try:
            block = even and all(
                n * per + k == r for r, (n, k) in enumerate(zip(res.node_of, res.local_of))
            )
        except SlurmEnvError:
            block = False
        ranks = f"the job is named {job_name!r}, so Lightning ignores Slurm and numbers ranks " \
            "NODE_RANK x devices + LOCAL_RANK (from slurmenv export)"
        if block:
            return Check("lightning", OK, f"{ranks}: right for this block layout")
        if even:
            problems.append(f"{ranks}, which is not Slurm's rank in this {res.layout_name} layout")
    else:
        npn = env.get("SLURM_NTASKS_PER_NODE")
        if npn is None:
            problems.append(
                "SLURM_NTASKS_PER_NODE is unset (srun -n without --ntasks-per-node): Lightning's "
                f"SLURMEnvironment refuses {res.world_size} tasks"
            )
        elif even and npn.strip() != str(per):
            problems.append(
                f"SLURM_NTASKS_PER_NODE={npn} (set for the job) but this step runs {per} task(s) "
                f"on {ctx.node}: Lightning's SLURMEnvironment refuses devices={per}"
            )
    if not problems:
        return Check("lightning", OK,
                     f"Lightning's own SLURMEnvironment reads this step right (devices={per}, "
                     f"num_nodes={res.nnodes})")
    if not even:
        fix = f"for Lightning start the same number of tasks on every node (srun -N{res.nnodes} " \
            "--ntasks-per-node=K) and pass plugins=[slurmenv.lightning.Environment()] " \
            "(docs/frameworks/lightning.md)"
    return Check("lightning", WARNING, "if this step runs Lightning: " + "; ".join(problems), fix)


def _json(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return None
