"""slurmenv on a real 4-node Slurm cluster, through the user's own command lines.

The cluster (``tests/slurm_harness.py``: nodes r1n09 r1n10 r2n09 r2n10, each in a network
namespace of its own, ``MpiParams=ports=12000-12999``) is started once per session and Slurm
release: Debian's 22.05, and for the tests ``FEATURES`` declares so, every release built from
source (tests/slurm_releases.py). Each test runs what a user would write in a batch script, such as
``srun -K … bash -c 'env=$(slurmenv export) && eval "$env" && exec python check.py'``, and checks the result
from outside. Frameworks run only where they are what is proven:

1. torch ``gloo`` all_reduce over 4 nodes for the default layout (uneven ``-N4 -n8``: 5,1,1,1),
   ``--ntasks-per-node``, ``-m cyclic`` (uneven, so full nodes are skipped), ``-m plane=2`` and
   ``-N3 -n5`` (``tests/programs/check_torch.py``);
2. TensorFlow ``MultiWorkerMirroredStrategy`` from slurmenv's ``TF_CONFIG``: two workers per
   node, and an uneven cyclic layout (``check_tf.py``);
3. ``srun slurmenv exec -- python …`` and ``srun bin/slurmenv-exec python …`` (both shims);
4. in a batch script, outside ``srun``, slurmenv refuses and nothing after the documented line
   runs; the same line inside ``srun`` works;
5. two concurrent steps of one job with rank 0 on the same node get different ports and both
   all_reduce while both hold their port, with Slurm's reserved ports and with the job/step
   formula (``SLURM_STEP_RESV_PORTS`` removed);
6. without a framework, for every layout of ``test_real_slurm_harness.py`` and for
   heterogeneous steps: all tasks agree on ``MASTER_ADDR``, ``MASTER_PORT`` and the
   ``TF_CONFIG`` cluster, and the layout slurmenv computed (the ``TF_CONFIG`` workers printed by
   the command line, ``hosts``/``node_of``/``local_of`` of the Python API) is where Slurm really
   ran each rank (``hostname``, ``SLURM_LOCALID``);
7. heterogeneous steps (``srun A : B``, ``srun --het-group=0,1`` in a heterogeneous batch
   job) resolve as one world (``slurmenv/launchers/het.py``):
   torch all_reduce across components with rank 0 on a node that is not the first of
   ``SLURM_STEP_NODELIST``; where Slurm does not tell a component's layout (its
   ``SLURM_DISTRIBUTION`` is not the component's: checked here too), ``TF_CONFIG`` is refused
   with the reason and ``--for torch`` still works;
Also: ``-m arbitrary`` with ``SLURM_HOSTFILE`` (rank 0 on the last listed node), and the
interactive step of ``salloc`` (``LaunchParameters=use_interactive_step``: a single process).

8. fake GPUs: without a binding option ``CUDA_VISIBLE_DEVICES`` stays what Slurm set, and
   ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` are right.

No proxy variable and no ``GLOO_SOCKET_IFNAME`` is needed here: node names resolve to the
namespace addresses through the hosts file the harness mounts, and gloo finds its interface
from the host name.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import BatchResult, SlurmCluster, SrunResult, parse_labels, release_version

from slurmenv import ports

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "every layout (block, cyclic, plane, uneven counts): each task's rank, MASTER_ADDR and "
    "TF_CONFIG where Slurm ran it": ("every", ["test_all_tasks_agree_and_layout_is_real"]),
    "`-m arbitrary` with `SLURM_HOSTFILE`": ("every", [
        "test_arbitrary_layout_follows_the_host_file"]),
    "heterogeneous steps and jobs": ("every", [
        "test_heterogeneous_batch_job", "test_heterogeneous_step_distribution_is_not_the_components",
        "test_heterogeneous_step_unknown_layout"]),
    "torch meets through `slurmenv export`, in two concurrent steps of one job on "
    "distinct ports": ("every", ["test_concurrent_steps_get_distinct_ports"]),
    "torch meets, every layout and a heterogeneous step": ("debian", [
        "test_torch_all_reduce", "test_heterogeneous_step_torch"]),
    "TensorFlow meets through `TF_CONFIG`": ("every", [
        "test_tensorflow_multi_worker[two-per-node]"]),
    "TensorFlow meets, an uneven cyclic layout": ("debian", ["test_tensorflow_multi_worker"]),
    "the batch script: refused outside a step, the documented form works": ("every", [
        "test_batch_script_is_refused", "test_batch_script_documented_form_works"]),
    "the interactive step of `salloc`": ("every", ["test_interactive_step_is_a_single_process"]),
    "`slurmenv exec` and the `bin/` shims": ("debian", [
        "test_exec_runs_torch", "test_bin_shims_run_torch"]),
    "fake GPUs: Slurm's device lists left alone": ("debian", [
        "test_gpus_untouched_without_binding"]),
}

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
CHECK_TORCH = PROGRAMS / "check_torch.py"
CHECK_TF = PROGRAMS / "check_tf.py"
CHECK_ENV = PROGRAMS / "check_env.py"
# Tasks run on this machine's file system: put this interpreter's `python`, `python3` and
# `slurmenv` (its console script) first on PATH, as an activated environment would.
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
TIMEOUT = 120.0  # per srun: a framework step takes 5-30 s on 2 cores

# The documented form, single-quoted so that it is evaluated in each task.
EXPORT_THEN = 'env=$(slurmenv export) && eval "$env" && exec python {}'


def explain(res: SrunResult | BatchResult) -> str:
    """What a failing assertion shows: the exit status and every task's output."""
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


