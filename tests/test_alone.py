"""Every test file passes when run alone (issue 36): ``tests/test_stepcheck.py`` failed alone,
on unchanged code, because nothing had imported the launchers before its threads did
(``launchers.load`` read ``sys.modules`` while another thread was still importing).

A cheap check, not the whole suite file by file: ``test_stepcheck.py`` and two fast unit files
drawn at random, each in a pytest of its own, in a random order (the seed is in the message).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALWAYS = ["tests/test_stepcheck.py"]
#: Fast unit files (a few seconds each alone), none starting a cluster.
FAST = ["tests/test_launcher_helpers.py", "tests/test_nodes.py", "tests/test_layout.py",
        "tests/test_k8s.py", "tests/test_world_guard.py", "tests/test_lsf.py",
        "tests/test_flux.py", "tests/test_pals.py"]


def test_some_test_files_pass_alone_in_a_random_order() -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    draw = random.Random(seed)
    files = ALWAYS + draw.sample(FAST, 2)
    draw.shuffle(files)
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    for path in files:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", path],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )
        assert out.returncode == 0, (
            f"{path} fails alone (files {files}, seed {seed}):\n{out.stdout[-3000:]}")
