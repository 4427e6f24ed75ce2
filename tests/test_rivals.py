"""Rival launches (``rivals.py``): rank 0 of an Open MPI launch refuses a MASTER_PORT that the
rank 0 of another live launch on its node resolves to.

The environments are ranks recorded on the real cluster (``tests/fixtures/mpi``: two
``mpirun`` started at once in job 1, both with rank 0 on r1n09). A collision of their job
families is made by changing launch B's ``OMPI_MCA_ess_base_jobid`` (a real collision needs
two ``mpirun`` PIDs that fold to equal families modulo 22,746). The first tests pass the
other processes' environments in (the environment is the input); the last ones start real
processes with those environments and let slurmenv find them in /proc, in this network
namespace and in another one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import slurmenv
from slurmenv import SlurmEnvError, ports, rivals

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "mpi"
EPHEMERAL = (32768, 60999)
SPAN = 22768 - 22  # ports of the default range outside the job's own block
KEY = "OMPI_MCA_ess_base_jobid"


def ranks(name: str) -> list[dict[str, str]]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return [r["env"] for r in data["ranks"]]


A0, A1 = ranks("openmpi_conc_a")[:2]  # launch A: rank 0, rank 1 (both on r1n09)
B0, B1 = ranks("openmpi_conc_b")[:2]  # launch B: rank 0 (r1n09), rank 1 (r1n10)


def colliding(env: Mapping[str, str], with_env: Mapping[str, str] = A0) -> dict[str, str]:
    """``env`` with a job id whose family draws ``with_env``'s port (family + SPAN)."""
    family = int(with_env[KEY]) >> 16
    other = family + SPAN if family + SPAN < 2**16 else family - SPAN
    return {**env, KEY: str(other << 16 | 1)}


def resolve(env: Mapping[str, str], others: Any = (), **options: Any) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=EPHEMERAL, cpus=1, rivals=others, **options)


def refusal(env: Mapping[str, str], others: Any, **options: Any) -> SlurmEnvError:
    with pytest.raises(SlurmEnvError) as info:
        resolve(env, others, **options)
    return info.value


def test_the_recorded_concurrent_launches_have_different_ports_and_no_rival() -> None:
    a, b = resolve(A0, [B0]), resolve(B0, [A0])
    assert a.rank == b.rank == 0 and a.master_port != b.master_port


def test_a_launch_whose_id_draws_the_same_port_is_a_rival() -> None:
    rival = colliding(B0)
    assert resolve(rival).master_port == resolve(A0).master_port  # the premise
    err = refusal(A0, [rival])
    assert (err.variable, err.value) == ("MASTER_PORT", str(resolve(A0).master_port))
    assert "another live launch" in err.message and rival[KEY] in err.message
    assert f"{KEY}={A0[KEY]}" in err.message
    assert err.fix and "start this launch again" in err.fix and "SLURMENV_PORT" in err.fix
    # and the other way round: whichever rank 0 looks second refuses
    assert refusal(rival, [A0]).variable == "MASTER_PORT"


def test_the_same_given_port_in_two_launches_is_refused_naming_it() -> None:
    same = {"SLURMENV_PORT": "23456"}
    err = refusal({**A0, **same}, [{**B0, **same}])
    assert err.variable == "SLURMENV_PORT" and err.value == "23456"
    assert err.fix and "its own port" in err.fix
    # an exported MASTER_PORT in the rival (its training process) is its port too
    err = refusal(A0, [{**B0, "MASTER_PORT": str(resolve(A0).master_port)}])
    assert err.variable == "MASTER_PORT" and "draw the same port" in err.message
    # --port on our command line against the rival's variable
    assert refusal(A0, [{**B0, **same}], port=23456).variable == "--port"
    # different ports: no rival
    assert resolve({**A0, **same}, [{**B0, "SLURMENV_PORT": "23457"}]).master_port == 23456


def test_a_port_given_on_our_command_line_is_not_assumed_for_the_other_launch() -> None:
    # the other launch may have been given another port on its own command line: our --port
    # is not taken for its port (else any two launches given ports would refuse each other)
    assert resolve(B0).master_port != 23456
    assert resolve(A0, [B0], port=23456).master_port == 23456
    # but the port the other one draws is checked against ours
    assert refusal(A0, [B0], port=resolve(B0).master_port).variable == "--port"


