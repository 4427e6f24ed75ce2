"""Flux tasks (fixture only: tests/fixtures/beyond/flux.json cites flux-core's task.c and
flux-coral2's cray_pals.c; Flux does not run here). The cray-pals apinfo file is built with
the version-1 structs (as flux-coral2's apinfo_create(1) writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import synth
from test_apinfo import write

import slurmenv
from slurmenv import launchers, pipeline, ports
from slurmenv.errors import SlurmEnvError
from slurmenv.options import Options

FIXTURES = Path(__file__).parent / "fixtures" / "beyond"
NO_EPHEMERAL: dict[str, Any] = {"ephemeral_range": None}
DATA = json.loads((FIXTURES / "flux.json").read_text())


def case(name: str) -> dict[str, Any]:
    return next(c for c in DATA["cases"] if c["name"] == name)


def with_master(env: dict[str, str], addr: str) -> Any:
    options = SimpleNamespace(**{**Options()._asdict(), "master_addr": addr})
    return pipeline.resolve(env, options, None)  # type: ignore[arg-type]


def test_cray_pals_apinfo_gives_the_layout(tmp_path: Path) -> None:
    found = case("cray_pals")
    info = found["apinfo"]
    path = tmp_path / "libpals_apinfo"
    path.write_bytes(write(1, [(lo, 0, n) for lo, n in zip(info["local"], info["nodes"])],
                           info["hosts"]))  # fmt: skip
    seen = set()
    for rank, task in enumerate(found["tasks"]):
        env = {**task["env"], "PALS_APINFO": str(path)}
        assert launchers.detect(env).NAME == "flux"
        res = slurmenv.resolve(env, **NO_EPHEMERAL)
        assert (res.launcher, res.rank, res.world_size, res.nnodes) == ("flux", rank, 4, 2)
        assert (res.local_rank, res.local_world_size, res.node_rank) == (rank % 2, 2, rank // 2)
        assert res.master_addr == "tioga17" and res.hostname == task["host"]
        job = env["FLUX_JOB_ID"]
        assert res.master_port == ports.launch_ports(
            ports.stable_hash(job), ports.stable_hash(job), ports.DEFAULT_RANGE, 2
        ).master
        assert str(res.master_port) not in env["PMI_CONTROL_PORT"].split(",")
        assert [w.split(":")[0] for w in res.tf_config["cluster"]["worker"]] == [
            "tioga17", "tioga17", "tioga18", "tioga18",
        ]
        seen.add(res.master_port)
    assert len(seen) == 1


def test_apinfo_must_be_this_jobs(tmp_path: Path) -> None:
    env = dict(case("cray_pals")["tasks"][0]["env"])
    path = tmp_path / "apinfo"
    path.write_bytes(write(1, [(0, 0, 0), (1, 0, 0), (0, 0, 1)], ["a", "b"]))  # 3 ranks
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve({**env, "PALS_APINFO": str(path)}, **NO_EPHEMERAL)
    assert info.value.variable == "FLUX_JOB_SIZE"


@pytest.mark.parametrize(("name", "local_world"), [("one_per_node", 1), ("one_node", 3)])
def test_one_way_layouts_need_the_master_address(name: str, local_world: int) -> None:
    tasks = case(name)["tasks"]
    for rank, task in enumerate(tasks):
        env = task["env"]
        with pytest.raises(SlurmEnvError) as info:
            slurmenv.resolve(env, **NO_EPHEMERAL)
        assert info.value.variable == "MASTER_ADDR" and "--master-addr" in (info.value.fix or "")
        res = with_master(env, "10.1.0.7")
        assert (res.rank, res.world_size, res.local_world_size) == (rank, len(tasks), local_world)
        assert res.node_rank == (rank if local_world == 1 else 0)
        assert res.master_addr == "10.1.0.7"


def test_unknown_layout_is_refused() -> None:
    env = case("plain")["tasks"][3]["env"]
    with pytest.raises(SlurmEnvError) as info:
        with_master(env, "10.1.0.7")
    assert info.value.variable == "FLUX_JOB_NNODES" and "cray-pals" in (info.value.fix or "")


def test_simple_pmi_must_agree() -> None:
    env = {**case("one_node")["tasks"][1]["env"], "PMI_RANK": "2"}
    with pytest.raises(SlurmEnvError) as info:
        with_master(env, "10.1.0.7")
    assert info.value.variable == "PMI_RANK"


def test_flux_inside_a_slurm_allocation_is_flux() -> None:
    # srun flux start: the broker's SLURM_* (even ones that happen to agree) are not the task's
    step = synth.step_env(["n1", "n2"], [1, 1], 0)
    env = {**step, **case("one_per_node")["tasks"][0]["env"]}
    assert launchers.detect(env).NAME == "flux"
    assert launchers.detect(step).NAME == "slurm"
