"""slurmenv through Slurm's task prolog on the real cluster (issue 20): no eval, no shell.

``srun --task-prolog=slurmenv-task-prolog CMD`` sets in every task exactly what
``eval "$(slurmenv export)"`` sets, with the same values; a torch gloo all_reduce over 3 nodes
runs ``python`` directly; a refusal kills every task before it starts and the user sees why.
The site-wide form (``TaskProlog=slurmenv-site-prolog`` in slurm.conf, a cluster of its own)
acts only in jobs that set ``SLURMENV=1`` and leaves every other job untouched.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster, SrunResult

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PROLOG = f"--task-prolog={BIN / 'slurmenv-task-prolog'}"
CHECK_TORCH = ROOT / "tests" / "programs" / "check_torch.py"
ENV = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
TIMEOUT = 180.0
GUARD = "SHOULD-NOT-RUN"
NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
         "NNODES", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "OMP_NUM_THREADS")
# In each task: what the prolog set, then what `slurmenv export --format json` computes there
# with those values removed (as a task without the prolog would see it).
COMPARE = [sys.executable, "-c", (
    "import json, os, subprocess, sys\n"
    f"names = {NAMES!r}\n"
    "got = {n: os.environ.get(n) for n in names}\n"
    "clean = {k: v for k, v in os.environ.items() if k not in names}\n"
    "out = subprocess.run(['slurmenv', 'export', '--format', 'json'], env=clean, "
    "capture_output=True, text=True)\n"
    "print('TASK ' + json.dumps({'got': got, 'export': json.loads(out.stdout or 'null'), "
    "'err': out.stderr}))\n"
)]


def explain(res: SrunResult) -> str:
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


def tasks(res: SrunResult) -> dict[int, dict[str, Any]]:
    return {rank: json.loads(lines[0][5:]) for rank, lines in res.per_task.items()
            if lines and lines[0].startswith("TASK ")}


@pytest.mark.parametrize("layout", [[], ["-m", "cyclic"], ["-m", "plane=2"]],
                         ids=["block", "cyclic", "plane"])
def test_the_prolog_sets_exactly_what_export_sets(
    slurm_cluster: SlurmCluster, layout: list[str]
) -> None:
    res = slurm_cluster.srun(["-N3", "-n6", "-w", "r1n[09-10],r2n09", PROLOG, *layout], COMPARE,
                             env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    got = tasks(res)
    assert sorted(got) == list(range(6)), explain(res)
    for rank, rec in got.items():
        export = rec["export"]
        assert export is not None, rec["err"]
        assert rec["got"]["RANK"] == str(rank)
        # every variable export sets, with the same value; nothing of NAMES that it does not
        assert {n: v for n, v in rec["got"].items() if v is not None} == \
            {n: v for n, v in export.items() if n in NAMES}, (rank, rec)


def test_a_torch_all_reduce_over_three_nodes_with_no_shell(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(
        ["-N3", "--ntasks-per-node=2", "-w", "r1n[09-10],r2n09", "-m", "cyclic", PROLOG],
        [sys.executable, str(CHECK_TORCH)], env={**ENV, "SLURMENV_FOR": "torch"},
        timeout=TIMEOUT,
    )
    assert res.returncode == 0, explain(res)
    checks = [json.loads(lines[0][6:]) for lines in res.per_task.values()
              if lines and lines[0].startswith("CHECK ")]
    assert sorted(c["rank"] for c in checks) == list(range(6)), explain(res)
    assert all(c["sum"] == 21 and c["world"] == 6 for c in checks), explain(res)
    assert {c["env"]["MASTER_ADDR"] for c in checks} == {"r1n09"}, explain(res)
    # cyclic: rank r on node r % 3 (Slurm's layout for 2 tasks on each of 3 nodes)
    assert all(c["host"] == ["r1n09", "r1n10", "r2n09"][c["rank"] % 3] for c in checks), \
        explain(res)


def test_a_refusal_kills_every_task_and_says_why(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(["-N2", "-n4", PROLOG], ["echo", GUARD],
                             env={**ENV, "SLURMENV_PORT": "bogus"}, timeout=TIMEOUT)
    assert res.returncode != 0 and GUARD not in res.stdout, explain(res)
    for rank in range(4):
        lines = res.per_task.get(rank, [])
        assert any("slurmenv: error: not a usable TCP port" in line for line in lines), \
            explain(res)
        assert any("SLURMENV_PORT='bogus'" in line for line in lines), explain(res)
    assert "task-prolog failed status=1" in res.stderr, explain(res)


def test_a_heterogeneous_step_and_pmi2_ranks(slurm_cluster: SlurmCluster) -> None:
    het = slurm_cluster.srun(["-N1", "-n1", "-w", "r1n09", PROLOG, *COMPARE, ":",
                              "-N2", "-n2", "-w", "r1n10,r2n09", PROLOG], COMPARE, env=ENV,
                             timeout=TIMEOUT)
    assert het.returncode == 0, explain(het)
    got = tasks(het)
    assert sorted(got) == [0, 1, 2], explain(het)
    for rank, rec in got.items():
        assert rec["got"]["RANK"] == str(rank) and rec["got"]["WORLD_SIZE"] == "3"
        assert {n: v for n, v in rec["got"].items() if v is not None} == \
            {n: v for n, v in rec["export"].items() if n in NAMES}, (rank, rec)
    pmi2 = slurm_cluster.srun(["-N2", "-n4", "--mpi=pmi2", PROLOG], COMPARE, env=ENV,
                              timeout=TIMEOUT)
    assert pmi2.returncode == 0, explain(pmi2)
    got = tasks(pmi2)
    assert sorted(int(rec["got"]["RANK"]) for rec in got.values()) == [0, 1, 2, 3]
    for rec in got.values():
        assert {n: v for n, v in rec["got"].items() if v is not None} == \
            {n: v for n, v in rec["export"].items() if n in NAMES}, rec


# -- the site-wide TaskProlog ----------------------------------------------------------------
SHOW = ["bash", "-c", "echo RANK=${RANK-unset} WORLD=${WORLD_SIZE-unset} ADDR=${MASTER_ADDR-unset}"]


def test_site_prolog_acts_only_in_jobs_that_opted_in(slurm_prolog_cluster: SlurmCluster) -> None:
    cluster = slurm_prolog_cluster
    # not opted in: untouched (a stale MASTER_ADDR stays as the user left it)
    plain = cluster.srun(["-N3", "-n3"], SHOW, env={**ENV, "MASTER_ADDR": "stale"},
                         timeout=TIMEOUT)
    assert plain.returncode == 0, explain(plain)
    assert plain.per_task_first == {r: "RANK=unset WORLD=unset ADDR=stale" for r in range(3)}
    # opted in: every task gets its values, and the stale address is replaced
    opted = cluster.srun(["-N3", "-n3"], SHOW, env={**ENV, "SLURMENV": "1",
                                                    "MASTER_ADDR": "stale"}, timeout=TIMEOUT)
    assert opted.returncode == 0, explain(opted)
    assert opted.per_task_first == {r: f"RANK={r} WORLD=3 ADDR=r1n09" for r in range(3)}
    # a job that did not opt in and would be refused is not failed either
    bogus = cluster.srun(["-N1", "-n1"], ["echo", "RAN"], env={**ENV, "SLURMENV_PORT": "x"},
                         timeout=TIMEOUT)
    assert bogus.returncode == 0 and bogus.per_task_first == {0: "RAN"}, explain(bogus)


def test_site_prolog_trains_an_opted_in_batch_job_and_spares_its_batch_step(
    slurm_prolog_cluster: SlurmCluster,
) -> None:
    script = f"""#!/bin/bash
echo "BATCH RANK=${{RANK-unset}}"
srun --label {sys.executable} {CHECK_TORCH}
"""
    res = slurm_prolog_cluster.sbatch(
        script, ["-N3", "--ntasks-per-node=1"],
        env={**ENV, "SLURMENV": "1", "SLURMENV_FOR": "torch"}, timeout=TIMEOUT,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BATCH RANK=unset" in res.stdout  # the batch step: nothing set, nothing failed
    checks = [json.loads(line.split("CHECK ", 1)[1]) for line in res.stdout.splitlines()
              if "CHECK " in line]
    assert sorted(c["rank"] for c in checks) == [0, 1, 2], res.stdout + res.stderr
    assert all(c["sum"] == 6 for c in checks)
