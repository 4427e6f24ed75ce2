"""The README's example, run as a user runs it, on the real Slurm cluster (needs root).

``examples/train.sbatch`` is submitted as written from a copy of ``examples/`` (the README:
``cd examples && sbatch train.sbatch``), with only this Python's ``bin`` (``slurmenv``,
``python``) on ``PATH``, as an activated virtual environment gives it. Its two steps must print
what the README says: one ``show --one-line`` line per rank, and ``train.py`` training on both
nodes with gloo (the CPU build of torch) to the same weights on every rank.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from slurm_harness import SlurmCluster

pytestmark = pytest.mark.slurm

#: what each test proves, on which release (tests/slurm_releases.py: docs/releases.md's table)
FEATURES = {
    "the README's example (`examples/train.sbatch`) trains and is verified": (
        "debian+newest", ["test_the_example_trains_on_two_nodes"]),
    "each launch form of the README trains": (
        "debian", ["test_each_launch_form_of_the_readme_trains"]),
}

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
#: the lines the README shows (tests/test_docs_examples.py checks that it shows these forms)
SHOWN = re.compile(r"rank=\d+/4 node=\S+ node_rank=\d/2 local_rank=\d/2 master=\S+:\d+ "
                   r"tf=\S+:\d+ cluster=[0-9a-f]{8} step=\d+\.\d+ gpus=-")
TRAINED = re.compile(r"^rank (\d)/4 on (\S+): loss [\d.]+, weights identical on every rank$",
                     re.MULTILINE)
#: torch's own warning lines (glog's form: severity letter, date, time)
TORCH_WARNING = re.compile(r"\[[WE]\d{4} \d\d:\d\d:\d\d")
#: the step check's lines (stderr, which slurm-JOBID.out holds too): rank 0's report, then one
#: line per other rank, in any order (docs/step-check.md)
CHECKED = re.compile(r"slurmenv step check: (?:rank ([1-3]): ok \()?4 of 4 ranks reached "
                     r"(\S+:\d+) in \d+\.\d s, all agree\)?")


def test_the_example_trains_on_two_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)
    job = slurm_cluster.sbatch((work / "train.sbatch").read_text(), [f"--chdir={work}"],
                               env={"PATH": f"{BIN}:/usr/bin:/bin"}, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    shown = [line for line in job.stdout.splitlines() if line.startswith("rank=")]
    assert [line.split()[0] for line in shown] == [f"rank={r}/4" for r in range(4)], job.stdout
    assert all(SHOWN.fullmatch(line) for line in shown), shown
    assert len({line.split(" master=")[1].split()[0] for line in shown}) == 1, shown
    trained = TRAINED.findall(job.stdout)
    assert sorted(rank for rank, _ in trained) == ["0", "1", "2", "3"], job.stdout + job.stderr
    assert len({node for _, node in trained}) == 2, trained
    # the job's stderr: the step check's four lines, and otherwise only torch's own warnings
    # (c10d's "[W1128 ...] ... cannot be retrieved" where the node's DNS does not answer)
    lines = job.stderr.splitlines()
    checked = [CHECKED.fullmatch(line) for line in lines if not TORCH_WARNING.match(line)]
    assert all(checked) and len(checked) == 4, job.stderr
    assert sorted(m.group(1) or "0" for m in checked if m) == ["0", "1", "2", "3"], job.stderr
    assert len({m.group(2) for m in checked if m}) == 1, job.stderr



def launch_forms() -> list[str]:
    """The command lines of the README's "Choose how to launch" table that start
    ``python train.py`` themselves (the Python helper's row needs a train.py of its own:
    tests/test_real_frameworks.py runs it), with the prolog's ``…`` the README's full form."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Choose how to launch", 1)[1].split("\n## ", 1)[0]
    full = re.search(r'--task-prolog="\$\(command -v [^`\n]*\)"', section)
    assert full is not None
    forms = []
    for row in re.findall(r"^\| `(srun [^`]*)`( calling)?", section, flags=re.MULTILINE):
        line, calling = row
        if not calling:
            forms.append(line.replace("--task-prolog=…", full.group(0)))
    return forms


def test_the_readme_table_has_the_forms() -> None:
    assert len(launch_forms()) == 4 and all(" train.py" in form for form in launch_forms())


@pytest.mark.parametrize("form", launch_forms())
def test_each_launch_form_of_the_readme_trains(
    slurm_cluster: SlurmCluster, tmp_path: Path, form: str
) -> None:
    """Each form as written, in the example's batch job (2 nodes x 2 tasks), trains
    examples/train.py on every rank it starts (torchrun: one worker per node, no GPU)."""
    pytest.importorskip("torch")
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)
    script = "\n".join(line for line in (work / "train.sbatch").read_text().splitlines()
                       if not line.startswith("srun "))
    job = slurm_cluster.sbatch(f"{script}\n{form}\n", [f"--chdir={work}"],
                               env={"PATH": f"{BIN}:/usr/bin:/bin"}, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    world = 2 if "torchrun" in form else 4
    trained = re.findall(rf"^rank (\d)/{world} on (\S+): loss [\d.]+, weights identical",
                         job.stdout, flags=re.MULTILINE)
    assert sorted(int(rank) for rank, _ in trained) == list(range(world)), job.stdout + job.stderr
    assert len({node for _, node in trained}) == 2, trained
