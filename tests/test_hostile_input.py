"""Hostile or partial input (issue 19): every input is parsed with bounded work before it is
used, and gives a complete resolution or a SlurmEnvError naming the variable, never another
exception, a silent single-process world, or unbounded time and memory."""

from __future__ import annotations

import json
import os
import pathlib
import tracemalloc
from collections.abc import Mapping

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import SlurmEnvError, dump, launchers, ports
from slurmenv import readfile as files
from slurmenv.launchers import evidence

ROOT = pathlib.Path(__file__).resolve().parent.parent
EPHEMERAL = (32768, 60999)
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
STEP = synth.step_env(HOSTS, [2, 2, 2, 2], 5)


def resolve(env: Mapping[str, str], **options: object) -> slurmenv.Resolution:
    options = {"ephemeral_range": EPHEMERAL, **options}
    return slurmenv.resolve(env, cpus=2, step_evidence=None, rivals=None,
                            **options)  # type: ignore[arg-type]


def refused(env: Mapping[str, str], **options: object) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as info:
        res = resolve(env, **options)
        res.env("all")
    return info.value


# -- stray launcher variables: no silent world of 1 ------------------------------------------
@pytest.mark.parametrize(
    ("stray", "variable", "launcher"),
    [({"PMI_RANK": "3", "PMI_SIZE": "8"}, "PMI_RANK", "hydra"),
     ({"PMIX_RANK": "3"}, "PMIX_RANK", "openmpi"),
     ({"OMPI_COMM_WORLD_SIZE": "4"}, "OMPI_COMM_WORLD_SIZE", "openmpi"),
     ({"FLUX_TASK_RANK": "3"}, "FLUX_TASK_RANK", "flux"),
     ({"TORCHELASTIC_RUN_ID": "x"}, "TORCHELASTIC_RUN_ID", "torchrun"),
     ({"JSM_NAMESPACE_RANK": "1"}, "JSM_NAMESPACE_RANK", "lsf"),
     ({"MV2_COMM_WORLD_LOCAL_RANK": "1"}, "MV2_COMM_WORLD_LOCAL_RANK", "mvapich"),
     ({"JOB_COMPLETION_INDEX": "2"}, "JOB_COMPLETION_INDEX", "k8s"),
     ({k: v for k, v in STEP.items() if k not in ("SLURM_JOB_ID", "SLURM_JOBID")},
      "SLURM_STEP_ID", "slurm"),
     ({"SLURM_PROCID": ""}, "SLURM_PROCID", "slurm")],
)
def test_a_stray_launcher_variable_refuses_the_single_process_default(
    stray: dict[str, str], variable: str, launcher: str
) -> None:
    err = refused(stray)
    assert err.variable == variable and launcher in err.message
    assert "train alone" in err.message and err.fix and variable in err.fix


def test_tool_settings_in_a_login_shell_still_give_a_single_process() -> None:
    profile = {"SLURM_CONF": "/etc/slurm/slurm.conf", "OMPI_MCA_btl": "self,tcp",
               "I_MPI_FABRICS": "shm:ofi", "PMIX_MCA_gds": "hash", "MV2_ENABLE_AFFINITY": "0",
               "KUBERNETES_SERVICE_HOST": "", "SLURMENV_THREADS": "0", "HYDRA_DEBUG": "0"}
    res = resolve(profile)
    assert (res.launcher, res.rank, res.world_size) == ("local", 0, 1)


def test_every_task_variable_belongs_to_a_registered_launcher() -> None:
    """The stray check reads the launchers' own declarations: each declared task variable is
    one the module reads (dump records it), so there is no second list to drift."""
    for module in launchers.modules():
        for name in getattr(module, "TASK_VARIABLES", ()):
            assert dump.is_read(name), (module.NAME, name)


# -- numbers: strict, bounded ----------------------------------------------------------------
@pytest.mark.parametrize("gtids", ["+4,5", "٤,٥", "4, 5x", "4,,5", "²,5"])
def test_slurm_gtids_is_parsed_strictly(gtids: str) -> None:
    assert refused({**STEP, "SLURM_GTIDS": gtids}).variable == "SLURM_GTIDS"


INTEGERS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NUM_TASKS",
            "SLURM_STEP_NUM_NODES", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_CPUS_PER_TASK",
            "SLURMENV_PORT", "SLURM_GTIDS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_RESV_PORTS")


@pytest.mark.parametrize("name", INTEGERS)
def test_a_number_of_thousands_of_digits_is_refused_naming_its_variable(name: str) -> None:
    err = refused({**STEP, name: "9" * 5000})
    assert err.variable is not None


