"""slurmenv's reading of slurm.conf and topology.conf (slurmenv/launchers/slurmconf.py) against
Slurm's own parser: ``s_p_parse_file`` of the built 26.05.3 ``libslurm.so``, called in this
process (tests/slurm_parser.py), on files generated from the grammar's pieces.

Where slurmenv reads a file, Slurm must read it too and find the same values; where Slurm
refuses it, slurmenv must refuse it. slurmenv may refuse more (non-ASCII bytes, operators, a
quoted value with blanks in a node list): those are counted, never silently different.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import slurm_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError
from slurmenv.launchers import slurmconf, topology

LIB = slurm_parser.library("26.05.3")
needs_slurm = pytest.mark.skipif(LIB is None, reason="Slurm 26.05.3 is not built here "
                                 "(tests/build_slurm.sh)")
PLAIN = ("TopologyPlugin", "TopologyParam", "SelectType", "SelectTypeParameters", "ClusterName")
LINES = {"PartitionName": ("Nodes", "SelectTypeParameters", "Default"),
         "NodeName": ("CPUs", "NodeHostName")}
ANY = settings(max_examples=100, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])

BLANK = st.sampled_from([" ", "\t", "\v", "\f", "\r", "  "])
KEY = st.sampled_from(["TopologyPlugin", "topologyplugin", "TOPOLOGYPLUGIN", "SelectType",
                       "SelectTypeParameters", "selecttypeparameters", "TopologyParam",
                       "PartitionName", "NodeName", "Nodes", "Default", "CPUs"])
VALUE = st.sampled_from(["topology/tree", "topology/block", '"topology/tree"', '"a b"',
                         '"x"y', '""', 'CR_Core,CR_NO_DIST_TOPO_BLOCK', "n[1-4]", "p1",
                         '"CR_Core,CR_NO_DIST_TOPO_BLOCK"', "a\\ b", "a\\#b", '"q', "4",
                         "select/cons_tres", "SwitchAsNodeRank"])
PIECE = st.one_of(
    KEY, VALUE, BLANK,
    st.sampled_from(["=", " = ", "+=", "-=", "=\t", "#", " # c", "\\", "\\\n", " \\ \n",
                     "\\\\", "\\#", "\n", "\n", "\r\n", '"', "\xa0", "\x1c", "é", "\u2028"]),
)
PAIR = st.builds(lambda k, a, v, b: f"{k}{a}={b}{v}", KEY, st.sampled_from(["", " ", "\t"]),
                 VALUE, st.sampled_from(["", " ", "\t"]))
LINE = st.one_of(
    st.lists(st.one_of(PAIR, PIECE), max_size=6).map(lambda parts: "".join(parts) + "\n"),
    st.lists(PAIR, min_size=1, max_size=3).map(lambda parts: " ".join(parts) + "\n"),
    st.builds(lambda b1, b2: f"Include{b1}inc.conf{b2}\n", BLANK, BLANK),
    st.sampled_from(["Include %c.conf\n", "ClusterName=Alpha\n", "ClusterName=beta\n",
                     "include\t{ABS} \n", "Include inc*.conf\n", " Include inc.conf\n",
                     "Includeinc.conf\n"]),
)


def slurm_reads(folder: Path, conf: str, included: str) -> slurm_parser.Parsed:
    """Slurm's reading of ``conf`` as slurm.conf in ``folder``, beside the files it may
    include (``{ABS}`` stands for an absolute path to one): every include names an existing
    file, as Slurm waits 60 s for a missing one."""
    (folder / "abs.conf").write_text("TopologyParam=SwitchAsNodeRank\n")
    conf = conf.replace("{ABS}", str(folder / "abs.conf"))
    (folder / "inc.conf").write_text(included, encoding="utf-8")
    for name in ("alpha.conf", "beta.conf"):
        (folder / name).write_text("SelectType=select/cons_tres\n")
    path = folder / "slurm.conf"
    path.write_text(conf, encoding="utf-8")
    assert LIB is not None
    return slurm_parser.parse(LIB, path, PLAIN, LINES)


def both(folder: Path, conf: str, included: str = "") -> tuple[slurm_parser.Parsed,
                                                                dict[str, str] | None]:
    slurm = slurm_reads(folder, conf, included)
    keys = tuple(key.lower() for key in PLAIN)
    try:
        ours: dict[str, str] | None = slurmconf.settings(str(folder / "slurm.conf"), keys)
    except slurmconf.Refused:
        ours = None
    return slurm, ours


# -- the forms of issue 41, and each grammar rule ----------------------------------------------
FORMS = {  # slurm.conf -> TopologyPlugin and SelectTypeParameters as Slurm reads them
    "TopologyPlugin = topology/tree\n": ("topology/tree", None),
    "TopologyPlugin\t=\ttopology/tree\n": ("topology/tree", None),
    "topologyplugin=topology/tree\n": ("topology/tree", None),
    'TopologyPlugin="topology/tree"\n': ("topology/tree", None),
    "TopologyPlugin=topology/tree # the tree\n": ("topology/tree", None),
    "TopologyPlugin=topology/tree#the tree\n": ("topology/tree", None),
    "TopologyPlugin=topology/block\nTopologyPlugin=topology/tree\n": ("topology/tree", None),
    "Include\tinc.conf\n": ("topology/tree", None),
    "Include inc.conf \n": ("topology/tree", None),
    "TopologyPlugin=topology/\\\ntree\n": ("topology/tree", None),
    "TopologyPlugin=topology/tree \\  \n\n": ("topology/tree", None),
    "Topology\\Plugin=topology/tree\n": ("topology/tree", None),
    "TopologyPlugin=topology/tree\\#x\n": ("topology/tree#x", None),
    "TopologyPlugin=topology/tree\r\n": ("topology/tree", None),
    "\vTopologyPlugin=topology/tree\f\n": ("topology/tree", None),
    'TopologyPlugin="topology/tree"x\n': ('"topology/tree"x', None),
    "SelectTypeParameters=CR_Core,CR_NO_DIST_TOPO_BLOCK\n"
    "PartitionName=p Nodes=n[1-4] SelectTypeParameters=CR_Socket\n":
        (None, "CR_Core,CR_NO_DIST_TOPO_BLOCK"),
    "PartitionName=p SelectTypeParameters=CR_Socket\n": (None, None),
    "TopologyPlugin=topology/tree\n# TopologyPlugin=topology/block\n": ("topology/tree", None),
}
REFUSED_BY_SLURM = [
    "TopologyPlugin=topology/tree SelectType=select/cons_tres\n",  # a plain key is alone
    "TopologyPlugin=\n",
    "TopologyPlugin = \n",
    " Include inc.conf\n",  # an include starts its line
    "Includeinc.conf\n",
    "Include inc*.conf\n",
    "Include %c.conf\n",  # no ClusterName before it
    "TopologyPlugin\n",
    "= topology/tree\n",
]


@needs_slurm
@pytest.mark.parametrize("conf", sorted(FORMS))
def test_forms_slurm_reads(tmp_path: Path, conf: str) -> None:
    slurm, ours = both(tmp_path, conf, "TopologyPlugin=topology/tree\n")
    plugin, params = FORMS[conf]
    assert slurm.ok
    assert (slurm.values.get("topologyplugin"), slurm.values.get("selecttypeparameters")) \
        == (plugin, params)
    assert ours is not None
    assert (ours.get("topologyplugin"), ours.get("selecttypeparameters")) == (plugin, params)


@needs_slurm
@pytest.mark.parametrize("conf", REFUSED_BY_SLURM)
def test_forms_slurm_refuses_are_refused(tmp_path: Path, conf: str) -> None:
    slurm, ours = both(tmp_path, conf, "TopologyPlugin=topology/tree\n")
    assert not slurm.ok
    assert ours is None


@pytest.mark.parametrize("conf", [
    "TopologyPlugin=topology/tree\xa0\n",  # no-break space: not a C blank
    "TopologyPlugin=topology/tree\u2028x\n",
    "TopologyPlugin=topology/tree\x1cx\n",
    "TopologyPlugin=topology/tree\x00\n",
    "TopologyPlugin+=topology/tree\n",
    "Include inc.conf",  # no blank after the name: C reads past the line
    "Include inc.conf#x\n",
])
def test_forms_slurmenv_refuses(tmp_path: Path, conf: str) -> None:
    (tmp_path / "inc.conf").write_text("")
    (tmp_path / "slurm.conf").write_text(conf, encoding="utf-8")
    with pytest.raises(SlurmEnvError) as info:
        topology.read_slurm_conf(str(tmp_path / "slurm.conf"))
    assert info.value.variable == "SLURM_CONF"
    assert "-m cyclic" in info.value.fix  # and slurm.py adds srun --mpi=pmi2 with SLURMENV_PMI=1


def test_non_ascii_in_a_comment_is_read(tmp_path: Path) -> None:
    """``#`` and ``\\`` are ASCII bytes, never part of a UTF-8 sequence: a comment may hold
    anything but NUL."""
    (tmp_path / "slurm.conf").write_text("# Zoë's cluster\u2028\xa0\nTopologyPlugin=topology/tree"
                                         " # é\n", encoding="utf-8")
    assert topology.read_slurm_conf(str(tmp_path / "slurm.conf")) == \
        {"topologyplugin": "topology/tree"}


def test_includes_are_read_where_they_stand(tmp_path: Path) -> None:
    """An include is read in place: a later line of the including file wins over it, and a
    relative name is taken beside SLURM_CONF, also from a file in another folder."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.conf").write_text("TopologyPlugin=topology/block\nInclude b.conf\n")
    (tmp_path / "b.conf").write_text("SelectType=select/cons_tres\n")
    (tmp_path / "mycluster.conf").write_text("TopologyParam=SwitchAsNodeRank\n")
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=MyCluster\nInclude sub/a.conf\nTopologyPlugin=topology/tree\n"
        "Include %c.conf\n")
    assert topology.read_slurm_conf(str(tmp_path / "slurm.conf")) == {
        "topologyplugin": "topology/tree", "selecttype": "select/cons_tres",
        "topologyparam": "SwitchAsNodeRank"}


