"""``slurmenv show``: --all-ranks, --one-line, --json on synthetic step environments.

The layout is checked against the independent reference in tests/synth.py, and what one task
says about another against what that other task resolves itself. Real Slurm:
tests/test_real_debugging.py.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv.commands import show
from slurmenv.commands.main import main

HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]


def use_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """Make ``env`` this process's environment (minus anything Slurm or launcher left)."""
    keep = synth.clean_env()
    for name in list(os.environ):
        if name not in keep:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def resolve(env: Mapping[str, str]) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=None)


layouts = st.sampled_from([None, "block", "cyclic", "plane"])


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    distribution=layouts,
    plane=st.integers(1, 3),
    data=st.data(),
)
def test_table_is_the_reference_layout_from_any_task(
    counts: list[int], distribution: str | None, plane: int, data: st.DataObject
) -> None:
    hosts = [f"node{i:02d}" for i in range(len(counts))]
    kwargs = {"distribution": distribution, "plane": plane if distribution == "plane" else None}
    node_of, local_of = synth.reference_layout(counts, **kwargs)
    rank = data.draw(st.integers(0, sum(counts) - 1))
    env = synth.step_env(hosts, counts, rank, **kwargs)  # type: ignore[arg-type]
    table = show.step_table(resolve(env), env)
    assert [r["node"] for r in table["ranks"]] == [hosts[n] for n in node_of]
    assert [r["node_rank"] for r in table["ranks"]] == node_of
    assert [r["local_rank"] for r in table["ranks"]] == local_of
    assert [r["rank"] for r in table["ranks"] if r["master"]] == [0]
    assert [r["rank"] for r in table["ranks"] if r["self"]] == [rank]
    assert table["master"]["node"] == hosts[node_of[0]]
    # Every other task computes the same table, and each rank's ports are the ones that rank
    # uses itself (its MASTER_PORT and its own TF_CONFIG entry).
    other = data.draw(st.integers(0, sum(counts) - 1))
    other_env = synth.step_env(hosts, counts, other, **kwargs)  # type: ignore[arg-type]
    other_res = resolve(other_env)
    other_table = show.step_table(other_res, other_env)

    def strip(t: dict[str, object]) -> object:
        return [{k: v for k, v in r.items() if k != "self"} for r in t["ranks"]]  # type: ignore[attr-defined]

    assert strip(other_table) == strip(table)
    own = other_table["ranks"][other]
    tf_port = int(other_res.tf_config["cluster"]["worker"][other].rsplit(":", 1)[1])
    expected = ([other_res.master_port] if other == 0 else []) + [tf_port]
    assert own["ports"] == expected


def test_arbitrary_layout_table_follows_the_host_file(tmp_path: os.PathLike[str]) -> None:
    hostfile_hosts = ["r2n10", "r1n09", "r2n10", "r1n10", "r1n09"]
    path = os.path.join(tmp_path, "hosts")
    with open(path, "w") as handle:
        handle.write("\n".join(hostfile_hosts) + "\n")
    hosts, counts = ["r1n09", "r1n10", "r2n10"], [2, 1, 2]
    env = synth.step_env(
        hosts, counts, 3, "arbitrary", hostfile_hosts=hostfile_hosts, SLURM_HOSTFILE=path
    )
    table = show.step_table(resolve(env), env)
    assert [r["node"] for r in table["ranks"]] == hostfile_hosts
    assert table["master"]["node"] == "r2n10"
    assert [r["local_rank"] for r in table["ranks"]] == [0, 0, 1, 0, 1]


