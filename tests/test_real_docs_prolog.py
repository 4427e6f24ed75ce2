"""Every documented ``srun --task-prolog`` line fails closed, on the real Slurm cluster (issue 30),
and a refusal stops the frameworks where Slurm starts the task anyway (issue 26).

Each ``srun … --task-prolog=…`` line of the README's and every docs/ page's code blocks runs
as written (only ``python train.py`` replaced by this test's program) in a batch job, with
``slurmenv-task-prolog``

* absent from the batch script's ``PATH`` (a virtual environment not activated there),
* on the batch script's ``PATH`` but absent on the node (a directory mounted only in the batch
  script's own mount namespace: slurmstepd, which runs the prolog, cannot see it),
* present:

the program never runs without its variables, and runs with them. The old line, whose bare
``$(command -v …)`` is empty without the prolog, is run the same way to show that the test
sees the difference: its program starts with ``RANK`` unset.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from slurm_harness import SlurmCluster

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PROLOG = BIN / "slurmenv-task-prolog"
TIMEOUT = 180.0
TRAIN = 'import os\nprint("TRAINED RANK=" + os.environ.get("RANK", "unset"), flush=True)\n'
OLD_LINE = ("srun --kill-on-bad-exit=1 --task-prolog=$(command -v slurmenv-task-prolog) "
            "python train.py")


#: Container runtimes: their lines are run by tests/test_real_containers.py (Charliecloud) or
#: cited from the runtime's sources (Apptainer, pyxis), as docs/containers.md says.
RUNTIMES = ("ch-run ", "apptainer ", "--container-image")


def every_line() -> list[str]:
    """The ``srun … --task-prolog=`` lines of the ``sh`` and ``bash`` code blocks of the README
    and of every page of docs/ (the changelog aside: it keeps what was true then)."""
    lines = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        if page.name == "CHANGELOG.md":
            continue
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", page.read_text(), flags=re.DOTALL):
            lines += [line for line in block.splitlines()
                      if line.startswith("srun ") and "--task-prolog=" in line]
    return lines


def documented_lines() -> list[str]:
    """The lines this test runs: every page's, those of container runtimes aside."""
    return [line for line in every_line() if not any(r in line for r in RUNTIMES)]


LINES = documented_lines()


def test_the_pages_document_the_closed_form() -> None:
    assert len(LINES) >= 3  # README, and task-prolog.md's top and batch examples
    assert len(every_line()) >= 5  # and docs/containers.md's Charliecloud and Apptainer lines
    assert all("|| echo /slurmenv-task-prolog-not-on-PATH" in line for line in every_line()), (
        every_line())


def job(line: str, case: str, tmp: Path) -> str:
    """A batch script running ``line`` with the prolog placed as ``case`` says."""
    pydir = tmp / "py"  # `python` for train.py, and nothing else
    pydir.mkdir(exist_ok=True)
    if not (pydir / "python").exists():
        (pydir / "python").symlink_to("/usr/bin/python3")
    (tmp / "train.py").write_text(TRAIN)
    line = line.replace("python train.py", f"python {tmp / 'train.py'}")
    path = f"{pydir}:/usr/bin:/bin"
    if case == "present":
        return f"#!/bin/bash\nexport PATH={BIN}:{path}\n{line}\necho SRUN-STATUS=$?\n"
    if case == "absent from PATH":
        return f"#!/bin/bash\nexport PATH={path}\n{line}\necho SRUN-STATUS=$?\n"
    # absent on the node: a tmpfs over `hidden`, in a mount namespace of the batch script's own
    hidden = tmp / "hidden"
    hidden.mkdir(exist_ok=True)
    inner = tmp / "inner.sh"
    inner.write_text(
        f"mount -t tmpfs none {hidden} || exit 99\n"
        f"cp {PROLOG} {hidden}/slurmenv-task-prolog\n"
        f"export PATH={hidden}:{path}\n"
        'echo "ON PATH HERE: $(command -v slurmenv-task-prolog)"\n'
        f"{line}\necho SRUN-STATUS=$?\n"
    )
    return f"#!/bin/bash\nexec unshare --mount bash {inner}\n"