def test_our_command_line_range_is_assumed_for_the_other_launch() -> None:
    narrow = (20000, 29999)
    family = int(A0[KEY]) >> 16
    span = 10000 - 10
    rival = {**B0, KEY: str(((family + span) % 2**16 if family + span < 2**16 else family - span) << 16)}
    assert ports.launch_ports(1, int(rival[KEY]) >> 16, narrow).master == \
        ports.launch_ports(1, family, narrow).master
    assert "draw the same port" in refusal(A0, [rival], port_range="20000-29999").message
    assert resolve(A0, [rival]).rank == 0  # default range: different ports


@pytest.mark.parametrize(
    ("ours", "other", "why"),
    [
        (A0, colliding(B1), "the other process is not rank 0 of its launch"),
        (A0, A1, "the other process belongs to our own launch (same job id)"),
        (A1, colliding(B0, A1), "we are not rank 0: we bind no MASTER_PORT"),
        (A0, {**colliding(B0), "OMPI_COMM_WORLD_SIZE": "x"}, "the other process cannot resolve"),
        (A0, {k: v for k, v in colliding(B0).items() if k != KEY}, "no launch key"),
    ],
)
def test_not_a_rival(ours: dict[str, str], other: dict[str, str], why: str) -> None:
    assert resolve(ours, [other]).master_port == resolve(ours).master_port, why


def test_srun_tasks_and_other_ranks_never_read_proc() -> None:
    """Only rank 0 of a launch with a launch key looks: an srun task (no key) and rank 1 of an
    mpirun resolve without importing rivals.py (so without reading other processes)."""
    code = ("import json, sys, slurmenv; slurmenv.resolve(json.loads(sys.argv[1]), cpus=1); "
            "print('slurmenv.rivals' in sys.modules)")
    for env, looks in ((ranks("srun_pmi2")[0], "False"), (A1, "False"), (A0, "True")):
        out = subprocess.run([sys.executable, "-c", code, json.dumps(env)], capture_output=True,
                             text=True, timeout=60, check=True)
        assert out.stdout.strip() == looks, (env.get("SLURM_PROCID"), out.stderr)


# -- real processes: slurmenv finds them in /proc ----------------------------------------------
@contextmanager
def process(env: Mapping[str, str], prefix: list[str] | None = None) -> Iterator[int]:
    """A real process (``sleep``) running with ``env`` until the block ends: its pid."""
    full = {**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.Popen([*(prefix or []), "sleep", "120"], env=full)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_live_rival_process_is_found_and_refuses_rank_0() -> None:
    rival = colliding(B0)
    with process(rival) as pid:
        found = dict(rivals.find(KEY, A0[KEY]))
        assert pid in found and found[pid][KEY] == rival[KEY]
        assert all(env[KEY] != A0[KEY] for env in found.values())
        with pytest.raises(SlurmEnvError) as info:
            slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1)  # reads /proc itself
        assert f"process {pid}" in info.value.message
        # the command line fails closed: nothing to evaluate, non-zero exit
        out = subprocess.run([sys.executable, "-m", "slurmenv", "export", "--for", "torch"],
                             env={**A0, "PATH": os.environ.get("PATH", "")},
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode != 0 and f"process {pid}" in out.stderr
        assert "export MASTER_PORT" not in out.stdout
    # once the rival is gone, the same rank 0 resolves
    assert slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1).rank == 0


def test_a_process_of_our_own_launch_is_not_a_rival() -> None:
    with process(A1) as pid:
        assert pid not in dict(rivals.find(KEY, A0[KEY]))
        assert slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1).rank == 0


