"""PALS apinfo files: the real files Slurm 22.05's cray_shasta wrote on the test cluster
(tests/fixtures/pals/, with what Slurm told each task), and files built here from the C
structs of versions 1 and 5 (Slurm's apinfo.c / apinfo.h, flux-coral2's apinfo5.h)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmenv.errors import SlurmEnvError
from slurmenv.launchers import apinfo

FIXTURES = Path(__file__).parent / "fixtures" / "pals"
REAL = sorted(p.stem for p in FIXTURES.glob("*.apinfo"))


def write(
    version: int,
    pes: list[tuple[int, int, int]],
    hosts: list[str],
    cmds: list[tuple[int, int, int]] | None = None,
) -> bytes:
    """An apinfo file as the C writers lay it out (x86_64): ``pes`` are (localidx, cmdidx,
    nodeidx) per rank. Written from the structs, independently of the parser."""
    cmds = cmds or [(len(pes), max(1, len(pes)), 1)]
    header = {1: 136, 5: 160}[version]
    profile, nic = {1: (52, 48), 5: (32, 104)}[version]
    cmd_off = header
    pe_off = cmd_off + 12 * len(cmds)
    node_off = pe_off + 12 * len(pes)
    total = node_off + 68 * len(hosts)
    head = struct.pack(
        "<i4xQ" + "QQi4x" * 5,
        version, total,
        profile, header, 0,
        12, cmd_off, len(cmds),
        12, pe_off, len(pes),
        68, node_off, len(hosts),
        nic, total, 0,
    )  # fmt: skip
    if version == 5:
        head += struct.pack("<QQQ", 0, 0, 0)
    body = b"".join(struct.pack("<3i", *c) for c in cmds)
    body += b"".join(struct.pack("<3i", *pe) for pe in pes)
    body += b"".join(struct.pack("<i64s", -1, h.encode()) for h in hosts)
    return head + body


def refusal(data: bytes) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as info:
        apinfo.parse(data, "/spool/apinfo")
    assert info.value.variable == "PALS_APINFO"
    assert info.value.value == "/spool/apinfo"
    assert info.value.fix
    return info.value


@pytest.mark.parametrize("name", REAL)
def test_real_file_matches_what_slurm_told_each_task(name: str) -> None:
    info = apinfo.read(str(FIXTURES / f"{name}.apinfo"))
    record = json.loads((FIXTURES / f"{name}.json").read_text())
    ranks = record["ranks"]
    assert info.version == 1  # Slurm 22.05.8 writes version 1
    assert len(info.nodes) == len(ranks) == int(ranks[0]["env"]["SLURM_STEP_NUM_TASKS"])
    for rank, task in enumerate(ranks):
        env = task["env"]
        assert int(env["SLURM_PROCID"]) == int(env["PALS_RANKID"]) == rank
        # the host the file gives this rank is the one it ran on
        assert info.hosts[info.nodes[rank]] == task["host"] == env["SLURMD_NODENAME"]
        assert info.local[rank] == int(env["SLURM_LOCALID"])
        on_node = [r for r, node in enumerate(info.nodes) if node == info.nodes[rank]]
        assert on_node == sorted(int(r) for r in env["SLURM_GTIDS"].split(","))
        if "SLURM_HET_SIZE" not in env:
            assert info.nodes[rank] == int(env["SLURM_NODEID"]) == int(env["PALS_NODEID"])


def test_real_heterogeneous_step_numbers_nodes_by_name_not_by_component() -> None:
    # Observed: in a heterogeneous step the file's node index follows the sorted node list,
    # PALS_NODEID (= SLURM_NODEID) the component order: they disagree for rank 0.
    info = apinfo.read(str(FIXTURES / "het.apinfo"))
    env0 = json.loads((FIXTURES / "het.json").read_text())["ranks"][0]["env"]
    assert info.hosts == ["r1n09", "r1n10", "r2n10"]
    assert info.nodes == [2, 0, 0, 1]
    assert env0["PALS_NODEID"] == "0"
    assert info.cmds == [0, 1, 1, 1] and info.ncmds == 2


def test_real_multi_prog_step_has_two_commands() -> None:
    info = apinfo.read(str(FIXTURES / "mp.apinfo"))
    assert info.cmds == [0, 0, 1, 1] and info.ncmds == 2
    assert info.counts == [3, 1]


def test_real_default_layout_is_uneven() -> None:
    info = apinfo.read(str(FIXTURES / "default.apinfo"))
    assert info.counts == [5, 1, 1, 1]
    assert info.hosts == ["r1n09", "r1n10", "r2n09", "r2n10"]
    assert info.local == [0, 1, 2, 3, 4, 0, 0, 0]


layouts = st.lists(st.integers(0, 5), min_size=1, max_size=8).flatmap(
    lambda nodes: st.tuples(st.just(len(set(nodes))), st.permutations(sorted(nodes)))
)


@given(layouts, st.sampled_from(apinfo.VERSIONS))
def test_written_files_round_trip(layout: tuple[int, list[int]], version: int) -> None:
    _, raw_nodes = layout
    # renumber node indices 0..k-1 in order of first use, count local indices per node
    order = {n: i for i, n in enumerate(dict.fromkeys(raw_nodes))}
    nodes = [order[n] for n in raw_nodes]
    local = [nodes[:r].count(n) for r, n in enumerate(nodes)]
    hosts = [f"nid{i:06d}" for i in range(len(order))]
    pes = [(lo, 0, n) for lo, n in zip(local, nodes)]
    info = apinfo.parse(write(version, pes, hosts))
    assert (info.version, info.nodes, info.local, info.hosts) == (version, nodes, local, hosts)
    assert sum(info.counts) == len(nodes)


@pytest.mark.parametrize("version", [0, 2, 3, 4, 6, 1 << 24])
def test_other_versions_are_refused_by_number(version: int) -> None:
    data = bytearray(write(5, [(0, 0, 0)], ["n1"]))
    data[:4] = struct.pack("<i", version)
    error = refusal(bytes(data))
    assert f"version {version}" in str(error)
    assert "1 and 5" in str(error)


def test_truncated_file_is_refused() -> None:
    data = write(1, [(0, 0, 0), (1, 0, 0)], ["n1"])
    assert "the header says" in str(refusal(data[:-1]))
    assert "too short" in str(refusal(data[:2]))
    assert "shorter than a version 1 header" in str(refusal(data[:100]))


def test_rank_on_a_missing_node_is_refused() -> None:
    assert "node index 1" in str(refusal(write(1, [(0, 0, 0), (0, 0, 1)], ["n1"])))


def test_repeated_local_index_is_refused() -> None:
    assert "local indices [0, 0]" in str(refusal(write(5, [(0, 0, 0), (0, 0, 0)], ["n1"])))


def test_unknown_command_is_refused() -> None:
    assert "command 1" in str(refusal(write(1, [(0, 1, 0)], ["n1"])))


def test_duplicate_or_empty_host_is_refused() -> None:
    pes = [(0, 0, 0), (0, 0, 1)]
    assert "listed twice" in str(refusal(write(1, pes, ["n1", "n1"])))
    assert "no usable host name" in str(refusal(write(1, pes, ["n1", ""])))


def test_wrong_record_size_is_refused() -> None:
    data = bytearray(write(1, [(0, 0, 0)], ["n1"]))
    data[64:72] = struct.pack("<Q", 16)  # pe_size
    assert "PE records of 16 bytes" in str(refusal(bytes(data)))


def test_missing_file_says_it_is_removed_when_the_application_ends(tmp_path: Path) -> None:
    with pytest.raises(SlurmEnvError) as info:
        apinfo.read(str(tmp_path / "apinfo"))
    assert info.value.variable == "PALS_APINFO"
    assert info.value.fix and "resolve inside the running task" in info.value.fix