# -- ports -----------------------------------------------------------------------------------
@pytest.mark.parametrize("listed", ["12001,12001,12001", "12000-12003,12002", "12000-12010,12005-12020"])
def test_a_port_reserved_twice_is_refused(listed: str) -> None:
    err = refused({**STEP, "SLURM_STEP_RESV_PORTS": listed})
    assert err.variable == "SLURM_STEP_RESV_PORTS" and "twice" in err.message


def test_a_huge_reserved_port_list_costs_little_memory() -> None:
    """200 copies of 1024-65535 (2.2 KB) took 617 MB: now refused, and a valid list that covers
    every port is expanded only as far as a resolution needs."""
    tracemalloc.start()
    try:
        refused({**STEP, "SLURM_STEP_RESV_PORTS": ",".join(["1024-65535"] * 200)})
        res = resolve({**STEP, "SLURM_STEP_RESV_PORTS": "1024-65535"}, ephemeral_range=None)
        assert (res.master_port, res.tf_config["cluster"]["worker"][0]) == (1024, "r1n09:1025")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    assert ports.parse_port_list("2000-2009,3000", "V", limit=3) == [2000, 2001, 2002]
    assert ports.parse_port_list("3000,2000-2001", "V") == [3000, 2000, 2001]


def test_a_port_at_the_first_ephemeral_port_is_refused() -> None:
    """in_ephemeral's lower bound is inclusive (a mutant with < survived)."""
    assert ports.in_ephemeral(32768, EPHEMERAL) and not ports.in_ephemeral(32767, EPHEMERAL)
    assert ports.in_ephemeral(60999, EPHEMERAL) and not ports.in_ephemeral(61000, EPHEMERAL)
    assert refused({**STEP, "SLURMENV_PORT": "32768"}).variable == "SLURMENV_PORT"
    assert resolve({**STEP, "SLURMENV_PORT": "32767"}).master_port == 32767


# -- the address template --------------------------------------------------------------------
@pytest.mark.parametrize(
    "template", ["{host}{host:x}", "{host:>8}", "{host}{host:>100000000}", "{host!r}",
                 "{host.upper}", "{host[0]}", "{}", "{0}", "{host}{other}", "{host", "ib"],
)
def test_a_template_allows_only_plain_host_fields(template: str) -> None:
    err = refused({**STEP, "SLURMENV_ADDR_TEMPLATE": template})
    assert err.variable == "SLURMENV_ADDR_TEMPLATE"


def test_the_documented_template_forms_work() -> None:
    for template, addr in (("{host}-ib", "r1n09-ib"), ("{host}i.fabric", "r1n09i.fabric"),
                           ("{host}.{host}", "r1n09.r1n09")):
        assert resolve({**STEP, "SLURMENV_ADDR_TEMPLATE": template}).master_addr == addr


# -- files named by variables ----------------------------------------------------------------
def arbitrary(path: str) -> dict[str, str]:
    return {**STEP, "SLURM_DISTRIBUTION": "arbitrary", "SLURM_HOSTFILE": path}


@pytest.mark.parametrize("path", ["/dev/zero", "/proc/self", "/dev/null"])
def test_a_host_file_that_is_not_a_regular_file_is_refused(path: str) -> None:
    err = refused(arbitrary(path))
    assert err.variable == "SLURM_HOSTFILE" and "not a regular file" in err.message


