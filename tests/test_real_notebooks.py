"""Notebooks on the real cluster (issue 22): ipyparallel engines in a Slurm job, a client
script standing in for the notebook (tests/programs/notebook_client.py), which runs in every
engine the cells of docs/frameworks/notebooks.md: ``slurmenv.resolve().apply()``, a gloo
``init_process_group``, an ``all_reduce``, ``destroy_process_group``, twice.

Engines are started three ways, each over 2 nodes x 2: ``srun ipengine`` (in a job where
another step already runs), ipyparallel's Slurm engine launcher (an engine job of its own) and
its MPI launcher (Open MPI 4's ``mpirun``). Engines of two steps are refused by
``slurmenv.notebook.check_engines``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import BatchResult, SlurmCluster

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "notebooks: ipyparallel engines": ("debian", [
        "test_srun_ipengine_in_a_job_where_another_step_runs",
        "test_ipclusters_slurm_engine_launcher",
        "test_ipclusters_mpi_engine_launcher",
        "test_engines_of_two_steps_are_refused",
    ]),
}

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "tests" / "programs" / "notebook_client.py"
PY = sys.executable
ENV = {"PATH": f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
JOB = ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2"]
TIMEOUT = 300.0
PREAMBLE = """#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# mpi4py's wheel (ipyparallel's MPI engines need it) takes Open MPI's ABI from this
export MPI4PY_MPIABI=openmpi
prof=$(mktemp -d /tmp/ipp-XXXXXX)
"""
CONTROLLER = f"""{PY} -m ipyparallel.controller --profile-dir=$prof --ip='*' --location=$(hostname) > $prof/ctl.log 2>&1 &
for i in $(seq 300); do [ -e $prof/security/ipcontroller-engine.json ] && break; sleep 0.2; done
"""


def explain(res: BatchResult) -> str:
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


def run(cluster: SlurmCluster, body: str) -> tuple[BatchResult, list[dict[str, Any]]]:
    pytest.importorskip("ipyparallel")
    res = cluster.sbatch(PREAMBLE + body, JOB, env=ENV, timeout=TIMEOUT)
    results = [json.loads(line[7:]) for line in res.stdout.splitlines()
               if line.startswith("RESULT ")]
    return res, results


def check_two_cells(res: BatchResult, results: list[dict[str, Any]], launcher: str) -> None:
    assert "CLIENT-RC 0" in res.stdout, explain(res)
    for run in (1, 2):
        cell = [r for r in results if r["run"] == run]
        assert sorted(r["rank"] for r in cell) == [0, 1, 2, 3], explain(res)
        assert all(r["sum"] == 10 and r["world"] == 4 for r in cell), explain(res)
        assert {r["launcher"] for r in cell} == {launcher}, explain(res)
        hosts = {r["rank"]: r["host"] for r in cell}
        assert sorted(hosts.values()) == ["r1n09", "r1n09", "r1n10", "r1n10"], explain(res)
        master = {r["master"] for r in cell}
        assert len(master) == 1 and master.pop().split(":")[0] == hosts[0], explain(res)
        for r in cell:  # local ranks number the engines of a node
            same = sorted(o["rank"] for o in cell if o["host"] == r["host"])
            assert r["local_rank"] == same.index(r["rank"]), explain(res)


def test_srun_ipengine_in_a_job_where_another_step_runs(slurm_cluster: SlurmCluster) -> None:
    body = CONTROLLER + f"""srun --overlap -N1 -n1 sleep 250 &
other=$!
srun --overlap --kill-on-bad-exit=1 {PY} -m ipyparallel.engine --profile-dir=$prof > $prof/eng.log 2>&1 &
eng=$!
timeout 240 {PY} {CLIENT} connect $prof 4
echo CLIENT-RC $?
kill $eng $other; kill %1; wait
"""
    res, results = run(slurm_cluster, body)
    check_two_cells(res, results, "slurm")


def test_ipclusters_slurm_engine_launcher(slurm_cluster: SlurmCluster) -> None:
    res, results = run(slurm_cluster, f"timeout 240 {PY} {CLIENT} slurm $prof 4\necho CLIENT-RC $?\n")
    check_two_cells(res, results, "slurm")


def test_ipclusters_mpi_engine_launcher(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("mpi4py")
    res, results = run(slurm_cluster, f"timeout 240 {PY} {CLIENT} mpi $prof 4\necho CLIENT-RC $?\n")
    check_two_cells(res, results, "openmpi")


def test_engines_of_two_steps_are_refused(slurm_cluster: SlurmCluster) -> None:
    body = CONTROLLER + f"""srun --overlap -N2 -n2 {PY} -m ipyparallel.engine --profile-dir=$prof > $prof/a.log 2>&1 &
a=$!
srun --overlap -N2 -n2 {PY} -m ipyparallel.engine --profile-dir=$prof > $prof/b.log 2>&1 &
b=$!
timeout 240 {PY} {CLIENT} connect $prof 4
echo CLIENT-RC $?
kill $a $b %1; wait
"""
    res, results = run(slurm_cluster, body)
    assert "CLIENT-RC 3" in res.stdout and results == [], explain(res)
    refused = next(json.loads(line[8:]) for line in res.stdout.splitlines()
                   if line.startswith("REFUSED "))
    assert "belong to 2 launches" in refused["message"], explain(res)
    assert refused["variable"] == "SLURM_STEP_ID"
