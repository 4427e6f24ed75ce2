"""slurmenv under Slurm 26.05's topology order, on a real 26.05.3 cluster (issue 33).

Slurm 26.05 lays a block or default step's tasks out in topology order under
``topology/tree`` or ``topology/block`` while ``SLURM_STEP_NODELIST`` and ``SLURM_NODEID``
keep name order (docs/topology.md). Each test starts a 4-node cluster ``n1``..``n4`` of the
release built by tests/build_slurm.sh with a topology, runs steps whose every task prints
what Slurm told it, where it really runs and what ``slurmenv export`` exported
(tests/programs/topo_probe.py), and counts the tasks whose ``RANK``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (rank 0's host) or ``TF_CONFIG`` workers (each rank's
host) are wrong: 0 everywhere, with no refusal where the topology file is readable, and a
refusal in every task (none exporting) where it is not.

The clusters come from the module's fixture ``slurm_topology_cluster`` (one running at a
time: asking for another topology stops the previous one); without a built 26.05.3 every test
is skipped with the reason (a failure with ``SLURMENV_REQUIRE_CLUSTER=1``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster, SlurmUnavailable, parse_labels, release_built

pytestmark = pytest.mark.slurm

RELEASE = "26.05.3"
#: what each test proves, on which release (tests/slurm_releases.py: docs/releases.md's table)
FEATURES = {
    "topology/tree (two levels, leaf switches out of name order; three levels; a node on two "
    "leaf switches), topology/block with BlockSizes, SwitchAsNodeRank, BlockAsNodeRank, "
    "CR_NO_DIST_TOPO_BLOCK, slurm.conf forms (blanks around =, Include<TAB>, a partition's "
    "SelectTypeParameters): block, default, one-task-per-node, uneven and partial steps right "
    "in every task": (
        "26.05.3", ["test_block_and_default_steps_are_right_in_every_task",
                    "test_batch_steps_over_part_of_the_jobs_nodes"]),
    "under a topology: cyclic, plane and arbitrary keep their order; an unreadable topology.conf "
    "is refused in every task": (
        "26.05.3", ["test_cyclic_and_plane_keep_name_order",
                    "test_arbitrary_follows_the_host_file_under_a_topology",
                    "test_unreadable_topology_is_refused_in_every_task_and_cyclic_still_works"]),
    "before 26.05: the same out-of-order topology/tree keeps name order, every task right": (
        "23.11.11,24.11.7,25.11.7", ["test_before_26_05_a_topology_keeps_name_order"]),
    "torch meets through slurmenv with rank 0 reordered by the topology": (
        "26.05.3", ["test_torch_meets_through_slurmenv_under_a_reordering_topology"]),
    "26.05's signed step ids: the batch script (-5) and the interactive step (-6)": (
        "26.05.3", ["test_batch_script_step_id_on_26_05", "test_interactive_step_id_on_26_05"]),
}
ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "programs" / "topo_probe.py"
CHECK_TORCH = ROOT / "tests" / "programs" / "check_torch.py"
ENV = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
NODES = ("n1", "n2", "n3", "n4")
# leaf switches out of name order: rank 0 on n2
TREE2 = ("SwitchName=sa Nodes=n2\nSwitchName=sb Nodes=n1\nSwitchName=sc Nodes=n[3-4]\n"
         "SwitchName=top Switches=sa,sb,sc\n")
# three levels, upper switches listed between the leaves: the leaves' file order decides
TREE3 = ("SwitchName=l1 Nodes=n4\nSwitchName=l2 Nodes=n1\nSwitchName=m1 Switches=l[1-2]\n"
         "SwitchName=l3 Nodes=n3\nSwitchName=l4 Nodes=n2\nSwitchName=m2 Switches=l[3-4]\n"
         "SwitchName=top Switches=m[1-2]\n")
# n4 on two leaf switches: the first listing it (sa) decides
MULTI = ("SwitchName=sa Nodes=n[2,4]\nSwitchName=sb Nodes=n[1,4]\nSwitchName=sc Nodes=n3\n"
         "SwitchName=top Switches=sa,sb,sc\n")
BLOCK = "BlockName=b1 Nodes=n[3-4]\nBlockName=b2 Nodes=n[1-2]\nBlockSizes=2,4\n"
TREE = "TopologyPlugin=topology/tree"
NO_DIST = "SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK"
TOPOLOGIES: dict[str, tuple[str, str]] = {  # name: (slurm.conf lines, topology.conf)
    "tree2": (TREE, TREE2),
    "tree3": (TREE, TREE3),
    "multi-homed": (TREE, MULTI),
    "block": ("TopologyPlugin=topology/block", BLOCK),
    "switch-as-node-rank": (f"{TREE}\nTopologyParam=SwitchAsNodeRank", TREE2),
    "block-as-node-rank": ("TopologyPlugin=topology/block\nTopologyParam=BlockAsNodeRank", BLOCK),
    "no-dist-topo-block": (f"{TREE}\n{NO_DIST}", TREE2),
    # issue 41: forms Slurm reads that slurmenv 0.5.0 read otherwise (a split each)
    "blanks-around-equals": ("TopologyPlugin = topology/tree", TREE2),
    "include-tab": ("Include\t{INCLUDE}", TREE2),
    "partition-select-type-parameters": (
        (f"{TREE}\n{NO_DIST}\nPartitionName=other Nodes=ALL Default=NO "
         "SelectTypeParameters=CR_Socket"), TREE2),
}
#: What {INCLUDE} in a slurm.conf line above names: a file holding this.
INCLUDED = "TopologyPlugin=topology/tree\n"
#: The node order Slurm 26.05 fills a 4-node block step in, observed.
ORDER = {"tree2": ["n2", "n1", "n3", "n4"], "tree3": ["n4", "n1", "n3", "n2"],
         "block": ["n3", "n4", "n1", "n2"], "multi-homed": ["n2", "n4", "n1", "n3"], "switch-as-node-rank": ["n2", "n1", "n3", "n4"],
         "block-as-node-rank": ["n3", "n4", "n1", "n2"],
         "no-dist-topo-block": ["n1", "n2", "n3", "n4"],
         "blanks-around-equals": ["n2", "n1", "n3", "n4"], "include-tab": ["n2", "n1", "n3", "n4"],
         "partition-select-type-parameters": ["n1", "n2", "n3", "n4"]}
#: Steps of a 4-node allocation (srun allocates it): block and default, one task per node,
#: uneven counts.
STEPS = (["-N4", "--ntasks-per-node=2"], ["-N4", "-n4"], ["-N4", "--ntasks-per-node=1"],
         ["-N4", "-n7"], ["-N4", "-n8", "-m", "block"], ["-N4", "-n5", "-m", "block:cyclic"])
#: Steps of a 4-node batch job over part of its nodes, and over all of them.
BATCH_STEPS = ("-N3 -n6", "-N2 -n4", "-N3 -n3", "-N4 -n8", "-N2 -n3", "-n4")


@pytest.fixture(scope="module")
def slurm_topology_cluster(
    slurm_release: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], SlurmCluster]]:
    """``get(name)``: the 26.05.3 cluster with topology ``name`` (TOPOLOGIES), started on
    first use; one runs at a time. ``slurm_release`` is 26.05.3, as FEATURES declares."""
    assert slurm_release == RELEASE, slurm_release
    if not release_built(RELEASE):
        pytest.skip(f"Slurm {RELEASE} is not built (sh tests/build_slurm.sh {RELEASE})")
    running: dict[str, SlurmCluster] = {}

    def get(name: str) -> SlurmCluster:
        if name not in running:
            for other in list(running):
                running.pop(other).stop()
            conf, topo = TOPOLOGIES[name]
            if "{INCLUDE}" in conf:
                included = tmp_path_factory.mktemp("include") / "plugin.conf"
                included.write_text(INCLUDED)
                conf = conf.replace("{INCLUDE}", str(included))
            cluster = SlurmCluster(nodes=NODES, release=RELEASE, extra_conf=conf, topology=topo)
            try:
                cluster.start()
            except SlurmUnavailable as exc:
                pytest.skip(f"real Slurm cluster unavailable: {exc}")
            running[name] = cluster
        return running[name]

    try:
        yield get
    finally:
        for cluster in running.values():
            cluster.stop()


def records(output: str) -> dict[int, dict[str, Any]]:
    """Rank -> the probe's record, from ``srun --label`` output (srun cuts lines longer than
    1024 bytes into several labelled lines: the pieces are joined back until the JSON parses)."""
    out = {}
    for rank, lines in parse_labels(output).items():
        found = []
        buffer: str | None = None
        for line in lines:
            if buffer is not None:
                buffer += line
            elif line.startswith("TOPO "):
                buffer = line[5:]
            else:
                continue
            try:
                found.append(json.loads(buffer))
            except ValueError:
                continue  # a piece is still to come
            buffer = None
        assert len(found) == 1, output
        out[rank] = found[0]
    return out


def wrong_tasks(got: dict[int, dict[str, Any]]) -> list[str]:
    """Every exported value checked against what the tasks really are (hostname,
    SLURM_PROCID): one line per wrong task."""
    host = {int(rec["slurm"]["PROCID"]): rec["hostname"] for rec in got.values()}
    assert sorted(host) == sorted(got) == list(range(len(got)))
    wrong = []
    for rank, rec in sorted(got.items()):
        exported = rec.get("exported")
        if exported is None:
            continue
        mine = sorted(r for r, h in host.items() if h == host[rank])
        workers = json.loads(exported["TF_CONFIG"])["cluster"]["worker"]
        seen = {
            "RANK": (exported["RANK"], str(rank)),
            "LOCAL_RANK": (exported["LOCAL_RANK"], str(mine.index(rank))),
            "LOCAL_WORLD_SIZE": (exported["LOCAL_WORLD_SIZE"], str(len(mine))),
            "MASTER_ADDR": (exported["MASTER_ADDR"], host[0]),
            "TF_CONFIG": ([w.rsplit(":", 1)[0] for w in workers],
                          [host[r] for r in range(len(host))]),
        }
        bad = [name for name, (got_value, real) in seen.items() if got_value != real]
        if bad:
            wrong.append(f"rank {rank} on {host[rank]}: {bad}")
    return wrong


def run_step(cluster: SlurmCluster, args: Sequence[str]) -> dict[int, dict[str, Any]]:
    res = cluster.srun(list(args), ["python3", str(PROBE)], env=ENV, timeout=120)
    assert res.returncode == 0, f"{args}: {res.stderr}\n{res.stdout}"
    return records(res.stdout)


@pytest.mark.parametrize("name", ["tree2", "tree3", "multi-homed", "block", "switch-as-node-rank",
                                  "block-as-node-rank", "no-dist-topo-block",
                                  "blanks-around-equals", "include-tab",
                                  "partition-select-type-parameters"])
def test_block_and_default_steps_are_right_in_every_task(
    slurm_topology_cluster: Callable[[str], SlurmCluster], name: str
) -> None:
    cluster = slurm_topology_cluster(name)
    for args in STEPS:
        got = run_step(cluster, args)
        refused = [rank for rank, rec in got.items() if rec["rc"] != 0]
        assert not refused, f"{name} {args}: {got[refused[0]]['error']}"
        assert wrong_tasks(got) == [], f"{name} {args}"
        if args[:2] == ["-N4", "--ntasks-per-node=2"]:
            hosts = [got[r]["hostname"] for r in range(0, 8, 2)]
            assert hosts == ORDER[name], f"{name}: Slurm's order changed: {hosts}"


def test_before_26_05_a_topology_keeps_name_order(slurm_release: str | None) -> None:
    """23.11 to 25.11 have no topology layout (their source): under the leaf switches out of
    name order that make 26.05 start on n2, rank 0 runs on n1 and every task is right."""
    assert slurm_release is not None and slurm_release != RELEASE, slurm_release
    if not release_built(slurm_release):
        pytest.skip(f"Slurm {slurm_release} is not built (sh tests/build_slurm.sh {slurm_release})")
    conf, topo = TOPOLOGIES["tree2"]
    cluster = SlurmCluster(nodes=NODES, release=slurm_release, extra_conf=conf, topology=topo)
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"real Slurm cluster unavailable: {exc}")
    try:
        for args in STEPS[:3]:
            got = run_step(cluster, args)
            refused = [rank for rank, rec in got.items() if rec["rc"] != 0]
            assert not refused, f"{slurm_release} {args}: {got[refused[0]]['error']}"
            assert wrong_tasks(got) == [], f"{slurm_release} {args}"
            assert got[0]["hostname"] == "n1", f"{slurm_release} {args}: rank 0 on {got[0]}"
    finally:
        cluster.stop()


def test_batch_steps_over_part_of_the_jobs_nodes(
    slurm_topology_cluster: Callable[[str], SlurmCluster]
) -> None:
    cluster = slurm_topology_cluster("tree2")
    script = "#!/bin/sh\n" + "".join(
        f"echo STEP {args}\nsrun --label {args} python3 {PROBE}\n" for args in BATCH_STEPS)
    job = cluster.sbatch(script, ["-N4", "-n8"], env=ENV, timeout=240)
    assert job.returncode == 0, job.stderr + job.stdout
    chunks = job.stdout.split("STEP ")[1:]
    assert len(chunks) == len(BATCH_STEPS), job.stdout
    reordered = 0
    for chunk in chunks:
        args, _, output = chunk.partition("\n")
        got = records(output)
        assert all(rec["rc"] == 0 for rec in got.values()), f"{args}: {output}"
        assert wrong_tasks(got) == [], f"{args}: {output}"
        reordered += got[0]["hostname"] != min({r["hostname"] for r in got.values()},
                                               key=lambda h: int(h[1:]))
    assert reordered, "no step put rank 0 off its first listed node: nothing was proven"


@pytest.mark.parametrize("args", [["-N4", "-n8", "-m", "cyclic"], ["-N4", "-n8", "-m", "plane=2"],
                                  ["-N4", "-n6", "-m", "cyclic"]])
def test_cyclic_and_plane_keep_name_order(
    slurm_topology_cluster: Callable[[str], SlurmCluster], args: list[str]
) -> None:
    got = run_step(slurm_topology_cluster("tree2"), args)
    assert all(rec["rc"] == 0 for rec in got.values())
    assert wrong_tasks(got) == []
    assert got[0]["hostname"] == "n1"


def test_arbitrary_follows_the_host_file_under_a_topology(
    slurm_topology_cluster: Callable[[str], SlurmCluster], tmp_path: Path
) -> None:
    cluster = slurm_topology_cluster("tree2")
    hostfile = tmp_path / "hosts"
    order = ["n4", "n1", "n1", "n3", "n2", "n4"]
    hostfile.write_text("\n".join(order) + "\n")
    res = cluster.srun(["-n6", "-m", "arbitrary"], ["python3", str(PROBE)],
                       env={**ENV, "SLURM_HOSTFILE": str(hostfile)}, timeout=120)
    assert res.returncode == 0, res.stderr
    got = records(res.stdout)
    assert [got[r]["hostname"] for r in range(6)] == order
    assert all(rec["rc"] == 0 for rec in got.values())
    assert wrong_tasks(got) == []


def test_unreadable_topology_is_refused_in_every_task_and_cyclic_still_works(
    slurm_topology_cluster: Callable[[str], SlurmCluster]
) -> None:
    """topology.conf gone from beside SLURM_CONF (slurmctld read it at start): every task of
    a block step refuses, those on n3 and n4 (which hold the same ranks in both orders)
    too, naming the file and fixes; the fix -m cyclic works on 26.05."""
    cluster = slurm_topology_cluster("tree2")
    path = cluster.conf.parent / "topology.conf"
    hidden = path.with_name("topology.conf.hidden")
    path.rename(hidden)
    try:
        got = run_step(cluster, ["-N4", "--ntasks-per-node=2"])
        errors = {rec["error"] for rec in got.values()}
        assert all(rec["rc"] != 0 for rec in got.values()), errors
        assert len(errors) == 1, errors
        text = errors.pop()
        assert f"{path} (topology/tree) cannot be read here" in text
        assert "-m cyclic" in text and "CR_NO_DIST_TOPO_BLOCK" in text
        fixed = run_step(cluster, ["-N4", "--ntasks-per-node=2", "-m", "cyclic"])
        assert all(rec["rc"] == 0 for rec in fixed.values())
        assert wrong_tasks(fixed) == []
    finally:
        hidden.rename(path)


def test_torch_meets_through_slurmenv_under_a_reordering_topology(
    slurm_topology_cluster: Callable[[str], SlurmCluster]
) -> None:
    pytest.importorskip("torch")
    cluster = slurm_topology_cluster("tree2")
    res = cluster.srun(["-N4", "--ntasks-per-node=2"],
                       ["bash", "-c", f"eval $(slurmenv export); exec python {CHECK_TORCH}"],
                       env=ENV, timeout=180)
    assert res.returncode == 0, res.stderr + res.stdout
    got = {}
    for rank, lines in res.per_task.items():
        found = [json.loads(line[6:]) for line in lines if line.startswith("CHECK ")]
        assert len(found) == 1, res.stdout
        got[rank] = found[0]
    assert sorted(got) == list(range(8))
    assert all(rec["sum"] == rec["expected"] == 36 for rec in got.values())
    assert got[0]["host"] == "n2"  # rank 0 is not on the first listed node
    assert {rec["env"]["MASTER_ADDR"] for rec in got.values()} == {"n2"}


def test_batch_script_step_id_on_26_05(
    slurm_topology_cluster: Callable[[str], SlurmCluster]
) -> None:
    """26.05 sets SLURM_STEP_ID=-5 in the batch script: sbatch -n1 resolves as one process,
    sbatch -N2 -n4 is refused as outside any job step."""
    cluster = slurm_topology_cluster("tree2")
    script = "#!/bin/sh\necho STEP_ID=$SLURM_STEP_ID\nslurmenv export --format json\n"
    one = cluster.sbatch(script, ["-n1"], env=ENV)
    assert "STEP_ID=-5" in one.stdout, one.stdout + one.stderr
    assert one.returncode == 0, one.stdout + one.stderr
    exported = json.loads(one.stdout.split("\n", 1)[1])
    assert (exported["RANK"], exported["WORLD_SIZE"]) == ("0", "1")
    many = cluster.sbatch(script, ["-N2", "-n4"], env=ENV)
    assert many.returncode != 0
    assert "outside any job step" in many.stderr, many.stderr


def test_interactive_step_id_on_26_05(
    slurm_topology_cluster: Callable[[str], SlurmCluster]
) -> None:
    """salloc's interactive step (LaunchParameters=use_interactive_step): 26.05 prints its id
    signed; slurmenv still gives a one-task job's a single-process environment (a larger
    job's is refused: tests/test_real_cluster.py)."""
    cluster = slurm_topology_cluster("tree2")
    typed = (  # the tree's slurmenv first: the interactive shell reads the user's profile
        f"PATH={Path(sys.executable).parent}:$PATH; "
        "echo STEP=$SLURM_STEP_ID; slurmenv export --format json --for torch | tr -d '\\n '; "
        "echo; exit\n"
    )
    res = cluster.run(["script", "-qec", "salloc -N1 -n1", "/dev/null"],
                      env={**ENV, "SHELL": "/bin/bash"}, input=typed, timeout=120)
    out = res.stdout.replace("\r", "")
    assert "STEP=-6" in out, out + res.stderr
    line = next(part for part in out.split("\n") if part.startswith('{"RANK"'))
    values = json.loads(line)
    assert (values["RANK"], values["WORLD_SIZE"], values["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
