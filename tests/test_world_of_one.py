"""No silent world of one (issue 42, items 1-3; slurmenv/worldguard.py, docs/fail-closed.md).

* a world of one needs evidence: every single-process result (the fallback, a one-task job,
  the interactive step, hand-set or torchrun values of one process, a one-task step) is given
  only where no declared variable says the world is larger (``worldguard.check_world_of_one``);
  the test of every launcher's declarations below adds each such variable to each of those
  results and expects no world of one;
* enclosures are checked, not assumed: a launcher declared ``ENCLOSED_BY`` another (torchrun's
  workers in an srun task, a Flux job inside ``srun flux start``) is believed only with its
  agent among the ancestors (real processes here: a program named ``torchrun``), else the
  outer world must agree or the task is refused naming both;
* the task prolog's marker, in a task with no Slurm job of its own (a scrubbed container),
  keeps the prolog's values when they form a whole world, or refuses.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import synth
from test_fail_closed import fake_proc

import slurmenv
from slurmenv import SlurmEnvError, launchers, worldguard
from slurmenv.launchers import evidence

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOSTS = ["n1", "n2"]
World = tuple[int, int]
#: The issue's scrubbed container: the prolog's values for rank 5 of 8, with its marker.
PROLOG = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
          "NODE_RANK": "1", "GROUP_RANK": "1", "NNODES": "2", "MASTER_ADDR": "n1",
          "MASTER_PORT": "10660"}
MARKER = "900000030.0:" + ",".join(PROLOG)
#: torchrun's leftovers of one worker (RANK=0 of 1), as the issue's 8-task step carries them.
LEFTOVERS = {"TORCHELASTIC_RUN_ID": "none", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
             "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
AGENT = "torchrun (pid 7) is an ancestor of this process"


def outcome(env: Mapping[str, str], **opts: Any) -> World | SlurmEnvError:
    """(rank, world size), or the refusal; no /proc evidence of a scrubbed step."""
    opts.setdefault("enclosure", None)
    opts.setdefault("step_evidence", None)
    try:
        res = slurmenv.resolve(env, ephemeral_range=None, cpus=1, rivals=(), **opts)
    except SlurmEnvError as exc:
        return exc
    return res.rank, res.world_size


def refused(env: Mapping[str, str], **opts: Any) -> SlurmEnvError:
    got = outcome(env, **opts)
    assert isinstance(got, SlurmEnvError), f"not refused: {got}"
    return got


def run_under(agent: str, tmp: pathlib.Path, argv: list[str],
              env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the child of a real process named ``agent`` (a POSIX sh script of that
    name, which does not exec its command: it is the command's parent)."""
    script = tmp / agent
    script.write_text('#!/bin/sh\n"$@"\nstatus=$?\nexit "$status"\n')
    script.chmod(0o755)
    return subprocess.run([str(script), *argv], env=dict(env), capture_output=True, text=True,
                          timeout=120, check=False)


def interactive(step: str = "-6", **counts: str) -> dict[str, str]:
    """salloc's interactive step (26.05: -6; 22.05: 4294967290) of job 12."""
    return {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": step, "SLURM_JOB_NODELIST": "n[1-2]",
            "SLURMD_NODENAME": "n1", **counts}


def one_task_job() -> dict[str, str]:
    env = synth.step_env(["n1"], [1], 0)
    for name in [n for n in env if n.startswith("SLURM_STEP") or n in ("SLURM_GTIDS",
                                                                        "SLURM_LOCALID")]:
        del env[name]
    return env


# -- the issue's three cases ---------------------------------------------------------------------
def test_the_prologs_values_in_a_scrubbed_container_are_rank_5_of_8() -> None:
    env = {**PROLOG, worldguard.SET_BY: MARKER}
    res = slurmenv.resolve(env, ephemeral_range=None, step_evidence=None)
    assert (res.rank, res.world_size, res.local_rank, res.node_rank) == (5, 8, 1, 1)
    assert (res.master_addr, res.master_port) == ("n1", 10660)
    assert any("kept as that step's values" in note for note in res.notes), res.notes
    # with /proc evidence of the scrubbed step, the same: the values are the step's own
    found = "slurmstepd: [900000030.0] (pid 7) is an ancestor of this process"
    assert outcome(env, step_evidence=found) == (5, 8)


