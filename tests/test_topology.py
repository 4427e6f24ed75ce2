"""Slurm 26.05's topology order (slurmenv/launchers/topology.py) with synthetic steps.

Every task of a step gets the environment Slurm 26.05 gives it (``SLURM_NODEID`` in node-list
order, ranks laid out block by block in topology order, as observed on a real 26.05 cluster:
tests/test_real_topology.py), with ``slurm.conf`` and ``topology.conf`` written to a temporary
folder; what each task resolves is compared with where its ranks really are. Where the order
cannot be known every task refuses, whatever its own node.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError, resolve
from slurmenv.launchers import topology

HOSTS = ["n1", "n2", "n3", "n4"]
TREE2 = "SwitchName=sa Nodes=n2\nSwitchName=sb Nodes=n1\nSwitchName=sc Nodes=n[3-4]\n" \
    "SwitchName=top Switches=sa,sb,sc\n"
SLUID = "s1ABCDEF"  # SLURM_JOB_SLUID: Slurm 26.05 and later


def write_conf(folder: Path, conf: str, topo: str | None = None) -> str:
    (folder / "slurm.conf").write_text(conf)
    if topo is not None:
        (folder / "topology.conf").write_text(topo)
    return str(folder / "slurm.conf")


def slurm_envs(
    hosts: Sequence[str], counts: Sequence[int], order: Sequence[str], **extra: str | None
) -> list[dict[str, str]]:
    """The environment of every task of a block step that Slurm fills in node ``order``
    (host names), ``counts[i]`` tasks on ``hosts[i]`` (list order), in rank order."""
    placed: list[tuple[int, int]] = []  # rank -> (node index in list order, local rank)
    for host in order:
        node = list(hosts).index(host)
        placed.extend((node, local) for local in range(counts[node]))
    envs = []
    for rank, (node, local) in enumerate(placed):
        env = synth.step_env(list(hosts), list(counts), 0, **extra)
        env.update({
            "SLURM_PROCID": str(rank), "SLURM_NODEID": str(node), "SLURM_LOCALID": str(local),
            "SLURMD_NODENAME": hosts[node],
            "SLURM_GTIDS": ",".join(str(r) for r, (n, _) in enumerate(placed) if n == node),
        })
        envs.append(env)
    return envs


def check_right(envs: Sequence[dict[str, str]], order: Sequence[str]) -> None:
    """Every task resolves to where its ranks really are."""
    host_of = [env["SLURMD_NODENAME"] for env in envs]
    assert host_of[0] == order[0]
    for rank, env in enumerate(envs):
        res = resolve(env)
        assert (res.rank, res.master_addr) == (rank, host_of[0])
        assert res.local_rank == int(env["SLURM_LOCALID"])
        assert res.local_world_size == host_of.count(host_of[rank])
        workers = res.tf_config["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == host_of


def refusals(envs: Sequence[dict[str, str]]) -> list[SlurmEnvError]:
    out = []
    for env in envs:
        with pytest.raises(SlurmEnvError) as info:
            resolve(env)
        out.append(info.value)
    return out


@pytest.mark.parametrize("counts", [[2, 2, 2, 2], [1, 1, 1, 1], [2, 2, 2, 1], [3, 1, 1, 1]])
@pytest.mark.parametrize("dist", [None, "block"])
def test_tree_two_levels_out_of_name_order(tmp_path: Path, counts: list[int],
                                           dist: str | None) -> None:
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n", TREE2)
    order = ["n2", "n1", "n3", "n4"]
    envs = slurm_envs(HOSTS, counts, order, distribution=dist, SLURM_JOB_SLUID=SLUID,
                      SLURM_CONF=conf)
    check_right(envs, order)
    assert f"in topology order (topology/tree, {tmp_path}/topology.conf)" in \
        resolve(envs[0]).sources["MASTER_ADDR"]


def test_tree_three_levels(tmp_path: Path) -> None:
    topo = ("SwitchName=l1 Nodes=n4\nSwitchName=l2 Nodes=n1\nSwitchName=m1 Switches=l[1-2]\n"
            "SwitchName=l3 Nodes=n3\nSwitchName=l4 Nodes=n2\nSwitchName=m2 Switches=l[3-4]\n"
            "SwitchName=top Switches=m[1-2]\n")
    conf = write_conf(tmp_path, "SelectType=select/cons_tres\nTopologyPlugin=topology/tree\n",
                      topo)
    order = ["n4", "n1", "n3", "n2"]
    check_right(slurm_envs(HOSTS, [2, 2, 2, 2], order, SLURM_JOB_SLUID=SLUID,
                           SLURM_CONF=conf), order)


def test_block_with_block_sizes(tmp_path: Path) -> None:
    topo = "BlockName=b1 Nodes=n[3-4]\nBlockName=b2 Nodes=n[1-2]\nBlockSizes=2,4\n"
    conf = write_conf(tmp_path, "TopologyPlugin=topology/block\n", topo)
    order = ["n3", "n4", "n1", "n2"]
    check_right(slurm_envs(HOSTS, [2, 2, 2, 2], order, SLURM_JOB_SLUID=SLUID,
                           SLURM_CONF=conf), order)


def test_a_step_over_part_of_the_job_follows_its_own_nodes(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n", TREE2)
    hosts = ["n1", "n2", "n4"]
    order = ["n2", "n1", "n4"]
    check_right(slurm_envs(hosts, [2, 2, 2], order, SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf),
                order)


@pytest.mark.parametrize("dist", ["cyclic", "plane"])
def test_cyclic_and_plane_keep_the_list_order(tmp_path: Path, dist: str) -> None:
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n", TREE2)
    for rank in range(8):
        env = synth.step_env(HOSTS, [2, 2, 2, 2], rank, distribution=dist, plane=2,
                             SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf)
        assert resolve(env).master_addr == "n1"


@pytest.mark.parametrize("conf_text", [
    "TopologyPlugin=topology/tree\nSelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK\n",
    ("SelectType=select/cons_tres\nSelectTypeParameters=cr_core,cr_no_dist_topo_block\n"
     "TopologyPlugin=topology/tree\n"),
    "TopologyPlugin=topology/flat\n",
    "# TopologyPlugin=topology/tree\n",
])
def test_settings_that_keep_the_list_order(tmp_path: Path, conf_text: str) -> None:
    conf = write_conf(tmp_path, conf_text, TREE2)
    check_right(slurm_envs(HOSTS, [2, 2, 2, 2], HOSTS, SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf),
                HOSTS)


def test_switch_as_node_rank_lists_nodes_in_topology_order(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\nTopologyParam=SwitchAsNodeRank\n",
                      TREE2)
    hosts = ["n2", "n1", "n3", "n4"]  # SLURM_STEP_NODELIST=n[2,1,3-4]
    check_right(slurm_envs(hosts, [2, 2, 2, 2], hosts, nodelist="n[2,1,3-4]",
                           SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf), hosts)


def test_before_26_05_nothing_is_read(tmp_path: Path) -> None:
    """Without SLURM_JOB_SLUID (Slurm before 26.05) the list order holds, even with an
    unreadable topology: no file is read."""
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n")  # no topology.conf
    check_right(slurm_envs(HOSTS, [2, 2, 2, 2], HOSTS, SLURM_CONF=conf), HOSTS)


@pytest.mark.parametrize("case", ["no topology.conf", "topology.yaml", "no slurm.conf",
                                  "no SLURM_CONF", "unknown key", "include with %",
                                  "torus", "blank in a node list", "node listed nowhere",
                                  "select/linear"])
def test_unknowable_order_is_refused_by_every_task(tmp_path: Path, case: str) -> None:
    """Every task refuses, also those whose own node holds the same ranks in both orders
    (n3 and n4 here), naming the setting and fixes that work on 26.05."""
    conf_text, topo = "TopologyPlugin=topology/tree\n", TREE2
    extra: dict[str, str | None] = {}
    if case == "no topology.conf":
        topo = None
    elif case == "topology.yaml":
        (tmp_path / "topology.yaml").write_text("- topology: x\n")
    elif case == "unknown key":
        topo = TREE2 + "SwitchName=sd Nodes=n5 Speed=4\n"
    elif case == "include with %":
        conf_text += "Include %c.conf\n"
    elif case == "select/linear":
        conf_text += "SelectType=select/linear\n"
    elif case == "torus":
        conf_text = "TopologyPlugin=topology/torus3d\n"
    elif case == "blank in a node list":
        topo = TREE2.replace("Nodes=n[3-4]", 'Nodes="n3 n4"')
    elif case == "node listed nowhere":  # n1 listed by its NodeHostName, say
        topo = TREE2.replace("Nodes=n1", "Nodes=host1")
    conf = write_conf(tmp_path, conf_text, topo)
    if case == "no slurm.conf":
        conf = str(tmp_path / "missing.conf")
    if case == "no SLURM_CONF":
        extra["SLURM_CONF"] = None
    else:
        extra["SLURM_CONF"] = conf
    envs = slurm_envs(HOSTS, [2, 2, 2, 2], ["n2", "n1", "n3", "n4"], SLURM_JOB_SLUID=SLUID,
                      **extra)
    errors = refusals(envs)
    assert len({str(e) for e in errors}) == 1  # the same refusal in every task
    assert errors[0].variable == "SLURM_CONF"
    assert "-m cyclic" in errors[0].fix and "CR_NO_DIST_TOPO_BLOCK" in errors[0].fix


def test_an_unreadable_topology_names_the_file_and_the_fixes(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n")
    envs = slurm_envs(HOSTS, [1, 1, 1, 1], ["n2", "n1", "n3", "n4"], SLURM_JOB_SLUID=SLUID,
                      SLURM_CONF=conf)
    error = refusals(envs)[3]
    text = str(error)
    assert f"{tmp_path}/topology.conf (topology/tree) cannot be read here" in text
    for fix in ("-m cyclic", "-m plane=N", "-m arbitrary", "CR_NO_DIST_TOPO_BLOCK"):
        assert fix in text


def test_includes_are_followed(tmp_path: Path) -> None:
    (tmp_path / "more.conf").write_text("SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK\n")
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\ninclude more.conf\n", TREE2)
    check_right(slurm_envs(HOSTS, [2, 2, 2, 2], HOSTS, SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf),
                HOSTS)


def test_heterogeneous_steps_under_a_reordering_topology_are_refused(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n", TREE2)
    env = synth.step_env(HOSTS, [1, 1, 1, 1], 0, SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf,
                         SLURM_HET_SIZE="2", SLURM_JOB_NODELIST_HET_GROUP_0="n[1-2]",
                         SLURM_JOB_NODELIST_HET_GROUP_1="n[3-4]")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert "heterogeneous" in str(info.value) and "topology order" in str(info.value)


# -- the order against an independent model ----------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    leaves=st.lists(st.lists(st.sampled_from(HOSTS + ["n5", "n6"]), max_size=3), max_size=5),
    per_node=st.integers(1, 3),
    kind=st.sampled_from(["tree", "block"]),
)
def test_order_matches_a_model(leaves: list[list[str]], per_node: int, kind: str) -> None:
    """Slurm's order as a walk: leaf by leaf (block by block) in file order, each leaf's nodes
    in list order, a node only where it first appears; a node listed nowhere is refused."""
    if kind == "tree":
        text = "".join(f"SwitchName=s{i} Nodes={','.join(leaf)}\n" if leaf
                       else f"SwitchName=s{i}\n" for i, leaf in enumerate(leaves))
        text += "SwitchName=top Switches=" + ",".join(f"s{i}" for i in range(len(leaves))) \
            + "\n" if leaves else "SwitchName=top\n"
    else:
        leaves = leaves or [[]]
        text = "".join(f"BlockName=b{i} Nodes={','.join(leaf)}\n" if leaf
                       else f"BlockName=b{i}\n" for i, leaf in enumerate(leaves))
    seen: list[str] = []
    for leaf in leaves:
        seen.extend(h for h in HOSTS if h in leaf and h not in seen)
    ranks_of = topology.tree_ranks if kind == "tree" else topology.block_ranks
    if len(seen) < len(HOSTS):  # a node of the step listed nowhere: refused
        with pytest.raises(SlurmEnvError):
            ranks_of(text, "t", HOSTS)
        return
    ranks = ranks_of(text, "t", HOSTS)
    got = [HOSTS[i] for i in sorted(range(4), key=lambda i: (ranks[i], i))]
    assert got == seen
    assert per_node  # the counts do not change the order


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("SwitchNameBlockSizesNodes=n1[-2],# \\\n\"'x")),
                    max_size=120))
def test_any_topology_text_is_read_or_refused(text: str) -> None:
    """Whatever topology.conf holds: ranks for every host, or a SlurmEnvError (never another
    exception, never a partial answer)."""
    for ranks_of in (topology.tree_ranks, topology.block_ranks):
        try:
            ranks = ranks_of(text, "t", ["n1", "n2"])
        except SlurmEnvError:
            continue
        assert len(ranks) == 2 and all(isinstance(rank, int) for rank in ranks)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_any_slurm_conf_is_read_or_refused(tmp_path_factory: pytest.TempPathFactory,
                                           text: str) -> None:
    path = tmp_path_factory.mktemp("conf") / "slurm.conf"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        found = topology.read_slurm_conf(str(path))
    except SlurmEnvError:
        return
    assert set(found) <= set(topology.KEYS)


# -- topology.conf as Slurm reads it (issue 41; the grammar: tests/test_slurmconf.py) ----------
@pytest.mark.parametrize("topo", [
    "switchname=sa nodes=n2\nSWITCHNAME=sb NODES=n1\nSwitchName=sc Nodes=n[3-4]\n",  # key case
    'SwitchName=sa Nodes="n2"\nSwitchName = sb  Nodes = n1\nSwitchName=sc Nodes=n[3-4]\n',
    "SwitchName=sa \\\n  Nodes=n2\nSwitchName=sb Nodes=n1 # n3\nSwitchName=sc Nodes=n[3-4]\n",
    "SwitchName=sa Nodes=n9 Nodes=n2\nSwitchName=sb Nodes=n1\nSwitchName=sc Nodes=n3,n4\n",
    "Include\tleaves.conf\nSwitchName=sc Nodes=n[3-4]\n",
])
def test_topology_forms_slurm_reads(tmp_path: Path, topo: str) -> None:
    """Key case, blanks around =, quotes, continuations, comments, a sub-key given twice (the
    last wins), an include beside SLURM_CONF: the order is n2, n1, n3, n4 in every task."""
    (tmp_path / "leaves.conf").write_text("SwitchName=sa Nodes=n2\nSwitchName=sb Nodes=n1\n")
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n", topo)
    order = ["n2", "n1", "n3", "n4"]
    check_right(slurm_envs(HOSTS, [2, 2, 2, 2], order, SLURM_JOB_SLUID=SLUID, SLURM_CONF=conf),
                order)


@pytest.mark.parametrize("bad", ["\xa0", "\u2028", "\x1c", "\x1f", "\x00", "\x85"])
def test_bytes_python_splits_on_are_refused_in_every_task(tmp_path: Path, bad: str) -> None:
    """A byte C does not take for a blank (where Python's str.split() does) would change a
    switch's members: refused in every task, never read either way."""
    conf = write_conf(tmp_path, "TopologyPlugin=topology/tree\n",
                      TREE2.replace("Nodes=n1", f"Nodes=n1{bad}Nodes=n9"))
    envs = slurm_envs(HOSTS, [2, 2, 2, 2], ["n2", "n1", "n3", "n4"], SLURM_JOB_SLUID=SLUID,
                      SLURM_CONF=conf)
    errors = refusals(envs)
    assert len({str(e) for e in errors}) == 1
    assert "--mpi=pmi2" in errors[0].fix