def test_a_fifo_as_host_file_is_refused_without_waiting(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: opening it blocking would wait for ever
    assert refused(arbitrary(str(fifo))).variable == "SLURM_HOSTFILE"


def test_a_file_over_the_limit_is_refused(tmp_path: pathlib.Path) -> None:
    big = tmp_path / "hosts"
    big.write_bytes(b"r1n09\n" * 100)
    assert files.read(str(big), "V", "fix", limit=600) is not None
    with pytest.raises(SlurmEnvError, match="larger than 599 bytes"):
        files.read(str(big), "V", "fix", limit=599)
    assert files.read(str(tmp_path / "absent"), "V", "fix") is None


PBS_RANK0 = json.loads((ROOT / "tests/fixtures/beyond/pbs_pals.json").read_text())[
    "cases"][0]["tasks"][0]["env"]


@pytest.mark.parametrize("variable", ["PALS_APINFO"])
def test_other_launchers_files_are_read_the_same_way(variable: str) -> None:
    env = {**PBS_RANK0, "PALS_APINFO": "/nonexistent/apinfo", variable: "/dev/zero"}
    with pytest.raises(SlurmEnvError) as info:
        res = resolve(env)
        res.env("all")
    assert info.value.variable == variable and "not a regular file" in info.value.message


# -- evidence of a scrubbed step: find() combines the cgroup and the ancestor ----------------
def test_find_reports_a_slurmstepd_ancestor(tmp_path: pathlib.Path) -> None:
    """find() itself (not only its parts) sees the ancestor: a mutant of find() that ignored
    it survived every unit test."""
    for pid, comm, parent, cmdline in ((100, "python3", 90, "python3"),
                                       (90, "slurmstepd", 1, "slurmstepd: [12.0]")):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_bytes(f"{pid} ({comm}) S {parent} 1 1".encode())
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    (tmp_path / "100" / "cgroup").write_text("0::/user.slice/user-0.slice/session-1.scope\n")
    found = evidence.find(str(tmp_path), pid=100)
    assert found is not None and "slurmstepd: [12.0]" in found
    (tmp_path / "100" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_12/step_3\n")
    assert "job_12/step_3" in str(evidence.find(str(tmp_path), pid=100))


# -- text that is not UTF-8, names, sizes ----------------------------------------------------
def test_a_host_name_that_is_not_utf8_is_refused() -> None:
    bad = "r1n09\udcff"  # what os.environ makes of the byte 0xff
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, nodelist=f"{bad},r1n10,r2n09,r2n10")
    err = refused(env)
    assert err.variable == "SLURM_STEP_NODELIST" and "UTF-8" in err.message
    assert refused({**STEP, "SLURMENV_MASTER_ADDR": bad}).variable == "SLURMENV_MASTER_ADDR"


def test_a_node_name_longer_than_a_dns_name_is_refused() -> None:
    long = "n" * 254
    env = {**STEP, "SLURM_STEP_NODELIST": f"{long},r1n10,r2n09,r2n10"}
    assert "longer than 253" in refused(env).message


def test_a_world_whose_tf_config_cannot_fit_is_refused_before_it_is_built() -> None:
    """20,000 tasks per node on 1,000 nodes: TF_CONFIG would need at least 180 MB; refused
    from the world size alone, with little memory."""
    counts = "20000(x1000)"
    env = {**STEP, "SLURM_STEP_TASKS_PER_NODE": counts, "SLURM_STEP_NUM_TASKS": "20000000",
           "SLURM_STEP_NUM_NODES": "1000", "SLURM_STEP_NODELIST": "n[1-1000]",
           "SLURMD_NODENAME": "n1", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_GTIDS": ",".join(map(str, range(20000)))}
    tracemalloc.start()
    try:
        err = refused(env)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.variable == "TF_CONFIG" and "20000000 workers" in err.message
    assert peak < 64 << 20, peak


# -- any text in any variable: a resolution or a SlurmEnvError -------------------------------
def _read_names() -> list[str]:
    names = [n for n in dump.VARIABLES]
    names += ["SLURMENV_PORT", "SLURMENV_PORT_RANGE", "SLURMENV_ADDR_TEMPLATE",
              "SLURMENV_RESOLVE_ADDR", "SLURMENV_MASTER_ADDR", "SLURMENV_TF_CHIEF",
              "SLURMENV_BIND_GPUS", "SLURMENV_THREADS"]
    return sorted(set(names) - {"SLURMENV_RESOLVE_ADDR"})  # resolving asks DNS: not here


NAMES = _read_names()
BASES = [STEP, {}, *(
    json.loads(p.read_text())["environ"] for p in sorted((ROOT / "tests/dumps").glob("*.json"))
)]
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "0", "1", "-1", "+4", "٤", "9" * 30, "1024-65535", "12001,12001",
                     "{host:>9}", "n[1-3]", "2(x0)", "/dev/zero", "\udcff", "a\nb", "4294967290",
                     "arbitrary", "plane=0", "cyclic:block,pack", "0-65535"]),
    st.text(alphabet="0123456789,-[]()x", max_size=30),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES), changes=st.dictionaries(st.sampled_from(NAMES), TEXT,
                                                           min_size=1, max_size=4))
def test_any_text_in_any_variable_resolves_or_is_refused(
    base: dict[str, str], changes: dict[str, str]
) -> None:
    env = {**base, **changes}
    try:
        res = resolve(env)
        out = res.env("all")
    except SlurmEnvError as exc:
        assert exc.message
        return
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        assert out[name]
    assert 0 <= res.rank < res.world_size
