"""Fail closed (issue 10): a value is read, derived from what was read, or the command fails
naming the variable; never a partial, guessed or stale environment.

The property test mutates real task environments (the dumps recorded on the test cluster,
tests/dumps) and checks each outcome against the independent layout reference (synth.py):
either a complete environment that matches it, or a refusal naming a variable; and the shell
form ``eval $(slurmenv export); cmd`` runs ``cmd`` exactly when the resolution succeeds.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any

import hostlist
import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import SlurmEnvError, ports, resolve
from slurmenv.launchers import batch as batch_launcher
from slurmenv.launchers import evidence

DUMPS = pathlib.Path(__file__).parent / "dumps"
_script = pathlib.Path(sysconfig.get_path("scripts")) / "slurmenv"
SLURMENV = str(_script) if _script.exists() else shutil.which("slurmenv")
TORCH = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
         "NNODES", "MASTER_ADDR", "MASTER_PORT")
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
GUARD = "SHOULD-NOT-RUN"


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DUMPS / name).read_text())
    return data


#: Task environments recorded on the real cluster whose resolution succeeded there.
TASKS = [recorded(name) for name in ("healthy-rank0.json", "healthy-rank5.json", "proxy.json",
                                     "port-taken.json")]
TASKS = [t for t in TASKS if "error" not in t["resolution"]]


def shell_env(env: Mapping[str, str]) -> dict[str, str]:
    out = synth.clean_env()
    out.pop("ENV", None)
    out.pop("BASH_ENV", None)
    out["PATH"] = os.pathsep.join([os.path.dirname(sys.executable),
                                   os.path.dirname(SLURMENV or ""), out.get("PATH", "/usr/bin")])
    out.update(env)
    return out


def shell_form(env: Mapping[str, str], args: str = "") -> subprocess.CompletedProcess[str]:
    """The README's form, run by bash: eval the export, then a command that must not run."""
    script = f'eval $(slurmenv export {args}); echo "{GUARD} RANK=$RANK"'
    return subprocess.run(["bash", "-c", script], env=shell_env(env), capture_output=True,
                          text=True, timeout=60, check=False)


def assert_refused_by_shell(env: Mapping[str, str], variable: str, args: str = "") -> str:
    out = shell_form(env, args)
    assert GUARD not in out.stdout, out.stdout + out.stderr
    assert out.returncode != 0
    assert f"variable: {variable}=" in out.stderr, out.stderr
    return out.stderr


def parse_counts(text: str) -> list[int]:
    """``2(x3),1`` -> ``[2, 2, 2, 1]`` (the test's own reading of Slurm's notation)."""
    counts: list[int] = []
    for part in text.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
    return counts


def reference(env: Mapping[str, str]) -> dict[str, object] | None:
    """What the independent reference says for a Slurm step task, or None if it cannot say."""
    try:
        hosts = hostlist.expand_hostlist(env["SLURM_STEP_NODELIST"])
        counts = parse_counts(env["SLURM_STEP_TASKS_PER_NODE"])
        rank = int(env["SLURM_PROCID"])
        plane = int(env["SLURM_DIST_PLANESIZE"]) if env.get("SLURM_DIST_PLANESIZE") else None
        return synth.expected(hosts, counts, rank, env.get("SLURM_DISTRIBUTION"), plane)
    except (KeyError, ValueError, IndexError):
        return None


VALUES = ["", "0", "1", "2", "3", "5", "7", "8", "9", "x", "-1", "2(x4)", "1(x8)", "r1n09",
          "r1n[09-10]", "12000", "4294967294", "cyclic", "block"]
NAMES = sorted({name for task in TASKS for name in task["environ"]} | {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "NNODES",
    "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "SLURM_DISTRIBUTION", "TORCHELASTIC_RUN_ID",
    "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_HET_SIZE",
})
MUTATION = st.tuples(st.sampled_from(NAMES), st.one_of(st.none(), st.sampled_from(VALUES)))


