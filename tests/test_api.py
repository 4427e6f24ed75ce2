"""The Python API: slurmenv.resolve() and the immutable Resolution."""

from __future__ import annotations

import json
import os

import pytest
import synth

import slurmenv
from slurmenv import Resolution, SlurmEnvError

EPHEMERAL = (32768, 60999)
HOSTS = ["a1", "a2", "b7"]
COUNTS = [2, 1, 2]


def resolve(env: dict[str, str], **options: object) -> Resolution:
    options.setdefault("ephemeral_range", EPHEMERAL)
    return slurmenv.resolve(env, **options)  # type: ignore[arg-type]


def rank_env(rank: int, **extra: str) -> dict[str, str]:
    return synth.step_env(HOSTS, COUNTS, rank, distribution="block", **extra)


def big_env() -> dict[str, str]:
    hosts = [f"n{i:05d}" for i in range(1, 20001)]
    return synth.step_env(hosts, [1] * 20000, 3, nodelist="n[00001-20000]")


def test_resolution_is_immutable() -> None:
    res = resolve(rank_env(1))
    with pytest.raises(AttributeError):
        res.rank = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        res.new_attribute = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        del res.rank
    with pytest.raises(TypeError):
        res.sources["RANK"] = "me"  # type: ignore[index]
    assert isinstance(res.hosts, tuple) and isinstance(res.notes, tuple)
    # what a caller gets is a copy: changing it changes nothing
    config = res.tf_config
    config["cluster"]["worker"].append("evil:1")
    config["task"]["index"] = 99
    assert res.tf_config["task"]["index"] == 1
    assert len(res.tf_config["cluster"]["worker"]) == 5
    assert res.rank == 1


def test_preset_tf_config_is_a_copy_too() -> None:
    tf = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    env = synth.clean_env({}, RANK="1", WORLD_SIZE="2", MASTER_ADDR="a", MASTER_PORT="23456",
                          LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                          TF_CONFIG=json.dumps(tf))
    res = resolve(env)
    res.tf_config["cluster"]["worker"].clear()
    assert res.tf_config == tf


def test_preset_tf_config_that_is_not_json_is_an_error() -> None:
    env = synth.clean_env({}, RANK="1", WORLD_SIZE="2", MASTER_ADDR="a", MASTER_PORT="23456",
                          LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                          TF_CONFIG="{not json")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env)
    assert info.value.variable == "TF_CONFIG"


def test_values_and_layout_properties() -> None:
    res = resolve(rank_env(3))
    want = synth.expected(HOSTS, COUNTS, 3, "block")
    assert (res.rank, res.local_rank, res.world_size, res.local_world_size, res.node_rank,
            res.nnodes) == (3, want["LOCAL_RANK"], 5, want["LOCAL_WORLD_SIZE"], want["NODE_RANK"],
                            3)
    assert res.hosts == ("a1", "a2", "b7")
    assert res.node_of == (0, 0, 1, 2, 2)
    assert res.local_of == (0, 1, 0, 0, 1)
    assert res.master_addr == "a1"
    assert res.launcher == "slurm"
    assert (res.job_id, res.step_id) == (str(synth.DEFAULT_JOB_ID), str(synth.DEFAULT_STEP_ID))


def test_is_chief_only_on_rank_zero() -> None:
    assert [resolve(rank_env(r)).is_chief for r in range(5)] == [True] + [False] * 4


def test_apply_keeps_user_values_unless_overwrite() -> None:
    res = resolve(rank_env(2))
    target = {"MASTER_PORT": "29400", "RANK": "2", "UNRELATED": "x"}
    applied = res.apply(target)
    assert target["MASTER_PORT"] == "29400"  # the user's choice kept
    assert "MASTER_PORT" not in applied
    assert applied["RANK"] == "2"  # same value: set (and reported)
    assert target["WORLD_SIZE"] == "5" and target["MASTER_ADDR"] == "a1"
    assert json.loads(target["TF_CONFIG"]) == res.tf_config
    assert target["UNRELATED"] == "x"
    applied = res.apply(target, overwrite=True)
    assert target["MASTER_PORT"] == str(res.master_port) == applied["MASTER_PORT"]


def test_apply_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", synth.clean_env())  # restored after the test
    res = resolve(rank_env(4))
    res.apply(for_="torch")
    assert os.environ["RANK"] == "4" and os.environ["MASTER_ADDR"] == "a1"
    assert "TF_CONFIG" not in os.environ


def test_apply_sets_nothing_when_tf_config_cannot_be_built() -> None:
    res = resolve(big_env())
    target = {"KEEP": "1"}
    with pytest.raises(SlurmEnvError) as info:
        res.apply(target)
    assert target == {"KEEP": "1"}
    assert info.value.variable == "TF_CONFIG"
    assert "slurmenv.resolve().tf_config" in str(info.value)
    # in-process there is no size limit, and the torch variables can still be applied
    assert len(res.tf_config["cluster"]["worker"]) == 20000
    assert res.apply(target, for_="torch")["RANK"] == "3"


