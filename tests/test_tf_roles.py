"""TensorFlow job roles (``--tf-jobs``, ``SLURMENV_TF_JOBS``, ``resolve(tf_jobs=)``,
``slurmenv.tf.cluster_resolver(jobs=)``): which rank gets which task, each task at its own
rank's address, the evaluator out of the cluster, and the refusals.

Real training with these roles: tests/test_real_tf_roles.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import options, tfconfig
from slurmenv.commands import show
from slurmenv.errors import SlurmEnvError

JOB_NAMES = ("chief", "evaluator", "ps", "worker")  # TensorFlow's SlurmClusterResolver order
MPI = Path(__file__).resolve().parent / "fixtures" / "mpi"


def resolve(env: dict[str, str], **opts: Any) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=None, cpus=1, rivals=(), **opts)


@st.composite
def steps(draw: st.DrawFn) -> tuple[list[str], list[int], str | None, int | None, str]:
    """A step (hosts, per-node counts, distribution, plane) and jobs that fit its tasks."""
    nnodes = draw(st.integers(1, 4))
    hosts = [f"n{i:02d}" for i in draw(st.permutations(range(10, 10 + nnodes)))]
    counts = draw(st.lists(st.integers(1, 4), min_size=nnodes, max_size=nnodes))
    distribution = draw(st.sampled_from([None, "block", "cyclic", "plane"]))
    plane = draw(st.integers(1, 3)) if distribution == "plane" else None
    world = sum(counts)
    chief = draw(st.integers(0, 1))
    evaluator = draw(st.integers(0, 1)) if world - chief > 1 else 0
    left = world - chief - evaluator
    ps = draw(st.integers(0, left - 1)) if chief and left > 1 else 0
    jobs = {"chief": chief, "evaluator": evaluator, "ps": ps, "worker": left - ps}
    items = [f"{name}={count}" for name, count in jobs.items() if count]
    text = ",".join(draw(st.permutations(items)))
    return hosts, counts, distribution, plane, text


@settings(max_examples=60, deadline=None)
@given(steps())
def test_every_rank_agrees_and_finds_itself(
    step: tuple[list[str], list[int], str | None, int | None, str],
) -> None:
    hosts, counts, distribution, plane, text = step
    world = sum(counts)
    wanted = dict(item.split("=") for item in text.split(","))
    configs = []
    for rank in range(world):
        env = synth.step_env(hosts, counts, rank, distribution, plane)
        res = resolve(env, tf_jobs=text)
        config = res.tf_config
        assert json.loads(res.env("tf")["TF_CONFIG"]) == config
        configs.append(config)
        task, cluster = config["task"], config["cluster"]
        host = synth.expected(hosts, counts, rank, distribution, plane)["HOST"]
        own = res.tf_addresses[rank]
        assert tfconfig.host_of(own) == host
        assert res.tf_roles[rank] == (task["type"], task["index"])
        if task["type"] == "evaluator":  # TensorFlow: the evaluator is not in the cluster
            assert task["index"] == 0 and all(own not in tasks for tasks in cluster.values())
        else:
            assert cluster[task["type"]][task["index"]] == own
        if rank == 0 and "chief" in wanted:
            assert task == {"type": "chief", "index": 0}
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    cluster = configs[0]["cluster"]
    assert {name: str(len(tasks)) for name, tasks in cluster.items()} == {
        name: count for name, count in wanted.items() if name != "evaluator"}
    assert list(cluster) == [name for name in JOB_NAMES if name in cluster]
    # ranks are cut into consecutive slices in TensorFlow's order: chief, evaluator, ps, worker
    order = [(c["task"]["type"], c["task"]["index"]) for c in configs]
    assert order == [(name, i) for name in JOB_NAMES for i in range(int(wanted.get(name, 0)))]
    every = [*(a for tasks in cluster.values() for a in tasks),
             *(res.tf_addresses[r] for r, (name, _) in enumerate(order) if name == "evaluator")]
    assert len(set(every)) == world  # one address per task: distinct ports on a shared node


def test_parameter_servers_in_a_cyclic_step() -> None:
    hosts, counts = ["a", "b", "c"], [3, 2, 2]
    configs = [resolve(env, tf_jobs="worker=3,ps=2,chief=1,evaluator=1").tf_config
               for env in synth.step_envs(hosts, counts, distribution="cyclic")]
    cluster = configs[0]["cluster"]
    assert {name: [a.split(":")[0] for a in tasks] for name, tasks in cluster.items()} == {
        "chief": ["a"], "ps": ["c", "a"], "worker": ["b", "c", "a"]}  # rank 1 (b) evaluates
    assert [c["task"] for c in configs[:3]] == [
        {"type": "chief", "index": 0}, {"type": "evaluator", "index": 0},
        {"type": "ps", "index": 0}]


def test_tf_chief_alone_is_chief_then_workers() -> None:
    env = synth.step_env(["a", "b"], [1, 2], 2)
    assert resolve(env, tf_chief=True).tf_config == resolve(env, tf_jobs="chief=1,worker=2").tf_config
    assert resolve(env, tf_chief=True).tf_roles == (("chief", 0), ("worker", 0), ("worker", 1))
    assert resolve(env).tf_roles == (("worker", 0), ("worker", 1), ("worker", 2))


@pytest.mark.parametrize(("text", "said"), [
    ("boss=1,worker=2", "unknown TensorFlow job 'boss'"),
    ("chief=2,worker=1", "at most one chief"),
    ("evaluator=2,worker=1", "at most one evaluator"),
    ("ps=1,worker=2", "need a chief"),
    ("chief=1,ps=2", "need a chief"),
    ("evaluator=1", "no task trains"),
    ("worker=0", "1 or more"),
    ("worker=-1", "1 or more"),
    ("worker=1.5", "1 or more"),
    ("worker=3,worker=1", "given twice"),
    ("worker", "not JOB=COUNT"),
    ("chief=1,,worker=1", "not JOB=COUNT"),
    ("worker=99999999999999999999", "1 or more"),
])
def test_jobs_that_no_strategy_can_use_are_refused(text: str, said: str) -> None:
    env = synth.step_env(["a", "b"], [1, 2], 0)
    with pytest.raises(SlurmEnvError) as err:
        options.from_environ({"SLURMENV_TF_JOBS": text})
    assert (err.value.variable, err.value.value) == ("SLURMENV_TF_JOBS", text)
    assert said in err.value.message and err.value.fix == options.JOBS.fix
    with pytest.raises(SlurmEnvError) as err:
        resolve(env, tf_jobs=text)
    assert (err.value.variable, err.value.value) == ("--tf-jobs", text)


def test_counts_that_do_not_add_up_are_refused_with_a_fix() -> None:
    env = synth.step_env(["a", "b", "c"], [2, 2, 1], 3)
    res = resolve(env, tf_jobs="chief=1,ps=2,worker=1")
    with pytest.raises(SlurmEnvError) as err:
        res.env("all")
    assert err.value.variable == "--tf-jobs"  # given as an option, not the variable
    assert err.value.value == "chief=1,ps=2,worker=1"
    assert "add up to 4 tasks, but the step has 5" in err.value.message
    assert "chief=1,ps=2,worker=2" in (err.value.fix or "")
    assert res.env("torch")["RANK"] == "3"  # torch's variables do not depend on the roles
    with pytest.raises(SlurmEnvError) as err:
        resolve(env, tf_jobs="chief=1,ps=2,worker=3").env("tf")
    assert "add up to 6 tasks, but the step has 5" in err.value.message


def test_tf_chief_and_tf_jobs_together_are_refused() -> None:
    env = synth.step_env(["a", "b"], [1, 1], 1, SLURMENV_TF_CHIEF="1")
    with pytest.raises(SlurmEnvError) as err:
        resolve(env, tf_jobs="chief=1,worker=1").env("tf")
    assert err.value.variable == "--tf-jobs" and "--tf-chief" in (err.value.fix or "")


def test_mpi_launchers_keep_refusing_tf_config() -> None:
    rank = json.loads((MPI / "openmpi_default.json").read_text())["ranks"][0]["env"]
    res = slurmenv.resolve(rank, ephemeral_range=None, cpus=1, rivals=(), tf_jobs="chief=1,worker=7")
    with pytest.raises(SlurmEnvError) as err:
        res.env("tf")
    assert err.value.variable == "TF_CONFIG"
    assert "RANK" in res.env("torch")


def test_export_refuses_in_words_and_show_marks_each_role() -> None:
    base = synth.clean_env(**synth.step_env(["a", "b"], [2, 1], 1))
    cmd = [sys.executable, "-m", "slurmenv"]
    bad = subprocess.run([*cmd, "export", "--tf-jobs", "chief=1,worker=1"], env=base,
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0 and "TF_CONFIG" not in bad.stdout  # a failing line for eval
    assert "--tf-jobs=" in bad.stderr and "Traceback" not in bad.stderr  # the flag given
    env = {**base, "SLURMENV_TF_JOBS": "chief=1,ps=1,worker=1"}
    text = subprocess.run([*cmd, "show", "--all-ranks"], env=env, capture_output=True, text=True,
                          timeout=60, check=True).stdout
    rows = [line.split() for line in text.splitlines() if line[:5].strip().rstrip("*").isdigit()]
    assert [row[6:8] for row in rows] == [["chief", "0"], ["ps", "0"], ["worker", "0"]]
    table = show.step_table(resolve(env), env)
    assert [r["tf_task"] for r in table["ranks"]] == [
        {"type": "chief", "index": 0}, {"type": "ps", "index": 0}, {"type": "worker", "index": 0}]
    plain = show.format_table(show.step_table(resolve(base), base))
    assert "TF_TASK" not in plain  # only once roles are asked for


# -- slurmenv.tf with TensorFlow ---------------------------------------------------------------
@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow")


def test_cluster_resolver_takes_tensorflows_jobs_dict(tf: Any) -> None:
    import slurmenv.tf

    envs = synth.step_envs(["a", "b"], [2, 2], distribution="cyclic")
    jobs = {"worker": 1, "ps": 1, "evaluator": 1, "chief": 1}
    chief, evaluator, ps, worker = (slurmenv.tf.cluster_resolver(environ=e, jobs=jobs) for e in envs)
    spec = chief.cluster_spec().as_dict()
    assert sorted(spec) == ["chief", "ps", "worker"]
    assert all(r.cluster_spec().as_dict() == spec for r in (evaluator, ps, worker))
    assert [(r.task_type, r.task_id) for r in (chief, evaluator, ps, worker)] == [
        ("chief", 0), ("evaluator", 0), ("ps", 0), ("worker", 0)]
    assert ps.master() == "grpc://" + spec["ps"][0] and spec["ps"][0].startswith("a:")
    assert evaluator.master() == ""  # not in the cluster: no server to name
    with pytest.raises(TypeError):
        slurmenv.tf.cluster_resolver(resolve(envs[0]), jobs=jobs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_returns_once_the_chief_stops_listening(tf: Any) -> None:
    import slurmenv.tf

    chief_port, worker_port = _free_port(), _free_port()
    config = {"cluster": {"chief": [f"127.0.0.1:{chief_port}"],
                          "worker": [f"127.0.0.1:{worker_port}"]},
              "task": {"type": "worker", "index": 0}}
    resolver = slurmenv.tf._resolver_class()(config)
    chief = socket.socket()
    chief.bind(("127.0.0.1", chief_port))
    chief.listen()
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            slurmenv.tf.serve(resolver, poll=0.05, start_timeout=60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    # the worker's server listens, and serve() keeps it while the chief does
    with socket.create_connection(("127.0.0.1", worker_port), timeout=30):
        pass
    assert not done.wait(0.5)
    chief.close()
    assert done.wait(60) and not errors


def test_serve_gives_up_when_the_chief_never_listens(tf: Any) -> None:
    import slurmenv.tf

    config = {"cluster": {"chief": [f"127.0.0.1:{_free_port()}"],
                          "ps": [f"127.0.0.1:{_free_port()}"],
                          "worker": [f"127.0.0.1:{_free_port()}"]},
              "task": {"type": "ps", "index": 0}}
    with pytest.raises(TimeoutError, match="did not listen"):
        slurmenv.tf.serve(slurmenv.tf._resolver_class()(config), poll=0.05, start_timeout=0.2)
