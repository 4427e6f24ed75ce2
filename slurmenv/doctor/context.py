"""What every doctor check looks at: the environment, the options, the resolution (or its
error) made without touching the machine, and the node facts the probe found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..dump.probe import FIRST_FACTS
from ..errors import SlurmEnvError
from ..launchers import base
from ..lean import NamedTuple
from ..options import names as option_names
from ..resolution import Resolution
from .libraries import socket_ifname
from .report import ERROR, SKIPPED, Check

NOT_PROBED = "not probed: this dump was taken without 'slurmenv dump --probe'"
NO_RESOLUTION = "needs a resolution (see above)"
NOT_RECORDED = "not recorded in this dump"

# Which check reports a resolution error, by the variable at fault.
_STEP_VARIABLES = ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOB_ID")
_OPTION_VARIABLES = option_names()  # every SLURMENV_* variable and flag of the options table
_PORT_VARIABLES = ("MASTER_PORT", "SLURMENV_PORT", "SLURM_STEP_RESV_PORTS")


def from_error(name: str, exc: SlurmEnvError) -> Check:
    """The check ``name`` failing with the resolver's own error (its message and fix)."""
    variable = f" ({exc.variable}={exc.value!r})" if exc.variable else ""
    return Check(name, ERROR, exc.message + variable, exc.fix)


class Context(NamedTuple):
    """What every check looks at."""

    environ: Mapping[str, str]
    options: Mapping[str, Any]
    res: Resolution | None
    err: SlurmEnvError | None
    ephemeral: tuple[int, int] | None
    facts: Mapping[str, Any] | None
    for_: str
    recorded_by: str | None = None  # the slurmenv version of a replayed dump's facts

    @property
    def job(self) -> str | None:
        return base.job_id(self.environ)

    @property
    def step(self) -> str | None:
        return base.step_id(self.environ)

    @property
    def node(self) -> str:
        if self.res is not None and self.res.hostname:
            return self.res.hostname
        if self.facts and self.facts.get("hostname"):
            return str(self.facts["hostname"])
        return self.environ.get("SLURMD_NODENAME") or "this node"

    def in_batch_script(self) -> bool:
        """In a Slurm job's batch script or salloc shell (no step of its own: the ``batch``
        launcher), where no launcher resolved this task and none claims it: an MPI rank on
        mpirun's node carries the batch script's variables too, and its launcher's refusal is
        its own."""
        if self.res is not None or not base.in_job_outside_steps(self.environ):
            return False
        from ..launchers import detect

        return bool(getattr(detect(self.environ), "OUTSIDE_STEP", False))

    def err_category(self) -> str | None:
        if self.err is None:
            return None
        variable = self.err.variable or ""
        if variable in _STEP_VARIABLES and self.in_batch_script():
            return "step"
        if variable in _PORT_VARIABLES:
            return "ports"
        if variable == "TF_CONFIG":
            return "tf-config"
        if variable in _OPTION_VARIABLES:
            return "options"
        return "counts"

    def route(self) -> Mapping[str, Any] | None:
        return None if self.facts is None else self.facts.get("route")

    def ifname(self) -> dict[str, str] | None:
        """The NCCL/GLOO interface variables that follow from the route to the master."""
        route = self.route()
        if not route or not route.get("interface"):
            return None
        name = str(route["interface"])
        if name == "lo" and self.res is not None and self.res.several_nodes:
            return None
        return socket_ifname(name, (self.facts or {}).get("interfaces", {}))

    @property
    def resolved(self) -> Resolution:
        """The resolution, in a check registered with ``resolution=True`` (the runner calls it
        only when there is one)."""
        if self.res is None:
            raise LookupError("no resolution: register the check with resolution=True")
        return self.res

    @property
    def probed(self) -> Mapping[str, Any]:
        """The node facts, in a check registered with ``facts=`` (the runner calls it only
        when the node was probed)."""
        if self.facts is None:
            raise LookupError("no node facts: register the check with facts=(...)")
        return self.facts

    def skipped_local(self, what: str) -> Check:
        return Check(what, SKIPPED, NOT_PROBED)

    def unrecorded(self, needed: Sequence[str]) -> list[str]:
        """The facts of ``needed`` that a replayed dump's probe did not record, because it
        predates them (none when the facts were probed here, or not at all)."""
        if self.recorded_by is None or self.facts is None:
            return []
        return [name for name in needed if name not in self.facts and name not in FIRST_FACTS]

    def not_recorded(self, what: str, facts: Sequence[str]) -> Check:
        """The verdict of a check whose facts this dump predates: skipped, saying so."""
        version = (self.recorded_by or "?")[:40]
        return Check(what, SKIPPED,
                     f"{NOT_RECORDED} (recorded by slurmenv {version}, before the probe "
                     f"fact{'s' * (len(facts) != 1)} {', '.join(facts)}): take a new one with "
                     "slurmenv dump --probe")

    def no_resolution(self, what: str) -> Check:
        """The verdict of a check that needs a resolution when there is none."""
        reason = "no job step" if self.err_category() == "step" else NO_RESOLUTION
        return Check(what, SKIPPED, reason)

    def title(self) -> str:
        res = self.res
        if res is not None:
            return f"rank {res.rank} of {res.world_size} on {self.node} ({res.label})"
        if self.job:
            where = ("outside any step" if self.in_batch_script() else
                     f"step {self.step}" if self.step else "no step of its own")
            return f"job {self.job}, {where}, on {self.node}"
        return f"on {self.node}"
