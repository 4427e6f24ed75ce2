"""The PALS launcher on the real apinfo files Slurm's ``mpi/cray_shasta`` writes (Slurm 22.05,
the cluster of ``tests/slurm_harness.py``), checked against what Slurm tells each task.

Slurm's cray_shasta plugin is an emulation of HPE PALS: it sets ``PALS_RANKID``,
``PALS_NODEID``, ``PALS_APID``, ``PALS_APINFO`` and ``PMI_CONTROL_PORT`` (not ``PMI_*`` ranks nor
``PALS_LOCAL_*``) and writes an apinfo file of format version 1 in every task. What is proven
here is the apinfo parsing and the PALS launcher on those files, not HPE's ``mpiexec``.

1. For several layouts (uneven default block, cyclic, uneven cyclic, plane, a node subset),
   every task resolves with all ``SLURM_*`` hidden: launcher ``pals``, and rank, local rank,
   sizes, node rank, rank 0's host and the whole TF_CONFIG worker list are where Slurm really
   ran the ranks (``tests/programs/check_pals.py`` parses the file inside the task: Slurm
   removes it when the step ends). With the Slurm variables visible, the same task resolves
   as ``slurm`` (registry order) to the same values, and neither takes ``PMI_CONTROL_PORT``
   (libpals's own port, Slurm's first reserved port) as ``MASTER_PORT``.
2. A heterogeneous step: Slurm's apinfo numbers nodes by sorted name while ``PALS_NODEID``
   follows the components: hidden, the PALS launcher refuses naming ``PALS_NODEID``; visible,
   Slurm's variables resolve it.
3. torch gloo all_reduce over 4 nodes, ``slurmenv export`` run under ``env -u`` for every
   ``SLURM*`` variable.
4. ``PBS_NODEFILE`` written by ``generate_pbs_nodefile`` (Debian's ``slurm-wlm-torque``) as the
   fallback when no apinfo file is named.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster
from test_real_cluster import ENV, PROGRAMS, TIMEOUT, check_torch_step, explain, per_rank

from slurmenv import ports

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "PALS on the apinfo files of Slurm's `mpi/cray_shasta`": ("debian", [
        "test_pals_launcher_on_real_apinfo_files",
        "test_heterogeneous_step_pals_nodeid_is_refused",
        "test_torch_all_reduce_through_pals",
        "test_pbs_nodefile_fallback",
        "test_real_apinfo_fixtures_are_what_slurm_writes_today",
    ]),
}

CHECK_PALS = PROGRAMS / "check_pals.py"
CHECK_TORCH = PROGRAMS / "check_torch.py"
# every variable whose name starts with SLURM (SLURM_*, SLURMD_NODENAME), unset for one command
HIDE_SLURM = 'env $(compgen -e | grep "^SLURM" | sed "s/^/-u /")'

LAYOUTS = {  # name: (srun args, tasks, nodes)
    "default-N4-n8": (["-N4", "-n8"], 8, 4),  # 5,1,1,1
    "cyclic-2-per-node": (["-N4", "--ntasks-per-node=2", "-m", "cyclic"], 8, 4),
    "cyclic-N4-n6": (["-N4", "-n6", "-m", "cyclic"], 6, 4),  # 3,1,1,1
    "plane2-N3-n7": (["-N3", "-n7", "-m", "plane=2"], 7, 3),
    "subset-N2-n3": (["-w", "r2n10,r1n10", "-N2", "-n3"], 3, 2),
}


def run_check(cluster: SlurmCluster, args: list[str]) -> dict[int, dict[str, Any]]:
    res = cluster.srun(
        ["--mpi=cray_shasta", *args], ["python", str(CHECK_PALS)], env=ENV, timeout=TIMEOUT
    )
    assert res.returncode == 0, explain(res)
    return per_rank(res, "PALS")


@pytest.mark.parametrize("name", LAYOUTS)
def test_pals_launcher_on_real_apinfo_files(slurm_cluster: SlurmCluster, name: str) -> None:
    args, ntasks, nnodes = LAYOUTS[name]
    got = run_check(slurm_cluster, args)
    assert sorted(got) == list(range(ntasks)), got
    host_of = {rank: rec["host"] for rank, rec in got.items()}
    ports_seen = set()
    for rank, rec in got.items():
        truth, hidden, full = rec["truth"], rec["hidden"], rec["full"]
        where = f"{name} rank {rank}: {rec}"
        assert "error" not in hidden and "error" not in full, where
        assert (hidden["launcher"], full["launcher"]) == ("pals", "slurm"), where
        env = hidden["env"]
        gtids = truth["SLURM_GTIDS"].split(",")
        assert env["RANK"] == truth["SLURM_PROCID"] == truth["PALS_RANKID"] == str(rank), where
        assert env["LOCAL_RANK"] == truth["SLURM_LOCALID"], where
        assert env["WORLD_SIZE"] == truth["SLURM_STEP_NUM_TASKS"] == str(ntasks), where
        assert env["LOCAL_WORLD_SIZE"] == str(len(gtids)), where
        assert env["NODE_RANK"] == env["GROUP_RANK"] == truth["SLURM_NODEID"], where
        assert env["NNODES"] == truth["SLURM_STEP_NUM_NODES"] == str(nnodes), where
        assert env["MASTER_ADDR"] == host_of[0], where
        assert rec["host"] == truth["SLURMD_NODENAME"], where
        # the whole layout: the worker of every rank is on the node that rank ran on
        assert [w.rsplit(":", 1)[0] for w in hidden["workers"]] == [
            host_of[r] for r in range(ntasks)
        ], where
        assert hidden["node_of"] == full["node_of"] and hidden["hosts"] == full["hosts"], where
        # Slurm's view agrees on everything but the port (Slurm's reserved ports there, the
        # job/step formula from PALS_APID here)
        same = {k: v for k, v in full["env"].items() if k != "MASTER_PORT"}
        assert same == {k: v for k, v in env.items() if k != "MASTER_PORT"}, where
        control = int(truth["PMI_CONTROL_PORT"])
        reserved = ports.parse_port_list(truth["SLURM_STEP_RESV_PORTS"], "SLURM_STEP_RESV_PORTS")
        assert control == reserved[0], where  # cray_shasta hands libpals the first one
        assert int(full["env"]["MASTER_PORT"]) == reserved[1], where  # never libpals's port
        job, step = int(truth["SLURM_JOB_ID"]), int(truth["SLURM_STEP_ID"])
        assert truth["PALS_APID"] == f"{job}.{step}", where
        formula = ports.block_ports(job, step, ports.DEFAULT_RANGE, 1).master
        assert int(env["MASTER_PORT"]) == formula != control, where
        assert "PALS_APINFO" in hidden["sources"]["WORLD_SIZE"], where
        ports_seen.add((env["MASTER_ADDR"], env["MASTER_PORT"], full["env"]["MASTER_PORT"]))
    assert len(ports_seen) == 1, ports_seen


def test_heterogeneous_step_pals_nodeid_is_refused(slurm_cluster: SlurmCluster) -> None:
    cmd = ["python", str(CHECK_PALS)]
    res = slurm_cluster.srun(
        ["--mpi=cray_shasta", "-w", "r2n10", "-N1", "-n1", *cmd, ":", "-w", "r1n09,r1n10",
         "-N2", "-n3"], cmd, env=ENV, timeout=TIMEOUT,
    )  # fmt: skip
    assert res.returncode == 0, explain(res)
    got = per_rank(res, "PALS")
    assert sorted(got) == [0, 1, 2, 3], explain(res)
    # rank 0 runs on r2n10: node index 2 in the file, PALS_NODEID=0 (its component's first)
    assert got[0]["host"] == "r2n10" and got[0]["truth"]["PALS_NODEID"] == "0"
    assert got[0]["hidden"]["variable"] == "PALS_NODEID", got[0]
    for rank, rec in got.items():
        assert rec["full"]["launcher"] == "slurm", rec
        assert rec["full"]["env"]["MASTER_ADDR"] == "r2n10", rec
        assert rec["full"]["env"]["RANK"] == str(rank), rec


def test_torch_all_reduce_through_pals(slurm_cluster: SlurmCluster) -> None:
    script = f"eval $({HIDE_SLURM} slurmenv export --for torch); exec python {CHECK_TORCH}"
    res = slurm_cluster.srun(
        ["--mpi=cray_shasta", "-N4", "-n6", "-m", "cyclic"], ["bash", "-c", script], env=ENV,
        timeout=TIMEOUT,
    )
    got = check_torch_step(res, 6)
    for rec in got.values():
        # the job/step formula (PALS_APID=<job>.<step>), not Slurm's reserved ports: the
        # values came from the PALS launcher, the Slurm variables were hidden
        reserved = ports.parse_port_list(rec["resv"], "SLURM_STEP_RESV_PORTS")
        assert int(rec["env"]["MASTER_PORT"]) not in reserved, rec
        assert rec["env"]["NNODES"] == "4", rec
    # uneven cyclic: ranks 0, 4, 5 share the first node
    assert [got[r]["env"]["LOCAL_RANK"] for r in range(6)] == ["0", "0", "0", "0", "1", "2"]
    assert {got[r]["host"] for r in (0, 4, 5)} == {got[0]["env"]["MASTER_ADDR"]}


NODEFILE_JOB = """#!/bin/bash
export PBS_NODEFILE=$(generate_pbs_nodefile)
echo NODEFILE $(cat $PBS_NODEFILE | tr '\\n' ' ')
# What HPE's mpiexec would set besides what cray_shasta sets, from Slurm's own values; no
# apinfo file named: the PBS_NODEFILE fallback.
srun --label --mpi=cray_shasta bash -c '
  export PMI_SIZE=$SLURM_STEP_NUM_TASKS PALS_LOCAL_RANKID=$SLURM_LOCALID
  export PALS_LOCAL_SIZE=$(echo $SLURM_GTIDS | tr "," "\\n" | wc -l) PBS_JOBID=$SLURM_JOB_ID.pbs
  unset PALS_APINFO
  echo RESOLVED $({HIDE} python -c "import slurmenv; r = slurmenv.resolve(); \\
print(r.launcher, r.rank, r.local_rank, r.world_size, r.local_world_size, r.node_rank, \\
r.nnodes, r.master_addr, r.master_port, r.hostname)") $SLURMD_NODENAME'
"""


@pytest.mark.skipif(shutil.which("generate_pbs_nodefile") is None, reason="slurm-wlm-torque")
def test_pbs_nodefile_fallback(slurm_cluster: SlurmCluster) -> None:
    script = NODEFILE_JOB.replace("{HIDE}", HIDE_SLURM)
    res = slurm_cluster.sbatch(script, ["-N2", "--ntasks-per-node=2"], env=ENV)
    assert res.returncode == 0, explain(res)
    nodefile = next(line for line in res.stdout.splitlines() if line.startswith("NODEFILE"))
    listed = nodefile.split()[1:]
    assert len(listed) == 4 and len(set(listed)) == 2, nodefile  # one line per task slot
    first = listed[0]
    lines = [line.split(": ", 1)[1] for line in res.stdout.splitlines() if "RESOLVED" in line]
    assert len(lines) == 4, explain(res)
    seen = {}
    for line in lines:
        (launcher, rank, local, world, local_world, node, nnodes, addr, port, host,
         slurm_host) = line.split()[1:]  # fmt: skip
        assert (launcher, world, local_world, nnodes, addr) == ("pals", "4", "2", "2", first)
        assert host == slurm_host and int(node) == listed[::2].index(host), line
        seen[int(rank)] = (host, int(local), port)
    assert sorted(seen) == [0, 1, 2, 3] and len({p for _, _, p in seen.values()}) == 1
    assert seen[0][0] == first


#: each fixture of tests/fixtures/pals/ and the srun that recorded it (its NAME.json "command"):
#: args before the command, and args after it (a heterogeneous step's second component)
FIXTURE_STEPS = {
    "default": (["-N4", "-n8"], []),
    "cyc6": (["-N4", "-n6", "-m", "cyclic"], []),
    "plane": (["-N3", "-n7", "-m", "plane=2"], []),
    "het": (["-w", "r2n10", "-N1", "-n1"], [":", "-w", "r1n09,r1n10", "-N2", "-n3"]),
    "mp": (["-N2", "-n4", "--multi-prog"], []),
}


def test_every_apinfo_fixture_is_named() -> None:
    recorded = {path.stem for path in (Path(__file__).parent / "fixtures" / "pals").glob("*.apinfo")}
    assert recorded == set(FIXTURE_STEPS)


@pytest.mark.parametrize("name", list(FIXTURE_STEPS))
def test_real_apinfo_fixtures_are_what_slurm_writes_today(
    slurm_cluster: SlurmCluster, name: str, tmp_path: Path
) -> None:
    """tests/fixtures/pals/NAME.apinfo was recorded from this cluster's Slurm: a step of the
    same shape writes the same bytes, every one of them."""
    fixture = (Path(__file__).parent / "fixtures" / "pals" / f"{name}.apinfo").read_bytes()
    dump = tmp_path / "dump.sh"
    dump.write_text('#!/bin/sh\nif [ "$SLURM_PROCID" = 0 ]; then '
                    'od -An -v -tx1 "$PALS_APINFO" | tr -d " \\n"; echo; fi\n')
    dump.chmod(0o755)
    tmp_path.chmod(0o755)
    before, after = FIXTURE_STEPS[name]
    if name == "mp":  # --multi-prog FILE, with two lines as recorded ('0-1 CMD' then '* CMD')
        programs = tmp_path / "multi.conf"
        programs.write_text(f"0-1 {dump}\n* {dump}\n")
        args, command = ["--mpi=cray_shasta", *before, str(programs)], []
    else:
        args = ["--mpi=cray_shasta", *before]
        command = [str(dump), *after, *([str(dump)] if after else [])]
    res = slurm_cluster.srun(args, command, env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    written = bytes.fromhex("".join(res.per_task[0]))
    assert written == fixture, name