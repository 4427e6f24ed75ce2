"""slurmenv under real MPI launchers on the real cluster (Open MPI 4.1 ``mpirun``, MPICH
``mpiexec.mpich``), through the user's own command lines in a batch script.

Each test submits one batch job of 3 nodes x 2 tasks (``tests/slurm_harness.py`` cluster) and
runs a launch in it, as a user would:

1. torch ``gloo`` all_reduce over 3 nodes through
   ``mpirun … bash -c 'eval $(slurmenv export --for torch); exec python check_torch.py'`` and through
   ``mpirun … slurmenv exec --for torch -- python check_torch.py``, for each mapping where rank 0's node is
   proven: Open MPI's default, ``--map-by node`` and ``--npernode 1``; Hydra's default and
   ``-ppn 1`` (every rank's RANK, LOCAL_RANK, NODE_RANK, ... checked against where it ran);
2. two concurrent ``mpirun`` (and two ``mpiexec``) in one job: different ports, both
   all_reduce while both hold their port; a second ``mpirun`` on the port a live one holds
   (given the same port, or started with a PID that makes its job family draw that port) is
   refused by its rank 0, and the first trains undisturbed;
3. ``srun --mpi=pmi2``: the ranks are Slurm tasks (PMI_RANK agrees with SLURM_PROCID);
4. outside Slurm, ``mpirun -np 4`` on one machine: needs ``--port`` (refused without), works
   with it;
5. ``slurmenv show --all-ranks`` and ``slurmenv doctor`` under ``mpirun``: no crash, and they
   say what is known;
6. ``mpirun --host`` without the batch node (rank 0 elsewhere): rank 0 refuses with the fix
   ``--master-addr``, ``mpirun`` aborts every rank, no all_reduce happens.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import BatchResult, SlurmCluster

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "Debian's Open MPI 4 `mpirun` and MPICH 4 `mpiexec`, `srun --mpi=pmi2`": ("debian", [
        "test_torch_all_reduce_under_mpi",
        "test_two_concurrent_launches_in_one_job",
        "test_a_second_launch_on_a_port_that_a_live_launch_holds_is_refused",
        "test_a_second_mpirun_whose_job_family_draws_the_same_port_is_refused",
        "test_srun_pmi2_ranks_are_slurm_tasks",
        "test_mpirun_outside_slurm_needs_a_port",
        "test_show_and_doctor_under_mpirun",
        "test_host_list_putting_rank_0_elsewhere_is_refused",
    ]),
}

ROOT = Path(__file__).resolve().parent.parent
CHECK_TORCH = ROOT / "tests" / "programs" / "check_torch.py"
PID_LAUNCH = ROOT / "tests" / "programs" / "pid_launch.py"
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
# r1n09 (batch node), r1n10, r2n09; 2 slots each. Named: without -w a node still completing the
# previous job sends this one elsewhere (the batch node then is r1n10), and the checks name them.
JOB = ["-N3", "-w", "r1n[09-10],r2n09", "--ntasks-per-node=2"]
PREAMBLE = """#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
launch() { echo "== LAUNCH $1"; shift; "$@"; echo "== RC $?"; }
"""
EXPORT = f"bash -c 'eval $(slurmenv export --for torch); exec python {CHECK_TORCH}'"
EXEC = f"slurmenv exec --for torch -- python {CHECK_TORCH}"
TIMEOUT = 300.0


def explain(res: BatchResult) -> str:
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


def sbatch(cluster: SlurmCluster, body: str, args: list[str] = JOB) -> BatchResult:
    return cluster.sbatch(PREAMBLE + body, args, env=ENV, timeout=TIMEOUT)


def launches(res: BatchResult) -> dict[str, tuple[int, list[dict[str, Any]], list[str]]]:
    """Launch name -> (mpirun's exit status, the CHECK records, the other output lines)."""
    out: dict[str, tuple[int, list[dict[str, Any]], list[str]]] = {}
    name, checks, lines = None, [], []  # type: ignore[var-annotated]
    for line in res.stdout.splitlines():
        if line.startswith("== LAUNCH "):
            name, checks, lines = line.split()[2], [], []
        elif line.startswith("== RC ") and name:
            out[name] = (int(line.split()[2]), checks, lines)
            name = None
        elif line.startswith("CHECK "):
            checks.append(json.loads(line[6:]))
        else:
            lines.append(line)
    return out


def check_world(got: list[dict[str, Any]], world: int, nnodes: int, rank0_host: str, where: str) -> None:
    """Every rank joined one world with the right sum, and each exported value is where the
    rank really ran."""
    by_rank = {rec["rank"]: rec for rec in got}
    assert sorted(by_rank) == list(range(world)) and len(got) == world, where
    hosts = sorted({rec["host"] for rec in got})
    assert len(hosts) == nnodes, where
    assert by_rank[0]["host"] == rank0_host, where
    node_rank_of: dict[str, str] = {}
    for rank, rec in by_rank.items():
        env = rec["env"]
        assert (rec["world"], rec["sum"]) == (world, world * (world + 1) // 2), where
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == str(world), where
        assert env["MASTER_ADDR"] == rank0_host, where
        on_host = sorted(r for r, other in by_rank.items() if other["host"] == rec["host"])
        assert env["LOCAL_WORLD_SIZE"] == str(len(on_host)), where
        assert env["LOCAL_RANK"] == str(on_host.index(rank)), where
        assert env["NNODES"] == str(nnodes), where
        assert node_rank_of.setdefault(rec["host"], env["NODE_RANK"]) == env["NODE_RANK"], where
    assert node_rank_of[rank0_host] == "0", where
    assert sorted(map(int, node_rank_of.values())) == list(range(nnodes)), where
    assert len({rec["env"]["MASTER_PORT"] for rec in got}) == 1, where


# -- 1. every proven mapping, both command forms ----------------------------------------------
MAPPINGS = {  # name: (launcher command, ranks, nodes holding them)
    "openmpi-default": ("mpirun -np 5", 5, 3),  # by slot: 2,2,1
    "openmpi-map-by-node": ("mpirun --map-by node -np 4", 4, 3),  # 0,3 / 1 / 2
    "openmpi-npernode": ("mpirun --npernode 1 -np 3", 3, 3),
    "hydra-default": ("mpiexec.mpich -n 5", 5, 3),  # fills nodes in order: 2,2,1
    "hydra-ppn": ("mpiexec.mpich -ppn 1 -n 3", 3, 3),
}


@pytest.mark.parametrize("name", MAPPINGS)
def test_torch_all_reduce_under_mpi(slurm_cluster: SlurmCluster, name: str) -> None:
    command, world, nnodes = MAPPINGS[name]
    res = sbatch(slurm_cluster, f"launch export {command} {EXPORT}\nlaunch exec {command} {EXEC}\n")
    got = launches(res)
    for form in ("export", "exec"):
        assert form in got, explain(res)
        rc, checks, _ = got[form]
        assert rc == 0, f"{form}\n{explain(res)}"
        check_world(checks, world, nnodes, "r1n09", f"{form}\n{explain(res)}")


# -- 2. two launches at the same time in one job -----------------------------------------------
PAIR = """echo "JOBID $SLURM_JOB_ID"
meet=$(mktemp -d)
export CHECK_MEET_DIR=$meet CHECK_MEET_COUNT=2 CHECK_TIMEOUT=200
# the launchers' daemon steps share the nodes (srun --overlap): else the second waits for the
# first's CPUs, and the first's rank 0 for the second's
export SLURM_OVERLAP=1
launch a {a} bash -c 'export CHECK_MEET_NAME=a; eval $(slurmenv export --for torch); echo PORT $MASTER_PORT; exec python {check}' > a.out 2>&1 &
launch b {b} bash -c 'export CHECK_MEET_NAME=b; eval $(slurmenv export --for torch); echo PORT $MASTER_PORT; exec python {check}' > b.out 2>&1 &
wait
cat a.out b.out
"""


def _pair(cluster: SlurmCluster, a: str, b: str) -> tuple[BatchResult, dict[str, Any]]:
    res = sbatch(cluster, PAIR.format(a=a, b=b, check=CHECK_TORCH))
    return res, launches(res)


@pytest.mark.parametrize(
    ("launcher", "a", "b"),
    [
        ("openmpi", "mpirun -np 3", "mpirun --map-by node -np 3"),
        ("hydra", "mpiexec.mpich -n 3", "mpiexec.mpich -n 3"),
    ],
)
def test_two_concurrent_launches_in_one_job(
    slurm_cluster: SlurmCluster, launcher: str, a: str, b: str
) -> None:
    res, got = _pair(slurm_cluster, a, b)
    ports = [{line.split()[1] for line in got[x][2] if line.startswith("PORT ")} for x in "ab"]
    # Open MPI: the families of two mpirun draw the same port 1 time in 22,746, and then one
    # rank 0 refuses (the next test); Hydra: proxy steps of their own, never the same port
    assert len(ports[0]) == len(ports[1]) == 1 and ports[0] != ports[1], explain(res)
    if launcher == "openmpi":  # outside the job's own block, where its srun steps' ports are
        job = int(re.search(r"^JOBID (\d+)$", res.stdout, re.MULTILINE).group(1))  # type: ignore[union-attr]
        block = range(10000 + job % 1000 * 22, 10000 + job % 1000 * 22 + 22)
        assert all(int(p) not in block for x in ports for p in x), explain(res)
    for x in "ab":
        rc, checks, _ = got[x]
        assert rc == 0, explain(res)
        assert sorted(rec["rank"] for rec in checks) == [0, 1, 2], explain(res)
        assert all(rec["sum"] == 6 for rec in checks), explain(res)
        rank0 = next(rec for rec in checks if rec["rank"] == 0)
        # both ranks 0 held their MASTER_PORT open at the same time before the all_reduce
        assert rank0["met"] == ["a", "b"], explain(res)
        if launcher == "hydra":  # a second mpiexec may get its proxy step on other nodes
            assert {rec["env"]["MASTER_ADDR"] for rec in checks} == {rank0["host"]}, explain(res)


HOLD = """meet=$(mktemp -d)
export CHECK_MEET_DIR=$meet CHECK_MEET_COUNT=2 CHECK_TIMEOUT=200 SLURM_OVERLAP=1
launch a mpirun -np 3 -x SLURMENV_PORT=23456 bash -c 'export CHECK_MEET_NAME=a; eval $(slurmenv export --for torch); echo PORT $RANK $MASTER_PORT; exec python {check}' > a.out 2>&1 &
# launch a's rank 0 holds MASTER_PORT (it wrote its mark), and waits for a second mark
for i in $(seq 1000); do [ -e "$meet/a" ] && break; sleep 0.2; done
launch b mpirun -np 3 -x SLURMENV_PORT=23456 bash -c 'export CHECK_MEET_NAME=b; eval $(slurmenv export --for torch); echo PORT $RANK $MASTER_PORT; exec python {check}' > b.out 2>&1
touch "$meet/b-done"
wait
cat a.out b.out
"""


def test_a_second_launch_on_a_port_that_a_live_launch_holds_is_refused(
    slurm_cluster: SlurmCluster,
) -> None:
    """Two mpirun of one job given the same port (the same happens when their job families
    draw the same port): the second one's rank 0 finds the first one's rank 0 on its node
    (rivals.py), refuses, and mpirun aborts that launch before any rank trains; the first one
    trains undisturbed."""
    res = sbatch(slurm_cluster, HOLD.format(check=CHECK_TORCH))
    got = launches(res)
    rc, checks, lines = got["b"]
    assert rc != 0 and checks == [], explain(res)
    text = "\n".join(lines)
    assert "another live launch whose rank 0 runs on this node" in text, explain(res)
    assert "variable: SLURMENV_PORT='23456'" in text and "its own port" in text, explain(res)
    assert not [line for line in lines if line.startswith("PORT 0 ")], explain(res)
    rc, checks, _ = got["a"]
    assert rc == 0, explain(res)
    assert sorted(rec["rank"] for rec in checks) == [0, 1, 2], explain(res)
    assert all(rec["sum"] == 6 and rec["env"]["MASTER_PORT"] == "23456" for rec in checks), \
        explain(res)
    rank0 = next(rec for rec in checks if rec["rank"] == 0)
    assert rank0["met"] == ["a", "b-done"], explain(res)


DRAWN = """meet=$(mktemp -d)
export CHECK_MEET_DIR=$meet CHECK_MEET_COUNT=2 CHECK_TIMEOUT=200 SLURM_OVERLAP=1
launch a mpirun -np 3 bash -c 'export CHECK_MEET_NAME=a; eval $(slurmenv export --for torch); echo PORT $RANK $MASTER_PORT; [ "$RANK" = 0 ] && echo FAM $OMPI_MCA_ess_base_jobid $PPID; exec python {check}' > a.out 2>&1 &
for i in $(seq 1000); do [ -e "$meet/a" ] && grep -q '^FAM ' a.out && break; sleep 0.2; done
set -- $(grep '^FAM ' a.out)
launch b python {pid_launch} "$2" "$3" mpirun -np 3 bash -c 'export CHECK_MEET_NAME=b; eval $(slurmenv export --for torch); echo PORT $RANK $MASTER_PORT; exec python {check}' > b.out 2>&1
touch "$meet/b-done"
wait
cat a.out b.out
"""


def test_a_second_mpirun_whose_job_family_draws_the_same_port_is_refused(
    slurm_cluster: SlurmCluster,
) -> None:
    """A real collision of two Open MPI job families: the second ``mpirun`` is started with a
    PID chosen so that its family (made from the node's name and mpirun's PID) equals the
    first one's modulo the 22,746 ports outside the job's block (tests/programs/pid_launch.py).
    Its rank 0 sees the first launch's rank 0 on the node holding that port, and refuses."""
    res = sbatch(slurm_cluster, DRAWN.format(check=CHECK_TORCH, pid_launch=PID_LAUNCH))
    got = launches(res)
    rc, checks, lines = got["b"]
    text = "\n".join(lines)
    started = [line for line in lines if line.startswith("PIDLAUNCH pid=")]
    assert len(started) == 1, explain(res)
    expected_family = int(started[0].split("family=")[1].split()[0])
    jobid_a = int(next(line.split()[1] for line in got["a"][2] if line.startswith("FAM ")))
    assert rc != 0 and checks == [], explain(res)
    assert "another live launch whose rank 0 runs on this node" in text, explain(res)
    assert "variable: MASTER_PORT=" in text, explain(res)
    drawn = re.search(r"their launch IDs OMPI_MCA_ess_base_jobid=(\d+) and (\d+) draw the same "
                      r"port", text)
    assert drawn and int(drawn.group(2)) == jobid_a, explain(res)
    jobid_b = int(drawn.group(1))
    # Open MPI made the family the PID was chosen for (from the node's name and mpirun's PID)
    assert jobid_b >> 16 == expected_family != jobid_a >> 16, explain(res)
    assert (jobid_b >> 16) % 22746 == (jobid_a >> 16) % 22746, explain(res)
    rc, checks, _ = got["a"]
    assert rc == 0 and sorted(rec["rank"] for rec in checks) == [0, 1, 2], explain(res)
    assert all(rec["sum"] == 6 for rec in checks), explain(res)


# -- 3. srun --mpi=pmi2 ranks are Slurm tasks ---------------------------------------------------
def test_srun_pmi2_ranks_are_slurm_tasks(slurm_cluster: SlurmCluster) -> None:
    res = sbatch(
        slurm_cluster,
        f"launch pmi2 srun --mpi=pmi2 -n 5 bash -c 'eval $(slurmenv export --for torch); echo PMI $PMI_RANK "
        f"$SLURM_PROCID; slurmenv show --for torch | head -1; exec python {CHECK_TORCH}'\n",
    )
    got = launches(res)
    rc, checks, lines = got["pmi2"]
    assert rc == 0, explain(res)
    check_world(checks, 5, 3, "r1n09", explain(res))
    pmi = [line.split()[1:] for line in lines if line.startswith("PMI ")]
    assert len(pmi) == 5 and all(a == b for a, b in pmi), explain(res)
    launchers = [line for line in lines if line.startswith("launcher: ")]
    assert len(launchers) == 5, explain(res)
    assert all(line.startswith("launcher: slurm (job ") for line in launchers), explain(res)


# -- 4. outside Slurm, one machine -------------------------------------------------------------
def test_mpirun_outside_slurm_needs_a_port(slurm_cluster: SlurmCluster) -> None:
    env = {**ENV, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    # the controller namespace: no Slurm job, one machine; 2 CPUs, so --oversubscribe
    mpirun = ["mpirun", "--oversubscribe", "-np", "4"]
    refused = slurm_cluster.run([*mpirun, "bash", "-c", EXPORT.split(" ", 2)[2][1:-1]],
                                env=env, timeout=TIMEOUT)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "MASTER_PORT cannot be derived" in refused.stderr and "--port" in refused.stderr
    assert "CHECK " not in refused.stdout
    ok = slurm_cluster.run([*mpirun, "-x", "SLURMENV_PORT=23456", "slurmenv", "exec", "--for", "torch", "--",
                            "python", str(CHECK_TORCH)], env=env, timeout=TIMEOUT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    checks = [json.loads(line[6:]) for line in ok.stdout.splitlines() if line.startswith("CHECK ")]
    assert sorted(rec["rank"] for rec in checks) == [0, 1, 2, 3], ok.stdout
    for rec in checks:
        assert rec["sum"] == 10 and rec["env"]["MASTER_ADDR"] == "127.0.0.1"
        assert rec["env"]["MASTER_PORT"] == "23456" and rec["env"]["NNODES"] == "1"
        assert rec["env"]["LOCAL_RANK"] == str(rec["rank"])


# -- 5. show and doctor under mpirun -----------------------------------------------------------
def test_show_and_doctor_under_mpirun(slurm_cluster: SlurmCluster) -> None:
    res = sbatch(
        slurm_cluster,
        "launch oneline mpirun -np 4 slurmenv show --one-line\n"
        "launch show mpirun --map-by node -np 2 slurmenv show --for torch\n"
        "launch allranks mpirun -np 4 slurmenv show --all-ranks --for torch\n"
        "launch doctor mpirun --map-by node -np 2 slurmenv doctor\n"
        # two ranks on mpirun's node, which carry the batch script's variables, both refused
        "launch doctorrank mpirun -np 2 -x RANK=7 slurmenv doctor\n"
        "launch tf mpirun -np 2 bash -c 'eval $(slurmenv export); echo RAN'\n",
    )
    got = launches(res)
    assert "Traceback" not in res.stdout + res.stderr, explain(res)
    # one line per rank, with what each rank knows
    rc, _, lines = got["oneline"]
    assert rc == 0, explain(res)
    text = "\n".join(lines)
    for rank in range(4):
        assert f"rank={rank}/4" in text, explain(res)
    assert text.count("master=r1n09:") == 4, explain(res)
    # show: every value with the MPI variable it comes from
    rc, _, lines = got["show"]
    text = "\n".join(lines)
    assert rc == 0 and "OMPI_COMM_WORLD_RANK=0" in text and "OMPI_COMM_WORLD_RANK=1" in text, \
        explain(res)
    assert "OMPI_MCA_orte_num_nodes=2" in text and "Open MPI's daemon step" in text, explain(res)
    # --all-ranks: an MPI launch does not tell the whole layout; it says so, no crash
    rc, _, _ = got["allranks"]
    assert rc != 0 and "--all-ranks needs the whole step's layout" in res.stderr, explain(res)
    # doctor on both nodes: the rank, its origin (Open MPI, not a Slurm task), the counts
    rc, _, lines = got["doctor"]
    text = "\n".join(lines)
    assert "rank 0 of 2" in text and "rank 1 of 2" in text, explain(res)
    assert "Open MPI" in text and "daemon step" in text, explain(res)
    # doctor of refused ranks on mpirun's node: the launcher's refusal, not "outside any step"
    rc, _, lines = got["doctorrank"]
    text = "\n".join(lines)
    assert rc != 0 and text.count("RANK=7 is already set") == 2, explain(res)
    assert "outside any job step" not in text and "outside any step" not in text, explain(res)
    # TF_CONFIG cannot be built under mpirun: the plain export is refused, the command stops
    rc, _, lines = got["tf"]
    assert rc != 0 and "RAN" not in lines, explain(res)
    assert "--for torch" in res.stderr, explain(res)


# -- 6. rank 0 elsewhere: refused ---------------------------------------------------------------
def test_host_list_putting_rank_0_elsewhere_is_refused(slurm_cluster: SlurmCluster) -> None:
    """From the batch node r1n09, ``--host r1n10:2,r2n09:2`` puts rank 0 on r1n10."""
    res = sbatch(
        slurm_cluster,
        f"launch host mpirun --host r1n10:2,r2n09:2 -np 4 {EXPORT}\n"
        f"launch hostexec mpirun --host r1n10:2,r2n09:2 -np 4 {EXEC}\n",
    )
    got = launches(res)
    for form in ("host", "hostexec"):
        rc, checks, _ = got[form]
        assert rc != 0 and checks == [], explain(res)
    assert "rank 0 runs on SLURMD_NODENAME=r1n10, not on r1n09" in res.stderr, explain(res)
    assert "--master-addr" in res.stderr, explain(res)