def test_a_process_in_another_network_namespace_is_not_a_rival() -> None:
    """Another node of the test cluster is another network namespace of this machine: a port
    there is another port."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to start a process in a network namespace")
    rival = colliding(B0)
    with process(rival, ["unshare", "--net"]) as pid:
        for _ in range(100):  # unshare execs sleep in the same pid
            if Path(f"/proc/{pid}/environ").exists() and os.stat(f"/proc/{pid}/ns/net").st_ino \
                    != os.stat("/proc/self/ns/net").st_ino:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert pid not in dict(rivals.find(KEY, A0[KEY]))
        assert slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1).rank == 0
        # the same environment in our namespace too: that one is found (and only once though
        # two processes here carry it: children that inherited an environment are read once)
        with process(rival) as here, process(rival) as child:
            found = [p for p, _ in rivals.find(KEY, A0[KEY]) if p in (pid, here, child)]
            assert found in ([here], [child])
            with pytest.raises(SlurmEnvError):
                slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1)


def test_a_replay_does_not_look_at_this_machines_processes(tmp_path: Path) -> None:
    """The processes of the machine that replays a dump are not the recorded node's."""
    from slurmenv import doctor, dump

    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(dump.collect(A0)))
    loaded = dump.load(str(path))
    with process(colliding(B0)):
        assert slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1, rivals=None).rank == 0
        with pytest.raises(SlurmEnvError):  # live, it would refuse
            slurmenv.resolve(A0, ephemeral_range=EPHEMERAL, cpus=1)
        assert loaded.resolve().rank == 0
        with loaded.environment() as env:
            report = doctor.diagnose(env, loaded.replay_options, ephemeral=loaded.ephemeral_range)
        assert not report.errors, report
        # live, doctor reports the rival in its ports check, and nothing else as an error
        report = doctor.diagnose(A0, {}, ephemeral=EPHEMERAL)
        errors = {c.name: c.message for c in report.checks if c.verdict == "error"}
        assert list(errors) == ["ports"] and "another live launch" in errors["ports"], report
        assert report.title == "job 1, no step of its own, on r1n09"


def test_open_mpi_5_launches_are_told_apart_by_their_pmix_namespace() -> None:
    """Open MPI 5.x sets no OMPI_MCA_ess_base_jobid: PMIX_NAMESPACE names the launch. Outside
    Slurm (one machine) both launches need a port; the same one given twice is refused."""
    def v5(rank: int, namespace: str) -> dict[str, str]:
        env = {k: v for k, v in ranks("openmpi_local")[rank].items()
               if not k.startswith("OMPI_MCA_")}
        return {**env, "PMIX_NAMESPACE": namespace, "SLURMENV_PORT": "29500"}

    ours, same_launch = v5(0, "prterun-host-1@1"), v5(1, "prterun-host-1@1")
    other = v5(0, "prterun-host-2@1")
    assert resolve(ours, [same_launch]).master_port == 29500
    err = refusal(ours, [other])
    assert err.variable == "SLURMENV_PORT" and "PMIX_NAMESPACE=prterun-host-2@1" in err.message
    assert resolve(ours, [{**other, "SLURMENV_PORT": "29501"}]).master_port == 29500


# -- the other launchers with a launch key: PBS PALS mpiexec, Flux jobs --------------------------
def test_pbs_pals_launches_are_told_apart_by_their_apid(tmp_path: Path) -> None:
    from test_pals import pbs_tasks

    ours = pbs_tasks(tmp_path)[0]
    other = {**ours, "PALS_APID": "another-application"}
    assert resolve(ours, [other]).master_port != resolve(other).master_port
    # two applications drawing one port: search an APID whose hash is equal modulo the span
    target = ports.stable_hash(ours["PALS_APID"]) % SPAN
    apid = next(f"app-{k}" for k in range(10**6) if ports.stable_hash(f"app-{k}") % SPAN == target
                and f"app-{k}" != ours["PALS_APID"])
    err = refusal(ours, [{**other, "PALS_APID": apid}])
    assert err.variable == "MASTER_PORT" and f"PALS_APID={apid}" in err.message
    # Slurm's cray_shasta APID (<job>.<step>) is a step ID of its own: no key, no look
    shasta = ranks("srun_shasta")[0]
    assert slurmenv.launchers.detect(shasta).NAME == "slurm"


def test_flux_jobs_are_told_apart_by_their_job_id() -> None:
    data = json.loads((FIXTURES.parent / "beyond" / "flux.json").read_text())
    env = next(c for c in data["cases"] if c["name"] == "one_node")["tasks"][0]["env"]
    ours = {**env, "SLURMENV_PORT": "29500"}  # one node: the address is given (--master-addr)
    same = resolve(ours, [{**ours, "FLUX_TASK_LOCAL_ID": "1", "FLUX_TASK_RANK": "1"}],
                   master_addr="n1")
    assert same.master_port == 29500
    err = refusal(ours, [{**ours, "FLUX_JOB_ID": "ƒ2"}], master_addr="n1")
    assert err.variable == "SLURMENV_PORT" and "FLUX_JOB_ID=ƒ2" in err.message


