"""``slurmenv torchrun`` and ``export --for torchrun`` on synthetic Slurm steps.

The command lines slurmenv builds are read back with torchrun's own argument parser (torch
2.13), so "the option reaches torchrun with this value" is what is checked, not a string.
Two tests run real torchrun agents (two "nodes" on loopback, two workers each) through
``slurmenv torchrun`` and through plain ``torchrun`` with ``PET_*`` variables; the real
multi-node runs are in test_real_torchrun.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from synth import clean_env, compress_counts, step_env

import slurmenv
from slurmenv.commands import torchrun
from slurmenv.errors import SlurmEnvError

HOSTS = ["n1", "n2", "n3"]
PROGRAMS = Path(__file__).parent / "programs"
SCRIPT = ["train.py", "--lr", "0.1"]


def node_env(hosts: Sequence[str], counts: Sequence[int], rank: int, **extra: str | None) -> dict[str, str]:
    """A clean environment of one task of a synthetic step (nothing inherited from pytest)."""
    return clean_env(**{k: v for k, v in step_env(hosts, counts, rank, **extra).items()})


def build(env: Mapping[str, str], args: Sequence[str] = SCRIPT, **kw: Any) -> torchrun.Launch:
    return torchrun.build(args, env, ephemeral_range=None, **kw)


@contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ replaced by ``env`` (torchrun's parser reads PET_* when it is built)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def torchrun_reads(launch: torchrun.Launch) -> Any:
    """torchrun's own parse of the command slurmenv would exec, in its environment."""
    run = pytest.importorskip("torch.distributed.run")
    skip = len(torchrun.torchrun_command())
    with environ(launch.environ):
        return run.get_args_parser().parse_args(launch.argv[skip:])


def option_count(argv: Sequence[str], option: str) -> int:
    """How many times ``--option`` (any spelling) is given before the script."""
    skip = len(torchrun.torchrun_command())
    _, end = torchrun.scan(argv[skip:])
    count = 0
    for token in argv[skip: skip + end]:
        name, _ = torchrun._canonical(token)
        count += name == option
    return count


# -- the filled-in options -----------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_every_node_gets_the_same_rendezvous_and_its_own_host_flag(rank: int) -> None:
    env = node_env(HOSTS, [1, 1, 1], rank, job_id=777, step_id=3)
    launch = build(env)
    args = torchrun_reads(launch)
    port = slurmenv.resolve(env, ephemeral_range=None).master_port
    assert args.nnodes == "3"
    assert args.nproc_per_node == "1"  # no GPU variable: torchrun's default, said explicitly
    assert args.rdzv_backend == "c10d"
    assert args.rdzv_endpoint == f"n1:{port}"
    assert args.rdzv_id == "777.3"
    assert args.rdzv_conf == f"is_host={int(rank == 0)}"
    assert args.node_rank == 0  # not passed with c10d: torchrun would ignore it and warn
    assert args.training_script == "train.py"
    assert args.training_script_args == ["--lr", "0.1"]


def test_two_steps_of_a_job_meet_different_rendezvous() -> None:
    a = torchrun_reads(build(node_env(HOSTS, [1, 1, 1], 1, job_id=900, step_id=0)))
    b = torchrun_reads(build(node_env(HOSTS, [1, 1, 1], 1, job_id=900, step_id=1)))
    assert a.rdzv_id != b.rdzv_id
    assert a.rdzv_endpoint != b.rdzv_endpoint


def test_reserved_ports_give_the_rendezvous_port() -> None:
    env = node_env(HOSTS, [1, 1, 1], 2, SLURM_STEP_RESV_PORTS="12003-12004")
    assert torchrun_reads(build(env)).rdzv_endpoint == "n1:12003"


def test_address_template_reaches_endpoint_and_local_addr() -> None:
    env = node_env(HOSTS, [1, 1, 1], 1, SLURMENV_ADDR_TEMPLATE="{host}-ib")
    args = torchrun_reads(build(env))
    assert args.rdzv_endpoint.startswith("n1-ib:")
    assert args.local_addr == "n2-ib"


@pytest.mark.parametrize(
    ("gpu_vars", "nproc"),
    [
        ({}, 1),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 3),
        ({"CUDA_VISIBLE_DEVICES": "GPU-4f1c,GPU-9a2e"}, 2),  # UUIDs (MIG, some sites)
        ({"CUDA_VISIBLE_DEVICES": ""}, 1),  # set but empty: CUDA sees no GPU
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 1),
        ({"CUDA_VISIBLE_DEVICES": "3", "SLURM_STEP_GPUS": "2,3"}, 1),  # what CUDA sees wins
        ({"ROCR_VISIBLE_DEVICES": "0,1"}, 2),
        ({"ZE_AFFINITY_MASK": "0,1,2,3"}, 4),
    ],
)
def test_nproc_per_node_counts_the_gpus_of_the_task(gpu_vars: dict[str, str], nproc: int) -> None:
    env = node_env(HOSTS, [1, 1, 1], 0, **gpu_vars)
    assert torchrun_reads(build(env)).nproc_per_node == str(nproc)


