"""Launchers, tried in order: each module answers "is it present?" and "resolve this task".

1. ``preset`` with a marker (``torchrun`` inside ``srun``): the launcher's own values win.
2. ``slurm``: inside a Slurm job (a step resolves; the batch script is refused).
3. ``preset`` without a marker: all four torch variables set by hand, outside Slurm.
4. ``local``: a single process.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..options import Options
from ..resolution import Resolution
from . import preset, slurm  # local (socket) is imported only when used


def detect(environ: Mapping[str, str]) -> str:
    """The name of the launcher that ``resolve`` would use for this environment."""
    if preset.marker(environ) and preset.is_present(environ):
        return "preset"
    if slurm.is_present(environ):
        return "slurm"
    if preset.is_present(environ):
        return "preset"
    return "local"


def resolve(
    environ: Mapping[str, str],
    options: Options,
    ephemeral: tuple[int, int] | None,
    cpus: int | None = None,
) -> Resolution:
    """Resolve with the first launcher that is present, then add the per-task settings."""
    name = detect(environ)
    if name == "preset":
        res = preset.resolve(environ, options.tf_chief)
    elif name == "slurm":
        res = slurm.resolve(environ, options, ephemeral)
    else:
        from . import local

        res = local.resolve(environ, options, ephemeral)
    return add_bindings(res, environ, options, cpus)


def add_bindings(
    res: Resolution, environ: Mapping[str, str], options: Options, cpus: int | None = None
) -> Resolution:
    """``res`` with this task's GPU lists (GPU binding) and unset thread counts added;
    ``cpus`` replaces the task's CPU affinity count (a replay gives the recorded one)."""
    from .. import gpus, threads

    gpu = gpus.plan(environ, res.local_rank, res.local_world_size, bind=options.bind_gpus)
    bindings = dict(gpu.env)
    sources = dict.fromkeys(gpu.env, gpu.source)
    notes = list(gpu.notes)
    if options.threads:
        counts = threads.plan(environ) if cpus is None else threads.plan(environ, lambda: cpus)
        bindings.update(counts.env)
        sources.update(dict.fromkeys(counts.env, counts.source))
        notes.extend(counts.notes)
    return res.with_bindings(
        bindings, gpus=gpu.gpus, gpu_source=gpu.source, sources=sources, notes=notes
    )
