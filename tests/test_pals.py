"""The PALS launcher (PBS Pro + Cray PALS mpiexec; cray_shasta tasks whose Slurm variables are
hidden): real apinfo files and task environments Slurm 22.05 wrote here
(tests/fixtures/pals/), and PBS+PALS's documented variables (tests/fixtures/beyond/pbs_pals.json,
fixture only: HPE's mpiexec does not run here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_apinfo import write

import slurmenv
from slurmenv import launchers, ports
from slurmenv.errors import SlurmEnvError
from slurmenv.launchers import pals

HERE = Path(__file__).parent
REAL = HERE / "fixtures" / "pals"
PBS = json.loads((HERE / "fixtures" / "beyond" / "pbs_pals.json").read_text())["cases"][0]
NO_EPHEMERAL: dict[str, Any] = {"ephemeral_range": None}


def real_tasks(name: str, hide_slurm: bool) -> list[dict[str, str]]:
    """The recorded environments of a real cray_shasta step, PALS_APINFO pointing at the
    recorded file; with ``hide_slurm`` every SLURM* variable removed."""
    ranks = json.loads((REAL / f"{name}.json").read_text())["ranks"]
    envs = []
    for task in ranks:
        env = {k: v for k, v in task["env"].items() if not (hide_slurm and k.startswith("SLURM"))}
        env["PALS_APINFO"] = str(REAL / f"{name}.apinfo")
        envs.append(env)
    return envs


def pbs_tasks(tmp_path: Path, version: int = 5) -> list[dict[str, str]]:
    info = PBS["apinfo"]
    path = tmp_path / "apinfo"
    pes = [(lo, 0, n) for lo, n in zip(info["local"], info["nodes"])]
    path.write_bytes(write(version, pes, info["hosts"]))
    return [{**task["env"], "PALS_APINFO": str(path)} for task in PBS["tasks"]]


@pytest.mark.parametrize("name", ["default", "cyc6", "plane", "mp"])
def test_real_cray_shasta_tasks_with_slurm_hidden(name: str) -> None:
    record = json.loads((REAL / f"{name}.json").read_text())["ranks"]
    seen = set()
    for rank, env in enumerate(real_tasks(name, hide_slurm=True)):
        truth = record[rank]["env"]
        res = slurmenv.resolve(env, **NO_EPHEMERAL)
        assert res.launcher == "pals"
        assert res.rank == rank == int(truth["SLURM_PROCID"])
        assert res.local_rank == int(truth["SLURM_LOCALID"])
        assert res.node_rank == int(truth["SLURM_NODEID"])
        assert res.world_size == int(truth["SLURM_STEP_NUM_TASKS"])
        assert res.local_world_size == len(truth["SLURM_GTIDS"].split(","))
        assert res.hostname == record[rank]["host"]
        assert res.master_addr == record[0]["host"]
        job, step = truth["PALS_APID"].split(".")
        assert res.master_port == ports.block_ports(int(job), int(step), ports.DEFAULT_RANGE, 1).master
        assert str(res.master_port) != truth["PMI_CONTROL_PORT"]
        workers = res.tf_config["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == [t["host"] for t in record]
        seen.add((res.master_addr, res.master_port))
    assert len(seen) == 1


@pytest.mark.parametrize("name", ["default", "cyc6", "plane", "het", "mp"])
def test_inside_a_real_step_slurm_stays_the_truth(name: str) -> None:
    """srun --mpi=cray_shasta tasks carry PALS_*, yet Slurm's variables describe them: the
    registry tries slurm first, and PMI_CONTROL_PORT (the first reserved port) is skipped."""
    for rank, env in enumerate(real_tasks(name, hide_slurm=False)):
        # a heterogeneous step is read by the het module, a Slurm step all the same
        assert launchers.detect(env).NAME == ("slurm-het" if name == "het" else "slurm")
        res = slurmenv.resolve(env, **NO_EPHEMERAL)
        assert res.launcher == "slurm"
        assert res.rank == rank
        reserved = ports.parse_port_list(env["SLURM_STEP_RESV_PORTS"], "SLURM_STEP_RESV_PORTS")
        assert env["PMI_CONTROL_PORT"] == str(reserved[0])
        assert res.master_port == reserved[1]
        assert "PMI_CONTROL_PORT" in res.sources["MASTER_PORT"]


def test_real_heterogeneous_step_with_slurm_hidden_is_refused() -> None:
    env = real_tasks("het", hide_slurm=True)[0]
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "PALS_NODEID" and info.value.value == "0"
    assert "the node index of rank 0 in the apinfo file (PALS_APINFO, version 1) is 2" in str(
        info.value
    )


def test_pbs_pals_fixture(tmp_path: Path) -> None:
    hosts = PBS["apinfo"]["hosts"]
    apid = PBS["tasks"][0]["env"]["PALS_APID"]
    expected_port = ports.launch_ports(4711, ports.stable_hash(apid), ports.DEFAULT_RANGE, 4).master
    for rank, env in enumerate(pbs_tasks(tmp_path)):
        res = slurmenv.resolve(env, **NO_EPHEMERAL)
        assert (res.launcher, res.rank, res.world_size) == ("pals", rank, 8)
        assert (res.local_rank, res.local_world_size) == (rank % 4, 4)
        assert (res.node_rank, res.nnodes) == (rank // 4, 2)
        assert res.master_addr == hosts[0] and res.hostname == hosts[rank // 4]
        assert res.master_port == expected_port
        assert str(res.master_port) not in env["PMI_CONTROL_PORT"].split(",")
        assert "4711" in res.sources["MASTER_PORT"]
        assert res.job_id == env["PBS_JOBID"]


@pytest.mark.parametrize(
    ("name", "value"),
    [("PMI_SIZE", "9"), ("PMI_RANK", "5"), ("PALS_NODEID", "0"), ("PALS_LOCAL_RANKID", "3"),
     ("PMI_LOCAL_RANK", "0"), ("PALS_LOCAL_SIZE", "5"), ("PMI_LOCAL_SIZE", "2")],
)  # fmt: skip
def test_pals_values_must_agree_with_the_apinfo_file(tmp_path: Path, name: str, value: str) -> None:
    env = {**pbs_tasks(tmp_path)[6], name: value}  # rank 6: node 1, local 2
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert (info.value.variable, info.value.value) == (name, value)


def test_rank_beyond_the_apinfo_file_is_refused(tmp_path: Path) -> None:
    env = {**pbs_tasks(tmp_path)[0], "PALS_RANKID": "8", "PMI_RANK": "8"}
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "PALS_RANKID"


def test_removed_apinfo_file_is_refused(tmp_path: Path) -> None:
    env = pbs_tasks(tmp_path)[0]
    Path(env["PALS_APINFO"]).unlink()
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "PALS_APINFO"


def test_pbs_jobid_alone_is_not_pbs() -> None:
    # Slurm's spank_pbs plugin sets PBS_JOBID in Slurm jobs: never a PALS/PBS task by itself
    assert launchers.detect({"PBS_JOBID": "12.server"}).NAME != "pals"
    assert launchers.detect({"PBS_JOBID": "12", "PBS_NODEFILE": "/x"}).NAME != "pals"
    env = real_tasks("default", hide_slurm=False)[3]
    assert launchers.detect({**env, "PBS_JOBID": env["SLURM_JOB_ID"]}).NAME == "slurm"


def test_nodefile_fallback_says_when_it_holds(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x1\nx1\nx2\nx2\n")  # one line per slot
    env = {**PBS["tasks"][5]["env"], "PBS_NODEFILE": str(nodefile)}
    del env["PALS_APINFO"]
    res = slurmenv.resolve(env, **NO_EPHEMERAL)
    assert (res.rank, res.local_rank, res.node_rank, res.nnodes) == (5, 1, 1, 2)
    assert res.master_addr == "x1" and res.hostname == "x2"
    assert "default host file" in res.sources["MASTER_ADDR"]
    assert any("default host file" in note for note in res.notes)
    with pytest.raises(SlurmEnvError):
        assert res.tf_config is None  # no layout without the apinfo file: raises


def test_nodefile_fallback_needs_every_value(tmp_path: Path) -> None:
    env = {k: v for k, v in PBS["tasks"][0]["env"].items() if k not in ("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE", "PALS_APINFO")}
    env["PBS_NODEFILE"] = str(tmp_path / "absent")
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert "PALS_LOCAL_SIZE" in str(info.value)


def test_port_seed() -> None:
    assert ports.stable_hash("a") == 0xE40C292C  # FNV-1a 32 test vector
    seed = pals.port_seed
    assert seed({"PBS_JOBID": "4711.pbs01", "PALS_APID": "x"})[0] == (4711, ports.stable_hash("x"))
    assert seed({"PBS_JOBID": "4711[3].pbs01"})[0] == (4711, 0)
    assert seed({"PALS_APID": "12.3"})[0] == (12, 3)
    assert seed({"PBS_JOBID": "12.pbs", "PALS_APID": "12.3"})[0] == (12, 3)
    assert seed({"PALS_APID": "f3a1"})[0] == (ports.stable_hash("f3a1"), ports.stable_hash("f3a1"))
    # a hashed APID is a launch key (launch_ports, rivals.py); Slurm's <job>.<step> is not
    assert pals.launch_key({"PALS_APID": "f3a1"}) == ("PALS_APID", "f3a1")
    assert pals.launch_key({"PALS_APID": "12.3", "PBS_JOBID": "4711"}) is None
    assert pals.launch_key({}) is None
    assert seed({})[0] is None


def test_no_launch_id_asks_for_a_port(tmp_path: Path) -> None:
    env = {k: v for k, v in pbs_tasks(tmp_path)[0].items() if k not in ("PBS_JOBID", "PALS_APID")}
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "MASTER_PORT" and "--port" in (info.value.fix or "")
    assert slurmenv.resolve(env, port=23456, **NO_EPHEMERAL).master_port == 23456


def test_explicit_port_that_pals_binds_is_refused(tmp_path: Path) -> None:
    env = pbs_tasks(tmp_path)[0]
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve({**env, "MASTER_PORT": "11002"}, **NO_EPHEMERAL)
    assert info.value.variable == "MASTER_PORT" and "PMI_CONTROL_PORT" in str(info.value)


def test_dump_keeps_the_apinfo_file_for_replay(tmp_path: Path) -> None:
    """PALS removes its apinfo file when the application ends: a dump records it (binary),
    and the replay resolves the same anywhere."""
    from slurmenv import dump

    envs = pbs_tasks(tmp_path)
    data = dump.collect(envs[5])
    assert "PALS_APINFO" in data["binary_files"]
    Path(envs[5]["PALS_APINFO"]).unlink()  # the application ended
    saved = tmp_path / "dump.json"
    saved.write_text(json.dumps(data))
    res, recorded = dump.load(str(saved)).replay()
    assert res is not None and recorded == data["resolution"]
    assert (res.launcher, res.rank, res.node_rank, res.master_addr) == ("pals", 5, 1, PBS["apinfo"]["hosts"][0])


def test_too_few_tensorflow_ports_name_where_the_ports_came_from() -> None:
    """The one shared refusal (ports.too_few_tf_ports): here the TF ports follow --port and
    would pass 65535, so the error names --port, not the formula's range. Only TF_CONFIG is
    refused: the torch variables still resolve (the fix says --for torch)."""
    env = real_tasks("default", hide_slurm=True)[0]
    res = slurmenv.resolve(env, port=65535, **NO_EPHEMERAL)
    assert res.master_port == 65535 and res.env("torch")["MASTER_PORT"] == "65535"
    with pytest.raises(SlurmEnvError) as info:
        res.tf_config  # noqa: B018 - computes TF_CONFIG
    assert info.value.variable == "--port"
    assert "--for torch" in (info.value.fix or "")
