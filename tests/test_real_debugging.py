"""show --all-ranks / --one-line, doctor and dump on the real Slurm test cluster.

The scenarios of the README's debugging section: a healthy step, the batch-script misuse, a
proxy set, a port already taken on the master node, a MASTER_PORT exported in the batch
script, a node name that does not resolve (and GPUs bound per task). Each also takes a ``slurmenv dump --probe`` and checks that replaying it
gives what the task resolved and diagnosed live. With ``UPDATE_DUMPS=1`` those dumps
are copied to tests/dumps/ (the fixtures tests/test_dump.py replays anywhere).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys
from typing import Any

import pytest
from slurm_harness import SlurmCluster, SrunResult

from slurmenv import doctor, dump

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "`show --all-ranks`, `doctor` and `dump` in real steps": ("debian", [
        "test_healthy_step",
        "test_batch_script_misuse",
        "test_proxy_set",
        "test_port_already_taken_on_the_master_node",
        "test_master_port_exported_in_the_batch_script",
        "test_node_name_that_does_not_resolve",
        "test_gpus_bound_per_task",
    ]),
}

SE = f"{sys.executable} -m slurmenv"
DUMPS = pathlib.Path(__file__).parent / "dumps"
HEALTHY = ["-N4", "--ntasks-per-node=2", "-c1"]


def ok(res: SrunResult) -> SrunResult:
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def keep(src: pathlib.Path, name: str) -> None:
    """Copy a dump taken here into tests/dumps/ when asked (UPDATE_DUMPS=1)."""
    if os.environ.get("UPDATE_DUMPS") == "1":
        shutil.copyfile(src, DUMPS / f"{name}.json")


def replayed_checks(path: pathlib.Path) -> list[dict[str, Any]]:
    """doctor's checks for a dump, computed on this machine from the dump alone."""
    loaded = dump.load(str(path))
    with loaded.environment() as env:
        report = doctor.diagnose(
            env, loaded.replay_options, ephemeral=loaded.ephemeral_range, facts=loaded.probe
        )
    return [c._asdict() for c in report.checks]


def assert_replay(path: pathlib.Path, live_doctor: dict[str, Any]) -> None:
    loaded = dump.load(str(path))
    _, replayed = loaded.replay()
    assert replayed == loaded.recorded, dump.differences(loaded.recorded, replayed)
    assert replayed_checks(path) == live_doctor["checks"]


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def test_healthy_step(slurm_cluster: SlurmCluster, tmp_path: pathlib.Path) -> None:
    d = tmp_path
    script = f"""
        export OMP_NUM_THREADS=1
        {SE} show --one-line
        {SE} show --all-ranks --json > {d}/all-$SLURM_PROCID.json
        {SE} doctor --json > {d}/doctor-$SLURM_PROCID.json; echo "doctor-rc=$?"
        {SE} dump --probe -o '{d}/dump-%t.json' 2>/dev/null
        eval "$({SE} doctor --export-ifname)"
        echo "ifname=$NCCL_SOCKET_IFNAME,$GLOO_SOCKET_IFNAME"
    """
    res = ok(slurm_cluster.srun(HEALTHY, ["bash", "-c", script]))
    assert sorted(res.per_task) == list(range(8))

    # one line per task: sorting the lines gives rank order, and the columns line up
    lines = [res.per_task[r][0] for r in range(8)]
    shuffled = [lines[r] for r in (5, 2, 7, 0, 3, 6, 1, 4)]
    assert sorted(shuffled) == lines
    for key in ("node=", "master=", "tf=", "cluster=", "gpus="):
        assert len({line.index(key) for line in lines}) == 1, (key, lines)
    assert len({line.split("master=")[1].split()[0] for line in lines}) == 1

    # the whole step computed in any one task is the same, and is where Slurm ran each task
    tables = [json.loads((d / f"all-{r}.json").read_text()) for r in range(8)]
    for table in tables:
        assert [r["self"] for r in table["ranks"]].index(True) == table["self"]
        for row in table["ranks"]:
            row.pop("self")
        table.pop("self")
    assert all(t == tables[0] for t in tables)
    really_on = [re.search(r"node=(\S+)", line).group(1) for line in lines]  # type: ignore[union-attr]
    assert [row["node"] for row in tables[0]["ranks"]] == really_on
    assert tables[0]["master"]["node"] == "r1n09"

    # doctor: everything ok on every task; the master resolves to r1n09's address
    for rank in range(8):
        assert "doctor-rc=0" in res.per_task[rank], res.per_task[rank]
        assert res.per_task[rank][-1] == "ifname=eth0,eth0"
        report = json.loads((d / f"doctor-{rank}.json").read_text())
        assert {c["verdict"] for c in report["checks"]} == {"ok"}, report
        checks = checks_of(report)
        node = really_on[rank]
        assert checks["master-name"]["message"] == \
            f"r1n09 resolves here to {slurm_cluster.addr['r1n09']}"
        assert checks["interface"]["message"].startswith(
            f"eth0 ({slurm_cluster.addr[node]}) reaches the master"
        )
        assert_replay(d / f"dump-{rank}.json", report)
    keep(d / "dump-0.json", "healthy-rank0")
    keep(d / "dump-5.json", "healthy-rank5")


