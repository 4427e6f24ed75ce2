"""slurmenv.torch, slurmenv.tf and slurmenv.jax with the real frameworks (CPU builds).

Multi-process tests start two real processes from synthetic step environments (one node,
``localhost``, two tasks) and check that a collective across them gives the right answer.
A framework that is not installed skips its tests with the reason shown (tests/run.sh
installs torch, tensorflow-cpu and jax).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from synth import clean_env, step_env

from slurmenv.errors import SlurmEnvError

PROGRAMS = Path(__file__).parent / "programs"


def local_step(rank: int, ntasks: int = 2, **extra: str) -> dict[str, str]:
    """Task ``rank`` of a one-node step on ``localhost``; a job ID of our own (ports)."""
    job = 10000 + os.getpid() % 50000
    env = step_env(["localhost"], [ntasks], rank, job_id=job, step_id=7, **extra)
    return clean_env(**env, GLOO_SOCKET_IFNAME="lo")


def run_tasks(program: str, envs: Sequence[Mapping[str, str]], timeout: float = 240) -> list[Any]:
    """Run ``program`` once per environment, concurrently; each prints one JSON line."""
    procs = [
        subprocess.Popen([sys.executable, str(PROGRAMS / program)], env=dict(env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for env in envs
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert len(lines) == 1, out
        results.append(json.loads(lines[0]))
    return results


# -- torch ----------------------------------------------------------------------------------


def test_torch_init_process_group_all_reduce_in_two_tasks() -> None:
    pytest.importorskip("torch")
    results = run_tasks("fw_torch_allreduce.py", [local_step(0), local_step(1)])
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["resolved_rank"] for r in results] == [0, 1]
    assert {r["world_size"] for r in results} == {2}
    assert {r["backend"] for r in results} == {"gloo"}  # no CUDA here
    assert {r["sum"] for r in results} == {3.0}  # 1 + 2: both joined


def test_torch_init_process_group_refuses_the_batch_script_before_torch() -> None:
    env = local_step(0, SLURM_STEP_ID="", SLURM_STEPID="")
    code = ("import sys, slurmenv.torch\ntry:\n    slurmenv.torch.init_process_group()\n"
            "except slurmenv.SlurmEnvError as e:\n    print(e.variable, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["SLURM_STEP_ID", "False"]


@pytest.mark.parametrize(
    ("local_rank", "visible", "device"),
    [(0, 4, 0), (3, 4, 3), (1, 1, 0), (3, 1, 0), (2, 8, 2), (5, 2, 1)],
)
def test_device_index_indexes_into_the_visible_devices(
    local_rank: int, visible: int, device: int
) -> None:
    from slurmenv.torch import device_index

    assert device_index(local_rank, visible) == device


def test_importing_the_helpers_imports_no_framework() -> None:
    code = ("import sys, slurmenv.torch, slurmenv.tf, slurmenv.jax\n"
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


# -- TensorFlow ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow")


def test_tf_resolver_matches_the_step(tf: Any) -> None:
    import slurmenv.tf

    hosts, counts = ["n1", "n2"], [2, 1]
    for rank in range(3):
        res = slurmenv.resolve(step_env(hosts, counts, rank), ephemeral_range=None)
        resolver = slurmenv.tf.cluster_resolver(res)
        assert isinstance(resolver, tf.distribute.cluster_resolver.TFConfigClusterResolver)
        workers = res.tf_config["cluster"]["worker"]
        assert resolver.cluster_spec().as_dict() == {"worker": workers}
        assert [w.split(":")[0] for w in workers] == ["n1", "n1", "n2"]
        assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == ("worker", rank, "grpc")
        assert resolver.master() == f"grpc://{workers[rank]}"


def test_tf_resolver_with_chief(tf: Any) -> None:
    import slurmenv.tf

    env = step_env(["n1", "n2"], [1, 1], 1, SLURMENV_TF_CHIEF="1")
    resolver = slurmenv.tf.cluster_resolver(environ=env)
    spec = resolver.cluster_spec().as_dict()
    assert len(spec["chief"]) == 1 and len(spec["worker"]) == 1
    assert (resolver.task_type, resolver.task_id) == ("worker", 0)


def test_tf_resolver_ignores_a_stale_tf_config(tf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import slurmenv.tf

    stale = {"cluster": {"worker": ["old:1"]}, "task": {"type": "worker", "index": 0},
             "session_master": "grpc://old:1"}
    monkeypatch.setenv("TF_CONFIG", json.dumps(stale))
    res = slurmenv.resolve(step_env(["n1", "n2"], [1, 1], 1), ephemeral_range=None)
    resolver = slurmenv.tf.cluster_resolver(res)
    assert resolver.cluster_spec().as_dict()["worker"] == res.tf_config["cluster"]["worker"]
    assert resolver.master().startswith("grpc://n2:")


def test_tf_resolver_for_20000_hosts_beyond_the_tf_config_limit(tf: Any) -> None:
    import slurmenv.tf

    hosts = [f"node{i:05d}" for i in range(20000)]
    env = step_env(hosts, [1] * len(hosts), 12345, job_id=31337)
    res = slurmenv.resolve(env, ephemeral_range=None)
    with pytest.raises(SlurmEnvError) as info:  # no process could be started with it
        res.env("tf")
    assert info.value.variable == "TF_CONFIG"
    resolver = slurmenv.tf.cluster_resolver(res)
    spec = resolver.cluster_spec()
    assert spec.num_tasks("worker") == 20000
    assert spec.task_address("worker", 19999).startswith("node19999:")
    assert (resolver.task_type, resolver.task_id) == ("worker", 12345)
    assert resolver.master().startswith("grpc://node12345:")
    assert len(json.dumps(spec.as_dict())) > 128 * 1024


def test_tf_multi_worker_mirrored_strategy_in_two_tasks(tf: Any) -> None:
    results = run_tasks("fw_tf_mwms.py", [local_step(0), local_step(1)])
    assert [r["task_id"] for r in results] == [0, 1]
    assert {r["replicas"] for r in results} == {2}
    assert {r["sum"] for r in results} == {3.0}
    assert not any(r["tf_config_set"] for r in results)


# -- JAX ------------------------------------------------------------------------------------------


def test_jax_initialize_args_use_slurmenvs_port() -> None:
    import slurmenv.jax

    env = step_env(["n1", "n2"], [2, 2], 3, job_id=4321, step_id=2)
    res = slurmenv.resolve(env, ephemeral_range=None)
    args = slurmenv.jax.initialize_args(res, environ=env)
    assert args == {"coordinator_address": f"n1:{res.master_port}", "num_processes": 4,
                    "process_id": 3, "local_device_ids": None}
    other_step = slurmenv.resolve(step_env(["n1", "n2"], [2, 2], 3, job_id=4321, step_id=3),
                                  ephemeral_range=None)
    assert other_step.master_port != res.master_port


@pytest.mark.parametrize(
    ("gpus", "counts", "rank", "ids"),
    [
        ("0,1,2,3", [4], 2, [2]),  # every task sees the node's 4 GPUs: one each
        ("0,1,2,3", [2], 1, [2, 3]),  # two each
        ("2", [4], 2, None),  # --gpus-per-task / a binding: JAX takes what it sees
        ("0,1", [1], 0, None),  # one process per node: all of them
        ("0,1,2", [2], 1, None),  # uneven: not guessed
    ],
)
def test_jax_local_device_ids_split_the_visible_gpus(
    gpus: str, counts: list[int], rank: int, ids: list[int] | None
) -> None:
    import slurmenv.jax

    env = step_env(["n1"], counts, rank, CUDA_VISIBLE_DEVICES=gpus)
    assert slurmenv.jax.initialize_args(environ=env)["local_device_ids"] == ids


def test_jax_distributed_initialize_in_two_tasks() -> None:
    pytest.importorskip("jax")
    results = run_tasks("fw_jax_init.py", [local_step(0), local_step(1)])
    assert [r["process_index"] for r in results] == [0, 1]
    assert {r["process_count"] for r in results} == {2}
    assert all(r["gathered"] == [1.0, 2.0] for r in results)
    address = {r["args"]["coordinator_address"] for r in results}
    assert len(address) == 1 and address.pop().startswith("localhost:")