def test_all_ranks_text_marks_master_and_self(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_env(monkeypatch, synth.step_env(HOSTS, [5, 1, 1, 1], 6, job_id=77, step_id=3))
    assert main(["show", "--all-ranks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    res = resolve(synth.step_env(HOSTS, [5, 1, 1, 1], 6, job_id=77, step_id=3))
    assert lines[0].startswith("job 77 step 3: 8 ranks on 4 nodes, block")
    assert f"master r1n09:{res.master_port} (rank 0 on r1n09, marked *)" in lines[0]
    header, rows = lines[1], lines[2:10]
    assert header.split() == ["RANK", "NODE", "NODE_RANK", "LOCAL_RANK", "PORTS", "GPUS"]
    assert rows[0].split()[0] == "0*"
    assert [row.split()[0] for row in rows[1:]] == [str(r) for r in range(1, 8)]
    assert [row for row in rows if "<- this task" in row] == [rows[6]]
    # columns line up: every NODE cell starts under the header's NODE
    start = header.index("NODE")
    assert {row[start:start + 5] for row in rows} == set(HOSTS)
    assert rows[0].split()[4] == f"{res.master_port},{res.tf_config['cluster']['worker'][0][-5:]}"


def one_lines(envs: list[dict[str, str]]) -> list[str]:
    return [show.one_line(resolve(env), env) for env in envs]


def test_one_line_sorts_by_rank_and_lines_up() -> None:
    envs = synth.step_envs(HOSTS, [3, 3, 3, 3], distribution="cyclic", job_id=9, step_id=2)
    lines = one_lines(envs)
    shuffled = lines[:]
    random.Random(1).shuffle(shuffled)
    assert sorted(shuffled) == lines  # plain sort = rank order (zero-padded ranks)
    assert [line.split()[0] for line in lines[:3]] == ["rank=00/12", "rank=01/12", "rank=02/12"]
    for key in ("node=", "node_rank=", "local_rank=", "master=", "tf=", "cluster=", "gpus="):
        assert len({line.index(key) for line in lines}) == 1, key
    assert len({line.split("cluster=")[1].split()[0] for line in lines}) == 1
    # rank 5 of a cyclic layout runs on the second node as its second task
    assert "node=r1n10 node_rank=1/4 local_rank=1/3" in lines[5]


def test_one_line_shows_the_task_that_disagrees() -> None:
    envs = synth.step_envs(HOSTS, [2, 2, 2, 2])
    envs[5]["MASTER_PORT"] = "23456"  # left over from the batch script in one task only
    lines = one_lines(envs)
    masters = [line.split("master=")[1].split()[0] for line in lines]
    assert masters[5] == "r1n09:23456"
    assert len(set(masters[:5] + masters[6:])) == 1 and masters[0] != masters[5]
    assert len({line.index("master=") for line in lines}) == 1


def test_one_line_error_sorts_in_place(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = synth.step_env(HOSTS, [5, 1, 1, 1], 0)
    batch = {k: v for k, v in env.items() if not k.startswith("SLURM_STEP")}  # batch script
    use_env(monkeypatch, batch)
    assert main(["show", "--one-line"]) == 1
    out, err = capsys.readouterr()
    assert re.fullmatch(r"rank=0/8 node=r1n09 ERROR inside Slurm job 4242 .*\n", out)
    assert "SLURM_STEP_ID" in out and "outside any job step" in err


def test_json_of_own_task(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_env(monkeypatch, synth.step_env(HOSTS, [2, 2, 2, 2], 3))
    assert main(["show", "--json", "--for", "torch"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rank"] == 3 and data["env"]["RANK"] == "3"
    assert data["env"]["MASTER_ADDR"] == "r1n09" and "TF_CONFIG" not in data["env"]
    assert data["sources"]["RANK"] == "SLURM_PROCID=3"


def test_all_ranks_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    use_env(monkeypatch, synth.step_env(HOSTS, [2, 2, 2, 2], 3, "cyclic"))
    assert main(["show", "--all-ranks", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["self"] == 3 and data["layout"] == "cyclic"
    assert [r["node"] for r in data["ranks"]] == HOSTS * 2


def test_one_line_and_json_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["show", "--one-line", "--json"])
    assert exc.value.code == 2
    assert "--one-line is text" in capsys.readouterr().err


def gpus_of(env: dict[str, str]) -> list[str]:
    return show.gpu_column(resolve(env), env)[0]


def test_gpus_shared_by_the_tasks_of_a_node() -> None:
    # srun -N2 --ntasks-per-node=2 --gres=gpu:3 (observed: every task sees 0,1,2)
    env = synth.step_env(
        ["g1n1", "g1n2"], [2, 2], 1, CUDA_VISIBLE_DEVICES="0,1,2", SLURM_STEP_GPUS="0,1,2",
        SLURM_GPUS_ON_NODE="3",
    )
    assert gpus_of(env) == ["0,1,2", "0,1,2", "?", "?"]


def test_gpus_bound_per_task_by_slurm() -> None:
    # srun -N2 --ntasks-per-node=2 --gpus-per-task=1, as observed for task 1: SLURM_STEP_GPUS
    # is narrowed too, only SLURM_GPUS_ON_NODE tells the node has 2
    env = synth.step_env(
        ["g1n1", "g1n2"], [2, 2], 1, CUDA_VISIBLE_DEVICES="1", SLURM_STEP_GPUS="1",
        SLURM_GPUS_ON_NODE="2", ROCR_VISIBLE_DEVICES="1", GPU_DEVICE_ORDINAL="1",
    )
    assert gpus_of(env) == ["?", "1", "?", "?"]


def test_gpus_bound_by_slurmenv() -> None:
    env = synth.step_env(
        ["g1n1", "g1n2"], [2, 2], 3, CUDA_VISIBLE_DEVICES="4,5,6,7", SLURM_GPUS_ON_NODE="4",
        SLURMENV_BIND_GPUS="1",
    )
    assert gpus_of(env) == ["?", "?", "4,5", "6,7"]


def test_no_gpus() -> None:
    assert gpus_of(synth.step_env(HOSTS, [2, 1, 1, 1], 4)) == ["-"] * 5


def test_all_ranks_under_torchrun_says_why_not(tmp_path: Path) -> None:
    from test_world_of_one import run_under

    # a worker of a real process named torchrun (its agent: issue 42), in an srun task
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 3, TORCHELASTIC_RUN_ID="r", RANK="1",
                         WORLD_SIZE="2", MASTER_ADDR="r1n10", MASTER_PORT="29400",
                         LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    env = synth.clean_env(PYTHONPATH=str(Path(__file__).resolve().parents[1]), **env)
    show = [sys.executable, "-m", "slurmenv", "show"]
    out = run_under("torchrun", tmp_path, [*show, "--all-ranks"], env)
    assert out.returncode == 1
    assert "--all-ranks needs the whole step's layout, but torchrun" in out.stderr
    out = run_under("torchrun", tmp_path, [*show, "--one-line"], env)
    assert out.returncode == 0, out.stderr  # this task alone is known
    assert out.stdout.startswith("rank=1/2 node=r1n10 ")


def mpi_rank_env(name: str, rank: int) -> dict[str, str]:
    """A rank recorded on the real cluster (tests/fixtures/mpi/, see test_mpi.py)."""
    path = Path(__file__).resolve().parent / "fixtures" / "mpi" / f"{name}.json"
    ranks = json.loads(path.read_text())["ranks"]
    return dict(ranks[rank]["env"])


def test_mpi_rank_in_a_job_but_in_no_step_says_job_not_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """mpirun in a batch script: the ranks are in job 1 but in no step of it (the daemon step
    is not theirs). Before, --one-line printed step=1.None and show 'job 1 step None'."""
    env = mpi_rank_env("openmpi_default", 0)
    res = slurmenv.resolve(env, ephemeral_range=None, cpus=1)
    assert (res.launcher, res.job_id, res.step_id) == ("openmpi", "1", None)
    line = show.one_line(res, env)
    assert " job=1 " in line and "step=" not in line and "None" not in line
    use_env(monkeypatch, env)
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    # in the launcher's own words, not srun's: mpirun's node, the batch script's variables
    assert ("launcher: openmpi (a rank of Open MPI's mpirun in Slurm job 1 (its Slurm variables "
            "are the batch script's: mpirun's own node))") in out
    assert "step" not in out.splitlines()[0].replace("Slurm job", "")
    assert "None" not in out
    # Hydra's ranks are tasks of its proxy step: that one is still shown
    hydra = mpi_rank_env("hydra_default", 0)
    assert " step=1.6 " in show.one_line(slurmenv.resolve(hydra, ephemeral_range=None), hydra)


def test_all_ranks_under_mpirun_names_the_mpi_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An MPI rank knows only its own place: --all-ranks refuses, naming the variable its rank
    came from (not an unset RANK) and a fix that fits an MPI launch."""
    env = mpi_rank_env("openmpi_default", 2)
    use_env(monkeypatch, env)
    assert main(["show", "--all-ranks"]) == 1
    err = capsys.readouterr().err
    assert f"variable: OMPI_COMM_WORLD_RANK='{env['OMPI_COMM_WORLD_RANK']}'" in err
    assert "mpirun ..." in err


def test_show_says_an_inherited_master_port_is_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The classic ``export MASTER_PORT=29500`` of a batch script wins over the step's port:
    show says so, naming the variable and its value (and says nothing without it)."""
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 3, job_id=77, step_id=3)
    use_env(monkeypatch, {**env, "MASTER_PORT": "29500"})
    assert main(["show"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert [n for n in notes if "MASTER_PORT" in n] == [(
        "note: MASTER_PORT=29500 was already set (inherited): kept as your choice, not derived "
        "for this step; a step of this job running at the same time with its rank 0 on the same "
        "node would take the same port (unset it to get one per step)")]
    use_env(monkeypatch, env)
    assert main(["show"]) == 0
    assert "MASTER_PORT=" not in "".join(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("note:"))
