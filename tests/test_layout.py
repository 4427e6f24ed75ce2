"""Task layouts (slurmenv.layout) against hand-worked examples and the independent reference
in tests/synth.py."""

from __future__ import annotations

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError, layout

BLOCK = layout.Distribution("block")
CYCLIC = layout.Distribution("cyclic")
DEFAULT = layout.Distribution("default")


def test_default_uneven_block_as_observed() -> None:
    # srun -N4 -n8 (no -m): SLURM_STEP_TASKS_PER_NODE=5,1(x3), ranks 0-4 on the first node
    placed = layout.place([5, 1, 1, 1], DEFAULT)
    assert placed.node_of == [0, 0, 0, 0, 0, 1, 2, 3]
    assert placed.local_of == [0, 1, 2, 3, 4, 0, 0, 0]


def test_cyclic_skips_full_nodes_as_observed() -> None:
    # srun -N4 -n6 -m cyclic: counts 3,1(x3), rank -> node 0,1,2,3,0,0
    placed = layout.place([3, 1, 1, 1], CYCLIC)
    assert placed.node_of == [0, 1, 2, 3, 0, 0]
    assert placed.local_of == [0, 0, 0, 0, 1, 2]


def test_cyclic_even_as_observed() -> None:
    # srun -N4 --ntasks-per-node=2 -m cyclic: ranks 0-3 on nodes 1-4, 4-7 on nodes 1-4 again
    placed = layout.place([2, 2, 2, 2], CYCLIC)
    assert placed.node_of == [0, 1, 2, 3, 0, 1, 2, 3]
    assert placed.local_of == [0, 0, 0, 0, 1, 1, 1, 1]


def test_plane_worked_example() -> None:
    # plane=2 over 5,3,4: round 0 gives 2 ranks to each node, round 1 again (node 1 only has
    # one left), round 2 the last rank of node 0.
    placed = layout.place([5, 3, 4], layout.Distribution("plane", 2))
    assert placed.node_of == [0, 0, 1, 1, 2, 2, 0, 0, 1, 2, 2, 0]
    assert placed.local_of == [0, 1, 0, 1, 0, 1, 2, 3, 2, 2, 3, 4]
    assert placed.ranks_on(0) == [0, 1, 6, 7, 11]


def test_default_one_task_per_node() -> None:
    placed = layout.place([1, 1, 1], DEFAULT)
    assert placed.node_of == [0, 1, 2]
    assert placed.local_of == [0, 0, 0]


def test_arbitrary_follows_the_host_file() -> None:
    hosts = ["a", "b", "c"]
    hostfile = ["c", "a", "c", "b", "a"]
    placed = layout.place([2, 1, 2], layout.Distribution("arbitrary"), hosts, hostfile)
    assert placed.node_of == [2, 0, 2, 1, 0]
    assert placed.local_of == [0, 0, 1, 0, 1]


@pytest.mark.parametrize(
    ("hostfile", "counts"),
    [
        (["a", "b"], [2, 1]),            # too short for 3 tasks
        (["a", "x", "b"], [2, 1]),       # x is not a node of the step
        (["a", "b", "b"], [2, 1]),       # counts disagree with the host file
    ],
)
def test_arbitrary_errors(hostfile: list[str], counts: list[int]) -> None:
    with pytest.raises(SlurmEnvError) as info:
        layout.place(counts, layout.Distribution("arbitrary"), ["a", "b"], hostfile)
    assert info.value.variable == "SLURM_HOSTFILE"