def mutate(env: dict[str, str], mutations: list[tuple[str, str | None]]) -> dict[str, str]:
    out = dict(env)
    for name, value in mutations:
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def check_outcome(env: Mapping[str, str], res: slurmenv.Resolution | None,
                  err: SlurmEnvError | None) -> None:
    """A complete environment that matches the reference, or a refusal naming a variable."""
    if err is not None:
        assert isinstance(err.variable, str) and err.variable, err
        assert err.message and err.fix, err
        return
    assert res is not None
    values = res.env("torch")
    assert tuple(n for n in TORCH if n in values) == TORCH  # complete
    got = {n: int(values[n]) for n in TORCH if n not in ("MASTER_ADDR",)}
    assert 0 <= got["RANK"] < got["WORLD_SIZE"] and 0 <= got["LOCAL_RANK"] < got["LOCAL_WORLD_SIZE"]
    assert 0 <= got["NODE_RANK"] < got["NNODES"] and got["GROUP_RANK"] == got["NODE_RANK"]
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
                 "GROUP_RANK", "NNODES"):
        inherited = env.get(name)
        if inherited:  # an inherited rank-like value either agrees or was refused
            assert inherited.strip() == values[name], name
    if res.layout_known and res.world_size > 1:  # a Slurm step: the reference decides
        ref = reference(env)
        assert ref is not None
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES"):
            assert got[name] == ref[name], (name, got, ref)
        assert values["MASTER_ADDR"] == ref["MASTER_NODE"]
        assert env["SLURM_NODEID"].strip() == str(ref["NODE_RANK"])
    elif not res.in_worker:  # a single process: nothing else
        assert (res.rank, res.world_size, res.nnodes, res.master_addr) == (0, 1, 1, "127.0.0.1")
    else:  # hand-set: the values as they were set
        for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            assert values[name] == env[name].strip() or values[name] == env[name]


def outcome(env: Mapping[str, str], task: Mapping[str, Any], ephemeral: tuple[int, int] | None
            ) -> tuple[slurmenv.Resolution | None, SlurmEnvError | None]:
    try:
        res = resolve(env, ephemeral_range=ephemeral, cpus=task.get("cpu_affinity"),
                      step_evidence=None)
        res.env("all")
    except SlurmEnvError as exc:
        return None, exc
    return res, None


def test_recorded_tasks_are_there() -> None:
    assert len(TASKS) >= 3


@given(st.sampled_from(range(len(TASKS))), st.lists(MUTATION, max_size=4))
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_task_environments_fail_closed(which: int, mutations: list[tuple[str, str | None]]
                                                ) -> None:
    task = TASKS[which]
    env = mutate(task["environ"], mutations)
    eph = task.get("ephemeral_range")
    res, err = outcome(env, task, tuple(eph) if eph else None)
    check_outcome(env, res, err)


@given(st.sampled_from(range(len(TASKS))), st.lists(MUTATION, min_size=1, max_size=3))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_task_environments_stop_the_shell_form(
    which: int, mutations: list[tuple[str, str | None]]
) -> None:
    task = TASKS[which]
    env = mutate(task["environ"], mutations)
    res, err = outcome(env, task, ports.ephemeral_range())  # the command reads this node's range
    out = shell_form(env)
    if err is not None:
        assert GUARD not in out.stdout, (err, out.stdout)
        assert f"variable: {err.variable}=" in out.stderr
    else:
        assert res is not None
        assert f"{GUARD} RANK={res.rank}" in out.stdout, out.stderr