def test_batch_script_misuse(slurm_cluster: SlurmCluster, tmp_path: pathlib.Path) -> None:
    script = f"""#!/bin/sh
{SE} show --one-line; echo "show-rc=$?"
{SE} doctor; echo "doctor-rc=$?"
{SE} dump --probe -o {tmp_path}/batch.json 2>/dev/null
"""
    job = slurm_cluster.sbatch(script, ["-N2", "-w", "r1n[09-10]", "-n4"])
    assert job.returncode == 0, job.stderr
    out = job.stdout.splitlines()
    assert re.fullmatch(rf"rank=0/4 node=r1n09 ERROR inside Slurm job {job.job_id} .*", out[0])
    assert "show-rc=1" in out and "doctor-rc=1" in out
    step = next(i for i, line in enumerate(out) if line.startswith("error    step"))
    assert "outside any job step" in out[step]
    assert "fix: evaluate slurmenv inside the job step" in out[step + 1]
    assert "srun slurmenv doctor" in out[step + 1]
    loaded = dump.load(str(tmp_path / "batch.json"))
    assert loaded.recorded is not None and loaded.recorded["variable"] == "SLURM_STEP_ID"
    _, replayed = loaded.replay()
    assert replayed == loaded.recorded
    verdicts = {c["name"]: c["verdict"] for c in replayed_checks(tmp_path / "batch.json")}
    assert verdicts["step"] == "error"
    keep(tmp_path / "batch.json", "batch-script")


def doctor_step(
    cluster: SlurmCluster, d: pathlib.Path, args: list[str], name: str
) -> list[dict[str, Any]]:
    """Run doctor --json and dump --probe in every task; return the reports by rank."""
    script = f"""
        {SE} doctor --json > {d}/{name}-$SLURM_PROCID.json; echo "doctor-rc=$?"
        {SE} dump --probe -o '{d}/{name}-dump-%t.json' 2>/dev/null
    """
    res = ok(cluster.srun(args, ["bash", "-c", script]))
    reports = []
    for rank in sorted(res.per_task):
        report = json.loads((d / f"{name}-{rank}.json").read_text())
        rc = 1 if report["errors"] else 0
        assert res.per_task[rank] == [f"doctor-rc={rc}"]
        assert_replay(d / f"{name}-dump-{rank}.json", report)
        reports.append(report)
    return reports


def test_proxy_set(slurm_cluster: SlurmCluster, tmp_path: pathlib.Path) -> None:
    proxy = "http://alice:secret@proxy.invalid:3128"  # never contacted
    args = ["-N2", "-w", "r1n[09-10]", "-n2", f"--export=ALL,https_proxy={proxy}"]
    reports = doctor_step(slurm_cluster, tmp_path, args, "proxy")
    for report in reports:
        check = checks_of(report)["proxy"]
        assert check["verdict"] == "error" and report["errors"] == 1
        assert "https_proxy=http://REDACTED@proxy.invalid:3128 is set and no_proxy does not " \
            "cover r1n09, r1n10" in check["message"]
        assert "export no_grpc_proxy=r1n09,r1n10" in check["fix"]
    text = (tmp_path / "proxy-dump-0.json").read_text()
    assert "secret" not in text and "alice" not in text
    keep(tmp_path / "proxy-dump-0.json", "proxy")


# listen.py PORT FLAG SECONDS: listen on PORT, create FLAG, sleep
LISTEN = """import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()
open(sys.argv[2], "w").close()
time.sleep(float(sys.argv[3]))
"""