def records(lines: Sequence[str], prefix: str) -> list[dict[str, Any]]:
    """The JSON records ``PREFIX {json}`` among one task's output lines.

    srun cuts lines longer than 1024 bytes into several labelled lines: the pieces that follow
    the start of a record are joined back until the JSON parses.
    """
    out: list[dict[str, Any]] = []
    buffer: str | None = None
    for line in lines:
        if buffer is not None:
            buffer += line
        elif line.startswith(prefix + " "):
            buffer = line[len(prefix) + 1 :]
        else:
            continue
        try:
            out.append(json.loads(buffer))
        except ValueError:
            continue  # a piece is still to come
        buffer = None
    return out


def per_rank(res: SrunResult, prefix: str, where: str = "") -> dict[int, dict[str, Any]]:
    """Rank -> that task's single ``PREFIX {json}`` record."""
    found = {rank: records(lines, prefix) for rank, lines in res.per_task.items()}
    found = {rank: recs for rank, recs in found.items() if recs}
    assert all(len(recs) == 1 for recs in found.values()), where + explain(res)
    return {rank: recs[0] for rank, recs in found.items()}


def srun(
    cluster: SlurmCluster, args: Sequence[str], script: str, env: dict[str, str] | None = None
) -> SrunResult:
    """``srun --label -K ARGS bash -c SCRIPT`` on the cluster, this interpreter first on PATH."""
    return cluster.srun(
        ["--kill-on-bad-exit=1", *args], ["bash", "-c", script], env={**ENV, **(env or {})}, timeout=TIMEOUT
    )


def check_torch_step(res: SrunResult, ntasks: int, where: str = "") -> dict[int, dict[str, Any]]:
    """All ``ntasks`` ranks joined one world, all_reduced the right sum, met one master."""
    assert res.returncode == 0, where + explain(res)
    got = per_rank(res, "CHECK", where)
    assert sorted(got) == list(range(ntasks)), where + explain(res)
    for rank, rec in got.items():
        assert (rec["rank"], rec["world"]) == (rank, ntasks), where + explain(res)
        assert rec["sum"] == rec["expected"] == ntasks * (ntasks + 1) // 2, where + explain(res)
        assert rec["env"]["RANK"] == str(rank), where + explain(res)
    masters = {(r["env"]["MASTER_ADDR"], r["env"]["MASTER_PORT"]) for r in got.values()}
    assert masters == {(got[0]["host"], got[0]["env"]["MASTER_PORT"])}, where + explain(res)
    return got


