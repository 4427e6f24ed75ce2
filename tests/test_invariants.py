"""Invariants every resolution keeps, whatever the launcher and the options (issue 27).

Over every registered launcher, on whole launches (every rank of one step or job: random
Slurm steps from synth.py, recorded launches from tests/fixtures, hand-built worlds) and random
valid options (every row of the options table, from its kind's valid samples):

* ``0 <= RANK < WORLD_SIZE``, ``0 <= LOCAL_RANK < LOCAL_WORLD_SIZE``, ``0 <= NODE_RANK < NNODES``;
* TF_CONFIG's task index lies inside its cluster list, and its own entry is this rank's own
  address (its node's, through the template) and port;
* the node and local rank of the layout agree with ``NODE_RANK`` and ``LOCAL_RANK``;
* every rank of one launch agrees on ``MASTER_ADDR``, ``MASTER_PORT`` and the worker list, the
  ranks are exactly ``0 .. WORLD_SIZE-1``, and each node's local ranks are ``0 .. LOCAL_WORLD_SIZE-1``.

A launch a launcher refuses by design (a leaked environment) is refused for every option; one
that resolves must keep every invariant.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import SlurmEnvError, launchers, options, tfconfig

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EPHEMERAL = (32768, 60999)
Launch = list[dict[str, str]]


def _beyond(fixture: str) -> list[tuple[str, Launch]]:
    data = json.loads((FIXTURES / "beyond" / f"{fixture}.json").read_text())
    return [(f"{fixture}/{case['name']}", [task["env"] for task in case["tasks"]])
            for case in data["cases"]]


def _mpi(name: str) -> Launch:
    ranks = json.loads((FIXTURES / "mpi" / f"{name}.json").read_text())["ranks"]
    return [rank["env"] for rank in ranks]


def _lsf(tmp: Path) -> list[tuple[str, Launch]]:
    case = json.loads((FIXTURES / "beyond" / "lsf_jsrun.json").read_text())["cases"][0]
    rankfile = tmp / "rankfile"
    rankfile.write_text("\n".join(case["rankfile"]) + "\n")
    return [("lsf_jsrun", [{**task["env"], "LSB_DJOB_RANKFILE": str(rankfile)}
                           for task in case["tasks"]])]


def _pals(tmp: Path) -> list[tuple[str, Launch]]:
    from test_pals import pbs_tasks

    return [("pbs_pals", pbs_tasks(tmp))]


def _torchrun(nodes: int, nproc: int, run_id: str = "job7") -> Launch:
    world = nodes * nproc
    return [{"TORCHELASTIC_RUN_ID": run_id, "RANK": str(n * nproc + k), "LOCAL_RANK": str(k),
             "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(n),
             "GROUP_WORLD_SIZE": str(nodes), "ROLE_RANK": str(n * nproc + k),
             "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
            for n in range(nodes) for k in range(nproc)]


def _preset(nodes: int, nproc: int) -> Launch:
    world = nodes * nproc
    return [{"RANK": str(n * nproc + k), "LOCAL_RANK": str(k), "WORLD_SIZE": str(world),
             "LOCAL_WORLD_SIZE": str(nproc), "NODE_RANK": str(n), "NNODES": str(nodes),
             "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
            for n in range(nodes) for k in range(nproc)]


def _mvapich(size: int) -> Launch:
    return [{"MV2_COMM_WORLD_RANK": str(r), "MV2_COMM_WORLD_SIZE": str(size),
             "MV2_COMM_WORLD_LOCAL_RANK": str(r), "MV2_COMM_WORLD_LOCAL_SIZE": str(size)}
            for r in range(size)]


def _het() -> Launch:
    from test_het_step import REORDERED, REORDERED_TASKS, task_env

    return [task_env(REORDERED, task) for task in REORDERED_TASKS]


def _one_task_job() -> Launch:
    env = synth.step_env(["n1"], [1], 0)
    for name in [n for n in env if n.startswith("SLURM_STEP") or n in ("SLURM_GTIDS",
                                                                        "SLURM_LOCALID")]:
        del env[name]
    return [env]


#: launcher -> its launches (name, every rank's environment); tmp: a directory for files.
LAUNCHES: dict[str, Callable[[Path], list[tuple[str, Launch]]]] = {
    "torchrun": lambda tmp: [("2x2", _torchrun(2, 2)), ("3x1", _torchrun(3, 1))],
    "flux": lambda tmp: _beyond("flux"),
    "het": lambda tmp: [("het", _het())],
    "slurm": lambda tmp: [(name, _mpi(name)) for name in ("srun_pmi2", "srun_shasta")],
    "lsf": _lsf,
    "pals": _pals,
    "openmpi": lambda tmp: [(n, _mpi(n)) for n in (
        "openmpi_default", "openmpi_bynode", "openmpi_npernode", "openmpi_host2",
        "openmpi5_default", "openmpi5_bynode", "openmpi5_uneven", "openmpi_leak")],
    "hydra": lambda tmp: [(n, _mpi(n)) for n in (
        "hydra_default", "hydra_ppn", "hydra_hosts", "impi_uneven", "impi_rr", "mpich5_ppn",
        "hydra_leak")],
    "mvapich": lambda tmp: [("one node", _mvapich(4))],
    "batch": lambda tmp: [("one-task job", _one_task_job())],
    "k8s": lambda tmp: [*_beyond("kubeflow_pytorchjob"), *_beyond("trainer_v2"),
                        *_beyond("volcano")],
    "preset": lambda tmp: [("2x2", _preset(2, 2)), ("1x3", _preset(1, 3))],
    "local": lambda tmp: [("nothing", [{}])],
}

#: Options a launcher's launches need to resolve at all (the fix its refusal gives).
NEEDS: dict[str, dict[str, Any]] = {
    "flux": {"master_addr": "10.0.0.1"},  # Flux tasks carry no host list
    "mvapich": {"port": 29500},  # mpirun_rsh gives no job ID for the port formula
}

#: Options that reach the network, drawn off here (resolve_addr: one DNS lookup per task, 2 s
#: each where the names do not resolve).
OFF = {"resolve_addr": False}
#: Every option of the table (slurmenv.options.TABLE), each drawn from its kind's valid samples:
#: an option added to the table is in these tests with no line here.
OPTIONS = st.fixed_dictionaries({}, optional={
    row.field: st.just(OFF[row.field]) if row.field in OFF
    else st.sampled_from([value for _, value in row.kind.valid])
    for row in options.TABLE
})


def by_the_options(launch: Launch, launcher: str) -> bool:
    """Whether a refused launch resolves with no option but those the launcher needs: then
    the options refused it."""
    return not isinstance(resolve_launch(launch, NEEDS.get(launcher, {})), SlurmEnvError)


def test_every_registered_launcher_has_launches() -> None:
    assert set(LAUNCHES) == set(launchers.REGISTRY)


def resolve_launch(launch: Launch, opts: dict[str, Any]) -> list[slurmenv.Resolution] | SlurmEnvError:
    """Every rank's resolution, or the first refusal (then every rank must be refused)."""
    results: list[slurmenv.Resolution | SlurmEnvError] = []
    for env in launch:
        try:
            results.append(slurmenv.resolve(env, ephemeral_range=EPHEMERAL, cpus=1, rivals=(),
                                            **opts))
        except SlurmEnvError as exc:
            results.append(exc)
    refused = [r for r in results if isinstance(r, SlurmEnvError)]
    if refused:
        return refused[0]
    return [r for r in results if not isinstance(r, SlurmEnvError)]


