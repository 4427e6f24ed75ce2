"""The step check (``srun slurmenv doctor --step``, ``slurmenv exec --preflight``) on the real
Slurm test cluster.

Healthy steps of several layouts pass in every task, and torch's gloo rendezvous takes the
port right after; each broken step is named, in seconds and in every task's exit status: one
node with another ``SLURMENV_PORT``, one node whose packets to rank 0 are dropped (nftables in
that node's network namespace), a task that exits before the check, a rank started twice. Under
Open MPI's ``mpirun`` and MPICH's Hydra the same check runs from their Resolution.

Start-up skews across the whole timeout start every task or none (the issue 36 case: rank 1 at
0 s, rank 0 at 15 s, rank 2 at 31 s, a timeout of 20 s).

With ``SHOW_REPORTS=1`` the reports are printed (docs/step-check.md shows them).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from slurm_harness import SlurmCluster, SrunResult, parse_labels

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "the step check: `doctor --step`, `exec --preflight` then torch": ("every", [
        "test_a_healthy_step_passes_in_every_task[block-4x2]",
        "test_a_healthy_step_passes_in_every_task[cyclic-4x2]",
        "test_torch_takes_the_port_right_after_the_preflight"]),
    "the step check on more layouts": ("debian", ["test_a_healthy_step_passes_in_every_task"]),
    "the step check names a broken step (port, dropped packets, early exit, a rank twice), "
    "under MPI and PALS": ("debian", [
        "test_a_node_with_another_port_is_named", "test_a_node_whose_packets_are_dropped_is_named",
        "test_a_task_that_exits_before_the_check_is_named", "test_a_rank_started_twice_is_named",
        "test_kill_on_bad_exit_ends_the_step", "test_the_check_runs_under_mpi_launchers",
        "test_the_check_runs_under_pals"]),
    "the step check starts every task or none across start-up skews": ("debian+newest", [
        "test_a_skew_across_the_timeout_starts_every_task",
        "test_a_task_later_than_the_timeout_starts_none"]),
}

SE = f"{sys.executable} -m slurmenv"
TIMEOUT = 30  # the check's own default: a broken step must be named well before it


def show(name: str, text: str) -> None:
    if os.environ.get("SHOW_REPORTS") == "1":
        print(f"\n=== {name}\n{text}", file=sys.stderr)


DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "step-check.md"


def normal(lines: list[str]) -> list[str]:
    """Lines with what changes from run to run blanked: Slurm's reserved ports, seconds."""
    return [re.sub(r"\b12\d\d\d\b", "PORT", re.sub(r" in \d+\.\d s", " in T s", line))
            for line in lines]


def documented(name: str, lines: list[str]) -> None:
    """docs/step-check.md's report ``name`` is what this run printed (ports and seconds
    aside)."""
    text = DOCS.read_text(encoding="utf-8").splitlines()
    start = text.index(f"<!-- step check report: {name} -->") + 2
    end = text.index("```", start)
    assert normal(text[start:end]) == normal(lines), f"docs/step-check.md, report {name}"