def test_an_include_loop_is_refused(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("Include slurm.conf\n")
    with pytest.raises(SlurmEnvError, match="more than 16 files"):
        topology.read_slurm_conf(str(tmp_path / "slurm.conf"))


# -- generated files against Slurm -------------------------------------------------------------
@needs_slurm
@ANY
@given(conf=st.lists(LINE, max_size=6).map("".join),
       included=st.lists(LINE.filter(lambda line: "nclude" not in line.lower()), max_size=3)
       .map("".join),
       tail=st.sampled_from(["", "TopologyPlugin=topology/tree"]))
def test_slurm_conf_read_as_slurm_reads_it(tmp_path: Path, conf: str, included: str,
                                           tail: str) -> None:
    slurm, ours = both(tmp_path, conf + tail, included)
    if ours is None:  # refused: fine whatever Slurm does (a subset), never a wrong value
        return
    if slurm.ok:
        assert ours == slurm.values
    else:  # only for a line slurmenv does not read: a key the test's table lacks, or a
        # line key whose rest is not pairs (slurmctld's own table judges those)
        reader = slurmconf.Reader(str(tmp_path / "slurm.conf"), "SLURM_CONF", True)
        statements = list(reader.statements(str(tmp_path / "slurm.conf")))
        subs = {key.lower(): {sub.lower() for sub in keys} for key, keys in LINES.items()}
        known = {key.lower() for key in PLAIN} | set(subs)
        def unread(statement: slurmconf.Statement) -> bool:
            key = statement.first.key.lower()
            if key not in known:
                return True
            if key not in subs:
                return False
            try:
                return any(p.key.lower() not in subs[key] for p in statement.rest())
            except slurmconf.Refused:
                return True

        assert any(unread(s) for s in statements)


TOPO_KEY = st.sampled_from(["SwitchName", "switchname", "Nodes", "nodes", "Switches",
                            "LinkSpeed", "BlockName"])
TOPO_VALUE = st.sampled_from(["s1", "s2", "n[1-4]", "n1,n2", '"n1"', '"n1 n2"', "top",
                              "s1,s2", "10", "n[1-2]x"])
TOPO_LINE = st.one_of(
    st.builds(lambda name, parts: f"SwitchName={name} " + " ".join(parts) + "\n",
              st.sampled_from(["s1", "s2", '"s3"', "top"]),
              st.lists(st.builds(lambda k, b, v: f"{k}{b}={v}", TOPO_KEY,
                                 st.sampled_from(["", " "]), TOPO_VALUE), max_size=3)),
    st.lists(st.one_of(TOPO_KEY, TOPO_VALUE, BLANK, st.sampled_from(
        ["=", "#", "\\\n", "\n", '"'])), max_size=6).map(lambda parts: "".join(parts) + "\n"),
)


@needs_slurm
@ANY
@given(text=st.lists(TOPO_LINE, max_size=6).map("".join))
def test_topology_conf_read_as_slurm_reads_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "topology.conf"
    path.write_text(text)
    assert LIB is not None
    slurm = slurm_parser.parse(LIB, path, (), {"SwitchName": ("Nodes", "Switches", "LinkSpeed")})
    try:
        records, _ = topology._records(text, str(path), "switchname",
                                       ("nodes", "switches", "linkspeed"))
    except slurmconf.Refused:
        return
    assert slurm.ok
    assert [(r.name, r.keys) for r in records] == \
        [(name, subs) for _, name, subs in slurm.records]


# -- node lists against Slurm's hostlist.c -----------------------------------------------------
NUMBER = st.sampled_from(["0", "1", "2", "9", "01", "007", "10", "010", "99", "100", "65536",
                          "65537", "70000"])
SPAN = st.one_of(NUMBER, st.builds(lambda a, b: f"{a}-{b}", NUMBER, NUMBER))
PART = st.one_of(
    st.sampled_from(["n1", "n01", "rack1-n2", "a.b", "x_y", "n", "", "n1 n2", "n\t1"]),
    st.builds(lambda p, spans, s: f"{p}[{','.join(spans)}]{s}",
              st.sampled_from(["n", "rack1-n", "", "n0", "a.b"]),
              st.lists(SPAN, min_size=1, max_size=3),
              st.sampled_from(["", "-ib", "x", "[1]", "]"])),
    st.sampled_from(["n[1-2", "n1-2]", "n[]", "n[a]", "n[1-2][3]", "n[-1]", "n[1--2]"]),
)


@needs_slurm
@settings(max_examples=300, deadline=None)
@given(parts=st.lists(PART, min_size=1, max_size=3))
def test_node_lists_expand_as_slurm_expands_them(parts: list[str]) -> None:
    """Where slurmenv reads a Nodes= list, Slurm's hostlist.c expands it to the same names;
    where Slurm refuses it, slurmenv does too."""
    expression = ",".join(parts)
    assert LIB is not None
    slurm = slurm_parser.hostlist(LIB, expression)
    names = sorted(set(slurm or []))
    decoys = {"n1", "n2", "n01", "n001", "n1x", "n100000", "rack1-n02", "n1-ib", "n00", "n"}
    # every name (python-hostlist expands), and a third of them among decoys (each host
    # tested against the list's parts)
    for hosts in (sorted(set(names) | {"n1", "n2"}), sorted(set(names[::3]) | decoys)):
        ranks = topology._Ranks(hosts)
        try:
            ranks.group(expression, 0, "t")
        except (slurmconf.Refused, SlurmEnvError):
            return
        assert slurm is not None, "slurmenv read a node list Slurm refuses"
        assert set(ranks.rank) == set(hosts) & set(slurm)


def test_a_404_byte_topology_costs_nothing_and_is_refused() -> None:
    """Ten ranges of a million names: slurmctld refuses each (hostlist.c MAX_RANGE, 65,536),
    and slurmenv refuses before expanding any (issue 41: it used to cost 727 MB and 5.5 s)."""
    text = "".join(f"SwitchName=s{i} Nodes=x[1-1000000]\n" for i in range(10))
    with pytest.raises(SlurmEnvError, match="range"):
        topology.tree_ranks(text, "/etc/slurm/topology.conf", ["x1", "x2"])


def test_names_are_counted_over_the_whole_file() -> None:
    """More than MAX_NAMES names in all is refused, expanded or not."""
    text = "".join(f"SwitchName=s{i} Nodes=x[1-65536]\n" for i in range(17))
    with pytest.raises(SlurmEnvError, match="more than 1048576 nodes"):
        topology.tree_ranks(text, "/etc/slurm/topology.conf", ["n1"])


def test_only_lists_that_may_hold_a_host_are_expanded() -> None:
    """Lists beginning like no host of the step, and every list once each host has its rank,
    are counted but not expanded: the order of n1, n2 is known from the first leaf."""
    text = "SwitchName=a Nodes=n[1-2]\n" + "".join(f"SwitchName=s{i} Nodes=n[1-65536]\n"
                                                  for i in range(15))
    assert topology.tree_ranks(text, "/etc/slurm/topology.conf", ["n2", "n1"]) == [1, 1]
