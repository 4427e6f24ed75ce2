"""Slurm node lists and task counts (slurmenv.nodes) against hand-written expectations and an
independent expansion written here with itertools.product."""

from __future__ import annotations

import itertools

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError, nodes


@pytest.mark.parametrize(
    ("text", "names"),
    [
        # several bracket groups: cartesian product, leftmost slowest
        ("rack[1-2]-node[01-02]",
         ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
        ("a[1-2]b[7-8]c[0-1]",
         ["a1b7c0", "a1b7c1", "a1b8c0", "a1b8c1", "a2b7c0", "a2b7c1", "a2b8c0", "a2b8c1"]),
        # zero padding is the width of the low bound
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("n[09-11]", ["n09", "n10", "n11"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        # lists inside brackets, order and duplicates kept
        ("n[1,3-4,2]", ["n1", "n3", "n4", "n2"]),
        ("n3,n1,n3", ["n3", "n1", "n3"]),
        ("n[3-4],n[1-2],n3", ["n3", "n4", "n1", "n2", "n3"]),
        # separators: comma, space, newline, tab
        ("n1 n2\nn3,n4\tn5", ["n1", "n2", "n3", "n4", "n5"]),
        # text after ']' (Slurm 23.11+), then a newline and more names
        ("c[1-2]-ib\nd[1-2]x", ["c1-ib", "c2-ib", "d1x", "d2x"]),
        ("n[1-2]\nn5", ["n1", "n2", "n5"]),
        ("n[1-2]\n", ["n1", "n2"]),
        ("gpu7", ["gpu7"]),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert nodes.expand(text, "SLURM_STEP_NODELIST") == names


def test_expand_beyond_python_hostlist_size_limit() -> None:
    # python-hostlist refuses more than 100,000 names per part; a whole list may hold more
    names = nodes.expand("n[1-150000]", "SLURM_STEP_NODELIST")
    assert len(names) == 150000
    assert names[0] == "n1" and names[-1] == "n150000"


@pytest.mark.parametrize(
    "text",
    ["n[1-2", "n1-2]", "a]b", "n[3-1]", "n[a-b]", "n[]", "n[1-]", "n[-1]", "n[[1-2]]", "",
     " ", ",", "\n"],
)
def test_expand_errors_name_the_variable_and_value(text: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        nodes.expand(text, "SLURM_STEP_NODELIST")
    err = info.value
    assert err.variable == "SLURM_STEP_NODELIST"
    assert err.value == text
    assert f"SLURM_STEP_NODELIST={text!r}" in str(err)
    assert err.fix


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("2(x3),1", [2, 2, 2, 1]),
        ("5,1(x3)", [5, 1, 1, 1]),
        ("1", [1]),
        ("4(x2)", [4, 4]),
        ("3(x1),2(x2)", [3, 2, 2]),
        ("12,1,12", [12, 1, 12]),
    ],
)
def test_tasks_per_node(text: str, counts: list[int]) -> None:
    assert nodes.parse_tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE") == counts


@pytest.mark.parametrize(
    "text",
    ["2(x0)", "0", "1,0", "0(x3)", "2(x00)", "", "2(x)", "2x3", "(x3)", "2(x3", "-1", "a",
     "1,,2", "1,", "1.5", "2(x-1)", " 4(x2) ", "4(x2)\n", "04", "4(x02)", "4, 2"],
)
def test_tasks_per_node_errors(text: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        nodes.parse_tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE")
    assert info.value.variable == "SLURM_STEP_TASKS_PER_NODE"
    assert info.value.value == text
    assert "SLURM_STEP_TASKS_PER_NODE" in str(info.value)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=30))
@settings(max_examples=100, deadline=None)
def test_tasks_per_node_round_trip(counts: list[int]) -> None:
    text = synth.compress_counts(counts)
    assert nodes.parse_tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE") == counts


# --- property: random multi-bracket lists against an independent expansion --------------------

@st.composite
def bracket(draw: st.DrawFn) -> tuple[str, list[str]]:
    """One bracket group, e.g. ``[09-11,3]``, and the strings it stands for."""
    pieces: list[str] = []
    values: list[str] = []
    for _ in range(draw(st.integers(1, 2))):
        lo = draw(st.integers(0, 120))
        size = draw(st.integers(1, 4))
        width = draw(st.integers(len(str(lo)), 3))
        hi = lo + size - 1
        lo_text, hi_text = str(lo).zfill(width), str(hi).zfill(width)
        pieces.append(lo_text if size == 1 else f"{lo_text}-{hi_text}")
        values.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return "[" + ",".join(pieces) + "]", values


@st.composite
def host_group(draw: st.DrawFn) -> tuple[str, list[str]]:
    """``prefix[..]mid[..]suffix``: text and its names (leftmost bracket slowest)."""
    prefix = draw(st.sampled_from(["n", "node", "rack", "gpu-", "c", "x.y"]))
    brackets = draw(st.lists(bracket(), min_size=0, max_size=3))
    mids = [draw(st.sampled_from(["", "-", "-node", "n", "_"])) for _ in brackets]
    suffix = draw(st.sampled_from(["", "-ib", "i", ".fabric"]))
    if not brackets:
        return prefix + suffix, [prefix + suffix]
    text = prefix
    for (btext, _), mid in zip(brackets, mids):
        text += btext + mid
    text += suffix
    names = [
        prefix + "".join(v + m for v, m in zip(combo, mids)) + suffix
        for combo in itertools.product(*(vals for _, vals in brackets))
    ]
    return text, names


@given(
    st.lists(host_group(), min_size=1, max_size=4),
    st.lists(st.sampled_from([",", " ", "\n", ", ", ",\n"]), min_size=3, max_size=3),
)
@settings(max_examples=150, deadline=None)
def test_expand_matches_reference(groups: list[tuple[str, list[str]]], seps: list[str]) -> None:
    text = groups[0][0]
    for i, (gtext, _) in enumerate(groups[1:]):
        text += seps[i] + gtext
    expected = [name for _, names in groups for name in names]
    assert nodes.expand(text, "SLURM_STEP_NODELIST") == expected
    # python-hostlist's compression of the same names expands back to them
    assert nodes.expand(synth.compress_hosts(expected), "X") == expected