def tf_of(res: slurmenv.Resolution) -> dict[str, Any] | None:
    try:
        return json.loads(res.env("tf")["TF_CONFIG"])  # type: ignore[no-any-return]
    except SlurmEnvError:
        return None


def address_of(host: str, template: str | None) -> str:
    """A node's address: through the template, except the single process's loopback."""
    return template.format(host=host) if template and host != "127.0.0.1" else host


def check_rank(res: slurmenv.Resolution, template: str | None) -> None:
    assert 0 <= res.rank < res.world_size, (res.rank, res.world_size)
    assert 0 <= res.local_rank < res.local_world_size, (res.local_rank, res.local_world_size)
    known_node = "NODE_RANK" not in res.unknown
    if known_node:
        assert 0 <= res.node_rank < res.nnodes, (res.node_rank, res.nnodes)
    tf = tf_of(res)
    if tf is None:
        return
    kind, index = tf["task"]["type"], tf["task"]["index"]
    cluster = tf["cluster"]
    assert 0 <= index < len(cluster[kind]), (kind, index, cluster)
    workers = tfconfig.rank_addresses(tf)
    assert len(workers) == res.world_size
    assert cluster[kind][index] == workers[res.rank], "TF_CONFIG's own entry is not this rank's"
    if res.layout_known:
        node = res.node_of[res.rank]
        assert res.local_of[res.rank] == res.local_rank
        if known_node:
            assert node == res.node_rank
        host = res.hosts[node]
        address = address_of(host, template)
        assert tfconfig.host_of(workers[res.rank]) == address, (workers[res.rank], address)
        # every rank's entry: its node's address
        for rank, entry in enumerate(workers):
            assert tfconfig.host_of(entry) == address_of(res.hosts[res.node_of[rank]], template)