@pytest.mark.parametrize("pid_namespace", [False, True])
def test_the_issues_env_i_command_exports_rank_5_of_8(pid_namespace: bool) -> None:
    bindir = str(pathlib.Path(sys.executable).parent)
    command = ["env", "-i", f"PATH={bindir}:/usr/bin:/bin", f"PYTHONPATH={ROOT}",
               *(f"{k}={v}" for k, v in PROLOG.items()), f"{worldguard.SET_BY}={MARKER}",
               sys.executable, "-m", "slurmenv", "export", "--for", "torch", "--format", "json"]
    if pid_namespace:
        if shutil.which("unshare") is None or subprocess.run(
                ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                check=False).returncode != 0:
            pytest.skip("no PID namespace here (unshare --pid needs root)")
        command = ["unshare", "--pid", "--fork", "--mount-proc", *command]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    values = json.loads(out.stdout)
    assert (values["RANK"], values["WORLD_SIZE"], values["MASTER_ADDR"]) == ("5", "8", "n1")


@pytest.mark.parametrize("step", ["-6", "4294967290"])
def test_the_interactive_step_of_a_multi_task_job_is_refused(step: str) -> None:
    err = refused(interactive(step, SLURM_NTASKS="8", SLURM_JOB_NUM_NODES="2"))
    assert (err.variable, err.value) == ("SLURM_NTASKS", "8"), err
    assert "world of one" in err.message and "WORLD_SIZE=1" in err.message, err


