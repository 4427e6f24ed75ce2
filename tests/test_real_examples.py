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

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
#: the lines the README shows (tests/test_docs_examples.py checks that it shows these forms)
SHOWN = re.compile(r"rank=\d+/4 node=\S+ node_rank=\d/2 local_rank=\d/2 master=\S+:\d+ "
                   r"tf=\S+:\d+ cluster=[0-9a-f]{8} step=\d+\.\d+ gpus=-")
TRAINED = re.compile(r"^rank (\d)/4 on (\S+): loss [\d.]+, weights identical on every rank$",
                     re.MULTILINE)


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