def check_local_ranks(got: dict[int, dict[str, Any]], nnodes: int, where: str) -> None:
    """LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, NNODES against where the ranks really ran."""
    hosts = {rec["host"] for rec in got.values()}
    assert len(hosts) == nnodes, where
    node_rank_of_host: dict[str, str] = {}
    for rank, rec in got.items():
        on_host = sorted(r for r, other in got.items() if other["host"] == rec["host"])
        env = rec["env"]
        assert int(env["LOCAL_WORLD_SIZE"]) == len(on_host), where
        assert int(env["LOCAL_RANK"]) == on_host.index(rank), where
        assert env["NNODES"] == str(nnodes), where
        assert node_rank_of_host.setdefault(rec["host"], env["NODE_RANK"]) == env["NODE_RANK"]
    assert sorted(map(int, node_rank_of_host.values())) == list(range(nnodes)), where


# -- 1. torch.distributed over 4 nodes, for every layout the issue names ------------------------
TORCH_LAYOUTS = {  # name: (srun args, tasks, nodes)
    "default-N4-n8": (["-N4", "-n8"], 8, 4),  # 5,1,1,1: ranks 0-4 on the first node
    "ntasks-per-node-2": (["-N4", "--ntasks-per-node=2"], 8, 4),
    "cyclic-N4-n6": (["-N4", "-n6", "-m", "cyclic"], 6, 4),  # 3,1,1,1: 0,4,5 on the first
    "plane2-N4-n8": (["-N4", "-n8", "-m", "plane=2"], 8, 4),  # 0,1,5,6,7 on the first node
    "N3-n5": (["-N3", "-n5"], 5, 3),
}


@pytest.mark.parametrize("name", TORCH_LAYOUTS)
def test_torch_all_reduce(slurm_cluster: SlurmCluster, name: str) -> None:
    args, ntasks, nnodes = TORCH_LAYOUTS[name]
    res = srun(slurm_cluster, args, EXPORT_THEN.format(CHECK_TORCH))
    got = check_torch_step(res, ntasks)
    check_local_ranks(got, nnodes, explain(res))


# -- 2. TensorFlow MultiWorkerMirroredStrategy from TF_CONFIG ----------------------------------
TF_LAYOUTS = {  # name: (srun args, pairs of ranks on the same node, pairs on different nodes)
    "two-per-node": (["-N2", "--ntasks-per-node=2"], [(0, 1), (2, 3)], [(1, 2)]),
    # Slurm allocates 3,1 here: ranks 0, 2, 3 on the first node, 1 on the second
    "cyclic-uneven": (["-N2", "-n4", "-m", "cyclic"], [(0, 2)], [(0, 1), (1, 2)]),
}


@pytest.mark.parametrize("name", TF_LAYOUTS)
def test_tensorflow_multi_worker(slurm_cluster: SlurmCluster, name: str) -> None:
    args, together, apart = TF_LAYOUTS[name]
    res = srun(slurm_cluster, args, EXPORT_THEN.format(CHECK_TF))
    assert res.returncode == 0, explain(res)
    got = per_rank(res, "CHECK")
    n = 4
    assert sorted(got) == list(range(n)), explain(res)
    clusters = {json.dumps(rec["tf_config"]["cluster"]) for rec in got.values()}
    assert len(clusters) == 1, explain(res)
    workers = got[0]["tf_config"]["cluster"]["worker"]
    for rank, rec in got.items():
        assert rec["index"] == rank and rec["replicas"] == n, explain(res)
        assert rec["sum"] == n * (n + 1) // 2, explain(res)
        assert workers[rank].split(":")[0] == rec["host"], explain(res)
    assert all(got[a]["host"] == got[b]["host"] for a, b in together), explain(res)
    assert all(got[a]["host"] != got[b]["host"] for a, b in apart), explain(res)
    assert len(set(workers)) == n, explain(res)  # distinct ports where a node runs several


