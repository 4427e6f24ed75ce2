"""slurmenv through Slurm's task prolog on the real cluster (issue 20): no eval, no shell.

``srun --task-prolog=slurmenv-task-prolog CMD`` sets in every task exactly what
``eval "$(slurmenv export)"`` sets, with the same values: every variable of the task's
environment is compared with the environment the prolog ran in, and what changed is what
``slurmenv export`` computes there, plus ``SLURMENV_SET_BY``. A torch gloo all_reduce over 3
nodes runs ``python`` directly; a refusal kills every task before it starts and the user sees
why. The site-wide form (``TaskProlog=slurmenv-site-prolog`` in slurm.conf, a cluster of its
own) acts only in jobs that opted in, refuses a ``SLURMENV`` that is neither yes nor no, runs
only the prolog installed beside it, and leaves every other job untouched; a ``srun`` inside an
opted-in step resolves its own step.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from slurm_harness import SlurmCluster, SrunResult

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "the task prolog (`--task-prolog`, site-wide `TaskProlog`)": ("every", [
        "test_the_prolog_sets_exactly_what_export_sets[cyclic]",
        "test_a_refusal_kills_every_task_and_says_why",
        "test_site_prolog_acts_only_in_jobs_that_opted_in",
        "test_site_prolog_trains_an_opted_in_batch_job_and_spares_its_batch_step"]),
    "the task prolog: GPUs bound, heterogeneous and pmi2 steps, torch without a shell, the "
    "site prolog's flags and copies, block and plane layouts": ("debian", [
        "test_the_prolog_sets_exactly_what_export_sets",
        "test_the_prolog_sets_exactly_what_export_sets_with_gpus_bound",
        "test_a_torch_all_reduce_over_three_nodes_with_no_shell",
        "test_a_heterogeneous_step_and_pmi2_ranks",
        "test_site_prolog_reads_slurmenv_as_slurmenv_reads_a_flag",
        "test_a_copied_site_prolog_kills_the_task_and_a_symlink_runs",
        "test_nothing_written_to_stderr_acts_as_a_prolog_line",
        "test_a_srun_inside_an_opted_in_srun_step_resolves_its_own_step"]),
}

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PROLOG = f"--task-prolog={BIN / 'slurmenv-task-prolog'}"
CHECK_TORCH = ROOT / "tests" / "programs" / "check_torch.py"
ENV = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
TIMEOUT = 180.0
GUARD = "SHOULD-NOT-RUN"


def watching(tmp: Path) -> str:
    """``--task-prolog=`` a prolog that first writes, for each task, the environment it runs
    in (the task's, before any export) and ``slurmenv export --format json`` computed there,
    then runs slurmenv-task-prolog."""
    wrapper = tmp / "watching-prolog"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))' "
        f"> {tmp}/pre-$SLURM_PROCID.json\n"
        f"{BIN / 'slurmenv'} export --format json > {tmp}/export-$SLURM_PROCID.json\n"
        f"exec {BIN / 'slurmenv-task-prolog'}\n")
    wrapper.chmod(0o755)
    return f"--task-prolog={wrapper}"


def environ(tmp: Path) -> list[str]:
    """A task that writes its environment to ``tmp/task-RANK.json`` (srun cuts long lines)."""
    return [sys.executable, "-c", (
        "import json, os\n"
        f"with open('{tmp}/task-' + os.environ['SLURM_PROCID'] + '.json', 'w') as out:\n"
        "    json.dump(dict(os.environ), out)\n"
        "print('WROTE')\n")]


def check_every_variable(res: SrunResult, tmp: Path, ntasks: int) -> dict[int, dict[str, str]]:
    """Each task's environment against the one its prolog ran in: what changed is exactly what
    ``slurmenv export`` computed there, plus the SLURMENV_SET_BY marker; nothing removed (but
    what Slurm itself changes after the prologs)."""
    assert res.returncode == 0, explain(res)
    assert res.per_task == {rank: ["WROTE"] for rank in range(ntasks)}, explain(res)
    envs = {rank: json.loads((tmp / f"task-{rank}.json").read_text()) for rank in range(ntasks)}
    for rank, env in envs.items():
        pre = json.loads((tmp / f"pre-{rank}.json").read_text())
        export = json.loads((tmp / f"export-{rank}.json").read_text())
        changed = {name: value for name, value in env.items() if pre.get(name) != value}
        changed.pop("TMPDIR", None)  # Slurm sets it after the prologs (task.c, exec_task)
        marker = changed.pop("SLURMENV_SET_BY")
        assert changed == export, (rank, changed, export)
        assert marker == f"{pre['SLURM_JOB_ID']}.{pre['SLURM_STEP_ID']}:{','.join(export)}"
        # nothing removed but the rlimits Slurm applies and unsets after the prologs
        removed = set(pre) - set(env)
        assert all(name.startswith("SLURM_RLIMIT_") for name in removed), (rank, removed)
    return envs


def explain(res: SrunResult) -> str:
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


@pytest.mark.parametrize("layout", [[], ["-m", "cyclic"], ["-m", "plane=2"]],
                         ids=["block", "cyclic", "plane"])
def test_the_prolog_sets_exactly_what_export_sets(
    slurm_cluster: SlurmCluster, layout: list[str], tmp_path: Path
) -> None:
    # a stale MASTER_ADDR and TF_CONFIG to replace, thread counts to set
    res = slurm_cluster.srun(
        ["-N3", "-n6", "-w", "r1n[09-10],r2n09", watching(tmp_path), *layout], environ(tmp_path),
        env={**ENV, "MASTER_ADDR": "stale", "TF_CONFIG": '{"stale": 1}'}, timeout=TIMEOUT)
    envs = check_every_variable(res, tmp_path, 6)
    assert all(env["RANK"] == str(rank) and "OMP_NUM_THREADS" in env
               and env["MASTER_ADDR"] == "r1n09" and '"stale"' not in env["TF_CONFIG"]
               for rank, env in envs.items()), envs


@pytest.mark.parametrize("for_", ["torch", "tf"])
def test_the_prolog_sets_exactly_what_export_sets_with_gpus_bound(
    slurm_gpu_cluster: SlurmCluster, for_: str, tmp_path: Path
) -> None:
    res = slurm_gpu_cluster.srun(["-N2", "--ntasks-per-node=2", "--gpus-per-task=2",
                                  watching(tmp_path)], environ(tmp_path),
                                 env={**ENV, "SLURMENV_FOR": for_, "TF_CONFIG": "stale"},
                                 timeout=TIMEOUT)
    envs = check_every_variable(res, tmp_path, 4)
    assert all("CUDA_VISIBLE_DEVICES" in env for env in envs.values()), envs


def test_a_torch_all_reduce_over_three_nodes_with_no_shell(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(
        ["-N3", "--ntasks-per-node=2", "-w", "r1n[09-10],r2n09", "-m", "cyclic", PROLOG],
        [sys.executable, str(CHECK_TORCH)], env={**ENV, "SLURMENV_FOR": "torch"},
        timeout=TIMEOUT,
    )
    assert res.returncode == 0, explain(res)
    checks = [json.loads(lines[0][6:]) for lines in res.per_task.values()
              if lines and lines[0].startswith("CHECK ")]
    assert sorted(c["rank"] for c in checks) == list(range(6)), explain(res)
    assert all(c["sum"] == 21 and c["world"] == 6 for c in checks), explain(res)
    assert {c["env"]["MASTER_ADDR"] for c in checks} == {"r1n09"}, explain(res)
    # cyclic: rank r on node r % 3 (Slurm's layout for 2 tasks on each of 3 nodes)
    assert all(c["host"] == ["r1n09", "r1n10", "r2n09"][c["rank"] % 3] for c in checks), \
        explain(res)


def test_a_refusal_kills_every_task_and_says_why(slurm_cluster: SlurmCluster) -> None:
    res = slurm_cluster.srun(["-N2", "-n4", PROLOG], ["echo", GUARD],
                             env={**ENV, "SLURMENV_PORT": "bogus"}, timeout=TIMEOUT)
    assert res.returncode != 0 and GUARD not in res.stdout, explain(res)
    for rank in range(4):
        lines = res.per_task.get(rank, [])
        assert any("slurmenv: error: not a usable TCP port" in line for line in lines), \
            explain(res)
        assert any("SLURMENV_PORT='bogus'" in line for line in lines), explain(res)
    assert "task-prolog failed status=1" in res.stderr, explain(res)


def test_a_heterogeneous_step_and_pmi2_ranks(slurm_cluster: SlurmCluster,
                                             tmp_path: Path) -> None:
    het_dir, pmi2_dir = tmp_path / "het", tmp_path / "pmi2"
    het_dir.mkdir()
    pmi2_dir.mkdir()
    prolog = watching(het_dir)
    het = slurm_cluster.srun(["-N1", "-n1", "-w", "r1n09", prolog, *environ(het_dir), ":",
                              "-N2", "-n2", "-w", "r1n10,r2n09", prolog], environ(het_dir), env=ENV,
                             timeout=TIMEOUT)
    envs = check_every_variable(het, het_dir, 3)
    assert all(env["RANK"] == str(rank) and env["WORLD_SIZE"] == "3"
               for rank, env in envs.items()), envs
    pmi2 = slurm_cluster.srun(["-N2", "-n4", "--mpi=pmi2", watching(pmi2_dir)], environ(pmi2_dir),
                              env=ENV, timeout=TIMEOUT)
    envs = check_every_variable(pmi2, pmi2_dir, 4)
    assert sorted(int(env["RANK"]) for env in envs.values()) == [0, 1, 2, 3]


# -- the site-wide TaskProlog ----------------------------------------------------------------
SHOW = ["bash", "-c", "echo RANK=${RANK-unset} WORLD=${WORLD_SIZE-unset} ADDR=${MASTER_ADDR-unset}"]


def test_site_prolog_acts_only_in_jobs_that_opted_in(slurm_prolog_cluster: SlurmCluster) -> None:
    cluster = slurm_prolog_cluster
    # not opted in: untouched (a stale MASTER_ADDR stays as the user left it)
    plain = cluster.srun(["-N3", "-n3"], SHOW, env={**ENV, "MASTER_ADDR": "stale"},
                         timeout=TIMEOUT)
    assert plain.returncode == 0, explain(plain)
    assert plain.per_task_first == {r: "RANK=unset WORLD=unset ADDR=stale" for r in range(3)}
    # opted in: every task gets its values, and the stale address is replaced
    opted = cluster.srun(["-N3", "-n3"], SHOW, env={**ENV, "SLURMENV": "1",
                                                    "MASTER_ADDR": "stale"}, timeout=TIMEOUT)
    assert opted.returncode == 0, explain(opted)
    assert opted.per_task_first == {r: f"RANK={r} WORLD=3 ADDR=r1n09" for r in range(3)}
    # a job that did not opt in and would be refused is not failed either
    bogus = cluster.srun(["-N1", "-n1"], ["echo", "RAN"], env={**ENV, "SLURMENV_PORT": "x"},
                         timeout=TIMEOUT)
    assert bogus.returncode == 0 and bogus.per_task_first == {0: "RAN"}, explain(bogus)


def test_site_prolog_trains_an_opted_in_batch_job_and_spares_its_batch_step(
    slurm_prolog_cluster: SlurmCluster,
) -> None:
    script = f"""#!/bin/bash
echo "BATCH RANK=${{RANK-unset}}"
srun --label {sys.executable} {CHECK_TORCH}
"""
    res = slurm_prolog_cluster.sbatch(
        script, ["-N3", "--ntasks-per-node=1"],
        env={**ENV, "SLURMENV": "1", "SLURMENV_FOR": "torch"}, timeout=TIMEOUT,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BATCH RANK=unset" in res.stdout  # the batch step: nothing set, nothing failed
    checks = [json.loads(line.split("CHECK ", 1)[1]) for line in res.stdout.splitlines()
              if "CHECK " in line]
    assert sorted(c["rank"] for c in checks) == [0, 1, 2], res.stdout + res.stderr
    assert all(c["sum"] == 6 for c in checks)


@pytest.mark.parametrize("value", ["TRUE", "Yes", " 1", "on", "OFF", "No", " 0", "y", "2",
                                   "enable"])
def test_site_prolog_reads_slurmenv_as_slurmenv_reads_a_flag(
    slurm_prolog_cluster: SlurmCluster, value: str
) -> None:
    from slurmenv import SlurmEnvError, options

    said = ""
    try:
        acts: bool | None = options.parse_flag(value, "SLURMENV")
    except SlurmEnvError as exc:
        acts, said = None, f"slurmenv: error: {str(exc).splitlines()[0]}"
    res = slurm_prolog_cluster.srun(["-N2", "-n2"], [*SHOW[:2], f"{SHOW[2]}; echo {GUARD}"],
                                    env={**ENV, "SLURMENV": value}, timeout=TIMEOUT)
    if acts is None:  # neither yes nor no: refused, the task never starts
        assert res.returncode != 0 and GUARD not in res.stdout, explain(res)
        for rank in (0, 1):
            assert said in res.per_task[rank], explain(res)
        assert "TaskProlog failed status=1" in res.stderr, explain(res)
        return
    assert res.returncode == 0, explain(res)
    assert res.per_task_first == ({r: f"RANK={r} WORLD=2 ADDR=r1n09" for r in range(2)} if acts
                                  else {r: "RANK=unset WORLD=unset ADDR=unset" for r in range(2)})


def test_a_copied_site_prolog_kills_the_task_and_a_symlink_runs(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # a slurmenv-task-prolog on PATH and in the working directory that would set RANK=7
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "slurmenv-task-prolog").write_text("#!/bin/sh\necho export RANK=7\n")
    (decoy / "slurmenv-task-prolog").chmod(0o755)
    site = BIN / "slurmenv-site-prolog"
    copied, linked = tmp_path / "copied-prolog", tmp_path / "linked-prolog"
    copied.write_bytes(site.read_bytes())
    copied.chmod(0o755)
    linked.symlink_to(site)
    env = {"PATH": f"{decoy}{os.pathsep}{ENV['PATH']}", "SLURMENV": "1"}
    args = ["-N2", "-n2", f"--chdir={decoy}"]
    res = slurm_cluster.srun([*args, f"--task-prolog={copied}"], [*SHOW[:2],
                             f"{SHOW[2]}; echo {GUARD}"], env=env, timeout=TIMEOUT)
    assert res.returncode != 0 and GUARD not in res.stdout, explain(res)
    for rank in (0, 1):
        assert (f"slurmenv: error: this job opted in (SLURMENV), but {tmp_path}/"
                "slurmenv-task-prolog is missing or not executable") in res.per_task[rank]
    ok = slurm_cluster.srun([*args, f"--task-prolog={linked}"], SHOW, env=env, timeout=TIMEOUT)
    assert ok.returncode == 0, explain(ok)
    assert ok.per_task_first == {r: f"RANK={r} WORLD=2 ADDR=r1n09" for r in range(2)}


def test_nothing_written_to_stderr_acts_as_a_prolog_line(
    slurm_prolog_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # Slurm 22.05.8 parses a prolog's stderr as its stdout ...
    loud = tmp_path / "loud-prolog"
    loud.write_text("#!/bin/sh\necho export FROM_STDERR=1 >&2\n")
    loud.chmod(0o755)
    res = slurm_prolog_cluster.srun(["-N1", "-n1", f"--task-prolog={loud}"],
                                    ["sh", "-c", "echo FROM_STDERR=${FROM_STDERR-unset}"],
                                    env=ENV, timeout=TIMEOUT)
    assert res.per_task_first == {0: "FROM_STDERR=1"}, explain(res)
    # ... so what the interpreter writes there, even at start-up (a site's sitecustomize), must
    # not reach it: the site prolog starts slurmenv-task-prolog with stderr on /dev/null
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.stderr.write('export RANK=99\\nprint HIJACKED\\n')\n")
    res = slurm_prolog_cluster.srun(
        ["-N2", "-n2"], SHOW,
        env={**ENV, "SLURMENV": "1", "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"},
        timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    assert res.per_task_first == {r: f"RANK={r} WORLD=2 ADDR=r1n09" for r in range(2)}
    assert "HIJACKED" not in res.stdout + res.stderr


NESTED = """#!/bin/bash
echo "OUTER RANK=$RANK PORT=$MASTER_PORT"
srun --overlap -N2 -n2 --label bash -c 'echo "INNER RANK=$RANK WORLD=$WORLD_SIZE PORT=$MASTER_PORT"'
echo "INNER-STATUS=$?"
"""


def test_a_srun_inside_an_opted_in_srun_step_resolves_its_own_step(
    slurm_prolog_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # srun --pty bash in an opted-in job, then srun there: step 0's values are inherited by
    # step 1, which once refused them ("RANK=0 is already set ... probably exported in the
    # batch script"); SLURMENV_SET_BY says they are slurmenv's for step 0
    shell = tmp_path / "shell.sh"
    shell.write_text(NESTED)
    shell.chmod(0o755)
    res = slurm_prolog_cluster.run(
        ["salloc", "-N2", "-n2", "srun", "-N1", "-n1", "--label", str(shell)],
        env={**ENV, "SLURMENV": "1"}, timeout=TIMEOUT)
    assert "0: OUTER RANK=0" in res.stdout and "0: INNER-STATUS=0" in res.stdout, \
        res.stdout + res.stderr
    inner = re.findall(r"INNER RANK=(\d) WORLD=(\d) PORT=(\d+)", res.stdout)
    outer_port = re.search(r"OUTER RANK=0 PORT=(\d+)", res.stdout)
    assert sorted(rank for rank, _, _ in inner) == ["0", "1"], res.stdout + res.stderr
    assert all(world == "2" for _, world, _ in inner)
    assert outer_port and all(port != outer_port.group(1) for _, _, port in inner)