def test_outside_slurm_one_node_on_loopback() -> None:
    env = clean_env()
    args = torchrun_reads(build(env))
    assert args.nnodes == "1"
    assert args.rdzv_endpoint.startswith("127.0.0.1:")
    assert args.rdzv_conf == "is_host=1"


# -- options given by the user win -----------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "option", "attribute", "value"),
    [
        (["--nnodes=1:3"], "nnodes", "nnodes", "1:3"),
        (["--nnodes", "1:3"], "nnodes", "nnodes", "1:3"),
        (["--nnode", "1:3"], "nnodes", "nnodes", "1:3"),  # argparse's abbreviation
        (["--nproc_per_node", "4"], "nproc-per-node", "nproc_per_node", "4"),
        (["--nproc-per-node=gpu"], "nproc-per-node", "nproc_per_node", "gpu"),
        (["--rdzv-id", "mine"], "rdzv-id", "rdzv_id", "mine"),
        (["--rdzv_conf=timeout=900"], "rdzv-conf", "rdzv_conf", "timeout=900"),
        (["--rdzv-backend", "etcd-v2"], "rdzv-backend", "rdzv_backend", "etcd-v2"),
    ],
)
def test_user_option_wins_and_is_given_once(
    user: list[str], option: str, attribute: str, value: str
) -> None:
    launch = build(node_env(HOSTS, [1, 1, 1], 1), [*user, *SCRIPT])
    assert option not in launch.filled
    assert option_count(launch.argv, option) == 1
    assert getattr(torchrun_reads(launch), attribute) == value
    for other in ("nnodes", "nproc-per-node", "rdzv-backend", "rdzv-id"):
        assert option_count(launch.argv, other) == 1


def test_user_endpoint_wins_and_drops_the_host_flag() -> None:
    launch = build(node_env(HOSTS, [1, 1, 1], 0), ["--rdzv-endpoint=store:29400", *SCRIPT])
    args = torchrun_reads(launch)
    assert args.rdzv_endpoint == "store:29400"
    assert args.rdzv_conf == ""  # is_host is only known for slurmenv's own endpoint


def test_pet_variable_counts_as_the_users_choice() -> None:
    env = node_env(HOSTS, [1, 1, 1], 0, PET_NPROC_PER_NODE="3", PET_RDZV_CONF="timeout=60")
    launch = build(env)
    assert option_count(launch.argv, "nproc-per-node") == 0
    args = torchrun_reads(launch)
    assert args.nproc_per_node == "3"
    assert args.rdzv_conf == "timeout=60"


def test_script_arguments_are_not_taken_for_torchrun_options() -> None:
    launch = build(node_env(HOSTS, [1, 1, 1], 0), ["train.py", "--nnodes", "7", "--rdzv-id=x"])
    args = torchrun_reads(launch)
    assert args.nnodes == "3"
    assert args.training_script_args == ["--nnodes", "7", "--rdzv-id=x"]


def test_static_backend_gets_master_address_and_node_rank() -> None:
    env = node_env(HOSTS, [1, 1, 1], 2)
    args = torchrun_reads(build(env, ["--rdzv-backend=static", *SCRIPT]))
    res = slurmenv.resolve(env, ephemeral_range=None)
    assert (args.master_addr, args.master_port, args.node_rank) == ("n1", res.master_port, 2)
    assert args.rdzv_endpoint == ""


def test_standalone_single_node_only_gets_nproc() -> None:
    launch = build(node_env(["n1"], [1], 0, CUDA_VISIBLE_DEVICES="0,1"), ["--standalone", *SCRIPT])
    assert launch.filled == {"nproc-per-node": "2"}
    with pytest.raises(SlurmEnvError, match="single-node") as info:
        build(node_env(HOSTS, [1, 1, 1], 0), ["--standalone", *SCRIPT])
    # the step's node count is at fault, not an option shown as a variable (issue 10)
    assert (info.value.variable, info.value.value) == ("SLURM_STEP_NUM_NODES", "3")
    with pytest.raises(SlurmEnvError) as info:
        build(node_env(HOSTS, [1, 1, 1], 0, PET_STANDALONE="1"), SCRIPT)
    assert (info.value.variable, info.value.value) == ("PET_STANDALONE", "1")


