"""The world guard (issue 36, slurmenv/worldguard.py): a chosen launcher never silences another
source of the world; the prolog's marker is applied before anything is read; every path
(API, export, exec, doctor) refuses the same way.

Each test here is one of the issue's reproducers (they passed on 0.3.0, wrongly).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Mapping

import launcher_contract
import pytest
import synth

import slurmenv
from slurmenv import SlurmEnvError, launchers, worldguard

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
#: A task of a 4-task step (job 4242, step 0), rank 3.
STEP4 = synth.step_env(HOSTS, [1, 1, 1, 1], 3)
HAND = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "23456"}
GUARD = "SHOULD-NOT-RUN"


def cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurmenv", *args],
        env=synth.clean_env(PYTHONPATH=str(ROOT), **env), capture_output=True, text=True,
        timeout=120, check=False,
    )


def refusal(env: Mapping[str, str], **options: object) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, ephemeral_range=None, step_evidence=None, **options)
    return info.value


# -- a chosen launcher silences Slurm -------------------------------------------------------
@pytest.mark.parametrize("how", ["variable", "keyword"])
def test_a_chosen_preset_launcher_cannot_silence_the_step(how: str) -> None:
    env = {**STEP4, **HAND}
    err = refusal({**env, "SLURMENV_LAUNCHER": "preset"}) if how == "variable" \
        else refusal(env, launcher="preset")
    # both sources named, each with its value
    assert (err.variable, err.value) == ("SLURM_PROCID", "3"), err
    assert "RANK=0" in err.message and "SLURM_PROCID=3" in err.message, err
    assert "SLURMENV_LAUNCHER" in (err.fix or "")


def test_a_chosen_k8s_launcher_cannot_silence_the_step() -> None:
    env = {**STEP4, **HAND, "KUBERNETES_SERVICE_HOST": "10.0.0.1", "SLURMENV_LAUNCHER": "k8s"}
    err = refusal(env)
    assert (err.variable, err.value) == ("SLURM_PROCID", "3"), err


def test_export_exec_and_doctor_refuse_the_forced_world() -> None:
    env = {**STEP4, **HAND, "SLURMENV_LAUNCHER": "preset"}
    export = cli(env, "export", "--for", "torch")
    assert export.returncode != 0 and "RANK=" not in export.stdout, export  # the shell guard only
    assert "SLURM_PROCID=3" in export.stderr, export.stderr
    ran = cli(env, "exec", "--", sys.executable, "-c", f"print('{GUARD}')")
    assert ran.returncode != 0 and GUARD not in ran.stdout, ran
    doctor = cli(env, "doctor")
    assert doctor.returncode != 0, doctor
    assert "SLURM_PROCID=3" in doctor.stdout + doctor.stderr
    assert " 0 errors" not in doctor.stdout


def test_a_chosen_slurm_launcher_cannot_silence_a_flux_job() -> None:
    # srun flux start: the broker's SLURM_* (task 1 of a 2-task step) reach every Flux job;
    # SLURMENV_LAUNCHER=slurm set once in the batch script reaches them too
    broker = synth.step_env(HOSTS[:2], [1, 1], 1)
    flux = {"FLUX_TASK_RANK": "3", "FLUX_TASK_LOCAL_ID": "0", "FLUX_JOB_SIZE": "4",
            "FLUX_JOB_NNODES": "4", "FLUX_JOB_ID": "f2Kq4", "SLURMENV_MASTER_ADDR": "r1n09"}
    shell = "flux-shell (pid 7) is an ancestor of this process"
    res = slurmenv.resolve({**broker, **flux}, ephemeral_range=None, step_evidence=None,
                           enclosure=shell)
    assert (res.launcher, res.rank, res.world_size) == ("flux", 3, 4)  # Flux's, as before
    err = refusal({**broker, **flux, "SLURMENV_LAUNCHER": "slurm"}, enclosure=shell)
    assert (err.variable, err.value) == ("FLUX_TASK_RANK", "3"), err
    assert "SLURM_PROCID=1" in err.message


def test_a_chosen_launcher_must_agree_with_the_detected_ones_refusal() -> None:
    # the batch script of a 4-task job declares no world facts, but refuses: a chosen
    # launcher does not silence that either
    script = synth.step_env(HOSTS, [1, 1, 1, 1], 0, SLURM_STEP_ID=None, SLURM_STEPID=None)
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS"):
        script.pop(name)
    err = refusal({**script, **HAND}, launcher="preset")
    assert "slurm-outside-step" in err.message and "refuses this task" in err.message, err
    assert err.variable == "SLURM_STEP_ID"


def test_readings_that_agree_can_be_chosen_between() -> None:
    step = synth.step_env(HOSTS, [2, 2, 2, 2], 5)
    own = slurmenv.resolve(step, ephemeral_range=None)
    hand = {name: str(value) for name, value in own.env("torch").items()}
    chosen = slurmenv.resolve({**step, **hand}, ephemeral_range=None, launcher="preset")
    assert (chosen.launcher, chosen.rank, chosen.world_size) == ("preset", 5, 8)


# -- the prolog's marker before anything is read ----------------------------------------------
def test_the_prolog_marker_outside_slurm_keeps_its_steps_values() -> None:
    # no Slurm job of its own (a scrubbed container): the marker's step is this task's, and
    # its values a whole world (issue 42; before, they were dropped into a world of one)
    kept = {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "1",
            "NODE_RANK": "2", "NNODES": "4", "MASTER_ADDR": "r1n09", "MASTER_PORT": "23456",
            "SLURMENV_SET_BY": "4242.7:RANK,LOCAL_RANK,WORLD_SIZE,LOCAL_WORLD_SIZE,NODE_RANK,"
                               "NNODES,MASTER_ADDR,MASTER_PORT"}
    res = slurmenv.resolve(kept, ephemeral_range=None, step_evidence=None)
    assert (res.rank, res.world_size, res.master_addr) == (2, 4, "r1n09")
    assert sum("kept as that step's values" in note for note in res.notes) == 1, res.notes


# -- the declarations the guard rests on ----------------------------------------------------
def test_world_facts_are_declared_variables_of_task_fields() -> None:
    for name in launchers.REGISTRY:
        module = launchers.load(name)
        assert isinstance(module, launcher_contract.Launcher)
        for field, variable in module.WORLD:
            assert field in worldguard.FIELDS, (name, field)
            assert variable in module.VARIABLES, (name, variable)
        assert (module.WORLD == ()) == (name in launchers.NO_WORLD), name
        later = launchers.REGISTRY[launchers.REGISTRY.index(name) + 1:]
        assert set(module.ENCLOSED_BY) <= set(later), (name, module.ENCLOSED_BY)
        if module.WORLD:  # the guard skips a launcher by its signals: they must hold
            assert name == "slurm" or name in launchers.SIGNALS, name


def test_garbage_in_a_world_fact_is_a_disagreement() -> None:
    env = {**STEP4, "SLURMENV_LAUNCHER": "preset", **HAND, "SLURM_PROCID": "0x3"}
    err = refusal(env)
    assert err.variable in ("SLURM_PROCID", "SLURMENV_LAUNCHER"), err


def test_a_chosen_single_process_default_still_looks_for_a_scrubbed_step() -> None:
    # --launcher local in a --cleanenv container: the /proc evidence still refuses it
    evidence = "slurmstepd: [4242.0] (pid 7) is an ancestor of this process"
    for options in ({}, {"launcher": "local"}):
        with pytest.raises(SlurmEnvError) as info:
            slurmenv.resolve({}, ephemeral_range=None, step_evidence=evidence, **options)
        assert info.value.variable == "SLURM_JOB_ID" and "scrubbed" in info.value.message


def test_the_task_prolog_refuses_the_forced_world() -> None:
    from slurmenv.commands import taskprolog

    status, text = taskprolog.run({**STEP4, **HAND, "SLURMENV_LAUNCHER": "preset"})
    assert status != 0 and "SLURM_PROCID=3" in text, text
    assert "export RANK=0" not in text