def run(cluster: SlurmCluster, line: str, case: str, tmp: Path) -> tuple[str, str]:
    res = cluster.sbatch(job(line, case, tmp), ["-N2", "--ntasks-per-node=1"],
                         env={"PATH": "/usr/bin:/bin"}, timeout=TIMEOUT)
    return res.stdout, res.stderr


@pytest.mark.parametrize("case", ["absent from PATH", "absent on the node"])
@pytest.mark.parametrize("line", LINES)
def test_a_missing_prolog_never_starts_the_program(
    slurm_cluster: SlurmCluster, line: str, case: str, tmp_path: Path
) -> None:
    out, err = run(slurm_cluster, line, case, tmp_path)
    status = re.search(r"SRUN-STATUS=(\d+)", out)
    assert status and status.group(1) != "0", out + err
    assert "TRAINED" not in out, out + err
    if case == "absent on the node":  # the batch script did see it
        assert f"ON PATH HERE: {tmp_path / 'hidden'}/slurmenv-task-prolog" in out, out + err
        assert "can not be executed" in err or "can not be executed" in out, out + err


@pytest.mark.parametrize("line", LINES)
def test_a_present_prolog_starts_the_program_with_its_variables(
    slurm_cluster: SlurmCluster, line: str, tmp_path: Path
) -> None:
    out, err = run(slurm_cluster, line, "present", tmp_path)
    assert "SRUN-STATUS=0" in out, out + err
    assert sorted(re.findall(r"TRAINED RANK=(\S+)", out)) == ["0", "1"], out + err


def test_the_old_line_started_the_program_without_a_rank(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    out, err = run(slurm_cluster, OLD_LINE, "absent from PATH", tmp_path)
    assert "SRUN-STATUS=0" in out, out + err
    assert re.findall(r"TRAINED RANK=(\S+)", out) == ["unset", "unset"], out + err


# -- where Slurm starts the task whatever the prolog's status (before 22.05) -------------------
# Such a Slurm is not available here: a prolog that runs slurmenv-task-prolog and exits 0 does
# what it does with a refusal (task.c's exec_task ignored the status up to 21.08).
STOPPED = {
    "torch": ("import torch.distributed as dist\n"
              "try:\n    dist.init_process_group('gloo')\n"
              "except ValueError as exc:\n    print('STOPPED', exc, flush=True)\n"
              "else:\n    print('TRAINED', flush=True)\n"),
    "tensorflow": ("import tensorflow as tf\n"
                   "try:\n    tf.distribute.MultiWorkerMirroredStrategy()\n"
                   "except ValueError as exc:\n    print('STOPPED', type(exc).__name__, flush=True)\n"
                   "else:\n    print('TRAINED', flush=True)\n"),
    "a script's own default": ("import os\n"
                               "try:\n    rank = int(os.environ.get('RANK', 0))\n"
                               "except ValueError as exc:\n    print('STOPPED', exc, flush=True)\n"
                               "else:\n    print('TRAINED', rank, flush=True)\n"),
}


@pytest.mark.parametrize("framework", list(STOPPED))
def test_a_refusal_stops_training_where_slurm_starts_the_task_anyway(
    slurm_cluster: SlurmCluster, framework: str, tmp_path: Path
) -> None:
    if framework in ("torch", "tensorflow"):
        pytest.importorskip(framework)
    ignoring = tmp_path / "old-slurm-prolog"
    ignoring.write_text(f"#!/bin/sh\n{PROLOG}\nexit 0\n")
    ignoring.chmod(0o755)
    res = slurm_cluster.srun(
        ["-N2", "-n2", f"--task-prolog={ignoring}"], [sys.executable, "-c", STOPPED[framework]],
        env={"SLURMENV_PORT": "bogus"}, timeout=TIMEOUT)
    for rank in (0, 1):
        lines = res.per_task.get(rank, [])
        assert any("slurmenv: error: not a usable TCP port" in line for line in lines), res.stdout
        assert any(line.startswith("STOPPED") for line in lines), res.stdout + res.stderr
    assert "TRAINED" not in res.stdout, res.stdout