def test_to_dict_is_json_serialisable() -> None:
    res = resolve(rank_env(1))
    data = json.loads(json.dumps(res.to_dict()))
    assert data["rank"] == 1 and data["world_size"] == 5 and data["is_chief"] is False
    assert data["master_addr"] == "a1" and data["master_port"] == res.master_port
    assert data["tf_config"] == res.tf_config
    assert data["sources"]["RANK"] == "SLURM_PROCID=1"
    # when TF_CONFIG cannot be built the summary says why instead
    res = resolve(rank_env(1, SLURM_STEP_RESV_PORTS="12000-12001"))
    data = json.loads(json.dumps(res.to_dict()))
    assert data["tf_config"] is None and "TF_CONFIG needs 2 ports" in data["tf_config_error"]


def test_tf_chief_shape() -> None:
    workers = None
    for rank in range(5):
        config = resolve(rank_env(rank), tf_chief=True).tf_config
        assert set(config["cluster"]) == {"chief", "worker"}
        assert len(config["cluster"]["chief"]) == 1 and len(config["cluster"]["worker"]) == 4
        if rank == 0:
            assert config["task"] == {"type": "chief", "index": 0}
        else:
            assert config["task"] == {"type": "worker", "index": rank - 1}
        full = config["cluster"]["chief"] + config["cluster"]["worker"]
        assert workers is None or full == workers
        workers = full
    plain = resolve(rank_env(0)).tf_config["cluster"]["worker"]
    assert workers == plain
    # the environment variable does the same, and a single task is a chief with no workers
    config = resolve(rank_env(0, SLURMENV_TF_CHIEF="1")).tf_config
    assert config["task"]["type"] == "chief"
    single = resolve(synth.step_env(["x"], [1], 0), tf_chief=True).tf_config
    assert single["cluster"] == {"chief": [single["cluster"]["chief"][0]]}


def test_keyword_options_override_variables() -> None:
    env = rank_env(0, SLURMENV_PORT="21000", SLURMENV_ADDR_TEMPLATE="{host}-ib")
    res = resolve(env)
    assert (res.master_port, res.master_addr) == (21000, "a1-ib")
    res = resolve(env, port=22000, addr_template="{host}.fabric")
    assert (res.master_port, res.master_addr) == (22000, "a1.fabric")
    assert res.tf_config["cluster"]["worker"][-1].startswith("b7.fabric:")
    with pytest.raises(TypeError):
        slurmenv.resolve(env, colour="blue")  # type: ignore[call-arg]


def test_default_environ_is_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", synth.clean_env(None, **rank_env(2)))
    assert slurmenv.resolve(ephemeral_range=EPHEMERAL).rank == 2


def test_unknown_output_set() -> None:
    with pytest.raises(SlurmEnvError) as info:
        resolve(rank_env(0)).env("jax-and-friends")
    assert info.value.variable == "--for"


# -- a string where a list is meant is a TypeError (issue 35) -------------------------------------
def _list_parameters() -> list[tuple[str, str]]:
    """(function, parameter) for every parameter of the documented API (docs/api.md's
    signatures, tests/doc_tables.py's API) and of slurmenv.tfconfig.build that takes a list
    (annotated as a Sequence or an Iterable): node lists, device lists, environments."""
    import inspect

    import doc_tables
    import test_api_doc

    from slurmenv import tfconfig

    targets = [(name, test_api_doc.target(name)) for name in doc_tables.API]
    targets.append(("slurmenv.tfconfig.build", tfconfig.build))
    found = []
    for name, function in targets:
        for parameter in inspect.signature(function).parameters.values():
            annotation = str(parameter.annotation)
            if annotation.startswith(("Sequence[", "Iterable[")) or "| Iterable[" in annotation:
                found.append((name, parameter.name))
    return found


def test_the_list_parameters_are_found() -> None:
    assert set(_list_parameters()) == {
        ("slurmenv.gpus.for_local_rank", "visible"), ("slurmenv.resolve", "rivals"),
        ("slurmenv.tfconfig.build", "workers")}


def test_a_string_for_a_list_is_a_type_error_saying_what_to_pass() -> None:
    from slurmenv import gpus, tfconfig

    with pytest.raises(TypeError, match=r"visible must be a list of GPU entries .*parse_list"):
        gpus.for_local_rank("4,5,6,7", 1, 2)  # type: ignore[arg-type]
    assert gpus.for_local_rank(gpus.parse_list("4,5,6,7", "CUDA_VISIBLE_DEVICES"), 1, 2) == [
        "6", "7"]
    with pytest.raises(TypeError, match=r"workers must be a list of 'host:port' strings"):
        tfconfig.build("n1:1,n2:2", 0)  # type: ignore[arg-type]
    env = synth.step_env(["n1", "n2"], [1, 1], 0)
    for wrong in ("n1", {"SLURM_PROCID": "0"}):
        with pytest.raises(TypeError, match=r"rivals must be a list of environments"):
            slurmenv.resolve(env, rivals=wrong, ephemeral_range=None)  # type: ignore[arg-type]
    assert slurmenv.resolve(env, rivals=[], ephemeral_range=None).rank == 0