def test_scan_finds_the_script_after_options_with_values() -> None:
    given, index = torchrun.scan(["-r3", "--tee", "1", "-m", "--max_restarts=2", "pkg.train", "-x"])
    assert given == {"redirects": "3", "tee": "1", "module": "", "max-restarts": "2"}
    assert index == 5
    assert torchrun.scan(["--", "train.py"]) == ({}, 1)


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("counts", [[2, 2], [2, 1], [1, 2], [3]])
def test_refuses_more_than_one_task_per_node(counts: list[int]) -> None:
    for rank in range(sum(counts)):
        with pytest.raises(SlurmEnvError) as info:
            build(node_env(HOSTS[: len(counts)], counts, rank))
        assert info.value.variable == "SLURM_STEP_TASKS_PER_NODE"
        assert info.value.value == compress_counts(counts)
        assert "--ntasks-per-node=1" in (info.value.fix or "")


def test_cli_refusal_names_the_variable_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = node_env(["n1", "n2"], [2, 2], 0)
    proc = subprocess.run(
        ["slurmenv", "torchrun", "--nproc-per-node=2", "--no-python", "touch", str(marker)],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 1
    assert "SLURM_STEP_TASKS_PER_NODE='2(x2)'" in proc.stderr
    assert "srun -K --ntasks-per-node=1" in proc.stderr
    assert proc.stdout == ""
    assert not marker.exists()


def test_refuses_the_batch_script() -> None:
    env = node_env(HOSTS, [1, 1, 1], 0, SLURM_STEP_ID=None, SLURM_STEPID=None)
    with pytest.raises(SlurmEnvError) as info:
        build(env)
    assert info.value.variable == "SLURM_STEP_ID"


def test_refuses_inside_torchrun() -> None:
    env = node_env(HOSTS, [1, 1, 1], 0, TORCHELASTIC_RUN_ID="1.0", RANK="3", WORLD_SIZE="4",
                   MASTER_ADDR="n1", MASTER_PORT="20000")
    with pytest.raises(SlurmEnvError) as info:
        build(env)
    assert info.value.variable == "TORCHELASTIC_RUN_ID"


def test_inherited_rank_variables_are_dropped() -> None:
    # Exported in the batch script: wrong on node 1 (slurmenv export would refuse them).
    env = node_env(HOSTS, [1, 1, 1], 1, RANK="0", LOCAL_RANK="0", WORLD_SIZE="3")
    with pytest.raises(SlurmEnvError):
        slurmenv.resolve(env, ephemeral_range=None)
    launch = build(env)
    assert launch.resolution.rank == 1
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE"} & set(launch.environ)
    assert launch.environ["SLURM_PROCID"] == "1"
    assert launch.environ["PATH"] == env["PATH"]


def test_no_script_is_a_usage_error() -> None:
    proc = subprocess.run(["slurmenv", "torchrun", "--nnodes=2"], env=clean_env(),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "needs a training script" in proc.stderr


# -- PET_* variables for users who call torchrun themselves -------------------------------------


def export_torchrun(env: Mapping[str, str]) -> dict[str, str]:
    proc = subprocess.run(["slurmenv", "export", "--for", "torchrun", "--format", "json"],
                          env=dict(env), capture_output=True, text=True, check=True)
    return dict(json.loads(proc.stdout))


@pytest.mark.parametrize("rank", [0, 1])
def test_pet_variables_give_torchrun_the_same_options(rank: int) -> None:
    env = node_env(["n1", "n2"], [1, 1], rank, CUDA_VISIBLE_DEVICES="0,1")
    pet = export_torchrun(env)
    assert set(pet) == set(slurmenv.OUTPUTS["torchrun"])
    with_flags = torchrun_reads(build(env))
    plain = torchrun_reads(torchrun.Launch(
        [*torchrun.torchrun_command(), *SCRIPT], {**env, **pet}, {}, with_flags))
    for name in ("nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id",
                 "rdzv_conf"):
        assert getattr(plain, name) == getattr(with_flags, name), name
    assert plain.nproc_per_node == "2"


def test_pet_variables_are_a_function_of_the_resolved_environment() -> None:
    # GPUs from the mapping resolved, not from this process's own environment.
    env = node_env(["n1", "n2"], [1, 1], 1, CUDA_VISIBLE_DEVICES="0,1,2,3")
    pet = slurmenv.resolve(env, ephemeral_range=None).env("torchrun")
    assert pet["PET_NPROC_PER_NODE"] == "4"
    assert pet["PET_RDZV_CONF"] == "is_host=0"


def test_export_for_torchrun_refuses_several_tasks_per_node() -> None:
    env = node_env(["n1", "n2"], [2, 2], 3)
    proc = subprocess.run(["slurmenv", "export", "--for", "torchrun"], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "SLURM_STEP_TASKS_PER_NODE" in proc.stderr
    assert "PET_" not in proc.stdout
    assert "exit 1" in proc.stdout  # the failure line that stops `eval $(...); torchrun`


def test_all_does_not_include_the_pet_variables() -> None:
    res = slurmenv.resolve(node_env(["n1", "n2"], [2, 2], 3), ephemeral_range=None)
    assert not any(name.startswith("PET_") for name in res.env("all"))


# -- real torchrun agents: two "nodes" on loopback -------------------------------------------------


def loopback_node(rank: int, job_id: int) -> dict[str, str]:
    """Task ``rank`` of a 2-node step whose nodes are ``localhost`` and ``127.0.0.1``."""
    return node_env(["localhost", "127.0.0.1"], [1, 1], rank, job_id=job_id, step_id=5,
                    GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(Path(__file__).parents[1]))


def run_nodes(commands: Sequence[Sequence[str]], envs: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(list(cmd), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for cmd, env in zip(commands, envs)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        results += [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    return results


def check_four_ranks(results: list[dict[str, Any]], run_id: str) -> None:
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert {r["sum"] for r in results} == {10.0}  # 1+2+3+4: every rank took part
    assert {r["world_size"] for r in results} == {4}
    assert sorted(r["env"]["GROUP_RANK"] for r in results) == ["0", "0", "1", "1"]
    assert {r["env"]["TORCHELASTIC_RUN_ID"] for r in results} == {run_id}


def needs_torch() -> None:
    """These run torch's torchrun and a training script: without torch they ask for it (a
    skip, which SLURMENV_REQUIRE_CLUSTER=1 makes a failure) instead of failing in torch's
    absence."""
    pytest.importorskip("torch")
    pytest.importorskip("torch.distributed.run")


def test_slurmenv_torchrun_runs_two_agents_of_two_workers() -> None:
    needs_torch()
    job = 50000 + os.getpid() % 9000
    envs = [loopback_node(rank, job) for rank in range(2)]
    cmd = ["slurmenv", "torchrun", "--nproc-per-node=2", str(PROGRAMS / "torchrun_check.py")]
    check_four_ranks(run_nodes([cmd, cmd], envs), f"{job}.5")


def test_plain_torchrun_with_pet_variables_runs_two_agents() -> None:
    needs_torch()
    job = 60000 + os.getpid() % 9000
    envs = [loopback_node(rank, job) for rank in range(2)]
    envs = [{**env, **export_torchrun(env)} for env in envs]
    cmd = [*torchrun.torchrun_command(), "--nproc-per-node=2", str(PROGRAMS / "torchrun_check.py")]
    check_four_ranks(run_nodes([cmd, cmd], envs), f"{job}.5")


def test_dry_run_prints_the_command() -> None:
    env = node_env(HOSTS, [1, 1, 1], 0)
    proc = subprocess.run(["slurmenv", "torchrun", "--dry-run", *SCRIPT], env=env,
                          capture_output=True, text=True, check=True)
    assert "--rdzv-backend=c10d" in proc.stdout
    assert proc.stdout.rstrip().endswith("train.py --lr 0.1")


def test_module_not_imported_by_plain_export() -> None:
    code = ("import sys, slurmenv.commands.main; slurmenv.commands.main.main(['export', '--for', 'torch']); "
            "sys.stderr.write(str('slurmenv.commands.torchrun' in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], env=node_env(HOSTS, [1, 1, 1], 0),
                          capture_output=True, text=True, check=True)
    assert proc.stderr == "False"


def test_slurmenv_options_come_before_torchrun_options() -> None:
    env = node_env(HOSTS, [1, 1, 1], 1)
    proc = subprocess.run(
        ["slurmenv", "torchrun", "--port", "23456", "--addr-template={host}-ib", "--dry-run",
         "--", "--max-restarts=1", *SCRIPT],
        env=env, capture_output=True, text=True, check=True,
    )
    words = proc.stdout.split()
    assert "--rdzv-endpoint=n1-ib:23456" in words
    assert "--local-addr=n2-ib" in words
    assert words[-4:] == ["--max-restarts=1", *SCRIPT]


def test_a_bad_slurmenv_option_is_refused() -> None:
    proc = subprocess.run(["slurmenv", "torchrun", "--port", "80", *SCRIPT],
                          env=node_env(HOSTS, [1, 1, 1], 0), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1
    assert "--port='80'" in proc.stderr