@pytest.mark.parametrize(
    ("environ", "kind", "plane"),
    [
        ({}, "default", 0),
        ({"SLURM_DISTRIBUTION": "block"}, "block", 0),
        ({"SLURM_DISTRIBUTION": "cyclic"}, "cyclic", 0),
        ({"SLURM_DISTRIBUTION": "block:cyclic"}, "block", 0),
        ({"SLURM_DISTRIBUTION": "cyclic:block,pack"}, "cyclic", 0),
        ({"SLURM_DISTRIBUTION": "block,nopack"}, "block", 0),
        ({"SLURM_DISTRIBUTION": "*"}, "default", 0),
        ({"SLURM_DISTRIBUTION": "*:cyclic"}, "default", 0),
        ({"SLURM_DISTRIBUTION": "plane", "SLURM_DIST_PLANESIZE": "4"}, "plane", 4),
        ({"SLURM_DISTRIBUTION": "plane=3"}, "plane", 3),
        ({"SLURM_DISTRIBUTION": "arbitrary"}, "arbitrary", 0),
    ],
)
def test_parse_distribution(environ: dict[str, str], kind: str, plane: int) -> None:
    dist = layout.parse_distribution(environ)
    assert isinstance(dist, layout.Distribution)
    assert (dist.kind, dist.plane_size) == (kind, plane)


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"SLURM_DISTRIBUTION": "plane"}, "SLURM_DIST_PLANESIZE"),
        ({"SLURM_DISTRIBUTION": "plane", "SLURM_DIST_PLANESIZE": "0"}, "SLURM_DIST_PLANESIZE"),
        ({"SLURM_DISTRIBUTION": "plane", "SLURM_DIST_PLANESIZE": "x"}, "SLURM_DIST_PLANESIZE"),
        ({"SLURM_DISTRIBUTION": "plane", "SLURM_DIST_PLANESIZE": "\u00b2"},
         "SLURM_DIST_PLANESIZE"),
        ({"SLURM_DISTRIBUTION": "plane=0"}, "SLURM_DISTRIBUTION"),
    ],
)
def test_plane_size_errors(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        layout.parse_distribution(environ)
    assert info.value.variable == variable
    assert variable in str(info.value)


def test_unknown_distribution_is_reported_not_guessed() -> None:
    dist = layout.parse_distribution({"SLURM_DISTRIBUTION": "spread"})
    assert isinstance(dist, layout.UnknownLayout)
    assert "spread" in dist.reason


# --- property: random counts against the reference -------------------------------------------

COUNTS = st.lists(st.integers(1, 6), min_size=1, max_size=12)


@given(COUNTS, st.sampled_from([None, "block", "cyclic", "plane", "block:cyclic", "*"]),
       st.integers(1, 5))
@settings(max_examples=300, deadline=None)
def test_place_matches_reference(counts: list[int], dist: str | None, plane: int) -> None:
    environ = {} if dist is None else {"SLURM_DISTRIBUTION": dist}
    if dist == "plane":
        environ["SLURM_DIST_PLANESIZE"] = str(plane)
    parsed = layout.parse_distribution(environ)
    assert isinstance(parsed, layout.Distribution)
    placed = layout.place(counts, parsed)
    node_of, local_of = synth.reference_layout(counts, dist, plane if dist == "plane" else None)
    assert placed.node_of == node_of
    assert placed.local_of == local_of
    # and the layout is a layout: node i holds exactly counts[i] ranks, local ranks 0.. in order
    for node, count in enumerate(counts):
        ranks = placed.ranks_on(node)
        assert len(ranks) == count
        assert [placed.local_of[r] for r in ranks] == list(range(count))
    assert placed.node_of[0] == 0


@given(COUNTS, st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_arbitrary_matches_reference(counts: list[int], rnd: object) -> None:
    hosts = [f"h{i}" for i in range(len(counts))]
    hostfile = [h for h, c in zip(hosts, counts) for _ in range(c)]
    rnd.shuffle(hostfile)  # type: ignore[attr-defined]
    placed = layout.place(counts, layout.Distribution("arbitrary"), hosts, hostfile)
    node_of, local_of = synth.reference_layout(
        counts, "arbitrary", hosts=hosts, hostfile_hosts=hostfile
    )
    assert (placed.node_of, placed.local_of) == (node_of, local_of)
