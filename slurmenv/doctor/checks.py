"""The doctor's checks in the order of the report (:data:`ORDER`), and :func:`diagnose`, which
runs each behind the guard its record declares (:func:`_run`). Each check is one function in
the ``checks_*`` module of its topic, reading the :class:`~.context.Context` and asking the
resolver's own rules (``gpus``, ``threads``, ``ports``, ``launchers``), never restating them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..dump.probe import resolve_for_doctor
from ..errors import SlurmEnvError
from . import (  # noqa: F401 - importing them registers their checks
    checks_frameworks,
    checks_network,
    checks_ports,
    checks_resources,
    checks_step,
    registry,
)
from .context import Context, from_error
from .report import SKIPPED, Check, Report

if TYPE_CHECKING:
    from ..dump.replay import Dump

#: The checks in the order of the report (a check's module registers it; this places it).
ORDER = ("step", "counts", "master-name", "interface", "ports", "enroot", "proxy", "gpus",
         "threads", "tf-config", "lightning")
registry.order(ORDER)

#: name -> label, in print order (a view of the registry).
CHECKS = registry.CHECKS


def diagnose(environ: Mapping[str, str], options: Mapping[str, Any] | None = None, *,
             ephemeral: tuple[int, int] | None = None, facts: Mapping[str, Any] | None = None,
             for_: str = "all", recorded_by: str | None = None) -> Report:
    """Every check for the task whose environment is ``environ``: ``facts`` what the probe
    found on the node (None: node-local checks skipped), ``ephemeral`` its ephemeral port
    range (None: unknown), ``recorded_by`` the version of the dump ``facts`` come from."""
    opts = dict(options or {})
    res, err = resolve_for_doctor(environ, opts)
    ctx = Context(environ, opts, res, err, ephemeral, facts, for_, recorded_by)
    checks = [_run(entry, ctx) for entry in list(registry.ENTRIES)]
    try:
        ifname = ctx.ifname()
    except Exception:  # noqa: BLE001 - malformed facts (an edited dump): no interface to name
        ifname = None
    return Report(ctx.title(), checks, ifname)


def _run(entry: registry.Entry, ctx: Context) -> Check:
    """One check, behind its record's guard; one that fails on its input (an edited dump) is
    reported skipped with the reason, so the other checks are still shown."""
    name = entry.name
    missing = ctx.unrecorded(entry.facts)
    if missing:
        return ctx.not_recorded(name, missing)
    try:
        if ctx.err is not None and entry.errors and ctx.err_category() in entry.errors:
            return from_error(name, ctx.err)
        if entry.resolution and ctx.res is None:
            return ctx.no_resolution(name)
        if entry.facts and ctx.facts is None:
            return ctx.skipped_local(name)
        result: Check = entry.function(ctx)
        return result
    except Exception as exc:  # noqa: BLE001 - facts from a file: any shape may come in
        from .. import __version__

        return Check(name, SKIPPED, f"not checked: it failed on its input ({type(exc).__name__}: "
                     f"{str(exc)[:120]}); unless that input is an edited dump, this is a bug in "
                     f"slurmenv {__version__}: please report it on the slurmenv issue tracker")


def outputs_to_check(environ: Mapping[str, str], given: str | None) -> str:
    """The output set to check; an invalid SLURMENV_FOR is checked as 'all' (the options check
    reports it)."""
    from ..options import outputs

    try:
        return outputs(environ, given)
    except SlurmEnvError:
        return "all"


def replay(
    loaded: Dump, options: Mapping[str, Any] | None = None, for_: str | None = None
) -> Report:
    """The checks of a dump's task, on its recorded environment, options and node facts
    (``doctor --from``); ``options`` win over the recorded ones. A check needing a fact the
    dump predates is skipped, saying so."""
    merged = {**loaded.replay_options, **(options or {})}
    with loaded.environment() as env:
        return diagnose(env, merged, ephemeral=loaded.ephemeral_range, facts=loaded.probe,
                        for_=outputs_to_check(env, for_), recorded_by=loaded.version)