@pytest.mark.parametrize("counts", [
    {"SLURM_JOB_NUM_NODES": "2"}, {"SLURM_NNODES": "2"}, {"SLURM_NPROCS": "4"},
    {"SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "1"},
])
def test_the_interactive_step_refuses_any_larger_job(counts: dict[str, str]) -> None:
    err = refused(interactive(**counts))
    assert err.variable in counts and err.value == counts[err.variable], err


@pytest.mark.parametrize("counts", [{}, {"SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "1"},
                                    {"SLURM_JOB_NUM_NODES": "1"}])
def test_the_interactive_step_of_a_one_task_job_is_one_process(counts: dict[str, str]) -> None:
    res = slurmenv.resolve(interactive(**counts), ephemeral_range=None, step_evidence=None)
    assert (res.launcher, res.world_size) == ("slurm-interactive-step", 1)


def test_a_one_task_step_in_a_larger_job_is_one_process() -> None:
    # srun -n1 in a 2-node job of 8 tasks: the step's own sizes tell, not the job's
    # (srun -E keeps the job's SLURM_NTASKS/SLURM_NNODES in the step)
    env = synth.step_env(["n2"], [1], 0, SLURM_JOB_NUM_NODES="2", SLURM_NTASKS="8",
                         SLURM_NNODES="2", SLURM_JOB_NODELIST="n[1-2]")
    assert outcome(env) == (0, 1)


@pytest.mark.parametrize("rank", [0, 3, 7])
def test_leftover_torchrun_variables_in_an_8_task_step_are_refused(rank: int) -> None:
    env = {**synth.step_env(HOSTS, [4, 4], rank), **LEFTOVERS}
    err = refused(env)
    assert err.variable is not None and err.variable.startswith("SLURM_"), err
    assert "RANK=0" in err.message or "WORLD_SIZE=1" in err.message, err
    # even where torchrun's agent is an ancestor, a world of one in an 8-task step is none
    err = refused(env, enclosure=AGENT)
    assert err.variable is not None and err.variable.startswith("SLURM_"), err


def test_torchrun_in_an_srun_task_is_believed_only_with_its_agent() -> None:
    # srun -N2 --ntasks-per-node=1 torchrun --nproc-per-node=4: worker 5 of 8 in task 1 of 2
    env = synth.step_env(HOSTS, [1, 1], 1, TORCHELASTIC_RUN_ID="abc", RANK="5",
                         LOCAL_RANK="1", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4", GROUP_RANK="1",
                         GROUP_WORLD_SIZE="2", MASTER_ADDR="n1", MASTER_PORT="29500")
    assert outcome(env, enclosure=AGENT) == (5, 8)
    err = refused(env)
    assert (err.variable, err.value) == ("SLURM_PROCID", "1"), err
    assert "RANK=5" in err.message and "ancestor" in err.message, err
    assert "TORCHELASTIC_RUN_ID" in (err.fix or "")


def test_a_flux_job_in_srun_flux_start_is_believed_only_with_its_shell() -> None:
    broker = synth.step_env(HOSTS, [1, 1], 1)
    flux = {"FLUX_TASK_RANK": "3", "FLUX_TASK_LOCAL_ID": "0", "FLUX_JOB_SIZE": "4",
            "FLUX_JOB_NNODES": "4", "FLUX_JOB_ID": "f2Kq4", "SLURMENV_MASTER_ADDR": "n1"}
    shell = "flux-shell (pid 9) is an ancestor of this process"
    assert outcome({**broker, **flux}, enclosure=shell) == (3, 4)
    err = refused({**broker, **flux})
    assert (err.variable, err.value) == ("SLURM_PROCID", "1") and "flux-shell" in err.message


def test_an_enclosure_whose_worlds_agree_needs_no_evidence() -> None:
    # torchrun's values equal to the step's own (a leftover copy that happens to agree)
    env = synth.step_env(HOSTS, [4, 4], 5, TORCHELASTIC_RUN_ID="abc", RANK="5",
                         LOCAL_RANK="1", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4", GROUP_RANK="1",
                         GROUP_WORLD_SIZE="2", MASTER_ADDR="n1", MASTER_PORT="29500")
    assert outcome(env) == (5, 8)


def test_every_enclosed_launcher_declares_its_agents() -> None:
    for name in launchers.REGISTRY:
        module = launchers.load(name)
        if module.ENCLOSED_BY:
            agents = getattr(module, "AGENTS", ())
            assert agents and all(isinstance(a, str) and a for a in agents), name


# -- the enclosure's evidence: real processes and a /proc tree ---------------------------------
CHILD = (
    "import json, slurmenv\n"
    "from slurmenv.launchers import evidence\n"
    "found = evidence.agent_ancestor(('torchrun',))\n"
    "try:\n"
    "    res = slurmenv.resolve(ephemeral_range=None, step_evidence=None)\n"
    "    print(json.dumps([found, res.rank, res.world_size]))\n"
    "except slurmenv.SlurmEnvError as err:\n"
    "    print(json.dumps([found, err.variable, None]))\n"
)


@pytest.mark.parametrize(("agent", "believed"), [("torchrun", True), ("notorchrun", False)])
def test_a_real_agent_process_is_the_evidence(tmp_path: pathlib.Path, agent: str,
                                              believed: bool) -> None:
    env = synth.clean_env(PYTHONPATH=str(ROOT), **synth.step_env(
        HOSTS, [1, 1], 1, TORCHELASTIC_RUN_ID="abc", RANK="5", LOCAL_RANK="1", WORLD_SIZE="8",
        LOCAL_WORLD_SIZE="4", GROUP_RANK="1", GROUP_WORLD_SIZE="2", MASTER_ADDR="n1",
        MASTER_PORT="29500"))
    out = run_under(agent, tmp_path, [sys.executable, "-c", CHILD], env)
    assert out.returncode == 0, out.stderr
    found, first, world = json.loads(out.stdout)
    if believed:
        assert found.startswith("torchrun (pid ") and [first, world] == [5, 8], out.stdout
    else:
        assert found is None and [first, world] == ["SLURM_PROCID", None], out.stdout


@pytest.mark.parametrize(("chain", "found"), [
    ([(100, "python3", "python3 train.py"), (90, "torchrun", "python3 /usr/bin/torchrun x")],
     "torchrun (pid 90)"),
    ([(100, "python3", "python3 t.py"), (90, "python3", "python3 -m torch.distributed.run t.py"),
      (80, "slurmstepd", "slurmstepd: [12.0]")], "torch.distributed.run (pid 90)"),
    ([(100, "python3", "python3 t.py"), (90, "python3", "/opt/py/bin/python3 /opt/bin/torchrun")],
     "torchrun (pid 90)"),
    # above the task's slurmstepd: not this task's agent
    ([(100, "python3", "python3 t.py"), (90, "slurmstepd", "slurmstepd: [12.0]"),
      (80, "torchrun", "torchrun x")], None),
    ([(100, "python3", "python3 t.py"), (90, "bash", "bash -c torchrun")], None),
    ([(100, "python3", "python3 t.py"), (90, "python3", "python3 -u -m torch.distributed.run")],
     "torch.distributed.run (pid 90)"),
    ([(100, "python3", "python3 t.py"), (90, "python3", "python3 train.py torchrun")], None),
    ([(100, "python3", "python3 t.py"), (90, "python3", "python3 -m mytool torchrun")], None),
])
def test_agent_ancestor_in_a_proc_tree(tmp_path: pathlib.Path, chain: list[tuple[int, str, str]],
                                       found: str | None) -> None:
    fake_proc(tmp_path, chain)
    got = evidence.agent_ancestor(("torchrun", "torch.distributed.run"), str(tmp_path), pid=100)
    assert (got is None) == (found is None) and (found is None or str(got).startswith(found))


def test_no_agent_above_pytest() -> None:
    assert evidence.agent_ancestor(("torchrun", "flux-shell")) is None


# -- the marker ------------------------------------------------------------------------------
@pytest.mark.parametrize(("marker", "unset"), [
    (MARKER, ["RANK"]),  # part of the prolog's values lost
    (MARKER, list(PROLOG)),  # all of them lost: only the marker says there was a step
    ("900000030.0:MASTER_ADDR,MASTER_PORT", []),  # no whole world listed
    ("900000030.0:", []),
    ("garbage", []),
])
def test_a_marker_without_a_whole_world_is_refused(marker: str, unset: list[str]) -> None:
    env = {k: v for k, v in PROLOG.items() if k not in unset}
    err = refused({**env, worldguard.SET_BY: marker})
    assert (err.variable, err.value) == (worldguard.SET_BY, marker), err


def test_a_marker_kept_values_that_contradict_each_other_are_refused() -> None:
    err = refused({**PROLOG, "LOCAL_RANK": "4", worldguard.SET_BY: MARKER})
    assert err.variable == "LOCAL_RANK", err


def test_a_marker_of_another_step_whose_values_are_gone_drops_nothing() -> None:
    env = {**synth.step_env(HOSTS, [4, 4], 5), worldguard.SET_BY: MARKER}
    res = slurmenv.resolve(env, ephemeral_range=None, step_evidence=None)
    assert res.rank == 5 and not any("task prolog" in note for note in res.notes), res.notes


def test_a_marker_of_another_job_in_a_batch_script_is_dropped() -> None:
    # sbatch from a task of an opted-in step: the new job's batch script inherits the values
    script = {**one_task_job(), "SLURM_JOB_ID": "77", **PROLOG, worldguard.SET_BY: MARKER}
    res = slurmenv.resolve(script, ephemeral_range=None, step_evidence=None)
    assert (res.launcher, res.world_size) == ("slurm-one-task-job", 1)
    assert any("resolved again" in note for note in res.notes)


# -- the rule, derived from every launcher's declarations ---------------------------------------
def single_processes() -> list[tuple[str, dict[str, str]]]:
    """Every way a world of one is given today, each resolving to rank 0 of 1."""
    return [
        ("nothing", {}),
        ("one-task job", one_task_job()),
        ("interactive step", interactive(SLURM_NTASKS="1", SLURM_JOB_NUM_NODES="1")),
        ("hand-set", {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "2950"}),
        ("torchrun", {**LEFTOVERS}),
        ("one-task step", synth.step_env(["n1"], [1], 0)),
    ]


def facts(env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(launcher, field, variable) of every declared fact of the world that holds for ``env``:
    every launcher's WORLD, and its JOB_WORLD where the task runs in no step of its own."""
    from slurmenv.launchers.base import SPECIAL_STEPS, step_id

    step = step_id(env)
    own_step = step is not None and step not in SPECIAL_STEPS
    found = []
    for module in launchers.modules():
        declared = module.WORLD if own_step else (*module.WORLD, *getattr(module, "JOB_WORLD", ()))
        found += [(module.NAME, field, variable) for field, variable in declared]
    return found


LARGER = {"rank": "3", "local_rank": "1", "node_rank": "1", "world_size": "8",
          "local_world_size": "4", "nnodes": "2"}
SAME = {"rank": "0", "local_rank": "0", "node_rank": "0", "world_size": "1",
        "local_world_size": "1", "nnodes": "1"}


@pytest.mark.parametrize(("name", "env"), single_processes(), ids=lambda v: str(v)[:20])
def test_every_variable_that_names_a_larger_world_ends_the_world_of_one(
        name: str, env: dict[str, str]) -> None:
    assert outcome(env) == (0, 1), name
    tried = []
    # the marker is the prolog's step's where the task has no Slurm job of its own (in one, a
    # marker of another step is dropped and the task's own step or job tells)
    marker = [] if "SLURM_JOB_ID" in env else [("marker", "", worldguard.SET_BY)]
    for launcher, field, variable in [*facts(env), *marker]:
        value = LARGER.get(field, MARKER)
        got = outcome({**env, variable: value})
        assert got != (0, 1), f"{name} with {variable}={value} ({launcher}): a world of one"
        if isinstance(got, SlurmEnvError):
            assert got.variable, (name, variable, str(got))
        tried.append(variable)
    assert {v for module in launchers.modules() for _, v in module.WORLD} <= set(tried)


@pytest.mark.parametrize(("name", "env"), single_processes()[3:], ids=lambda v: str(v)[:20])
def test_variables_that_agree_with_a_world_of_one_keep_it(name: str, env: dict[str, str]) -> None:
    # the rule is not a list of names: a fact that says one process agrees
    for launcher, field, variable in facts(env):
        got = outcome({**env, variable: SAME[field]})
        assert not (isinstance(got, SlurmEnvError) and "world of one" in got.message), (
            f"{name} with {variable}={SAME[field]} ({launcher}): {got}")


def test_a_world_of_one_refusal_names_every_launcher_declaring_the_variable() -> None:
    err = refused({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "2950",
                   "SLURM_STEP_NUM_TASKS": "8"})
    assert (err.variable, err.value) == ("SLURM_STEP_NUM_TASKS", "8"), err
    assert "slurm-het or slurm launcher" in err.message, err


def test_an_srun_task_needs_no_evidence() -> None:
    # the enclosure is looked for only when the worlds disagree: an srun task, with /proc
    # allowed (pytest has no torchrun agent above it), resolves as before
    env = synth.step_env(HOSTS, [4, 4], 5)
    assert outcome(env, enclosure=worldguard.FIND) == (5, 8)


def test_a_dump_of_a_worker_under_its_agent_replays_its_world(tmp_path: pathlib.Path) -> None:
    """``dump`` records the agent the worker ran under (``enclosure``), so the replay, on a
    machine where no such process is its ancestor, gives the recorded world; the same dump
    without that record is refused there, as the task would have been."""
    env = synth.clean_env(PYTHONPATH=str(ROOT), **synth.step_env(
        HOSTS, [1, 1], 1, TORCHELASTIC_RUN_ID="abc", RANK="5", LOCAL_RANK="1", WORLD_SIZE="8",
        LOCAL_WORLD_SIZE="4", GROUP_RANK="1", GROUP_WORLD_SIZE="2", MASTER_ADDR="n1",
        MASTER_PORT="29500"))
    path = tmp_path / "worker.json"
    out = run_under("torchrun", tmp_path, [sys.executable, "-m", "slurmenv", "dump", "-o",
                                           str(path)], env)
    assert out.returncode == 0, out.stderr
    data = json.loads(path.read_text())
    assert data["enclosure"].startswith("torchrun (pid "), data["enclosure"]
    summary = data["resolution"]["summary"]
    assert (summary["rank"], summary["world_size"]) == (5, 8)
    from slurmenv.dump import replay

    res = replay.load(str(path)).resolve()
    assert (res.rank, res.world_size) == (5, 8)
    del data["enclosure"]
    path.write_text(json.dumps(data))
    with pytest.raises(SlurmEnvError) as info:
        replay.load(str(path)).resolve()
    assert info.value.variable == "SLURM_PROCID"
