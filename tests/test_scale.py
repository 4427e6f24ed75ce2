"""Correctness at scale: node lists past python-hostlist's and Slurm's size caps, and steps of
100,000 tasks, checked against independent references (and Slurm's own hostlist code, through
``scontrol``). No timing here: speed is measured by benchmarks/bench.py."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import SlurmEnvError, nodes
from slurmenv.tfconfig import MAX_ARG_STRLEN

EPHEMERAL = (32768, 60999)
BIG = 100_000
JOB_ID = 4242  # synth.DEFAULT_JOB_ID
ROOT = Path(__file__).resolve().parent.parent


def resolve(env: dict[str, str], **options: object) -> slurmenv.Resolution:
    options.setdefault("ephemeral_range", EPHEMERAL)
    return slurmenv.resolve(env, **options)  # type: ignore[arg-type]


def names(prefix: str, lo: int, hi: int, width: int) -> list[str]:
    return [f"{prefix}{i:0{width}d}" for i in range(lo, hi + 1)]


def spot_check(listed: nodes.NodeList, expected: list[str]) -> None:
    """``listed[i]`` at the ends, the caps and random places."""
    n = len(expected)
    assert len(listed) == n
    rng = random.Random(n)
    picks = {0, 1, n - 1, n // 2, *(i for i in (65535, 65536, 99999, 100000) if i < n)}
    picks.update(rng.randrange(n) for _ in range(200))
    for i in sorted(picks):
        assert listed[i] == expected[i], i


# --- node lists beyond the caps -----------------------------------------------------------------

def test_single_range_beyond_python_hostlist_and_slurm_caps() -> None:
    # 150,000 names in one range: over Slurm's 65,536 per range and python-hostlist's 100,000
    # per part. Slurm writes such ranges (see test_scontrol_writes_ranges_it_cannot_read).
    text = "n[000000-149999]"
    expected = names("n", 0, 149_999, 6)
    listed = nodes.NodeList(text, "SLURM_STEP_NODELIST")
    spot_check(listed, expected)
    assert listed.names() == expected
    assert nodes.expand(text, "SLURM_STEP_NODELIST") == expected


def test_multi_bracket_product_over_the_cap() -> None:
    # 12 x 10,000 = 120,000 names in one part: python-hostlist alone refuses it.
    text = "r[00-11]-n[00000-09999]-ib"
    expected = [f"r{r:02d}-n{n:05d}-ib" for r, n in itertools.product(range(12), range(10_000))]
    listed = nodes.NodeList(text, "SLURM_STEP_NODELIST")
    spot_check(listed, expected)
    assert listed.names() == expected


def test_several_parts_and_lists_inside_brackets_at_scale() -> None:
    # Slurm writes a fragmented allocation as one bracket with many ranges.
    kept = [i for i in range(120_000) if i % 7 != 3]
    ranges, start = [], kept[0]
    for a, b in zip(kept, kept[1:] + [None]):
        if b != a + 1:
            ranges.append(f"{start:06d}" if start == a else f"{start:06d}-{a:06d}")
            start = b
    text = f"gpu[{','.join(ranges)}] cpu[1-3]\nx7"
    expected = [f"gpu{i:06d}" for i in kept] + ["cpu1", "cpu2", "cpu3", "x7"]
    listed = nodes.NodeList(text, "SLURM_STEP_NODELIST")
    spot_check(listed, expected)
    assert listed.names() == expected


@pytest.mark.parametrize(
    "text",
    [
        f"n[0-{nodes.MAX_NODES}]",  # one name too many in a range
        "a[0-1023]b[0-1024]",  # a product just over the limit
        "n[0-99999999999999999999]",  # absurd: refused by counting, never expanded
        f"n[0-{nodes.MAX_NODES // 2}],m[0-{nodes.MAX_NODES // 2}]",  # over the limit in all
    ],
)
def test_lists_over_the_limit_are_refused(text: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        len(nodes.NodeList(text, "SLURM_STEP_NODELIST"))
    assert info.value.variable == "SLURM_STEP_NODELIST"
    assert info.value.value == text
    assert str(nodes.MAX_NODES) in str(info.value)


def test_the_limit_itself_is_accepted() -> None:
    listed = nodes.NodeList(f"n[0-{nodes.MAX_NODES - 1}]", "SLURM_STEP_NODELIST")
    assert len(listed) == nodes.MAX_NODES
    assert listed[0] == "n0" and listed[nodes.MAX_NODES - 1] == f"n{nodes.MAX_NODES - 1}"


def test_task_counts_up_to_the_limit() -> None:
    counts = nodes.parse_tasks_per_node(f"4,1(x{nodes.MAX_NODES - 2}),2", "X")
    assert len(counts) == nodes.MAX_NODES and counts[:2] == [4, 1] and counts[-2:] == [1, 2]
    for text in (f"1(x{nodes.MAX_NODES + 1})", f"1(x{nodes.MAX_NODES}),1", "1(x99999999999999)"):
        with pytest.raises(SlurmEnvError) as info:
            nodes.parse_tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE")
        assert info.value.value == text and str(nodes.MAX_NODES) in str(info.value)


def test_a_malformed_end_is_found_even_when_only_the_first_name_is_used() -> None:
    env = synth.step_env(["n1", "n2"], [1, 1], 0, nodelist="n[1-2],x[3-")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env).env("torch")
    assert info.value.variable == "SLURM_STEP_NODELIST"


def test_whitespace_inside_brackets_is_refused() -> None:
    # python-hostlist accepts "n[12\n]" (its regex's $ matches before a newline) and returns
    # the name "n12\n"; Slurm never writes whitespace inside brackets, slurmenv refuses it.
    for text in ("n[12\n]", "n[1-2\n]", "n[1, 2]", "n[ 1-2]"):
        with pytest.raises(SlurmEnvError) as info:
            len(nodes.NodeList(text, "SLURM_STEP_NODELIST"))
        assert info.value.value == text


def hostlist_reference(text: str) -> list[str] | None:
    """python-hostlist on each part (split at top-level commas and whitespace), limits lifted;
    None where it refuses the list or yields a name with whitespace."""
    import hostlist

    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth == 0 and (ch == "," or ch.isspace()):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    saved, hostlist.MAX_SIZE = hostlist.MAX_SIZE, 10**7
    try:
        out = [name for part in parts if part
               for name in hostlist.expand_hostlist(part, allow_duplicates=True)]
    except (hostlist.BadHostlist, RecursionError):
        return None
    finally:
        hostlist.MAX_SIZE = saved
    if not out or any(not name or any(c.isspace() or c in "[]" for c in name) for name in out):
        return None
    return out


@given(st.text(alphabet="n0123-[],\n x9\t", max_size=18))
@settings(max_examples=3000, deadline=None)
def test_lookup_without_expanding_matches_python_hostlist(text: str) -> None:
    # NodeList expands part by part with python-hostlist; that must give exactly python-hostlist's
    # names for the whole list, and refuse exactly what it refuses (but names with whitespace).
    expected = hostlist_reference(text)
    try:
        listed = nodes.NodeList(text, "X")
        len(listed)
    except SlurmEnvError:
        assert expected is None or re.search(r"\[[^\]]*\s", text), (text, expected)
        return
    assert expected is not None, text
    assert [listed[i] for i in range(len(listed))] == expected
    assert listed.names() == expected


# --- a step of 100,000 tasks ----------------------------------------------------------------------

HOSTS = names("n", 0, BIG - 1, 6)


def expected_torch(hosts: list[str], counts: list[int], rank: int, **layout: object) -> dict:
    want = synth.expected(hosts, counts, rank, **layout)  # type: ignore[arg-type]
    return {name: str(want[name]) for name in
            ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
             "NNODES")} | {"MASTER_ADDR": str(want["MASTER_NODE"])}


@pytest.mark.parametrize("rank", [0, 1, BIG // 2 - 1, BIG // 2, BIG - 1])
def test_100k_nodes_one_task_each(rank: int) -> None:
    env = synth.step_env(HOSTS, [1] * BIG, rank, nodelist="n[000000-099999]")
    res = resolve(env)
    values = res.env("torch")
    assert {k: values[k] for k in expected_torch(HOSTS, [1] * BIG, rank)} == \
        expected_torch(HOSTS, [1] * BIG, rank)
    assert values["MASTER_ADDR"] == "n000000"
    assert values["LOCAL_WORLD_SIZE"] == "1" and values["NNODES"] == str(BIG)
    assert res.hostname == HOSTS[rank]


@pytest.mark.parametrize(
    ("distribution", "plane", "counts"),
    [
        (None, None, [4] * 25_000),  # Slurm's default here: block
        ("cyclic", None, [4] * 25_000),
        ("plane=3", 3, [4] * 25_000),
        (None, None, [4] * 20_000 + [2] * 10_000),  # uneven: 100,000 tasks on 30,000 nodes
        ("cyclic", None, [4] * 20_000 + [2] * 10_000),
        ("plane=3", 3, [4] * 20_000 + [2] * 10_000),
    ],
)
def test_100k_tasks_layouts(distribution: str | None, plane: int | None, counts: list[int]) -> None:
    hosts = HOSTS[: len(counts)]
    node_of, local_of = synth.reference_layout(counts, distribution, plane)
    nodelist = synth.compress_hosts(hosts)
    for rank in (0, 1, BIG // 2, BIG - 2, BIG - 1):
        env = synth.step_env(hosts, counts, rank, distribution, plane, nodelist=nodelist)
        res = resolve(env)
        values = res.env("torch")
        assert values["RANK"] == str(rank)
        assert values["NODE_RANK"] == str(node_of[rank])
        assert values["LOCAL_RANK"] == str(local_of[rank])
        assert values["LOCAL_WORLD_SIZE"] == str(counts[node_of[rank]])
        assert values["WORLD_SIZE"] == str(BIG)
        assert values["NNODES"] == str(len(counts))
        assert values["MASTER_ADDR"] == hosts[0]
    # the whole layout, built when asked for
    assert list(res.node_of) == node_of and list(res.local_of) == local_of
    assert list(res.hosts) == hosts


def test_100k_tf_config_is_refused_in_the_environment_but_torch_is_fine() -> None:
    rank = 77_777
    env = synth.step_env(HOSTS, [1] * BIG, rank, nodelist="n[000000-099999]")
    res = resolve(env)
    with pytest.raises(SlurmEnvError) as info:
        res.env("all")
    assert info.value.variable == "TF_CONFIG"
    assert str(MAX_ARG_STRLEN) in str(info.value)
    assert res.env("torch")["RANK"] == str(rank)
    # in process there is no size limit
    config = res.tf_config
    workers = config["cluster"]["worker"]
    assert len(workers) == BIG
    assert config["task"] == {"type": "worker", "index": rank}
    port = int(workers[0].rpartition(":")[2])
    assert workers == [f"{host}:{port}" for host in HOSTS]


def test_tf_config_just_under_and_over_the_limit() -> None:
    # 1 task per node, names n000000..: each worker adds len('"n000000:NNNNN",') bytes.
    for count, ok in ((8000, True), (9000, False)):
        hosts = HOSTS[:count]
        env = synth.step_env(hosts, [1] * count, 0, nodelist=synth.compress_hosts(hosts))
        res = resolve(env)
        if ok:
            text = res.env("tf")["TF_CONFIG"]
            assert json.loads(text) == res.tf_config
            assert len("TF_CONFIG=") + len(text) + 1 <= MAX_ARG_STRLEN
        else:
            with pytest.raises(SlurmEnvError):
                res.env("tf")


def run_export(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = synth.clean_env(PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-m", "slurmenv", "export", *args], env=full, capture_output=True,
        text=True, timeout=120, check=False,
    )


def test_100k_export_command() -> None:
    env = synth.step_env(HOSTS, [1] * BIG, BIG - 1, nodelist="n[000000-099999]")
    refused = run_export(env)
    assert refused.returncode == 1
    assert "TF_CONFIG" in refused.stderr and "exit 1" in refused.stdout
    torch = run_export(env, "--for", "torch")
    assert torch.returncode == 0, torch.stderr
    assert "export MASTER_ADDR='n000000';" in torch.stdout
    assert f"export RANK='{BIG - 1}';" in torch.stdout
    assert "export LOCAL_WORLD_SIZE='1';" in torch.stdout


# --- what must not need the whole list, and the checks that must still happen ---------------------

def test_the_whole_list_is_checked() -> None:
    # Every use of a step's node list counts it against SLURM_STEP_NUM_NODES, so the list is
    # expanded whole: a bad part after the first is refused, not left for later.
    with pytest.raises(SlurmEnvError):
        nodes.NodeList("n[000000-000003],m[0-99999999999999999999]", "SLURM_STEP_NODELIST")


def test_large_parts_leave_python_hostlists_limit_alone() -> None:
    # A part over python-hostlist's 100,000-name cap is expanded without touching the shared
    # module's MAX_SIZE, so threads expanding lists at once (here: small lists that must keep
    # the cap, and large ones that lift it for themselves) never see each other's limit.
    import threading

    import hostlist

    before = hostlist.MAX_SIZE
    big, errors = "n[000000-199999]", []

    def expand_big() -> None:
        for _ in range(3):
            if len(nodes.NodeList(big, "X")) != 200_000:
                errors.append("big")

    def small_keeps_cap() -> None:
        for _ in range(200):
            try:
                hostlist.expand_hostlist("m[0-150000]")
                errors.append("the shared MAX_SIZE was lifted")
            except hostlist.BadHostlist:
                pass

    threads = [threading.Thread(target=f) for f in (expand_big, small_keeps_cap, expand_big)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and hostlist.MAX_SIZE == before


@pytest.mark.parametrize(("distribution", "plane"), [(None, None), ("block", None),
                                                      ("cyclic", None), ("plane=2", 2)])
def test_master_and_port_at_scale(distribution: str | None, plane: int | None) -> None:
    counts = [2] * (BIG // 2)
    hosts = HOSTS[: len(counts)]
    rank = 12_345
    env = synth.step_env(hosts, counts, rank, distribution, plane, nodelist="n[000000-049999]")
    res = resolve(env)
    values = res.env("torch")
    assert values["MASTER_ADDR"] == "n000000"
    assert values["MASTER_PORT"] == str(res.master_port)
    node_of, local_of = synth.reference_layout(counts, distribution, plane)
    assert values["NODE_RANK"] == str(node_of[rank])
    assert values["LOCAL_RANK"] == str(local_of[rank])


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"SLURMD_NODENAME": "n000001"}, "SLURMD_NODENAME"),  # wrong own node name
        ({"SLURM_STEP_NUM_NODES": str(BIG - 1)}, "SLURM_STEP_TASKS_PER_NODE"),
        ({"SLURM_STEP_NODELIST": "n[000000-099998]"}, "SLURM_STEP_NODELIST"),  # one short
        ({"SLURM_NODEID": "50001"}, "SLURM_NODEID"),  # not this node (nor where the layout puts it)
        ({"SLURM_GTIDS": "50000,50001"}, "SLURM_GTIDS"),
        ({"SLURM_PROCID": str(BIG)}, "SLURM_PROCID"),
    ],
)
def test_100k_checks_still_happen(change: dict[str, str], variable: str) -> None:
    env = synth.step_env(HOSTS, [1] * BIG, BIG // 2, nodelist="n[000000-099999]", **change)
    with pytest.raises(SlurmEnvError) as info:
        resolve(env).env("torch")
    assert info.value.variable == variable


@given(
    st.one_of(
        st.tuples(st.integers(1, 9), st.integers(1, 7)).map(lambda nt: [nt[1]] * nt[0]),
        st.lists(st.integers(1, 7), min_size=1, max_size=9),
    ),
    st.sampled_from([None, "block", "cyclic", "plane"]),
    st.integers(1, 8),
)
@settings(max_examples=1500, deadline=None)
def test_one_ranks_place_without_the_whole_layout(
    counts: list[int], distribution: str | None, plane: int
) -> None:
    # layout.locate / ranks_on compute one rank's node and one node's ranks directly (the
    # check of SLURM_NODEID/LOCALID/GTIDS at 100,000 tasks); they must agree with Slurm's layout.
    from slurmenv import layout

    size = plane if distribution == "plane" else 0
    dist = layout.Distribution(distribution or "default", size)
    node_of, local_of = synth.reference_layout(counts, distribution, size or None)
    placed = layout.place(counts, dist)
    assert (placed.node_of, placed.local_of) == (node_of, local_of)
    for rank in range(sum(counts)):
        assert layout.locate(counts, dist, rank) == (node_of[rank], local_of[rank])
    for node in range(len(counts)):
        assert layout.ranks_on(counts, dist, node) == [r for r, n in enumerate(node_of) if n == node]
    assert layout.total(counts) == sum(counts) and layout.largest(counts) == max(counts)


# --- Slurm's own hostlist code (scontrol, no controller needed) ------------------------------------

@pytest.fixture()
def scontrol(tmp_path: Path) -> tuple[str, dict[str, str]]:
    path = shutil.which("scontrol")
    if path is None:
        pytest.skip("scontrol (Debian slurm-client) not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=scale\nSlurmctldHost=localhost\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    probe = subprocess.run([path, "show", "hostnames", "n[1-2]"], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    if probe.stdout.split() != ["n1", "n2"]:
        pytest.skip(f"scontrol cannot expand host lists here: {probe.stderr.strip()}")
    return path, env


def test_scontrol_writes_ranges_it_cannot_read(
    scontrol: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    path, env = scontrol
    listed = tmp_path / "hosts"
    listed.write_text("\n".join(HOSTS) + "\n")
    # Slurm compresses 100,000 consecutive names into one range...
    written = subprocess.run([path, "show", "hostlist", str(listed)], env=env,
                             capture_output=True, text=True, timeout=60, check=True)
    text = written.stdout.strip()
    assert text == "n[000000-099999]"
    # ...that its own parser refuses (over 65,536 names in a range), with exit status 0
    read = subprocess.run([path, "show", "hostnames", text], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert read.returncode == 0 and read.stdout == ""
    assert "Too many hosts in range" in read.stderr
    # slurmenv reads what Slurm wrote
    assert nodes.expand(text, "SLURM_STEP_NODELIST") == HOSTS


@pytest.mark.parametrize(
    "text",
    [
        "r[00-99]-n[0000-0999]",  # 100,000 names, ranges under Slurm's cap
        "n[000000-065535]",  # Slurm's largest range
        # (no text after the last ']': Slurm reads it only from 23.11; this is 22.05)
        "n[9-11],a[098-101],b[1,3-4]c[7-8],n[000000-065535],x7",
    ],
)
def test_same_names_as_scontrol(scontrol: tuple[str, dict[str, str]], text: str) -> None:
    path, env = scontrol
    out = subprocess.run([path, "show", "hostnames", text], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    expected = out.stdout.split()
    assert expected, out.stderr
    listed = nodes.NodeList(text, "SLURM_STEP_NODELIST")
    spot_check(listed, expected)
    assert listed.names() == expected


# --- the closed forms and whole steps at large sizes (hypothesis) --------------------------------

@st.composite
def large_counts(draw: st.DrawFn) -> list[int]:
    """Task counts of hundreds to thousands of nodes: equal counts (the closed form of the
    round-robin layouts), or a few runs of different counts (block's closed form; cyclic and
    plane then place in full)."""
    if draw(st.booleans()):
        return [draw(st.integers(1, 40))] * draw(st.integers(100, 3000))
    runs = [(draw(st.integers(1, 12)), draw(st.integers(100, 400)))]  # hundreds of nodes...
    runs += draw(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 400)), max_size=4))
    return [per for per, nodes_ in runs for _ in range(nodes_)]


@given(large_counts(), st.sampled_from([None, "block", "cyclic", "plane"]), st.integers(1, 48),
       st.randoms(use_true_random=False))
@settings(max_examples=40, deadline=None)
def test_one_ranks_place_at_large_sizes(
    counts: list[int], distribution: str | None, plane: int, rng: random.Random
) -> None:
    """layout.locate / ranks_on against Slurm's layout (synth.py) with hundreds to thousands of
    nodes and up to 40 tasks per node, at the ends, the round boundaries and random places."""
    from slurmenv import layout

    size = plane if distribution == "plane" else 0
    dist = layout.Distribution(distribution or "default", size)
    node_of, local_of = synth.reference_layout(counts, distribution, size or None)
    ntasks, nnodes = len(node_of), len(counts)
    chunk = size or 1
    assert nnodes >= 100
    ranks = {0, 1, ntasks - 1, ntasks // 2, *(rng.randrange(ntasks) for _ in range(60))}
    for boundary in (nnodes * chunk, counts[0], nnodes):  # end of a round, of a node
        ranks.update(r for r in (boundary - 1, boundary) if 0 <= r < ntasks)
    for rank in sorted(ranks):
        assert layout.locate(counts, dist, rank) == (node_of[rank], local_of[rank]), rank
    on: dict[int, list[int]] = {}
    for rank, node in enumerate(node_of):
        on.setdefault(node, []).append(rank)
    for node in sorted({0, 1, nnodes - 1, *(rng.randrange(nnodes) for _ in range(30))}):
        assert layout.ranks_on(counts, dist, node) == on[node], node
    assert layout.total(counts) == ntasks and layout.largest(counts) == max(counts)


@st.composite
def large_steps(draw: st.DrawFn) -> tuple[list[str], list[int], str, str | None, int | None]:
    """A step on hundreds of nodes named in several bracket groups (two-dimensional ones
    too), as Slurm compresses them, with uneven or equal task counts."""
    hosts: list[str] = []
    text_parts = []
    for g in range(draw(st.integers(1, 3))):
        racks = draw(st.integers(1, 4))
        per_rack = draw(st.integers(20, 150))
        width = draw(st.integers(len(str(per_rack)), 4))
        prefix = "abc"[g]
        if racks == 1:
            text_parts.append(f"{prefix}n[{0:0{width}d}-{per_rack - 1:0{width}d}]")
            hosts += [f"{prefix}n{i:0{width}d}" for i in range(per_rack)]
        else:
            text_parts.append(f"{prefix}r[1-{racks}]n[{0:0{width}d}-{per_rack - 1:0{width}d}]")
            hosts += [f"{prefix}r{r}n{i:0{width}d}" for r in range(1, racks + 1)
                      for i in range(per_rack)]
    if draw(st.booleans()):
        counts = [draw(st.integers(1, 8))] * len(hosts)
    else:
        counts = draw(st.lists(st.integers(1, 8), min_size=len(hosts), max_size=len(hosts)))
    dist = draw(st.sampled_from([None, "block", "cyclic", "plane"]))
    plane = draw(st.integers(1, 6)) if dist == "plane" else None
    return hosts, counts, ",".join(text_parts), dist, plane


@given(large_steps(), st.randoms(use_true_random=False))
@settings(max_examples=25, deadline=None)
def test_large_steps_resolve_like_slurm(
    step: tuple[list[str], list[int], str, str | None, int | None], rng: random.Random
) -> None:
    """Whole resolutions of steps on hundreds of hosts: sampled ranks get the reference's
    values, TF_CONFIG puts every rank on its host, and the layout is Slurm's."""
    hosts, counts, nodelist, dist, plane = step
    assert len(hosts) >= 20
    ntasks = sum(counts)
    node_of, local_of = synth.reference_layout(counts, dist, plane, hosts)
    for rank in sorted({0, ntasks - 1, *(rng.randrange(ntasks) for _ in range(4))}):
        env = synth.step_env(hosts, counts, rank, dist, plane, nodelist=nodelist)
        res = resolve(env)
        want = expected_torch(hosts, counts, rank, distribution=dist, plane=plane)
        assert want.items() <= res.env("torch").items()
        workers = res.tf_config["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == [hosts[n] for n in node_of]
        assert (list(res.hosts), list(res.node_of), list(res.local_of)) == (
            hosts, node_of, local_of)
        assert res.hostname == hosts[node_of[rank]]