# -- partial hand-set variables (issue 10, item 3) -------------------------------------------
@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "RANK"),
        ({"RANK": "3", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "WORLD_SIZE"),
        ({"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "MASTER_ADDR": "h",
          "MASTER_PORT": "29500"}, "LOCAL_WORLD_SIZE"),
        ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
          "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "NODE_RANK"),
        ({"RANK": "1"}, "WORLD_SIZE"),
        ({"LOCAL_RANK": "1"}, "RANK"),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2",
          "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "LOCAL_RANK"),
        ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
          "NODE_RANK": "1", "GROUP_RANK": "0", "NNODES": "2", "MASTER_ADDR": "h",
          "MASTER_PORT": "29500"}, "NODE_RANK"),
    ],
)
def test_partial_hand_set_variables_are_refused(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, step_evidence=None)
    assert info.value.variable == variable
    assert "NODE_RANK" in str(info.value.fix) and "none of them" in str(info.value.fix)
    assert_refused_by_shell(env, variable)


def test_a_complete_hand_set_world_is_taken_as_it_is_and_says_so() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "NODE_RANK": "1", "NNODES": "4", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    res = resolve(env, step_evidence=None)
    assert {n: res.env("torch")[n] for n in TORCH} == {**env, "GROUP_RANK": "1"}
    assert res.sources["NNODES"] == "NNODES set by the environment"
    # values forced by what was read, and said so: a world of 1 on one node
    one = resolve({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500"},
                  step_evidence=None)
    assert (one.local_world_size, one.nnodes) == (1, 1)
    assert one.sources["LOCAL_WORLD_SIZE"] == "a world of 1 (the environment)"
    assert "set by" not in one.sources["NNODES"]


def test_single_process_only_without_any_launcher_variable() -> None:
    # MASTER_PORT alone is the user's port choice; MASTER_ADDR/TF_CONFIG alone are replaced
    res = resolve({"MASTER_PORT": "29511", "MASTER_ADDR": "login1", "TF_CONFIG": "{}"},
                  step_evidence=None)
    assert (res.launcher, res.master_addr, res.master_port) == ("local", "127.0.0.1", 29511)
    assert any("MASTER_ADDR=login1" in note for note in res.notes)
    assert any("TF_CONFIG was already set" in note for note in res.notes)
    assert_refused_by_shell({"NNODES": "2"}, "RANK")


# -- the fallback rule: no variable any registered launcher declares as its own (issue 26) --
def test_lsf_job_variables_without_jsrun_are_refused_not_a_world_of_one() -> None:
    lsf = {"LSB_JOBID": "3", "LSB_HOSTS": "a a b b", "LSB_DJOB_NUMPROC": "4"}
    with pytest.raises(SlurmEnvError) as info:
        resolve(lsf, step_evidence=None)
    assert info.value.variable == "LSB_JOBID" and "(lsf)" in info.value.message
    for name in ("LSB_HOSTS", "LSB_DJOB_NUMPROC"):  # each alone, too
        with pytest.raises(SlurmEnvError) as info:
            resolve({name: lsf[name]}, step_evidence=None)
        assert info.value.variable == name
    stderr = assert_refused_by_shell(lsf, "LSB_JOBID", "--for torch")
    assert "lsf" in stderr
    # LSF's settings kept in a login profile are no job
    res = resolve({"LSB_DEFAULTQUEUE": "normal", "LSF_ENVDIR": "/etc/lsf"}, step_evidence=None)
    assert (res.launcher, res.world_size) == ("local", 1)


def test_the_fallback_rule_is_every_registered_launchers_declaration() -> None:
    """The set the single-process default checks is made from the registered modules'
    TASK_VARIABLES, and nothing else: each one alone refuses it, naming its launchers."""
    from slurmenv import launchers

    owners: dict[str, set[str]] = {}
    for module in launchers.modules():
        for name in module.TASK_VARIABLES:
            owners.setdefault(name, set()).add(module.NAME)
    assert len(owners) > 40
    for name, declared_by in owners.items():
        with pytest.raises(SlurmEnvError) as info:
            resolve({name: "1"}, step_evidence=None, ephemeral_range=None)
        if info.value.variable != name:  # another launcher detects it alone: not the fallback
            assert launchers.detect({name: "1"}).NAME != "local", name
            continue
        named = info.value.message.split("(", 1)[1].split(")", 1)[0].split(" or ")
        assert set(named) == declared_by, name


def test_a_new_launcher_declaring_its_variables_is_covered_without_a_special_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import awsbatch_launcher

    full = {"AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_NUM_NODES": "2",
            "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.7", "SLURMENV_PORT": "29500"}
    partial = {"AWS_BATCH_JOB_NUM_NODES": "2",
               "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.7"}
    # not registered: the package knows nothing of it (what a site without it gets)
    assert resolve(partial, step_evidence=None).launcher == "local"
    awsbatch_launcher.register(monkeypatch)
    res = resolve(full, step_evidence=None, ephemeral_range=None)
    assert (res.launcher, res.rank, res.world_size, res.master_addr) == ("awsbatch", 1, 2, "10.0.0.7")
    with pytest.raises(SlurmEnvError) as info:
        resolve(partial, step_evidence=None)
    assert info.value.variable == "AWS_BATCH_JOB_NUM_NODES"
    assert "(awsbatch)" in info.value.message and "train alone" in info.value.message


# -- inherited values (issue 10, decisions) --------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1"),
     ("NODE_RANK", "0"), ("GROUP_RANK", "0"), ("NNODES", "1")],
)
def test_inherited_rank_like_values_that_disagree_are_refused(name: str, value: str) -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, **{name: value})
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=None)
    assert info.value.variable == name and info.value.value == value
    assert_refused_by_shell(env, name)


