"""Containers under srun on the real cluster (issue 28): Charliecloud's ``ch-run`` with a
directory image that has no slurmenv inside.

The image is built here, from nothing downloaded: a directory tree with the mount points
``ch-run`` needs, the host's ``/usr`` and the Python the tests run with bound in read-only (its
virtual environment, when it is one, and the interpreter that environment links to, wherever
``sys.base_prefix`` is), as a site image would carry its own Python. What is proven:

* the task prolog (``srun --task-prolog=slurmenv-task-prolog ch-run IMG -- prog``) and
  ``srun slurmenv exec -- ch-run IMG -- prog`` on the host give the program inside every
  variable ``slurmenv export`` computes for its task, and a torch gloo all_reduce runs inside;
* slurmenv inside the image (the checkout bound in, ``python -m slurmenv exec``) gives the same;
* a start that scrubs the environment (``ch-run --unset-env='*'``, ``env -i``) is refused: no
  PID namespace here, so slurmenv sees the ``slurmstepd`` ancestor;
* facts for docs/containers.md: in a PID namespace of its own (``unshare --pid --mount-proc``,
  as ``apptainer --pid``/``--containall``), neither that ancestor nor another launch's rank 0
  (the rival check of rivals.py) is visible; in a network namespace of its own, ``doctor``'s
  interface check reports the master unreachable.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_harness import SlurmCluster, SrunResult, parse_labels

pytestmark = pytest.mark.slurm

#: what these tests prove, on which Slurm releases (tests/slurm_releases.py, docs/releases.md)
FEATURES = {
    "containers: Charliecloud `ch-run`, PID and network namespaces": ("debian", [
        "test_the_image_has_no_slurmenv",
        "test_the_documented_charliecloud_lines_run",
        "test_ch_run_shares_the_pid_and_network_namespaces",
        "test_the_task_prolog_reaches_the_program_inside",
        "test_exec_on_the_host_reaches_the_program_inside",
        "test_slurmenv_inside_the_image",
        "test_torch_trains_inside_with_the_prolog",
        "test_a_scrubbed_environment_is_refused",
        "test_what_a_pid_namespace_hides",
        "test_a_scrubbed_environment_in_a_pid_namespace_is_not_seen",
        "test_doctor_in_a_network_namespace_of_its_own",
        "test_doctor_names_the_enroot_hooks_values",
    ]),
}

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PROLOG = f"--task-prolog={BIN / 'slurmenv-task-prolog'}"
#: The interpreter the image runs: the one running the tests (tests/run.sh's virtual environment,
#: or any other), with its packages (torch, hostlist); PREFIXES are bound in for it.
PYTHON = sys.executable


def python_prefixes() -> list[str]:
    """What ``PYTHON`` needs outside ``/usr``, parents first: the virtual environment (whose
    site-packages hold the packages; the checkout it installs editable is elsewhere and not
    bound), the base interpreter's prefix (the standard library, and the packages of a venv made
    with ``--system-site-packages``) and the prefix of the binary the venv's ``python`` links to."""
    real = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    found: list[str] = []
    for path in sorted({sys.prefix, sys.base_prefix, real}, key=len):
        if path == "/usr" or path.startswith("/usr/") or path in ("", "/"):
            continue
        if not any(path == p or path.startswith(p + "/") for p in found):
            found.append(path)
    return found


PREFIXES = python_prefixes()
ENV = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "USER": "root"}
TIMEOUT = 180.0
NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
         "NNODES", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "OMP_NUM_THREADS",
         "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SRC = "/opt/slurmenv-src"  # where the checkout is bound when slurmenv runs inside
# the program inside: prints its environment, a variable a line (srun cuts long lines)
SHOW = ("import os\nfor k, v in sorted(os.environ.items()):\n"
        f"    if k.startswith('SLURM') or k in {NAMES!r} or k == 'WHERE':\n"
        "        print('ENV ' + k + '=' + v)\n")
PRINT_ENV = [PYTHON, "-c", SHOW]
FOUR = ["-N2", "-n4", "-w", "r1n[09-10]"]


