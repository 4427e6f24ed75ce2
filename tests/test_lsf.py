"""LSF jsrun tasks (fixture only: tests/fixtures/beyond/lsf_jsrun.json cites IBM's, the sites'
and Lightning's documents; LSF does not run here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import slurmenv
from slurmenv import launchers, ports
from slurmenv.errors import SlurmEnvError

CASE = json.loads((Path(__file__).parent / "fixtures" / "beyond" / "lsf_jsrun.json").read_text())[
    "cases"
][0]
NO_EPHEMERAL: dict[str, Any] = {"ephemeral_range": None}


def tasks(tmp_path: Path) -> list[dict[str, str]]:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("\n".join(CASE["rankfile"]) + "\n")
    return [{**task["env"], "LSB_DJOB_RANKFILE": str(rankfile)} for task in CASE["tasks"]]


def test_jsrun_tasks(tmp_path: Path) -> None:
    assert CASE["rankfile"][0] == "batch3"  # the launch node comes first
    for rank, env in enumerate(tasks(tmp_path)):
        assert launchers.detect(env).NAME == "lsf"  # not openmpi, though OMPI_COMM_WORLD_* are set
        res = slurmenv.resolve(env, **NO_EPHEMERAL)
        assert (res.rank, res.world_size, res.local_rank, res.local_world_size) == (
            rank, 6, rank % 3, 3,
        )
        assert (res.node_rank, res.nnodes) == (rank // 3, 2)
        assert res.hostname == CASE["tasks"][rank]["host"] != env["HOSTNAME"]
        assert res.master_addr == "a01n01"  # the first compute host, never the launch node
        assert res.master_port == ports.block_ports(123456, 0, ports.DEFAULT_RANGE, 3).master
        assert "launch node" in res.sources["MASTER_ADDR"]


@pytest.mark.parametrize(
    ("change", "variable"),
    [({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_RANK"),
     ({"JSM_NAMESPACE_SIZE": "9", "OMPI_COMM_WORLD_SIZE": "9"}, "JSM_NAMESPACE_SIZE"),
     ({"JSM_NAMESPACE_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
      "JSM_NAMESPACE_LOCAL_RANK"),
     ({"LSB_DJOB_RANKFILE": "/nonexistent/rankfile"}, "LSB_DJOB_RANKFILE")],
)  # fmt: skip
def test_refusals(tmp_path: Path, change: dict[str, str], variable: str) -> None:
    env = {**tasks(tmp_path)[4], **change}  # rank 4: host 1, local 1
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == variable


def test_rankfile_with_only_the_launch_node_is_refused(tmp_path: Path) -> None:
    env = tasks(tmp_path)[0]
    Path(env["LSB_DJOB_RANKFILE"]).write_text("batch3\n")
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "LSB_DJOB_RANKFILE" and "launch node" in str(info.value)