def test_inherited_rank_like_values_that_agree_are_noted() -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, NNODES="4", LOCAL_WORLD_SIZE="2")
    res = resolve(env, ephemeral_range=None)
    assert "NNODES=4 was already set and agrees" in res.notes


def test_inherited_master_addr_and_tf_config_are_replaced_by_apply_too() -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, MASTER_ADDR="login1", TF_CONFIG='{"x": 1}',
                         MASTER_PORT="23456")
    res = resolve(env, ephemeral_range=None)
    assert res.master_addr == "r1n09" and res.master_port == 23456
    assert "replaces the inherited MASTER_ADDR=login1" in res.sources["MASTER_ADDR"]
    assert any("MASTER_ADDR=login1" in note for note in res.notes)
    target = dict(env)
    applied = res.apply(target)
    assert target["MASTER_ADDR"] == "r1n09" and applied["MASTER_ADDR"] == "r1n09"
    assert json.loads(target["TF_CONFIG"]) == res.tf_config
    assert target["MASTER_PORT"] == "23456"  # the user's port stays
    # a user-chosen value differing from the resolution is kept unless overwrite=True
    target["MASTER_PORT"] = "29999"
    assert "MASTER_PORT" not in res.apply(target) and target["MASTER_PORT"] == "29999"
    assert res.apply(target, overwrite=True)["MASTER_PORT"] == "23456"


def test_torch_helper_replaces_an_inherited_master_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, MASTER_ADDR="login1")
    monkeypatch.setattr(os, "environ", dict(env))
    resolve(ephemeral_range=None).apply(for_="torch")
    assert os.environ["MASTER_ADDR"] == "r1n09"


# -- inside a torchrun worker (item 4) ---------------------------------------------------------
WORKER = {"TORCHELASTIC_RUN_ID": "r", "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
          "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2",
          "MASTER_ADDR": "r1n09", "MASTER_PORT": "29500"}


def test_torchrun_worker_default_export_names_tf_config_and_the_way_out() -> None:
    stderr = assert_refused_by_shell(WORKER, "TF_CONFIG")
    assert "--for torch" in stderr
    out = shell_form(WORKER, "--for torch")
    assert f"{GUARD} RANK=1" in out.stdout


