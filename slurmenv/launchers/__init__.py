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
from . import local, preset, slurm


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
    environ: Mapping[str, str], options: Options, ephemeral: tuple[int, int] | None
) -> Resolution:
    """Resolve with the first launcher that is present."""
    name = detect(environ)
    if name == "preset":
        return preset.resolve(environ, options.tf_chief)
    if name == "slurm":
        return slurm.resolve(environ, options, ephemeral)
    return local.resolve(environ, options, ephemeral)