# -- 3. slurmenv exec and the bin/ shims --------------------------------------------------------
def test_exec_runs_torch(slurm_cluster: SlurmCluster) -> None:
    command = ["slurmenv", "exec", "--", "python", str(CHECK_TORCH)]
    res = slurm_cluster.srun(["-N2", "-n3"], command, env=ENV, timeout=TIMEOUT)
    check_local_ranks(check_torch_step(res, 3), 2, explain(res))


def test_bin_shims_run_torch(slurm_cluster: SlurmCluster) -> None:
    """bin/slurmenv-exec runs bin/slurmenv (PYTHONPATH, no install needed)."""
    command = [str(ROOT / "bin" / "slurmenv-exec"), "python3", str(CHECK_TORCH)]
    res = slurm_cluster.srun(["-N3", "-n4", "-m", "cyclic"], command, env=ENV, timeout=TIMEOUT)
    check_local_ranks(check_torch_step(res, 4), 3, explain(res))


# -- 4. the batch script, outside srun ---------------------------------------------------------
@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_batch_script_is_refused(slurm_cluster: SlurmCluster, shell: str) -> None:
    script = f"""#!/bin/{shell}
slurmenv exec -- echo EXEC-STARTED
echo "exec status $?"
eval $(slurmenv export)
echo TRAINING-STARTED
"""
    res = slurm_cluster.sbatch(script, ["-N2", "-n4"], env=ENV)
    assert res.returncode == 1, explain(res)
    assert res.stdout.splitlines() == ["exec status 1"], explain(res)
    refusals = [line for line in res.stderr.splitlines() if line.startswith("slurmenv: error:")]
    assert len(refusals) == 2, explain(res)
    assert all("outside any job step" in line for line in refusals), explain(res)
    fixes = [line for line in res.stderr.splitlines() if line.strip().startswith("fix:")]
    assert len(fixes) == 2 and all("srun" in line for line in fixes), explain(res)


def test_batch_script_documented_form_works(slurm_cluster: SlurmCluster) -> None:
    script = """#!/bin/bash
srun --label bash -c 'eval $(slurmenv export); echo TRAINING-STARTED $RANK $WORLD_SIZE $MASTER_ADDR'
srun --label hostname
"""
    res = slurm_cluster.sbatch(script, ["-N2", "-n3"], env=ENV)
    assert res.returncode == 0, explain(res)
    lines = parse_labels(res.stdout)  # per rank: what the step printed, then its host name
    first = lines[0][1]
    assert lines == {r: [f"TRAINING-STARTED {r} 3 {first}", lines[r][1]] for r in range(3)}, (
        explain(res)
    )


# -- 5. two concurrent steps of one job ---------------------------------------------------------
CONCURRENT = """#!/bin/bash
run='env=$(slurmenv export) && eval "$env" && exec python {check}'
pair() {{  # two steps at once on the job's two nodes: both put rank 0 on the first node
  mkdir "$1" && export CHECK_MEET_DIR=$PWD/$1 CHECK_MEET_COUNT=2
  srun --overlap --label -N2 -n2 $2 bash -c "$run" > "$1-a.out" 2>&1 & a=$!
  srun --overlap --label -N2 -n2 $2 bash -c "$run" > "$1-b.out" 2>&1 & b=$!
  wait $a || status=1
  wait $b || status=1
}}
status=0
pair reserved ''
pair formula 'env -u SLURM_STEP_RESV_PORTS'
for f in reserved-a reserved-b formula-a formula-b; do echo "== $f"; cat "$f.out"; done
exit $status
"""


