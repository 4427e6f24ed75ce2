"""Kubernetes operators (fixture only: tests/fixtures/beyond/, every value citing the
operator's source; no Kubernetes runs here): one process per pod resolves, several processes
per pod are refused with the fix, and every value is checked against the others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import slurmenv
from slurmenv import launchers
from slurmenv.errors import SlurmEnvError

FIXTURES = Path(__file__).parent / "fixtures" / "beyond"
NO_EPHEMERAL: dict[str, Any] = {"ephemeral_range": None}


def case(fixture: str, name: str) -> list[dict[str, str]]:
    data = json.loads((FIXTURES / f"{fixture}.json").read_text())
    found = next(c for c in data["cases"] if c["name"] == name)
    return [task["env"] for task in found["tasks"]]


ACCEPTED = [
    ("kubeflow_pytorchjob", "one_process_per_pod", "mnist-master-0", "23456"),
    ("kubeflow_pytorchjob", "old_operator", "mnist-master-0", "23456"),
    ("trainer_v2", "one_process_per_node", "ddp-node-0-0.ddp", "29500"),
    ("volcano", "master_and_two_workers", "pt-master-0.pt", "23456"),
]


@pytest.mark.parametrize(("fixture", "name", "addr", "port"), ACCEPTED)
def test_one_process_per_pod(fixture: str, name: str, addr: str, port: str) -> None:
    envs = case(fixture, name)
    for index, env in enumerate(envs):
        assert launchers.detect(env).NAME == "k8s"
        res = slurmenv.resolve(env, **NO_EPHEMERAL)
        assert (res.rank, res.world_size, res.local_rank, res.local_world_size) == (
            index, len(envs), 0, 1,
        )
        assert (res.node_rank, res.nnodes) == (index, len(envs))
        assert (res.master_addr, str(res.master_port)) == (addr, port)
        assert "one process per pod" in res.sources["RANK"]


@pytest.mark.parametrize(
    ("fixture", "name", "variable"),
    [("kubeflow_pytorchjob", "four_processes_per_pod", "PET_NPROC_PER_NODE"),
     ("kubeflow_pytorchjob", "auto_processes_per_pod", "PET_NPROC_PER_NODE"),
     ("trainer_v2", "four_processes_per_node", "PET_NPROC_PER_NODE")],
)  # fmt: skip
def test_pod_index_is_not_a_process_rank(fixture: str, name: str, variable: str) -> None:
    for env in case(fixture, name):
        with pytest.raises(SlurmEnvError) as info:
            slurmenv.resolve(env, **NO_EPHEMERAL)
        assert info.value.variable == variable
        assert "one process per pod" in (info.value.fix or "")
        assert "torchrun" in (info.value.fix or "")


def test_world_size_counting_processes_is_refused_without_pet_nproc() -> None:
    env = dict(case("kubeflow_pytorchjob", "four_processes_per_pod")[1])
    del env["PET_NPROC_PER_NODE"]  # WORLD_SIZE=8 but PET_NNODES=2 pods
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "WORLD_SIZE" and "pod index" in str(info.value)


def test_a_second_process_in_a_volcano_pod_is_refused() -> None:
    env = {**case("volcano", "master_and_two_workers")[1], "LOCAL_RANK": "1"}
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "LOCAL_RANK"


def test_torchrun_workers_in_a_pod_are_torchruns() -> None:
    # the fix: torchrun in the pod; its workers carry TORCHELASTIC_RUN_ID and their own RANK
    env = {**case("trainer_v2", "four_processes_per_node")[1], "TORCHELASTIC_RUN_ID": "ddp",
           "RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
           "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "ddp-node-0-0.ddp",
           "MASTER_PORT": "29500"}  # fmt: skip
    assert launchers.detect(env).NAME == "torchrun"
    # believed with torchrun's agent among the worker's ancestors (issue 42): in the pod, it is
    agent = "torchrun (pid 7) is an ancestor of this process"
    assert slurmenv.resolve(env, **NO_EPHEMERAL, enclosure=agent).rank == 6
    with pytest.raises(SlurmEnvError) as info:  # a leftover copy: the pod's own world
        slurmenv.resolve(env, **NO_EPHEMERAL, enclosure=None)
    assert info.value.variable == "PET_NODE_RANK"


@pytest.mark.parametrize(
    ("change", "variable"),
    [({"PET_NODE_RANK": "1"}, "RANK"), ({"HOSTNAME": "mnist-worker-0"}, "RANK"),
     ({"WORLD_SIZE": "2"}, "WORLD_SIZE"), ({"PET_NNODES": "1:3"}, "PET_NNODES")],
)  # fmt: skip
def test_values_are_checked_against_each_other(change: dict[str, str], variable: str) -> None:
    env = {**case("kubeflow_pytorchjob", "one_process_per_pod")[2], **change}  # worker-1, rank 2
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == variable


def test_trainer_index_must_match_the_indexed_job() -> None:
    env = {**case("trainer_v2", "one_process_per_node")[1], "JOB_COMPLETION_INDEX": "0"}
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env, **NO_EPHEMERAL)
    assert info.value.variable == "PET_NODE_RANK"


def test_outside_kubernetes_the_same_variables_are_hand_set() -> None:
    env = {k: v for k, v in case("volcano", "master_and_two_workers")[1].items()
           if not k.startswith("KUBERNETES_")}  # fmt: skip
    assert launchers.detect(env).NAME == "preset"