def test_a_process_caught_in_its_execve_is_read_again() -> None:
    """Right after Popen returns (vfork), the child may still be inside execve, and its
    /proc/<pid>/environ reads empty for a moment (about 1 raw read in 10 here). A rank 0 that
    re-executes itself (``bash -c 'eval …; exec python …'``) passes through that moment too:
    find() reads such a process again and does not miss it. Without the second read, find()
    missed about 1 such process in 1,000 here (once in a CI run of this file's first test)."""
    rival = colliding(B0)
    for _ in range(300):
        with process(rival) as pid:
            assert pid in dict(rivals.find(KEY, A0[KEY]))


def test_an_empty_environ_is_read_again_deterministically(tmp_path: Path) -> None:
    """The re-read of a process caught inside execve, without timing: the first read finds the
    environment empty, and the process's exec completes while find() waits (``wait``)."""
    pid = tmp_path / "4242"
    pid.mkdir()
    (pid / "environ").write_bytes(b"")
    (pid / "stat").write_bytes(b"4242 (bash) R 1 1 1 0 -1 4194304 0")  # live, not a kthread
    waited: list[float] = []

    def exec_completes(seconds: float) -> None:
        waited.append(seconds)
        (pid / "environ").write_bytes(b"A=1\0B=2\0")

    assert rivals._environ(str(tmp_path), "4242", wait=exec_completes) == b"A=1\0B=2\0"
    assert len(waited) == 1
    # a zombie or a kernel thread has no environment for good: not read again
    (pid / "environ").write_bytes(b"")
    (pid / "stat").write_bytes(b"4242 (kworker/0:1) I 2 0 0 0 -1 2129984 0")
    assert rivals._environ(str(tmp_path), "4242", wait=exec_completes) == b""
    assert len(waited) == 1


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")
def test_another_users_process_is_not_read() -> None:
    """The rival check reads only the processes of the user who runs it, root included."""
    rival = colliding(B0)

    def as_nobody() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    full = {**rival, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.Popen(["sleep", "120"], env=full, preexec_fn=as_nobody)  # noqa: PLW1509
    try:
        assert proc.pid not in dict(rivals.find(KEY, A0[KEY]))
        assert proc.pid in dict(rivals.find(KEY, A0[KEY], uid=NOBODY))
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "broken",
    [{"SLURMENV_ADDR_TEMPLATE": "{host}{host:x}"}, {"OMPI_COMM_WORLD_RANK": "9" * 5000},
     {"SLURMENV_PORT_RANGE": "x"}, {"OMPI_COMM_WORLD_SIZE": "\udcff"}],
)
def test_a_rivals_broken_environment_never_crashes_rank_0(broken: dict[str, str]) -> None:
    """Another process's variables, however broken, are never this rank 0's error."""
    res = resolve(A0, [{**colliding(B0), **broken}])
    assert res.rank == 0


def test_a_process_whose_network_namespace_cannot_be_read_counts_as_on_this_node(
    tmp_path: Path,
) -> None:
    """find()'s docstring: a process whose /proc/<pid>/ns/net cannot be read counts as in our
    namespace (a rival missed is a hang; one too many is a refusal with a fix). A /proc tree
    written here: ours readable, process 4242's ns/net absent, 4343's another namespace."""
    proc = tmp_path
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "net").write_bytes(b"")
    for pid, netns in (("4242", None), ("4343", "other")):
        (proc / pid).mkdir()
        (proc / pid / "environ").write_bytes(f"{KEY}=999\0WHO={pid}\0".encode())
        (proc / pid / "stat").write_bytes(f"{pid} (python) S 1 1 1 0 -1 4194304 0".encode())
        if netns:
            (proc / pid / "ns").mkdir()
            (proc / pid / "ns" / "net").write_bytes(netns.encode())  # another inode
    found = {pid for pid, _ in rivals.find(KEY, "1", proc=str(proc))}
    assert found == {4242}
    # and when ours cannot be read either, every process counts
    (proc / "self" / "ns" / "net").unlink()
    assert {pid for pid, _ in rivals.find(KEY, "1", proc=str(proc))} == {4242, 4343}
