"""What real Slurm tells tasks, checked on a real 4-node cluster: Debian's 22.05.8, and every
release built from source (tests/slurm_releases.py): the same values unless said otherwise.

Plain srun/sbatch, no slurmenv.  Cluster: nodes r1n09 r1n10 r2n09 r2n10 (addresses
10.213.0.2-5), 8 CPUs each, CR_Core, OverSubscribe=YES, MpiParams=ports=12000-12999.

OBSERVED (the tests below assert these values, except those marked "seen"):

In every task: ``hostname`` == ``SLURMD_NODENAME`` == the node name, and node names
resolve (r1n09 -> 10.213.0.2 ... r2n10 -> 10.213.0.5).  ``SLURM_STEP_ID=0`` for a lone
srun.  ``SLURM_GTIDS`` = the step's ranks on this node, ascending, comma separated.
``SLURM_STEP_NODELIST`` = ``r1n[09-10],r2n[09-10]`` for -N4.

layout (srun args)            TASKS_PER_NODE  DISTRIBUTION   rank: node index/LOCALID
-N4 -n8                       5,1(x3)         unset          0:0/0 1:0/1 2:0/2 3:0/3
                                                             4:0/4 5:1/0 6:2/0 7:3/0
-N4 --ntasks-per-node=2       2(x4)           unset          0:0/0 1:0/1 2:1/0 3:1/1
                                                             4:2/0 5:2/1 6:3/0 7:3/1
-N4 --ntasks-per-node=2       2(x4)           cyclic         0:0/0 1:1/0 2:2/0 3:3/0
  -m cyclic                                                  4:0/1 5:1/1 6:2/1 7:3/1
-N4 -n6 -m cyclic             3,1(x3)         cyclic         0:0/0 1:1/0 2:2/0 3:3/0
                                                             4:0/1 5:0/2
-N4 -n8 -m plane=2            5,1(x3)         plane (+       0:0/0 1:0/1 2:1/0 3:2/0
                                              PLANESIZE=2)   4:3/0 5:0/2 6:0/3 7:0/4
-N3 -n5 (STEP_NODELIST        3,1(x2)         unset          0:0/0 1:0/1 2:0/2 3:1/0
  r1n[09-10],r2n09)                                          4:2/0
-N4 --ntasks-per-node=2       3,2(x2),1       plane (3)      0:0/0 1:0/1 2:0/2 3:1/0
  -m plane=3                                                 4:1/1 5:2/0 6:2/1 7:3/0
-N4 -n12 -m plane=4           8,2,1(x2)       plane (4)      0-3:0/0-3 4:1/0 5:1/1
                                                             6:2/0 7:3/0 8-11:0/4-7
-N4 -n8 -m block              5,1(x3)         block          as -N4 -n8
-N4 -n8 -m cyclic             5,1(x3)         cyclic         0:0/0 1:1/0 2:2/0 3:3/0
                                                             4:0/1 5:0/2 6:0/3 7:0/4

So: without -m, SLURM_DISTRIBUTION is unset (even with --ntasks-per-node); the
allocation srun makes for -N4 -n8 is 5,1,1,1 whatever -m says, and -m plane/cyclic
only reorder ranks inside it; -m plane=3 overrides --ntasks-per-node=2 (3,2,2,1; not from 23.11:
2,2,2,2, see CHANGED).
Nothing but SLURM_GTIDS/LOCALID/NODEID tells a task the layout: derive it from them.

Batch script outside srun (sbatch -N4 -n8): runs on r1n09, no SLURM_STEP_ID and no
SLURM_STEP_* at all (26.05: SLURM_STEP_ID=SLURM_STEPID=-5, SLURM_BATCH_SCRIPT printed
signed, and no other SLURM_STEP_*), SLURM_PROCID=0, SLURM_NTASKS=8, SLURM_TASKS_PER_NODE=5,1(x3),
SLURM_JOB_NODELIST=r1n[09-10],r2n[09-10].  Two ``srun --overlap`` in one job: same
SLURM_JOB_ID, SLURM_STEP_ID 0 then 1 (concurrent ones: 0 and 1, in start order).

Ports: with MpiParams=ports set, EVERY step gets SLURM_STEP_RESV_PORTS without asking,
e.g. ``12001-12006`` for -N4 -n8 (count = max tasks per node + 1 = 6); consecutive
steps get consecutive ranges (seen); concurrent steps on one node get disjoint ranges.
``--resv-ports=3`` gives 3 ports; ``--resv-ports=0`` and a bare ``--resv-ports`` (count
0 in 22.05!) give none: the variable is unset.

Heterogeneous step ``srun -N1 -n1 cmd : -N2 -n2 cmd`` (outside an allocation: makes a
het job; needs backfill, hence bf_interval=1, else ~30 s): ranks 0,1,2 on r1n09, r1n10,
r2n09; SLURM_PROCID global, SLURM_NTASKS=3, SLURM_STEP_NODELIST=r1n[09-10],r2n09,
SLURM_STEP_TASKS_PER_NODE=1(x3), SLURM_NODEID 0,1,2, SLURM_HET_SIZE=2 and
SLURM_PACK_SIZE=2, SLURM_DISTRIBUTION=cyclic (set although no -m), per component
SLURM_JOB_ID_PACK_GROUP_0/1 (two job ids), SLURM_JOB_NODELIST_PACK_GROUP_0=r1n09,
SLURM_JOB_NODELIST_PACK_GROUP_1=r1n10,r2n09 (no *_HET_GROUP_* spelling in a step).

GPUs (2 nodes g1n1 g1n2, 4 fake GPUs each): ``-N1 -n2 --gres=gpu:3`` -> every task
CUDA_VISIBLE_DEVICES=0,1,2, SLURM_STEP_GPUS=0,1,2 (also ROCR_VISIBLE_DEVICES and
GPU_DEVICE_ORDINAL=0,1,2, SLURM_GPUS_ON_NODE=3).  ``-N2 --ntasks-per-node=2
--gpus-per-task=1`` -> ranks 0,1,2,3 on g1n1,g1n1,g1n2,g1n2 see 0,1,0,1 (one device
each; SLURM_STEP_GPUS is then the task's own device).  ``-N2 -n4 --gpus-per-task=1``
lays out 3,1: devices 0,1,2 on g1n1 and 0 on g1n2, SLURM_GPUS_ON_NODE 3 and 1.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from slurm_harness import SlurmCluster, SrunResult, _netns_list, release_version

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "what Slurm tells tasks: layouts, the batch script, steps, reserved ports, heterogeneous "
    "steps": ("every", [
        "test_layout", "test_commands_and_tasks_run_the_clusters_release",
        "test_hostname_is_node_name_and_resolves", "test_batch_script_outside_srun",
        "test_two_steps_in_one_job", "test_resv_ports", "test_concurrent_steps_get_distinct_ports",
        "test_heterogeneous_step", "test_stop_leaves_nothing"]),
    "what Slurm tells tasks: fake GPUs (gres)": ("debian+newest", [
        "test_gres_gpu_all_tasks_see_step_gpus", "test_gpus_per_task"]),
}

NODES = ("r1n09", "r1n10", "r2n09", "r2n10")
ALL = "r1n[09-10],r2n[09-10]"
SHOW_ENV = ["sh", "-c", "echo HOSTNAME=$(hostname); env"]

# args -> (rank -> node index, rank -> SLURM_LOCALID, STEP_NODELIST,
#          STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION or None when unset)
LAYOUTS = {
    "N4-n8": (
        ["-N4", "-n8"],
        [0, 0, 0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 0, 0, 0], ALL, "5,1(x3)", None,
    ),
    "N4-npn2": (
        ["-N4", "--ntasks-per-node=2"],
        [0, 0, 1, 1, 2, 2, 3, 3], [0, 1, 0, 1, 0, 1, 0, 1], ALL, "2(x4)", None,
    ),
    "N4-npn2-cyclic": (
        ["-N4", "--ntasks-per-node=2", "-m", "cyclic"],
        [0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 1, 1, 1, 1], ALL, "2(x4)", "cyclic",
    ),
    "N4-n6-cyclic": (
        ["-N4", "-n6", "-m", "cyclic"],
        [0, 1, 2, 3, 0, 0], [0, 0, 0, 0, 1, 2], ALL, "3,1(x3)", "cyclic",
    ),
    "N4-n8-plane2": (
        ["-N4", "-n8", "-m", "plane=2"],
        [0, 0, 1, 2, 3, 0, 0, 0], [0, 1, 0, 0, 0, 2, 3, 4], ALL, "5,1(x3)", "plane",
    ),
    "N3-n5": (
        ["-N3", "-n5"],
        [0, 0, 0, 1, 2], [0, 1, 2, 0, 0], "r1n[09-10],r2n09", "3,1(x2)", None,
    ),
    "N4-npn2-plane3": (  # 22.05: plane wins over --ntasks-per-node: 3,2,2,1 (CHANGED: later)
        ["-N4", "--ntasks-per-node=2", "-m", "plane=3"],
        [0, 0, 0, 1, 1, 2, 2, 3], [0, 1, 2, 0, 1, 0, 1, 0], ALL, "3,2(x2),1", "plane",
    ),
    "N4-n12-plane4": (
        ["-N4", "-n12", "-m", "plane=4"],
        [0, 0, 0, 0, 1, 1, 2, 3, 0, 0, 0, 0], [0, 1, 2, 3, 0, 1, 0, 0, 4, 5, 6, 7],
        ALL, "8,2,1(x2)", "plane",
    ),
    "N4-n8-block": (
        ["-N4", "-n8", "-m", "block"],
        [0, 0, 0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 0, 0, 0], ALL, "5,1(x3)", "block",
    ),
    "N4-n8-cyclic": (
        ["-N4", "-n8", "-m", "cyclic"],
        [0, 1, 2, 3, 0, 0, 0, 0], [0, 0, 0, 0, 1, 2, 3, 4], ALL, "5,1(x3)", "cyclic",
    ),
}  # fmt: skip


def ok(res: SrunResult) -> SrunResult:
    assert res.returncode == 0, res.stderr
    return res


#: what a later release lays out otherwise: (since, layout as in LAYOUTS)
CHANGED = {
    # --ntasks-per-node wins over the plane size: 2,2,2,2, ranks 0,1 on the first node
    # (observed on 23.11.11 and 26.05.3; 22.05 grows the first node to 3)
    "N4-npn2-plane3": ((23, 11), (
        ["-N4", "--ntasks-per-node=2", "-m", "plane=3"],
        [0, 0, 1, 1, 2, 2, 3, 3], [0, 1, 0, 1, 0, 1, 0, 1], ALL, "2(x4)", "plane",
    )),
}  # fmt: skip


def layout_on(release: str | None, name: str) -> tuple[list[str], list[int], list[int], str, str,
                                                       str | None]:
    """LAYOUTS[name] as ``release`` lays it out."""
    since, changed = CHANGED.get(name, ((99,), LAYOUTS[name]))
    return changed if release_version(release) >= since else LAYOUTS[name]


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout(slurm_cluster: SlurmCluster, name: str) -> None:
    args, node_of, local_of, nodelist, tpn, dist = layout_on(slurm_cluster.release, name)
    env = ok(slurm_cluster.srun(args, SHOW_ENV)).per_task_env()
    assert sorted(env) == list(range(len(node_of)))
    for rank, e in env.items():
        node = NODES[node_of[rank]]
        on_node = [r for r, n in enumerate(node_of) if n == node_of[rank]]
        assert e["HOSTNAME"] == node
        assert e["SLURMD_NODENAME"] == node
        assert e["SLURM_PROCID"] == str(rank)
        assert e["SLURM_LOCALID"] == str(local_of[rank])
        assert e["SLURM_NODEID"] == str(node_of[rank])
        assert e["SLURM_STEP_NODELIST"] == nodelist
        assert e["SLURM_STEP_TASKS_PER_NODE"] == tpn
        assert e["SLURM_STEP_NUM_TASKS"] == str(len(node_of))
        assert e["SLURM_GTIDS"] == ",".join(map(str, on_node))
        assert e.get("SLURM_DISTRIBUTION") == dist
        assert e["SLURM_STEP_ID"] == "0"
    if dist == "plane":
        plane = args[-1].removeprefix("plane=")
        assert {e["SLURM_DIST_PLANESIZE"] for e in env.values()} == {plane}


def test_commands_and_tasks_run_the_clusters_release(slurm_cluster: SlurmCluster) -> None:
    """srun, and srun inside a task, are the cluster's release, also where the caller passes a
    PATH of its own (a 22.05 client cannot talk to a 26.05 controller)."""
    version = slurm_cluster.release or "22.05.8"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    outer = slurm_cluster.run(["srun", "--version"], env=env)
    inner = ok(slurm_cluster.srun(["-N1", "-n1"], ["srun", "--version"], env=env))
    assert outer.stdout.split()[-1:] == [version], outer.stdout + outer.stderr
    assert inner.per_task_first[0].split()[-1] == version, inner.stdout


def test_hostname_is_node_name_and_resolves(slurm_cluster: SlurmCluster) -> None:
    script = (
        "import os, socket; h = socket.gethostname(); "
        "print(h, os.environ['SLURMD_NODENAME'], socket.gethostbyname(h), "
        "socket.gethostbyname('r2n10'))"
    )
    res = ok(slurm_cluster.srun(["-N4", "-n4"], ["python3", "-c", script]))
    assert res.per_task_first == {
        0: "r1n09 r1n09 10.213.0.2 10.213.0.5",
        1: "r1n10 r1n10 10.213.0.3 10.213.0.5",
        2: "r2n09 r2n09 10.213.0.4 10.213.0.5",
        3: "r2n10 r2n10 10.213.0.5 10.213.0.5",
    }


def test_batch_script_outside_srun(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.sbatch("#!/bin/sh\nenv\n", ["-N4", "-n8"])
    assert res.returncode == 0, res.stderr
    env = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    if release_version(slurm_cluster.release) >= (26, 5):
        # 26.05: SLURM_BATCH_SCRIPT (0xfffffffb) printed signed, in both spellings
        assert (env["SLURM_STEP_ID"], env["SLURM_STEPID"]) == ("-5", "-5")
        assert [k for k in env if k.startswith("SLURM_STEP_")] == ["SLURM_STEP_ID"]
    else:  # 22.05 to 25.11: neither is set
        assert "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env
        assert [k for k in env if k.startswith("SLURM_STEP_")] == []
    assert env["SLURM_PROCID"] == "0"
    assert env["SLURM_NTASKS"] == "8"
    assert env["SLURM_TASKS_PER_NODE"] == "5,1(x3)"
    assert env["SLURM_JOB_NODELIST"] == ALL
    assert env["SLURMD_NODENAME"] == "r1n09"


def test_two_steps_in_one_job(slurm_cluster: SlurmCluster) -> None:
    step = "srun --overlap -N1 -n1 sh -c 'echo $SLURM_JOB_ID.$SLURM_STEP_ID'\n"
    res = slurm_cluster.sbatch(f"#!/bin/sh\n{step}{step}exit 3\n", ["-N4", "-n8"])
    assert res.returncode == 3
    assert res.stdout.split() == [f"{res.job_id}.0", f"{res.job_id}.1"]


def test_resv_ports(slurm_cluster: SlurmCluster) -> None:
    """MpiParams=ports gives every step ports; --resv-ports needs '=count'."""

    def ports(*args: str) -> set[str | None]:
        res = ok(slurm_cluster.srun(["-N4", "-n8", *args], SHOW_ENV))
        return {e.get("SLURM_STEP_RESV_PORTS") for e in res.per_task_env().values()}

    def count(port_range: str | None) -> int:
        m = re.fullmatch(r"(\d+)-(\d+)", port_range or "")
        assert m, port_range
        lo, hi = int(m.group(1)), int(m.group(2))
        assert 12000 <= lo <= hi <= 12999
        return hi - lo + 1

    (default,) = ports()
    assert count(default) == 6  # max tasks per node (5) + 1
    (three,) = ports("--resv-ports=3")
    assert count(three) == 3
    assert ports("--resv-ports=0") == {None}
    assert ports("--resv-ports") == {None}  # no "=N": count 0, no ports at all


def test_concurrent_steps_get_distinct_ports(slurm_cluster: SlurmCluster) -> None:
    show = "echo $SLURM_STEP_ID $SLURM_STEP_RESV_PORTS; sleep 1"
    step = f"srun --overlap -N1 -n1 sh -c '{show}' &\n"
    res = slurm_cluster.sbatch(f"#!/bin/sh\n{step}{step}wait\n", ["-N1", "-n2"])
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.splitlines())
    assert [line.split()[0] for line in lines] == ["0", "1"]
    assert lines[0].split()[1] != lines[1].split()[1]


def test_heterogeneous_step(slurm_cluster: SlurmCluster) -> None:
    res = ok(slurm_cluster.srun(["-N1", "-n1", *SHOW_ENV, ":", "-N2", "-n2"], SHOW_ENV))
    env = res.per_task_env()
    assert [e["HOSTNAME"] for e in env.values()] == ["r1n09", "r1n10", "r2n09"]
    for rank, e in env.items():
        assert e["SLURM_PROCID"] == str(rank)
        assert e["SLURM_NTASKS"] == "3"
        assert e["SLURM_STEP_NODELIST"] == "r1n[09-10],r2n09"
        assert e["SLURM_STEP_TASKS_PER_NODE"] == "1(x3)"
        assert e["SLURM_HET_SIZE"] == "2"
        assert e["SLURM_PACK_SIZE"] == "2"
        assert e["SLURM_NODEID"] == str(rank)
        assert e["SLURM_DISTRIBUTION"] == "cyclic"
        assert e["SLURM_JOB_ID_PACK_GROUP_0"] == e["SLURM_JOB_ID"]
        assert e["SLURM_JOB_ID_PACK_GROUP_1"] == str(int(e["SLURM_JOB_ID"]) + 1)
        assert e["SLURM_JOB_NODELIST_PACK_GROUP_0"] == "r1n09"
        assert e["SLURM_JOB_NODELIST_PACK_GROUP_1"] == "r1n10,r2n09"
        assert not [k for k in e if "HET_GROUP" in k]


def test_gres_gpu_all_tasks_see_step_gpus(slurm_gpu_cluster: SlurmCluster) -> None:
    res = ok(slurm_gpu_cluster.srun(["-N1", "-n2", "--gres=gpu:3"], SHOW_ENV))
    for e in res.per_task_env().values():
        for var in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "ROCR_VISIBLE_DEVICES"):
            assert e[var] == "0,1,2"
        assert e["GPU_DEVICE_ORDINAL"] == "0,1,2"
        assert e["SLURM_GPUS_ON_NODE"] == "3"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (  # (host, CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS, SLURM_GPUS_ON_NODE) per rank
            ["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"],
            [("g1n1", "0", "0", "2"), ("g1n1", "1", "1", "2"),
             ("g1n2", "0", "0", "2"), ("g1n2", "1", "1", "2")],
        ),
        (  # the default layout is 3,1 here too
            ["-N2", "-n4", "--gpus-per-task=1"],
            [("g1n1", "0", "0", "3"), ("g1n1", "1", "1", "3"),
             ("g1n1", "2", "2", "3"), ("g1n2", "0", "0", "1")],
        ),
    ],
)  # fmt: skip
def test_gpus_per_task(
    slurm_gpu_cluster: SlurmCluster, args: list[str], expected: list[tuple[str, ...]]
) -> None:
    env = ok(slurm_gpu_cluster.srun(args, SHOW_ENV)).per_task_env()
    keys = ("HOSTNAME", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")
    assert [tuple(e[k] for k in keys) for e in env.values()] == expected


def test_stop_leaves_nothing(slurm_cluster: SlurmCluster) -> None:
    """A second cluster beside the session one starts over a leftover namespace of
    a 'crashed' run with the same name; after stop nothing of it remains."""
    cluster = SlurmCluster(nodes=["x1"], release=slurm_cluster.release)
    subprocess.run(["ip", "netns", "add", cluster.ctl_ns], check=True)
    with cluster:
        res = ok(cluster.srun(["-n2"], ["hostname"]))
        assert res.per_task_first == {0: "x1", 1: "x1"}
        tmp, pids = cluster.tmp, [p.pid for p in cluster.procs.values()]
    assert tmp is not None
    assert not tmp.exists()
    assert not [ns for ns in _netns_list() if ns.startswith(cluster.prefix)]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # the session cluster beside it is untouched
    ok(slurm_cluster.srun(["-N4", "-n4"], ["true"]))