def test_torchrun_worker_default_show_shows_what_is_known() -> None:
    out = subprocess.run([SLURMENV or "slurmenv", "show"], env=shell_env(WORKER),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "RANK" in out.stdout and "set by torchrun" in out.stdout
    assert "TF_CONFIG" in out.stdout and "not known here" in out.stdout
    assert "--for torch" in out.stdout
    data = json.loads(subprocess.run([SLURMENV or "slurmenv", "show", "--json"],
                                     env=shell_env(WORKER), capture_output=True, text=True,
                                     timeout=60, check=True).stdout)
    assert data["env"]["RANK"] == "1" and "TF_CONFIG" in data["unknown"]


def test_an_incomplete_torchrun_worker_is_refused() -> None:
    env = {k: v for k, v in WORKER.items() if k != "LOCAL_WORLD_SIZE"}
    assert_refused_by_shell(env, "LOCAL_WORLD_SIZE", "--for torch")


# -- errors that blame the right thing (item 5) ----------------------------------------------
def test_too_few_reserved_ports_name_the_reservation() -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, SLURM_STEP_RESV_PORTS="12000-12001")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=None).env("all")
    assert info.value.variable == "SLURM_STEP_RESV_PORTS"
    assert info.value.value == "12000-12001"
    assert "--resv-ports=3" in str(info.value.fix) and "--port-range" not in str(info.value.fix)
    assert_refused_by_shell(env, "SLURM_STEP_RESV_PORTS")


def test_a_wrong_node_id_is_blamed_on_slurm_nodeid() -> None:
    # rank 5 runs on r2n09 (node 2), as SLURMD_NODENAME and the layout say; SLURM_NODEID lies
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, SLURM_NODEID="0")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=None)
    assert info.value.variable == "SLURM_NODEID" and info.value.value == "0"
    assert "srun task" in str(info.value.fix)
    # a node name the layout contradicts is blamed on the name
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, SLURMD_NODENAME="r1n09")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=None)
    assert info.value.variable == "SLURMD_NODENAME"


def test_a_port_in_the_ephemeral_range_names_where_it_came_from() -> None:
    eph = (32768, 60999)
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, MASTER_PORT="40000")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=eph)
    assert (info.value.variable, info.value.value) == ("MASTER_PORT", "40000")
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, SLURM_STEP_RESV_PORTS="40000-40002")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=eph)
    assert info.value.variable == "SLURM_STEP_RESV_PORTS" and "MpiParams" in str(info.value.fix)


def test_resolve_addr_is_shown_as_given() -> None:
    # 'r1n09..x' is not a host name: refused as the template's fault, before any lookup
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 5, SLURMENV_RESOLVE_ADDR="yes",
                         SLURMENV_ADDR_TEMPLATE="{host}..x")
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=None)
    assert (info.value.variable, info.value.value) == ("SLURMENV_ADDR_TEMPLATE", "{host}..x")
    # a host name no resolver knows (.invalid, RFC 6761): the lookup fails, named as given
    env["SLURMENV_ADDR_TEMPLATE"] = "{host}.invalid"
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, ephemeral_range=None)
    assert (info.value.variable, info.value.value) == ("SLURMENV_RESOLVE_ADDR", "yes")


# -- scrubbed environments (item 6) ----------------------------------------------------------
def fake_proc(root: pathlib.Path, chain: list[tuple[int, str, str]]) -> None:
    """A /proc with ``chain`` = [(pid, comm, cmdline), ...], each the parent of the previous."""
    for (pid, comm, cmdline), parent in zip(chain, [*[c[0] for c in chain[1:]], 1]):
        d = root / str(pid)
        d.mkdir()
        (d / "stat").write_bytes(f"{pid} ({comm}) S {parent} 1 1".encode())
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")