def step_check(cluster: SlurmCluster, args: list[str], before: str = "",
               timeout: int = TIMEOUT) -> SrunResult:
    """Every task: ``before``, then ``doctor --step``, then ``rc=STATUS``."""
    script = f"{before}\n{SE} doctor --step --step-timeout {timeout}; echo rc=$?"
    res = cluster.srun(args, ["bash", "-c", script], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def exclude(hosts: str) -> str:
    return (f"  nodes at fault: {hosts}; run again without them: srun --exclude={hosts} ... (in "
            f"an allocation with other nodes), or sbatch --exclude={hosts} ...")


def seconds(line: str) -> float:
    found = re.search(r" in (\d+\.\d) s", line)
    assert found, line
    return float(found.group(1))


def port_of(line: str) -> int:
    found = re.search(r"reached r1n09:(\d+) ", line)
    assert found, line
    return int(found.group(1))


LAYOUTS = {
    "block-4x2": (["-N4", "--ntasks-per-node=2", "-c1"], 8),
    "cyclic-4x2": (["-N4", "-n8", "-m", "cyclic", "-c1"], 8),
    "2x2": (["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-c1"], 4),
    "4x1": (["-N4", "-n4"], 4),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_healthy_step_passes_in_every_task(slurm_cluster: SlurmCluster, layout: str) -> None:
    args, world = LAYOUTS[layout]
    res = step_check(slurm_cluster, args)
    assert sorted(res.per_task) == list(range(world))
    head = res.per_task[0][0]
    show(layout, head)
    assert re.fullmatch(rf"slurmenv step check: {world} of {world} ranks reached "
                        r"r1n09:\d+ in \d+\.\d s, all agree", head), head
    assert res.per_task[0][1:] == ["rc=0"]
    for rank in range(1, world):
        assert res.per_task[rank] == [
            f"slurmenv step check: rank {rank}: ok ({head.split(': ', 1)[1]})", "rc=0"]
    assert seconds(head) < TIMEOUT / 2  # ended when the last rank arrived, not at the timeout
    if layout == "block-4x2":
        documented(layout, [head, res.per_task[5][0]])


TORCH = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0]); dist.all_reduce(t)
print(f"rank {dist.get_rank()}: all_reduce {t.item():.0f} on port {os.environ['MASTER_PORT']}")
dist.barrier()  # no rank tears its group down while another still talks to it
dist.destroy_process_group()
"""


def test_torch_takes_the_port_right_after_the_preflight(
    slurm_cluster: SlurmCluster, tmp_path: pathlib.Path
) -> None:
    pytest.importorskip("torch")
    program = tmp_path / "torch_check.py"
    program.write_text(TORCH)
    res = slurm_cluster.srun(
        ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-c1", "--kill-on-bad-exit"],
        ["bash", "-c", f"{SE} exec --preflight --for torch -- {sys.executable} {program}"],
        timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    report = parse_labels(res.stderr)[0]
    show("torch", "\n".join(report))
    port = port_of(report[0])
    assert report[0].endswith(", all agree")
    for rank in range(4):
        assert res.per_task[rank] == [f"rank {rank}: all_reduce 10 on port {port}"], res.stdout


def test_a_node_with_another_port_is_named(slurm_cluster: SlurmCluster) -> None:
    before = 'if [ "$SLURM_NODEID" = 1 ]; then export SLURMENV_PORT=23456; fi'
    res = step_check(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-c1"],
                     before)
    report = res.per_task[0]
    show("port", "\n".join(report))
    port = port_of(report[0])
    assert report[0].endswith("; 2 ranks with problems, the step is not sound")
    assert report[1] == (
        "  2 ranks 2-3 on r1n10 disagree on MASTER_PORT: 23456 (given port (--port or "
        "SLURMENV_PORT); TensorFlow ports follow it); rank 0 has "
        f"{port} (SLURM_STEP_RESV_PORTS={port}-{port + 2} (reserved by Slurm))")
    assert report[2:] == [exclude("r1n10"), "rc=1"]
    documented("port", report[:3])
    for rank in (1, 2, 3):
        line, rc = res.per_task[rank]
        assert line.startswith(f"slurmenv step check: rank {rank}: the step is not sound (4 of 4")
        assert rc == "rc=1"
    assert seconds(report[0]) < TIMEOUT / 2


def test_a_node_whose_packets_are_dropped_is_named(slurm_cluster: SlurmCluster) -> None:
    ns = slurm_cluster.node_ns["r1n10"]
    rule = ("add table inet stepcheck; add chain inet stepcheck out { type filter hook output "
            f"priority 0; }}; add rule inet stepcheck out ip daddr {slurm_cluster.addr['r1n09']} "
            "tcp dport 12000-12999 drop")
    subprocess.run(["ip", "netns", "exec", ns, "nft", rule], check=True)
    try:
        res = step_check(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2",
                                         "-c1"], timeout=8)
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete table inet stepcheck"],
                       check=True)
    report = res.per_task[0]
    show("dropped", "\n".join(report + res.per_task[2]))
    port = port_of(report[0])
    assert report[0].startswith("slurmenv step check: 2 of 4 ranks reached r1n09:")
    assert report[1:] == [f"  2 ranks 2-3 (expected on r1n10) never connected to r1n09:{port}",
                          exclude("r1n10"), "rc=1"]
    me = slurm_cluster.addr["r1n10"]
    for rank in (2, 3):
        line, rc = res.per_task[rank]
        assert line == (f"slurmenv step check: rank {rank} on r1n10: could not reach rank 0 at "
                        f"r1n09:{port} within 8 s, from eth0 {me} (r1n09:{port}: timed "
                        "out (packets dropped on the way?))")
        assert rc == "rc=1"
    assert res.per_task[1][-1] == "rc=1"  # rank 1 reached rank 0, and learnt it is not sound
    documented("dropped", [*report[:3], res.per_task[2][0]])


def test_a_task_that_exits_before_the_check_is_named(slurm_cluster: SlurmCluster) -> None:
    before = 'if [ "$SLURM_PROCID" = 3 ]; then exit 0; fi; export SLURMENV_STEP_TIMEOUT=5'
    res = slurm_cluster.srun(["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-c1"],
                             ["bash", "-c", f"{before}\n{SE} doctor --step; echo rc=$?"],
                             timeout=120)
    report = res.per_task[0]
    show("exited", "\n".join(report))
    port = port_of(report[0])
    assert report[0] == (f"slurmenv step check: 3 of 4 ranks reached r1n09:{port} in "
                         f"{seconds(report[0]):.1f} s; 1 rank with problems, the step is not "
                         "sound")
    assert report[1:] == [f"  1 rank 3 (expected on r1n10) never connected to r1n09:{port}",
                          exclude("r1n10"), "rc=1"]
    assert 3 not in res.per_task
    documented("exited", report[:3])
    assert [res.per_task[r][-1] for r in (1, 2)] == ["rc=1", "rc=1"]


def test_a_rank_started_twice_is_named(slurm_cluster: SlurmCluster) -> None:
    # the second task of r1n10 says it is rank 2, as the first does
    before = ('if [ "$SLURM_PROCID" = 3 ]; then export SLURM_PROCID=2 SLURM_LOCALID=0; fi')
    res = step_check(slurm_cluster, ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-c1"],
                     before)
    report = res.per_task[0]
    show("twice", "\n".join(report))
    port = port_of(report[0])
    me = slurm_cluster.addr["r1n10"]
    assert report[0].startswith(f"slurmenv step check: 3 of 4 ranks reached r1n09:{port} in ")
    assert report[1:] == [
        (f"  rank 2 started 2 times: by r1n10 ({me}), r1n10 ({me}) (the step's layout puts it "
        "on r1n10)"),
        f"  1 rank 3 (expected on r1n10) never connected to r1n09:{port}",
        exclude("r1n10"), "rc=1"]
    assert seconds(report[0]) < TIMEOUT / 2  # every task had come: no wait for rank 3
    documented("twice", report[:4])
    line, rc = res.per_task[3]  # srun's task 3, which said it was rank 2
    assert line.startswith("slurmenv step check: rank 2: the step is not sound (3 of 4 ranks")
    assert rc == "rc=1"


def test_kill_on_bad_exit_ends_the_step(slurm_cluster: SlurmCluster) -> None:
    before = 'if [ "$SLURM_NODEID" = 1 ]; then export SLURMENV_PORT=23456; fi'
    res = slurm_cluster.srun(
        ["-N2", "-w", "r1n[09-10]", "--ntasks-per-node=2", "-c1", "--kill-on-bad-exit"],
        ["bash", "-c", f"{before}\nexec {SE} exec --preflight -- echo training started"],
        timeout=120)
    assert res.returncode != 0
    assert "training started" not in res.stdout
    assert "slurmenv: the step check failed: 'echo' was not started" in res.stderr


# -- start-up skews: every task starts, or none does ---------------------------------------
SKEW = ('sleep "$(echo "{delays}" | cut -d" " -f$((SLURM_PROCID + 1)))"\n'
        '{se} exec --preflight --step-timeout {timeout} -- sh -c \'echo "started $RANK"\'; '
        'echo rc=$?')


def skewed(cluster: SlurmCluster, delays: list[int], timeout: int) -> SrunResult:
    script = SKEW.format(delays=" ".join(map(str, delays)), se=SE, timeout=timeout)
    res = cluster.srun(["-N3", "-n3"], ["bash", "-c", script], timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_a_skew_across_the_timeout_starts_every_task(slurm_cluster: SlurmCluster) -> None:
    # issue 36: rank 1 at 0 s, rank 0 at 15 s, rank 2 at 31 s with a timeout of 20 s; on
    # 0.3.0 rank 1 gave up at its own start + 30 s while ranks 0 and 2 started
    res = skewed(slurm_cluster, [15, 0, 31], 20)
    for rank in range(3):
        assert res.per_task[rank] == [f"started {rank}", "rc=0"], res.stdout + res.stderr
    report = parse_labels(res.stderr)
    show("skew", "\n".join(report[0]))
    assert report[0][0].endswith(", all agree")
    assert 15 < seconds(report[0][0]) < 20  # rank 0 waited for rank 2, 16 s after its start


def test_a_task_later_than_the_timeout_starts_none(slurm_cluster: SlurmCluster) -> None:
    res = skewed(slurm_cluster, [0, 0, 9], 5)
    assert [res.per_task[r][-1] for r in range(3)] == ["rc=1"] * 3, res.stdout + res.stderr
    assert "started" not in res.stdout
    report = parse_labels(res.stderr)
    show("skew-late", "\n".join(report[0] + report[2]))
    port = port_of(report[0][0])
    node = re.fullmatch(r"slurmenv step check: rank 2 on (\S+): could not reach .*",
                        report[2][0])
    assert node, report[2]
    assert report[0][1:] == [
        f"  1 rank 2 (expected on {node[1]}) never connected to r1n09:{port}",
        exclude(node[1]), "slurmenv: the step check failed: 'sh' was not started"]


# -- other launchers with a rank 0 address ---------------------------------------------------
MPI = {"openmpi": "mpirun -np 5", "hydra": "mpiexec.mpich -n 5"}


@pytest.mark.parametrize("launcher", MPI)
def test_the_check_runs_under_mpi_launchers(slurm_cluster: SlurmCluster, launcher: str) -> None:
    from test_real_mpi import explain, launches, sbatch

    res = sbatch(slurm_cluster, f"launch check {MPI[launcher]} slurmenv doctor --step "
                 "--step-timeout 30\n")
    rc, _, lines = launches(res)["check"]
    show(launcher, "\n".join(lines))
    assert rc == 0, explain(res)
    head = next(line for line in lines if line.startswith("slurmenv step check: 5 of 5"))
    assert re.fullmatch(r"slurmenv step check: 5 of 5 ranks reached r1n09:\d+ in \d+\.\d s, "
                        "all agree", head), explain(res)
    assert sorted(line.split(":")[1] for line in lines if ": ok (" in line) == \
        [f" rank {r}" for r in range(1, 5)], explain(res)


def test_the_check_runs_under_pals(slurm_cluster: SlurmCluster) -> None:
    # Slurm's cray_shasta plugin emulates PALS; with every SLURM* variable hidden the tasks
    # resolve as launcher pals (tests/test_real_pals.py), and the check runs from that
    from test_real_pals import HIDE_SLURM

    launcher = "import json, sys; print('launcher=' + json.load(sys.stdin)['launcher'])"
    script = (f"{HIDE_SLURM} {SE} show --json | {sys.executable} -c \"{launcher}\"; "
              f"{HIDE_SLURM} {SE} doctor --step --step-timeout {TIMEOUT}; echo rc=$?")
    res = slurm_cluster.srun(["--mpi=cray_shasta", "-N4", "-n8"], ["bash", "-c", script],
                             timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    head = res.per_task[0][1]
    show("pals", head)
    assert re.fullmatch(r"slurmenv step check: 8 of 8 ranks reached r1n09:\d+ in \d+\.\d s, "
                        "all agree", head), res.stdout
    for rank in range(8):
        assert res.per_task[rank][0] == "launcher=pals", res.per_task[rank]
        assert res.per_task[rank][-1] == "rc=0", res.per_task[rank]