def explain(res: SrunResult) -> str:
    return f"exit status {res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Charliecloud directory image: the mount points ch-run binds, /bin, /lib... as the
    host lays them out, nothing else (no Python packages: /usr is bound at run time)."""
    if shutil.which("ch-run") is None:
        pytest.fail("ch-run is missing: tests/run.sh installs Debian's charliecloud-runtime")
    img = tmp_path_factory.mktemp("chimage")
    for name in ("dev", "proc", "sys", "tmp", "usr", "etc", "root", "home", "run", "mnt", "opt"):
        (img / name).mkdir(exist_ok=True)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():  # merged /usr: the same link
            (img / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (img / name).mkdir()
    for name in ("passwd", "group", "hosts", "resolv.conf"):  # ch-run binds the host's on these
        (img / "etc" / name).write_text("")
    for path in (*PREFIXES, SRC):
        (img / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return img


def ch_run(image: Path, *extra: str) -> list[str]:
    """``ch-run`` of the image with the host's /usr, the test Python's prefixes and the
    host's /bin, /lib... (where they are not links to /usr) bound read-only."""
    binds = ["/usr"] + [f"/{n}" for n in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
                        if Path(f"/{n}").is_dir() and not Path(f"/{n}").is_symlink()]
    binds += PREFIXES
    return ["ch-run", *(f"-b{b}:{b}" for b in binds), *extra, str(image), "--"]


def envs(res: SrunResult) -> dict[int, dict[str, str]]:
    return {rank: dict(line[4:].split("=", 1) for line in lines if line.startswith("ENV "))
            for rank, lines in res.per_task.items()
            if any(line.startswith("ENV ") for line in lines)}


def expected(task_env: dict[str, str]) -> dict[str, str]:
    """What ``slurmenv export --format json`` computes from a task's Slurm variables (the
    environment the program saw, without what slurmenv set): the resolver reads only them."""
    clean = {k: v for k, v in task_env.items() if k not in NAMES}
    clean["PATH"] = ENV["PATH"]
    out = subprocess.run([str(BIN / "slurmenv"), "export", "--format", "json"], env=clean,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def assert_every_task_got_its_values(res: SrunResult, count: int) -> dict[int, dict[str, str]]:
    assert res.returncode == 0, explain(res)
    got = envs(res)
    assert sorted(got) == list(range(count)), explain(res)
    for rank, env in got.items():
        # thread counts come from the task's CPU affinity, which this process does not share
        want = {n: v for n, v in expected(env).items() if n not in THREADS}
        assert env["RANK"] == str(rank)
        assert {n: env.get(n) for n in want} == want, (rank, env)
        assert all(env.get(n) for n in THREADS), (rank, env)
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in got.values()}) == 1
    return got


def test_the_image_has_no_slurmenv(slurm_cluster: SlurmCluster, image: Path) -> None:
    # -t: a /tmp of the container's own (ch-run binds the host's /tmp by default, where a
    # checkout installed editable, such as CI's clone, would be found)
    res = slurm_cluster.srun(["-N1", "-n1"], [*ch_run(image, "-t"), PYTHON, "-c", "import slurmenv"],
                             env=ENV, timeout=TIMEOUT)
    assert res.returncode != 0 and "No module named 'slurmenv'" in res.stderr, explain(res)