def test_concurrent_steps_get_distinct_ports(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.sbatch(
        CONCURRENT.format(check=CHECK_TORCH), ["-N2", "-n4"], env=ENV, timeout=2 * TIMEOUT
    )
    assert res.returncode == 0, explain(res)
    steps: dict[str, dict[int, dict[str, Any]]] = {}
    for section in res.stdout.split("== ")[1:]:
        name, _, body = section.partition("\n")
        step = SrunResult(0, body, "", parse_labels(body))
        steps[name] = check_torch_step(step, 2, f"step {name}\n")
    assert sorted(steps) == ["formula-a", "formula-b", "reserved-a", "reserved-b"], explain(res)
    for kind in ("reserved", "formula"):
        a, b = steps[f"{kind}-a"][0], steps[f"{kind}-b"][0]
        assert a["host"] == b["host"], explain(res)  # rank 0 of both on one node
        assert a["step"] != b["step"], explain(res)
        assert a["env"]["MASTER_PORT"] != b["env"]["MASTER_PORT"], explain(res)
        # each rank 0 waited, holding its port, until the other step's rank 0 held its own
        assert a["met"] == b["met"] == sorted([f"step-{a['step']}", f"step-{b['step']}"])
        for rec in (a, b):
            port = int(rec["env"]["MASTER_PORT"])
            if kind == "reserved":
                assert port == int(rec["resv"].split("-")[0].split(",")[0]), explain(res)
            else:
                assert rec["resv"] is None, explain(res)
                plan = ports.block_ports(res.job_id, int(rec["step"]), ports.DEFAULT_RANGE, 1)
                assert port == plan.master, explain(res)


# -- 6. every task agrees, and the computed layout is where Slurm ran each rank ----------------
LAYOUTS = {  # name: (srun args, tasks); the layouts of test_real_slurm_harness.py, and more
    "N4-n8": (["-N4", "-n8"], 8),
    "N4-npn2": (["-N4", "--ntasks-per-node=2"], 8),
    "N4-npn2-cyclic": (["-N4", "--ntasks-per-node=2", "-m", "cyclic"], 8),
    "N4-n6-cyclic": (["-N4", "-n6", "-m", "cyclic"], 6),
    "N4-n8-plane2": (["-N4", "-n8", "-m", "plane=2"], 8),
    "N3-n5": (["-N3", "-n5"], 5),
    "N4-npn2-plane3": (["-N4", "--ntasks-per-node=2", "-m", "plane=3"], 8),
    "N4-n12-plane4": (["-N4", "-n12", "-m", "plane=4"], 12),
    "N4-n8-block": (["-N4", "-n8", "-m", "block"], 8),
    "N4-n8-cyclic": (["-N4", "-n8", "-m", "cyclic"], 8),
    "N4-n4": (["-N4", "-n4"], 4),
    # heterogeneous: SLURM_NODEID follows the components, not the (sorted) node list
    "het-rank0-on-r2n10": (["-w", "r2n10", "-n2", ":", "-w", "r1n09,r2n09", "-n2"], 4),
    "het-3-components": (["-N1", "-n1", ":", "-N1", "-n2", ":", "-N2", "-n2"], 5),
}
SHOW = (
    "echo HOST $(hostname); "
    "printf 'EXPORT %s\\n' \"$(slurmenv export --format json | tr -d '\\n')\"; "
    f"exec python {CHECK_ENV}"
)


@pytest.mark.parametrize("name", LAYOUTS)
def test_all_tasks_agree_and_layout_is_real(slurm_cluster: SlurmCluster, name: str) -> None:
    args, ntasks = LAYOUTS[name]
    check_agreement(srun(slurm_cluster, args, SHOW), ntasks)


def test_arbitrary_layout_follows_the_host_file(slurm_cluster: SlurmCluster) -> None:
    """-m arbitrary: rank r runs on line r of SLURM_HOSTFILE, so rank 0 is on r2n10, the last
    node of SLURM_STEP_NODELIST, and MASTER_ADDR must be r2n10."""
    hostfile = slurm_cluster.tmp / "arbitrary-hosts"
    hostfile.write_text("r2n10\nr1n09\nr1n09\nr2n10\nr1n10\n")
    res = srun(slurm_cluster, ["-m", "arbitrary", "-n5"], SHOW,
               env={"SLURM_HOSTFILE": str(hostfile)})
    check_agreement(res, 5)
    exported = per_rank(res, "EXPORT")
    assert exported[0]["MASTER_ADDR"] == "r2n10", explain(res)


def check_agreement(res: SrunResult, ntasks: int) -> None:
    """Every task agrees on the master and the TF cluster, and the layout slurmenv computed
    (command line and API) is where Slurm ran each rank."""
    assert res.returncode == 0, explain(res)
    host = {rank: lines[0].removeprefix("HOST ") for rank, lines in res.per_task.items()}
    exported = per_rank(res, "EXPORT")
    api = per_rank(res, "ENV")
    assert sorted(host) == sorted(exported) == sorted(api) == list(range(ntasks)), explain(res)
    tf = {rank: json.loads(e["TF_CONFIG"]) for rank, e in exported.items()}
    # everyone agrees (command line and API)
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        assert len({e[key] for e in exported.values()}) == 1, explain(res)
    assert len({json.dumps(t["cluster"]) for t in tf.values()}) == 1, explain(res)
    assert len({json.dumps([a["hosts"], a["node_of"], a["local_of"]]) for a in api.values()}) == 1
    workers = tf[0]["cluster"]["worker"]
    hosts, node_of, local_of = api[0]["hosts"], api[0]["node_of"], api[0]["local_of"]
    # ... and it is where Slurm ran each rank
    assert exported[0]["MASTER_ADDR"] == host[0], explain(res)
    for rank in range(ntasks):
        e, a = exported[rank], api[rank]
        assert e["RANK"] == a["slurm"]["PROCID"] == str(rank), explain(res)
        assert e["WORLD_SIZE"] == str(ntasks), explain(res)
        assert tf[rank]["task"] == {"type": "worker", "index": rank}, explain(res)
        assert workers[rank].split(":")[0] == host[rank], explain(res)
        assert hosts[node_of[rank]] == host[rank], explain(res)
        assert str(local_of[rank]) == a["slurm"]["LOCALID"] == e["LOCAL_RANK"], explain(res)
        assert e["NODE_RANK"] == a["slurm"]["NODEID"] == str(node_of[rank]), explain(res)
        assert e["LOCAL_WORLD_SIZE"] == str(list(host.values()).count(host[rank])), explain(res)
        assert a["resolution"]["master_port"] == int(e["MASTER_PORT"]), explain(res)
    assert len(set(workers)) == ntasks, explain(res)  # one port per task on a node


# -- 7. heterogeneous steps ---------------------------------------------------------------------
def test_heterogeneous_step_torch(slurm_cluster: SlurmCluster) -> None:
    """Rank 0 runs on r2n10, the last node of SLURM_STEP_NODELIST (r1n09,r2n[09-10])."""
    args = ["-w", "r2n10", "-n2", ":", "-w", "r1n09,r2n09", "-n2"]
    res = srun(slurm_cluster, args, EXPORT_THEN.format(CHECK_TORCH))
    got = check_torch_step(res, 4)
    assert [got[r]["host"] for r in range(4)] == ["r2n10", "r2n10", "r1n09", "r2n09"]
    check_local_ranks(got, 3, explain(res))


HET_BATCH = """#!/bin/bash
#SBATCH --nodes=1 --ntasks-per-node=2
#SBATCH hetjob
#SBATCH --nodes=2 --ntasks-per-node=1
show='env=$(slurmenv export) && eval "$env" && echo $(hostname) $RANK $WORLD_SIZE $MASTER_ADDR $TF_CONFIG'
echo "== both"; srun --label --het-group=0,1 bash -c "$show"
echo "== one"; srun --label --het-group=1 bash -c "$show"
"""


def test_heterogeneous_batch_job(slurm_cluster: SlurmCluster) -> None:
    """The README's form: srun --het-group=0,1 in a heterogeneous batch job is one world of
    4 ranks; --het-group=1 alone is an ordinary step of 2."""
    res = slurm_cluster.sbatch(HET_BATCH, env=ENV)
    assert res.returncode == 0, explain(res)
    for section, world in zip(res.stdout.split("== ")[1:], (4, 2)):
        lines = parse_labels(section.partition("\n")[2])
        rows = {rank: got[0].split(" ", 4) for rank, got in lines.items()}
        assert sorted(rows) == list(range(world)), explain(res)
        workers = json.loads(rows[0][4])["cluster"]["worker"]
        for rank, (host, env_rank, env_world, master, tf_config) in rows.items():
            assert (env_rank, env_world, master) == (str(rank), str(world), rows[0][0])
            assert json.loads(tf_config)["cluster"]["worker"] == workers, explain(res)
            assert workers[rank].split(":")[0] == host, explain(res)
        if world == 4:
            assert rows[0][0] == rows[1][0] != rows[2][0] != rows[3][0], explain(res)


def test_heterogeneous_step_distribution_is_not_the_components(
    slurm_cluster: SlurmCluster,
) -> None:
    """Why slurmenv does not use SLURM_DISTRIBUTION in a heterogeneous step: what component 0
    (laid out cyclic by -m cyclic) tells its tasks varies from run to run ('block' in some
    runs, 'cyclic' in others), while SLURM_NODEID and SLURM_GTIDS always tell the truth."""
    script = "echo $(hostname) $SLURM_DISTRIBUTION $SLURM_NODEID $SLURM_GTIDS"
    res = srun(slurm_cluster, ["-N2", "-n4", "-m", "cyclic", ":", "-N2", "-n4"], script)
    assert res.returncode == 0, explain(res)
    first = {rank: lines[0].split() for rank, lines in res.per_task.items() if rank < 4}
    assert [first[r][2] for r in range(4)] == ["0", "1", "0", "0"], explain(res)  # cyclic
    assert {first[r][1] for r in range(4)} <= {"block", "cyclic"}, explain(res)
    assert first[0][3] == first[2][3] == first[3][3] == "0,2,3", explain(res)


def test_heterogeneous_step_unknown_layout(slurm_cluster: SlurmCluster) -> None:
    """Component 1 runs 4 tasks on 2 nodes: Slurm does not tell the others how (its
    SLURM_DISTRIBUTION is not reliable), so TF_CONFIG, and with it the default export, is
    refused; the torch variables are exact."""
    script = (
        "echo HOST $(hostname); "
        "echo REFUSED $(slurmenv export 2>&1 >/dev/null | head -n1); "
        "printf 'EXPORT %s\\n' \"$(slurmenv export --for torch --format json | tr -d '\\n')\""
    )
    res = srun(slurm_cluster, ["-N1", "-n2", ":", "-N2", "-n4"], script)
    assert res.returncode == 0, explain(res)
    exported = per_rank(res, "EXPORT")
    assert sorted(exported) == list(range(6)), explain(res)
    host = {rank: lines[0].removeprefix("HOST ") for rank, lines in res.per_task.items()}
    for rank, lines in res.per_task.items():
        assert lines[1].startswith("REFUSED slurmenv: error: the task layout cannot be known: "
                                   "component 1 of this heterogeneous step"), explain(res)
        e = exported[rank]
        assert (e["RANK"], e["WORLD_SIZE"]) == (str(rank), "6"), explain(res)
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == (
            host[0], exported[0]["MASTER_PORT"]), explain(res)
        on_host = sorted(r for r in host if host[r] == host[rank])
        assert e["LOCAL_RANK"] == str(on_host.index(rank)), explain(res)
        assert e["LOCAL_WORLD_SIZE"] == str(len(on_host)), explain(res)
        assert "TF_CONFIG" not in e


# -- 8. GPUs: without a binding option, Slurm's lists stay ------------------------------------
GPU_SHOW = (
    "before=$CUDA_VISIBLE_DEVICES; "
    "test -z \"$(slurmenv export | grep CUDA_VISIBLE_DEVICES)\" || echo EXPORTED-GPUS; "
    "env=$(slurmenv export) && eval \"$env\" && "
    "echo $(hostname) $before $CUDA_VISIBLE_DEVICES $SLURM_LOCALID $LOCAL_RANK $LOCAL_WORLD_SIZE"
)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (  # host, CUDA_VISIBLE_DEVICES before and after, SLURM_LOCALID, LOCAL_RANK, LOCAL_WS
            ["-N2", "--ntasks-per-node=2", "--gres=gpu:4"],
            ["g1n1 0,1,2,3 0,1,2,3 0 0 2", "g1n1 0,1,2,3 0,1,2,3 1 1 2",
             "g1n2 0,1,2,3 0,1,2,3 0 0 2", "g1n2 0,1,2,3 0,1,2,3 1 1 2"],
        ),
        (
            ["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"],
            ["g1n1 0 0 0 0 2", "g1n1 1 1 1 1 2", "g1n2 0 0 0 0 2", "g1n2 1 1 1 1 2"],
        ),
    ],
)  # fmt: skip
def test_gpus_untouched_without_binding(
    slurm_gpu_cluster: SlurmCluster, args: list[str], expected: list[str]
) -> None:
    res = srun(slurm_gpu_cluster, args, GPU_SHOW)
    assert res.returncode == 0, explain(res)
    assert [lines for _, lines in sorted(res.per_task.items())] == [[x] for x in expected], (
        explain(res)
    )


