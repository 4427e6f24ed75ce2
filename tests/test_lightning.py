"""slurmenv.lightning.Environment against synthetic step environments, with real Lightning
(its ClusterEnvironment classes, Fabric's own call of validate_settings). Real Slurm:
tests/test_real_lightning.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import synth

from slurmenv.errors import SlurmEnvError

pytest.importorskip("lightning")

from slurmenv.lightning import Environment, packages

HOSTS = ["r1n09", "r1n10", "r2n09"]


def env_of(
    rank: int, counts: list[int], distribution: str | None = None, plane: int | None = None
) -> Environment:
    environ = synth.step_env(HOSTS[: len(counts)], counts, rank, distribution, plane)
    return Environment(environ=environ, ephemeral_range=None)


def test_is_a_cluster_environment_of_lightning_and_lightning_fabric() -> None:
    import lightning.fabric.plugins.environments as unified
    import lightning_fabric.plugins.environments as standalone
    import pytorch_lightning.plugins.environments as pl

    env = env_of(0, [2, 2])
    assert isinstance(env, Environment)
    assert isinstance(env, unified.ClusterEnvironment)
    assert isinstance(env, standalone.ClusterEnvironment)
    assert isinstance(env, pl.ClusterEnvironment)
    assert env.creates_processes_externally is True


@pytest.mark.parametrize("rank", range(4))
def test_cyclic_layout_keeps_slurms_rank(rank: int) -> None:
    """-N2 --ntasks-per-node=2 -m cyclic: ranks 0,2 on the first node, 1,3 on the second."""
    env = env_of(rank, [2, 2], "cyclic")
    node, local = rank % 2, rank // 2
    assert (env.global_rank(), env.world_size()) == (rank, 4)
    assert (env.node_rank(), env.local_rank()) == (node, local)
    assert (env.devices, env.num_nodes) == (2, 2)
    assert (env.main_address, env.main_port) == ("r1n09", env.resolution.master_port)
    # what Lightning's strategies then call: ignored, the rank stays Slurm's
    env.set_global_rank(node * 2 + local)
    env.set_world_size(99)
    assert (env.global_rank(), env.world_size()) == (rank, 4)
    env.validate_settings(num_devices=2, num_nodes=2)


def test_copies_are_the_same_immutable_environment() -> None:
    import copy

    env = env_of(1, [2, 2])
    assert copy.copy(env) is env and copy.deepcopy(env) is env


def test_plane_layout_and_repr() -> None:
    env = env_of(2, [4, 4], "plane", plane=2)  # 0,1,4,5 on the first node, 2,3,6,7 on the next
    assert (env.global_rank(), env.node_rank(), env.local_rank()) == (2, 1, 0)
    assert repr(env).startswith("slurmenv.lightning.Environment(Resolution(launcher='slurm'")


@pytest.mark.parametrize(("devices", "nodes", "name"), [(1, 2, "devices"), (2, 1, "num_nodes")])
def test_settings_that_differ_from_the_step_are_refused(
    devices: int, nodes: int, name: str
) -> None:
    env = env_of(1, [2, 2])
    with pytest.raises(SlurmEnvError) as info:
        env.validate_settings(num_devices=devices, num_nodes=nodes)
    assert info.value.variable == name
    assert info.value.value == str(devices if name == "devices" else nodes)
    assert "devices=2, num_nodes=2" in (info.value.fix or "")


@pytest.mark.parametrize("counts", [[2, 1], [3, 1, 2], [1, 2, 3]])
def test_uneven_layouts_are_refused_on_every_task(counts: list[int]) -> None:
    for rank in range(sum(counts)):
        env = env_of(rank, counts)
        errors = []
        with pytest.raises(SlurmEnvError) as info:
            env.devices  # noqa: B018 - the property raises
        errors.append(info.value)
        with pytest.raises(SlurmEnvError) as info:
            env.validate_settings(env.resolution.local_world_size, len(counts))
        errors.append(info.value)
        for error in errors:
            assert error.variable == "SLURM_STEP_TASKS_PER_NODE"
            assert error.value == synth.compress_counts(counts)
            assert f"({','.join(map(str, counts))} tasks per node)" in error.message
            assert "--ntasks-per-node" in (error.fix or "")


def test_under_torchrun_the_workers_variables_are_used() -> None:
    """slurmenv torchrun: one Slurm task per node, torchrun's workers carry RANK & co."""
    environ = synth.step_env(["n1", "n2"], [1, 1], 1, TORCHELASTIC_RUN_ID="abc", RANK="5",
                             LOCAL_RANK="1", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4",
                             GROUP_RANK="1", GROUP_WORLD_SIZE="2", MASTER_ADDR="n1",
                             MASTER_PORT="29500")
    agent = "torchrun (pid 7) is an ancestor of this process"  # the worker shows its agent
    env = Environment(environ=environ, ephemeral_range=None, enclosure=agent)
    ranks = (env.global_rank(), env.local_rank(), env.node_rank(), env.world_size())
    assert ranks == (5, 1, 1, 8)
    assert (env.main_address, env.main_port, env.devices, env.num_nodes) == ("n1", 29500, 4, 2)
    env.validate_settings(num_devices=4, num_nodes=2)
    with pytest.raises(SlurmEnvError):
        env.validate_settings(num_devices=8, num_nodes=1)


def test_outside_a_step_it_fails_when_made() -> None:
    environ = synth.clean_env(SLURM_JOB_ID="7", SLURM_NTASKS="4", SLURM_JOB_NODELIST="n[1-2]")
    with pytest.raises(SlurmEnvError) as info:
        Environment(environ=environ, ephemeral_range=None)
    assert "srun" in (info.value.fix or "")


def test_fabric_calls_validate_settings_before_joining() -> None:
    """Real Fabric with the plugin: wrong devices stop launch() with slurmenv's error (no
    process group is ever started: rank 1 of 4 would wait for the others)."""
    from lightning.fabric import Fabric

    env = env_of(1, [2, 2], "cyclic")
    fabric = Fabric(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp", plugins=[env])
    assert fabric.strategy.cluster_environment is env
    with pytest.raises(SlurmEnvError) as info:
        fabric.launch()
    assert info.value.variable == "devices"


def test_the_base_class_follows_what_the_program_imported() -> None:
    """A program that imported only pytorch_lightning gets lightning_fabric's base class only
    (and the unified package is not imported for it); one that imported nothing gets both."""
    code = (
        "import sys, pytorch_lightning, slurmenv.lightning as s\n"
        "print(s.packages(), 'lightning' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=synth.clean_env())
    assert out.stdout.split() == ["('lightning_fabric',)", "False"]
    code = "import slurmenv.lightning as s; print(s.packages())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=synth.clean_env())
    assert out.stdout.strip() == "('lightning', 'lightning_fabric')"
    assert packages()  # this test process imported lightning