def test_ch_run_shares_the_pid_and_network_namespaces(
    slurm_cluster: SlurmCluster, image: Path
) -> None:
    """ch-run makes a user and a mount namespace only: what docs/containers.md says of it."""
    names = ["/proc/self/ns/pid", "/proc/self/ns/net", "/proc/self/ns/mnt"]
    res = slurm_cluster.srun(["-N1", "-n1"], ["sh", "-c", " ".join(
        ["readlink", *names, "&&", *ch_run(image), "/usr/bin/readlink", *names])],
        env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    outside, inside = res.per_task[0][:3], res.per_task[0][3:]
    assert outside[:2] == inside[:2], explain(res)  # pid, net: the host's
    assert outside[2] != inside[2], explain(res)  # mnt: its own


def test_the_task_prolog_reaches_the_program_inside(
    slurm_cluster: SlurmCluster, image: Path
) -> None:
    """The prolog runs on the host, before ch-run; ch-run passes the environment as it is."""
    res = slurm_cluster.srun([*FOUR, PROLOG], [*ch_run(image), *PRINT_ENV], env=ENV,
                             timeout=TIMEOUT)
    got = assert_every_task_got_its_values(res, 4)
    assert "TF_CONFIG" in got[0] and got[3]["LOCAL_RANK"] == "0"  # block: ranks 0-2, then 3


def test_exec_on_the_host_reaches_the_program_inside(
    slurm_cluster: SlurmCluster, image: Path
) -> None:
    res = slurm_cluster.srun(
        [*FOUR, "-m", "cyclic"], [str(BIN / "slurmenv"), "exec", "--", *ch_run(image),
                                  *PRINT_ENV], env=ENV, timeout=TIMEOUT)
    got = assert_every_task_got_its_values(res, 4)
    assert got[1]["NODE_RANK"] == "1"  # cyclic: rank 1 on the second node


def charliecloud_lines() -> list[str]:
    """The ``srun`` lines of docs/containers.md's Charliecloud batch script."""
    text = (ROOT / "docs" / "containers.md").read_text(encoding="utf-8")
    section = text.split("## Charliecloud", 1)[1].split("\n## ", 1)[0]
    return [line for block in re.findall(r"```(?:bash|sh)\n(.*?)```", section, re.DOTALL)
            for line in block.splitlines() if line.startswith("srun ")]


def test_the_page_shows_the_charliecloud_lines() -> None:
    assert len(charliecloud_lines()) == 2


@pytest.mark.parametrize("line", charliecloud_lines())
def test_the_documented_charliecloud_lines_run(
    slurm_cluster: SlurmCluster, image: Path, line: str, tmp_path: Path
) -> None:
    """Each line as written in a batch job, the image and the program aside: ``ch-run "$IMG"
    --`` is this test's image (the host's /usr bound in), ``python train.py`` prints the
    environment inside; srun labels the output."""
    (tmp_path / "train.py").write_text(SHOW)
    run = (line.replace('ch-run "$IMG" --', shlex.join(ch_run(image, f"-b{tmp_path}:/mnt")))
           .replace("python train.py", f"{PYTHON} /mnt/train.py")
           .replace("srun ", "srun --label ", 1))
    assert "ch-run " in run and "/mnt/train.py" in run, run
    script = f"#!/bin/bash\nexport PATH={shlex.quote(ENV['PATH'])}\n{run}\n"
    job = slurm_cluster.sbatch(script, ["-N2", "-n4", "-w", "r1n[09-10]"], env=ENV,
                               timeout=TIMEOUT)
    res = SrunResult(job.returncode, job.stdout, job.stderr, parse_labels(job.stdout))
    assert_every_task_got_its_values(res, 4)


def test_slurmenv_inside_the_image(slurm_cluster: SlurmCluster, image: Path) -> None:
    """The checkout bound into the image: ``python -m slurmenv exec`` inside the container."""
    res = slurm_cluster.srun(
        FOUR, [*ch_run(image, f"-b{ROOT}:{SRC}", f"--set-env=PYTHONPATH={SRC}"), PYTHON, "-m",
               "slurmenv", "exec", "--", PYTHON, "-c",
               "import os, slurmenv; os.environ['WHERE'] = slurmenv.__file__\n" + SHOW],
        env=ENV, timeout=TIMEOUT)
    got = assert_every_task_got_its_values(res, 4)
    assert {e["WHERE"] for e in got.values()} == {f"{SRC}/slurmenv/__init__.py"}


def test_torch_trains_inside_with_the_prolog(slurm_cluster: SlurmCluster, image: Path) -> None:
    """A gloo all_reduce over 2 nodes, every rank in its own container, no slurmenv inside."""
    programs = ROOT / "tests" / "programs"
    res = slurm_cluster.srun(
        [*FOUR, PROLOG], [*ch_run(image, f"-b{programs}:/mnt"), PYTHON, "/mnt/check_torch.py"],
        env={**ENV, "SLURMENV_FOR": "torch"}, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    checks = [json.loads(lines[0][6:]) for lines in res.per_task.values()
              if lines and lines[0].startswith("CHECK ")]
    assert sorted(c["rank"] for c in checks) == [0, 1, 2, 3], explain(res)
    assert all(c["sum"] == 10 and c["world"] == 4 for c in checks), explain(res)


@pytest.mark.parametrize("scrub", [["--unset-env=*"], "env -i"], ids=["ch-run-unset-env", "env-i"])
def test_a_scrubbed_environment_is_refused(
    slurm_cluster: SlurmCluster, image: Path, scrub: list[str] | str
) -> None:
    """No Slurm variable inside, but slurmstepd is this process's ancestor (no PID namespace):
    refused, with the failure text on stdout that makes eval stop."""
    inside = [PYTHON, "-m", "slurmenv", "export"]
    if isinstance(scrub, str):
        command = [*ch_run(image, f"-b{ROOT}:{SRC}"), "/usr/bin/env", "-i",
                   f"PYTHONPATH={SRC}", *inside]
    else:
        command = [*ch_run(image, f"-b{ROOT}:{SRC}", *scrub, f"--set-env=PYTHONPATH={SRC}"),
                   *inside]
    res = slurm_cluster.srun(["-N2", "-n2"], command, env=ENV, timeout=TIMEOUT)
    assert res.returncode != 0, explain(res)
    errors = parse_labels(res.stderr)
    for rank in (0, 1):
        assert not any("export RANK" in line for line in res.per_task.get(rank, [])), explain(res)
        text = "\n".join(errors.get(rank, []))
        assert "slurmstepd: [" in text and "is an ancestor of this process" in text, explain(res)
        assert "SLURM_JOB_ID=(unset)" in text, explain(res)


# -- namespaces: facts for docs/containers.md ---------------------------------------------
FACTS = r"""
import json, os, subprocess, sys, time
from slurmenv import rivals
from slurmenv.launchers import evidence
print("FACT " + json.dumps({
    "ancestor": evidence.stepd_ancestor(),
    "rivals": [pid for pid, _ in rivals.find("OMPI_MCA_ess_base_jobid", "222")],
    "pid": os.getpid(),
}))
"""


def test_what_a_pid_namespace_hides(slurm_cluster: SlurmCluster) -> None:
    """Another launch's rank 0 (a process with Open MPI's launch ID, as rivals.find looks for)
    runs on the node; outside a PID namespace slurmenv sees it and the slurmstepd ancestor,
    inside one (``unshare --pid --fork --mount-proc``) it sees neither."""
    pyenv = {**ENV, "PYTHONPATH": str(ROOT)}
    script = (
        "OMPI_MCA_ess_base_jobid=111 sleep 60 & other=$!; sleep 0.2; "
        f"{PYTHON} -c \"$FACTS\" | sed 's/^FACT /HOST /'; "
        f"unshare --pid --fork --mount-proc {PYTHON} -c \"$FACTS\" | sed 's/^FACT /PIDNS /'; "
        "kill $other"
    )
    res = slurm_cluster.srun(["-N1", "-n1"], ["sh", "-c", script],
                             env={**pyenv, "FACTS": FACTS}, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    lines = res.per_task[0]
    host = json.loads(next(line[5:] for line in lines if line.startswith("HOST ")))
    pidns = json.loads(next(line[6:] for line in lines if line.startswith("PIDNS ")))
    assert host["ancestor"] and "slurmstepd: [" in host["ancestor"], explain(res)
    assert len(host["rivals"]) == 1, explain(res)
    assert pidns == {"ancestor": None, "rivals": [], "pid": pidns["pid"]}, explain(res)
    assert pidns["pid"] <= 3, explain(res)  # its own numbering: python is PID 1 or 2 there


def test_a_scrubbed_environment_in_a_pid_namespace_is_not_seen(
    slurm_cluster: SlurmCluster,
) -> None:
    """The limit of the refusal above (docs/containers.md): with no Slurm variable and no
    slurmstepd visible, a task is a single process to slurmenv: rank 0 of 1. Where Slurm's
    cgroup plugins run, ``/proc/self/cgroup`` still names the step (evidence.cgroup_step); the
    test cluster runs proctrack/linuxproc, without Slurm cgroups."""
    res = slurm_cluster.srun(
        ["-N2", "-n2"], ["unshare", "--pid", "--fork", "--mount-proc", "env", "-i",
                         f"PYTHONPATH={ROOT}", PYTHON, "-m", "slurmenv", "export", "--format",
                         "json"], env=ENV, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    for rank in (0, 1):
        values: dict[str, Any] = json.loads("\n".join(res.per_task[rank]))
        assert (values["RANK"], values["WORLD_SIZE"]) == ("0", "1"), explain(res)


def test_doctor_in_a_network_namespace_of_its_own(slurm_cluster: SlurmCluster) -> None:
    """``unshare --net`` (a container with its own network, only ``lo``): doctor's interface
    check is an error, naming the master's address it cannot reach."""
    res = slurm_cluster.srun(["-N2", "-n2"], ["unshare", "--net", str(BIN / "slurmenv"),
                                              "doctor", "--json"], env=ENV, timeout=TIMEOUT)
    assert res.returncode != 0, explain(res)
    for rank in (0, 1):
        report = json.loads("\n".join(res.per_task[rank]))
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["interface"]["verdict"] == "error", report
        assert "no route" in checks["interface"]["message"], report
        assert checks["step"]["verdict"] == "ok", report


# -- enroot's PyTorch hook (pyxis), emulated: docs/containers.md ---------------------------
# What conf/hooks/extra/50-slurm-pytorch.sh (NVIDIA/enroot 4) puts in a pyxis container for an
# image that sets PYTORCH_VERSION, and pyxis's own RANK/LOCAL_RANK, before the task starts.
ENROOT_HOOK = (
    "export PYTORCH_VERSION=2.5.0 "
    'MASTER_ADDR="$(scontrol show hostname "$SLURM_STEP_NODELIST" | head -n1)" '
    "MASTER_PORT=$((SLURM_JOB_ID % 4536 + 61000)) WORLD_SIZE=$SLURM_NTASKS "
    "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID; "
)
REPORT = (
    "import json, subprocess\n"
    "doc = json.loads(subprocess.run(['slurmenv', 'doctor', '--json'], capture_output=True, "
    "text=True).stdout)\n"
    "enroot = next(c for c in doc['checks'] if c['name'] == 'enroot')\n"
    "print('ENROOT ' + json.dumps([enroot['verdict'], enroot['message']]))\n"
    "out = json.loads(subprocess.run(['slurmenv', 'export', '--format', 'json'], "
    "capture_output=True, text=True).stdout)\n"
    "print('EXPORT ' + json.dumps({k: out[k] for k in ('MASTER_ADDR', 'MASTER_PORT', 'RANK')}))\n"
)


def test_doctor_names_the_enroot_hooks_values(slurm_cluster: SlurmCluster) -> None:
    """Rank 0 on the step's second node (-m arbitrary): the hook's MASTER_ADDR (the first node)
    is wrong and slurmenv replaces it; its MASTER_PORT (one per job) slurmenv keeps, as any
    inherited MASTER_PORT; doctor says both, naming the hook."""
    assert slurm_cluster.tmp is not None
    hostfile = slurm_cluster.tmp / "enroot-hosts"
    hostfile.write_text("r1n10\nr1n09\n")
    res = slurm_cluster.srun(
        ["-m", "arbitrary", "-n2"],
        ["sh", "-c", ENROOT_HOOK + f'exec {PYTHON} -c "$REPORT"'],
        env={**ENV, "SLURM_HOSTFILE": str(hostfile), "REPORT": REPORT}, timeout=TIMEOUT)
    assert res.returncode == 0, explain(res)
    ports = set()
    for rank in (0, 1):
        lines = res.per_task[rank]
        verdict, message = json.loads(next(x[7:] for x in lines if x.startswith("ENROOT ")))
        exported = json.loads(next(x[7:] for x in lines if x.startswith("EXPORT ")))
        port = int(exported["MASTER_PORT"])
        assert 61000 <= port < 61000 + 4536, exported  # the hook's, kept
        ports.add(port)
        assert (exported["MASTER_ADDR"], exported["RANK"]) == ("r1n10", str(rank)), exported
        assert verdict == "warning", message
        assert f"MASTER_PORT={port} is what enroot's PyTorch hook sets" in message
        assert "the hook's MASTER_ADDR=r1n09 is replaced by rank 0's r1n10" in message
    assert len(ports) == 1, explain(res)