@pytest.mark.parametrize(
    ("stepd", "found"),
    [("slurmstepd: [12.0]", True), ("slurmstepd: [12.3]", True),
     ("slurmstepd: [12.batch]", False), ("slurmstepd: [12.extern]", False),
     ("slurmstepd: [12.interactive]", False)],
)
def test_slurmstepd_ancestor_is_the_evidence(tmp_path: pathlib.Path, stepd: str, found: bool) -> None:
    fake_proc(tmp_path, [(100, "python3", "python3 x"), (90, "bash", "bash -c x"),
                         (80, "apptainer", "apptainer exec"), (70, "slurmstepd", stepd)])
    got = evidence.stepd_ancestor(str(tmp_path), pid=100)
    assert (got is not None) == found
    if found:
        assert stepd in str(got)


def test_no_slurmstepd_no_evidence(tmp_path: pathlib.Path) -> None:
    fake_proc(tmp_path, [(100, "python3", "python3"), (90, "sshd", "sshd: alice")])
    assert evidence.stepd_ancestor(str(tmp_path), pid=100) is None
    assert evidence.stepd_ancestor() is None  # pytest does not run in a Slurm step here


@pytest.mark.parametrize(
    ("line", "found"),
    [("0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0", True),
     ("0::/system.slice/slurmstepd.scope/job_12/step_batch/user/task_0", False),
     ("0::/system.slice/slurmstepd.scope/job_12/step_extern/user", False),
     ("0::/system.slice/slurmstepd.scope/job_12/step_interactive/user", False),
     ("4:memory:/slurm/uid_0/job_12/step_3/task_1", True),
     ("0::/user.slice/user-1000.slice/session-3.scope", False)],
)
def test_cgroup_of_a_step_is_the_evidence(tmp_path: pathlib.Path, line: str, found: bool) -> None:
    path = tmp_path / "cgroup"
    path.write_text(line + "\n")
    assert (evidence.cgroup_step(str(path)) is not None) == found


def test_scrubbed_step_refuses_the_single_process_default() -> None:
    seen = "slurmstepd: [12.0] (pid 70) is an ancestor of this process"
    with pytest.raises(SlurmEnvError) as info:
        resolve({}, step_evidence=seen)
    assert info.value.variable == "SLURM_JOB_ID" and seen in info.value.message
    assert "--cleanenv" in str(info.value.fix)
    assert resolve({}, step_evidence=None).world_size == 1
    # only the fallback looks: a real step task never pays for (or is refused by) it
    step = synth.step_env(HOSTS, [2, 2, 2, 2], 5)
    assert resolve(step, ephemeral_range=None, step_evidence=seen).rank == 5


# -- one-task jobs (item 7) ------------------------------------------------------------------
def batch(**extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "31", "SLURM_JOBID": "31", "SLURM_JOB_NUM_NODES": "1",
            "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "r1n09", "SLURM_PROCID": "0",
            "SLURM_TASKS_PER_NODE": "1", **extra}


def test_a_one_task_batch_script_is_one_process() -> None:
    res = resolve(batch(SLURM_NTASKS="1", SLURM_NPROCS="1"), step_evidence=None)
    assert (res.rank, res.world_size, res.nnodes, res.master_addr) == (0, 1, 1, "127.0.0.1")
    assert "SLURM_NTASKS=1" in res.sources["WORLD_SIZE"]
    out = shell_form(batch(SLURM_NTASKS="1"))
    assert f"{GUARD} RANK=0" in out.stdout


@pytest.mark.parametrize(
    "extra",
    [{}, {"SLURM_NTASKS": "2"}, {"SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "2",
                                 "SLURM_NNODES": "2"}],
    ids=["no-task-count", "two-tasks", "two-nodes"],
)
def test_every_other_job_is_still_refused_in_its_batch_script(extra: dict[str, str]) -> None:
    stderr = assert_refused_by_shell(batch(**extra), "SLURM_STEP_ID")
    if not extra:  # sbatch -N1 without -n: say how to tell Slurm there is one task
        assert "sbatch -n 1" in stderr
    assert batch_launcher.OUTSIDE_STEP_FIX.split(":")[0] in stderr
