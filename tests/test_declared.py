"""Tests made from what each launcher declares (issue 36), so that the next launcher cannot
reopen a hole without failing them: no test here names a launcher or a variable.

For every registered launcher and its sample launches (``test_invariants.LAUNCHES``, which
must hold every registered launcher):

* dropping any one variable it declares (``VARIABLES``) that the task holds gives a refusal
  naming a variable, or the same world: never a smaller or different one;
* its ``read`` runs under a mapping that records every name it looks up: each one is declared
  (``VARIABLES``, or a name under ``PREFIXES``);
* every launcher, chosen (``launcher=``), on every other launcher's tasks: refused naming a
  variable, or the same world as detected.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from test_invariants import LAUNCHES, NEEDS

import slurmenv
from slurmenv import SlurmEnvError, launchers

World = tuple[int, int, int, int]
TASK_VARIABLES = {n for module in launchers.modules() for n in module.TASK_VARIABLES}


def world(res: slurmenv.Resolution) -> World:
    return res.rank, res.world_size, res.local_rank, res.local_world_size


def outcome(env: Mapping[str, str], **opts: Any) -> World | SlurmEnvError:
    try:
        return world(slurmenv.resolve(env, ephemeral_range=None, cpus=1, rivals=(),
                                      step_evidence=None, **opts))
    except SlurmEnvError as exc:
        return exc


def sample_tasks(launcher: str, tmp: Path) -> list[tuple[str, dict[str, str]]]:
    """A few tasks of each launch of ``launcher``: the first two ranks and the last."""
    found = []
    for name, launch in LAUNCHES[launcher](tmp):
        picked = sorted({0, min(1, len(launch) - 1), len(launch) - 1})
        found += [(f"{name}[{k}]", dict(launch[k])) for k in picked]
    return found


def declared(module: Any, name: str) -> bool:
    return name in module.VARIABLES or name.startswith(tuple(module.PREFIXES))


@pytest.mark.parametrize("launcher", launchers.REGISTRY)
def test_dropping_a_declared_variable_never_gives_another_world(
    launcher: str, tmp_path: Path
) -> None:
    module = launchers.load(launcher)
    opts = NEEDS.get(launcher, {})
    tried = 0
    for name, env in sample_tasks(launcher, tmp_path):
        full = outcome(env, **opts)
        if isinstance(full, SlurmEnvError):
            continue  # a launch refused by design (a leak): nothing to shrink
        for variable in [v for v in env if declared(module, v)]:
            rest = {k: v for k, v in env.items() if k != variable}
            got = outcome(rest, **opts)
            tried += 1
            if isinstance(got, SlurmEnvError):
                assert got.variable, (name, variable, str(got))
            else:
                assert got == full, f"{name} without {variable}: world {got}, not {full}"
    assert tried or launcher == "local", f"no declared variable of {launcher} was tried"


class Recording(Mapping[str, str]):
    """A read-only environment that records every name looked up in it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.seen: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.seen.add(name)
        return self.env[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.seen.add(name)
        return name in self.env

    def __iter__(self) -> Iterator[str]:  # iterating looks nothing up by name
        return iter(self.env)

    def __len__(self) -> int:
        return len(self.env)


@pytest.mark.parametrize("launcher", launchers.REGISTRY)
def test_read_looks_up_only_declared_variables(launcher: str, tmp_path: Path) -> None:
    module = launchers.load(launcher)
    read = 0
    for name, env in sample_tasks(launcher, tmp_path):
        if not module.detect(env):
            continue
        recorder = Recording(env)
        try:
            module.read(recorder)
        except SlurmEnvError:
            pass  # the names looked up before a refusal count as much
        # the single-process default looks for every launcher's TASK_VARIABLES (local.stray)
        undeclared = sorted(n for n in recorder.seen if not declared(module, n)
                            and not (module.FALLBACK and n in TASK_VARIABLES))
        assert undeclared == [], f"{launcher}.read looks up undeclared {undeclared} ({name})"
        read += 1
    assert read, f"no sample task of {launcher} is detected by it"


@pytest.mark.parametrize("chosen", launchers.REGISTRY)
def test_a_chosen_launcher_on_every_other_launchers_tasks(chosen: str, tmp_path: Path) -> None:
    for launcher in launchers.REGISTRY:
        if launcher == chosen:
            continue
        opts = {**NEEDS.get(launcher, {}), **NEEDS.get(chosen, {})}
        for name, env in sample_tasks(launcher, tmp_path):
            detected = outcome(env, **opts)
            got = outcome(env, launcher=chosen, **opts)
            if isinstance(got, SlurmEnvError):
                assert got.variable, (chosen, name, str(got))
            else:
                assert got == detected, (
                    f"{chosen} chosen on {launcher}'s {name}: world {got}, detected {detected}")