def check_launch(results: list[slurmenv.Resolution], template: str | None) -> None:
    for res in results:
        check_rank(res, template)
    first = results[0]
    world = first.world_size
    for res in results:
        assert (res.master_addr, res.master_port, res.world_size) == \
            (first.master_addr, first.master_port, world)
    tfs = [tf_of(res) for res in results]
    if tfs[0] is not None:
        lists = {tuple(tfconfig.rank_addresses(tf)) for tf in tfs if tf is not None}
        assert len(lists) == 1 and all(tf is not None for tf in tfs), "ranks disagree on workers"
    if len(results) == world:  # the whole launch: every rank once, every node's local ranks
        assert sorted(res.rank for res in results) == list(range(world))
        nodes: dict[int, list[slurmenv.Resolution]] = {}
        for res in results:
            if "NODE_RANK" not in res.unknown:
                nodes.setdefault(res.node_rank, []).append(res)
        for members in nodes.values():
            size = members[0].local_world_size
            assert all(m.local_world_size == size for m in members)
            assert sorted(m.local_rank for m in members) == list(range(size))


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
@given(opts=OPTIONS)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_invariants_of_every_launcher(launcher: str, opts: dict[str, Any], tmp_path: Path) -> None:
    resolved, by_option = 0, 0
    opts = {**NEEDS.get(launcher, {}), **opts}
    for name, launch in LAUNCHES[launcher](tmp_path):
        outcome = resolve_launch(launch, opts)
        if isinstance(outcome, SlurmEnvError):
            assert outcome.variable, (name, str(outcome))
            by_option += by_the_options(launch, launcher)
            continue
        detected = {launchers.detect(env).__name__.rpartition(".")[2] for env in launch}
        assert detected == {launcher} or name in ("srun_pmi2", "srun_shasta"), (name, detected)
        check_launch(outcome, opts.get("addr_template"))
        resolved += 1
    # options may refuse every launch (TF job roles for another world size, GPU binding
    # without GPUs, another launcher chosen), naming a variable; else one launch resolves
    assert resolved or by_option, f"no launch of {launcher} resolved with {opts}"


@st.composite
def slurm_steps(draw: st.DrawFn) -> tuple[list[str], list[int], str | None, int | None]:
    nnodes = draw(st.integers(1, 6))
    hosts = [f"r{i // 3}n{i % 3:02d}" for i in range(nnodes)]
    counts = draw(st.lists(st.integers(1, 4), min_size=nnodes, max_size=nnodes))
    distribution = draw(st.sampled_from([None, "block", "cyclic", "plane"]))
    plane = draw(st.integers(1, 3)) if distribution == "plane" else None
    return hosts, counts, distribution, plane


@given(step=slurm_steps(), opts=OPTIONS, job=st.integers(1, 10**7), step_id=st.integers(0, 50))
@settings(max_examples=60, deadline=None)
def test_invariants_of_random_slurm_steps(
    step: tuple[list[str], list[int], str | None, int | None], opts: dict[str, Any], job: int,
    step_id: int,
) -> None:
    hosts, counts, distribution, plane = step
    launch = synth.step_envs(hosts, counts, distribution=distribution, plane=plane, job_id=job,
                             step_id=step_id)
    outcome = resolve_launch(launch, opts)
    if isinstance(outcome, SlurmEnvError):  # an option's refusal (GPU binding without GPUs)
        assert outcome.variable and by_the_options(launch, "slurm"), str(outcome)
        return
    check_launch(outcome, opts.get("addr_template"))
    for rank, res in enumerate(outcome):  # and the independent reference's layout
        want = synth.expected(hosts, counts, rank, distribution, plane)
        assert (res.rank, res.local_rank, res.node_rank) == \
            (want["RANK"], want["LOCAL_RANK"], want["NODE_RANK"])