# -- the interactive step --------------------------------------------------------------------
def test_interactive_step_is_a_single_process(slurm_cluster: SlurmCluster) -> None:
    """salloc with LaunchParameters=use_interactive_step opens a shell in step 4294967290 on
    the first node (one task, even for -N2 -n4; 26.05 prints the id signed: -6): slurmenv gives
    it a single-process environment when the job has one task (salloc -N1 -n1), and refuses
    it in a larger job, whose SLURM_NTASKS the step keeps (issue 42: a srun from that shell
    would otherwise train worlds of one), as it refuses that job's batch script."""
    step = "-6" if release_version(slurm_cluster.release) >= (26, 5) else "4294967290"
    typed = (  # the tree's slurmenv first: the interactive shell reads the user's profile
        f"PATH={Path(sys.executable).parent}:$PATH; "
        "echo STEP=$SLURM_STEP_ID; echo NTASKS=$SLURM_NTASKS NODES=$SLURM_JOB_NUM_NODES; "
        "slurmenv export --for torch > /dev/null; echo RC=$?; "
        "slurmenv export --format json --for torch | tr -d '\\n '; echo; exit\n"
    )

    def interactive(*args: str) -> str:
        res = slurm_cluster.run(
            ["script", "-qec", f"salloc {' '.join(args)}", "/dev/null"],  # salloc wants a tty
            env={**ENV, "SHELL": "/bin/bash"}, input=typed, timeout=TIMEOUT,
        )
        out = res.stdout.replace("\r", "")
        assert f"STEP={step}\n" in out, out + res.stderr
        return out + res.stderr

    one = interactive("-N1", "-n1")
    assert "RC=0" in one, one
    line = next(part for part in one.split("\n") if part.startswith('{"RANK"'))
    values = json.loads(line)
    assert (values["RANK"], values["WORLD_SIZE"], values["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
    many = interactive("-N2", "-n4")
    assert "NTASKS=4 NODES=2" in many, many  # the job's, in the interactive step
    assert "RC=1" in many and "SLURM_NTASKS='4'" in many, many