def test_port_already_taken_on_the_master_node(
    slurm_cluster: SlurmCluster, tmp_path: pathlib.Path
) -> None:
    d = tmp_path
    (d / "listen.py").write_text(LISTEN)
    listen = f"{sys.executable} {d}/listen.py"
    wait = 'for i in $(seq 100); do [ -e "$1" ] && break; sleep 0.1; done'
    script = f"""#!/bin/bash
wait_for() {{ {wait}; }}
# a leftover process of another step holds the port on the master node r1n09
srun -N1 -n1 -w r1n09 --overlap {listen} 23456 {d}/up1 30 &
wait_for {d}/up1
SLURMENV_PORT=23456 srun -N2 -n2 --overlap bash -c '
    {SE} doctor --json > {d}/taken-$SLURM_PROCID.json; echo "rc-$SLURM_PROCID=$?"
    {SE} dump --probe -o {d}/taken-dump-%t.json 2>/dev/null'
kill %1
# rank 0 of the same step already listening: not a problem
SLURMENV_PORT=23457 srun -N1 -n2 -w r1n09 --overlap bash -c '
    if [ "$SLURM_PROCID" = 0 ]; then exec {listen} 23457 {d}/up2 3; fi
    f={d}/up2; for i in $(seq 100); do [ -e "$f" ] && break; sleep 0.1; done
    {SE} doctor --json > {d}/ours.json'
"""
    job = slurm_cluster.sbatch(script, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2"])
    assert job.returncode == 0, job.stdout + job.stderr
    assert sorted(job.stdout.split()) == ["rc-0=1", "rc-1=0"]
    master = json.loads((d / "taken-0.json").read_text())
    ports = checks_of(master)["ports"]
    assert ports["verdict"] == "error" and master["errors"] == 1
    assert re.match(
        r"already listening on r1n09: 23456 \(MASTER_PORT, rank 0\) by pid \d+ python3?: ", 
        ports["message"],
    ), ports
    other = json.loads((d / "taken-1.json").read_text())
    assert checks_of(other)["ports"]["verdict"] == "ok"  # r1n10 does not open MASTER_PORT
    for rank, report in enumerate((master, other)):
        assert_replay(d / f"taken-dump-{rank}.json", report)
    ours = checks_of(json.loads((d / "ours.json").read_text()))["ports"]
    assert ours["verdict"] == "ok"
    assert re.search(r"already opened by this step: 23457 by rank 0 of this step \(pid \d+",
                     ours["message"]), ours
    keep(d / "taken-dump-0.json", "port-taken")


def test_master_port_exported_in_the_batch_script(
    slurm_cluster: SlurmCluster, tmp_path: pathlib.Path
) -> None:
    # The classic batch script: MASTER_PORT reaches every step through srun's environment,
    # and each step keeps it (the user's choice), so the doctor warns in every task.
    d = tmp_path
    script = f"""#!/bin/bash
export MASTER_PORT=29500
srun -N2 -n2 bash -c '{SE} doctor --json > {d}/inherited-$SLURM_PROCID.json; echo "rc=$?"'
srun -N2 -n2 bash -c 'eval $({SE} export); echo "step-$SLURM_STEP_ID=$MASTER_PORT"'
srun -N1 -n1 {SE} doctor -q
"""
    job = slurm_cluster.sbatch(script, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=1"])
    assert job.returncode == 0, job.stdout + job.stderr
    out = job.stdout.splitlines()
    # both tasks of the doctor step exit 0 (a warning), and a second step takes 29500 too
    assert sorted(line for line in out if line.startswith(("rc=", "step-"))) == [
        "rc=0", "rc=0", "step-1=29500", "step-1=29500"
    ], out
    fix = "unset MASTER_PORT in the batch script and let slurmenv derive a port per step " \
        "(or reserve ports with srun --resv-ports=N)"
    for rank in (0, 1):
        report = json.loads((d / f"inherited-{rank}.json").read_text())
        assert [c["name"] for c in report["checks"] if c["verdict"] != "ok"] == ["ports"]
        ports = checks_of(report)["ports"]
        assert ports["verdict"] == "warning" and ports["fix"] == fix, ports
        assert ports["message"].startswith(
            f"MASTER_PORT=29500 is inherited (exported before srun, e.g. in the batch "
            f"script): every step and launch of job {job.job_id} takes it"
        ), ports
    assert "29500 (MASTER_PORT, rank 0)" in checks_of(
        json.loads((d / "inherited-0.json").read_text()))["ports"]["message"]
    # the text report (-q: problems only) names it with the fix
    warn = next(i for i, line in enumerate(out) if line.startswith("warning  ports"))
    assert "MASTER_PORT=29500 is inherited" in out[warn]
    assert fix in out[warn + 1]
    assert out[-1] == f"slurmenv doctor: rank 0 of 1 on r1n09 (job {job.job_id}, step 2): " \
        "0 errors, 1 warning", out


def test_node_name_that_does_not_resolve(
    slurm_cluster: SlurmCluster, tmp_path: pathlib.Path
) -> None:
    args = ["-N2", "-w", "r1n[09-10]", "-n2", "--export=ALL,SLURMENV_ADDR_TEMPLATE={host}-nosuch"]
    reports = doctor_step(slurm_cluster, tmp_path, args, "nosuch")
    for report in reports:
        checks = checks_of(report)
        assert checks["master-name"]["verdict"] == "error"
        assert checks["master-name"]["message"].startswith(
            "MASTER_ADDR r1n09-nosuch does not resolve on r1n"
        )
        assert "'{host}-nosuch'" in checks["master-name"]["fix"]
        assert checks["interface"]["verdict"] == "skipped"
    keep(tmp_path / "nosuch-dump-0.json", "name-unresolved")


def test_gpus_bound_per_task(slurm_gpu_cluster: SlurmCluster, tmp_path: pathlib.Path) -> None:
    script = f"""
        {SE} show --one-line
        {SE} doctor --json > {tmp_path}/gpu-$SLURM_PROCID.json
    """
    args = ["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"]
    res = ok(slurm_gpu_cluster.srun(args, ["bash", "-c", script]))
    for rank in range(4):
        assert res.per_task[rank][0].endswith(f"gpus={rank % 2}")
        check = checks_of(json.loads((tmp_path / f"gpu-{rank}.json").read_text()))["gpus"]
        assert check["verdict"] == "ok"
        assert check["message"].startswith(f"CUDA_VISIBLE_DEVICES={rank % 2}: one GPU of its own")
