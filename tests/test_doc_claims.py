"""Claims of the docs that a page states in prose, held by the code or run as written: the
limits a page gives are the code's constants, and the examples of docs/fail-closed.md that
show an exit status run here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import synth

import slurmenv
from slurmenv import nodes, options

ROOT = Path(__file__).resolve().parent.parent


def page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


# -- limits are the code's ---------------------------------------------------------------------
def test_the_node_list_limit_is_the_codes() -> None:
    limit = f"{nodes.MAX_NODES:,}"
    for name in ("docs/testing.md", "docs/layouts.md"):
        assert limit in page(name), name
    assert "over 100,000 names refused" not in page("docs/testing.md")


# -- no test measures a speed ---------------------------------------------------------------------
CLOCKS = re.compile(r"\btime\.(?:monotonic|time|perf_counter)(?:_ns)?\(|\bperf_counter\(")


def test_no_test_measures_wall_clock_time() -> None:
    """docs/testing.md: no test asserts a speed (benchmarks/ measures it). Only the cluster
    harness reads the clock, for its own deadlines."""
    found = [f"{path.name}:{number}" for path in sorted((ROOT / "tests").glob("*.py"))
             if path.name not in ("slurm_harness.py", Path(__file__).name)
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if CLOCKS.search(line)]
    assert not found, f"a test reads the clock (assert behaviour, not time): {found}"


# -- README: which command takes which option -----------------------------------------------------
def test_the_readme_says_which_command_takes_which_option() -> None:
    """As docs/options.md (generated from the table) says: every option for the resolving
    commands, the ones marked torchrun for slurmenv torchrun."""
    text = " ".join(page("README.md").split())
    every = re.search(r"`export`, `exec`, `show`, `doctor` and `dump` take the options (.*?);", text)
    torchrun = re.search(r"`slurmenv torchrun` takes (`--.*?)\.", text)
    assert every and torchrun, "README.md: the sentence naming each command's options"
    flags = {row.flag for row in options.TABLE}
    assert set(re.findall(r"`(--[\w-]+)`", every.group(1))) == flags
    assert set(re.findall(r"`(--[\w-]+)`", torchrun.group(1))) == {
        row.flag for row in options.TABLE if row.torchrun}
    assert "Every resolving command takes" not in text


# -- docs/fail-closed.md: tool settings alone ----------------------------------------------------
TOOL_SETTINGS = {
    "SLURM_CONF": "/etc/slurm/slurm.conf", "OMPI_MCA_btl": "tcp,self", "I_MPI_FABRICS": "shm",
    "HYDRA_BOOTSTRAP": "ssh", "PMIX_MCA_gds": "hash", "MV2_ENABLE_AFFINITY": "0",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1", "PET_NPROC_PER_NODE": "1", "PET_MASTER_PORT": "23456",
    "SLURMENV_THREADS": "0",
}


def resolve(environ: dict[str, str]) -> slurmenv.Resolution:
    return slurmenv.resolve(environ, ephemeral_range=None, step_evidence=None, rivals=None)


def test_tool_settings_alone_give_a_single_process() -> None:
    res = resolve(dict(TOOL_SETTINGS))
    assert (res.rank, res.world_size, res.master_addr) == (0, 1, "127.0.0.1")
    for name, value in TOOL_SETTINGS.items():
        assert resolve({name: value}).world_size == 1, name


@pytest.mark.parametrize("nnodes", ["1", "2"])
def test_except_a_kubeflow_pod_without_its_node_rank(nnodes: str) -> None:
    with pytest.raises(slurmenv.SlurmEnvError) as info:
        resolve({**TOOL_SETTINGS, "PET_NNODES": nnodes})
    assert info.value.variable == "PET_NODE_RANK"
    assert "`KUBERNETES_SERVICE_HOST` and `PET_NNODES` together" in page("docs/fail-closed.md")


# -- docs/fail-closed.md: the reader going away --------------------------------------------------
def head_c_7(environ: dict[str, str], *words: str) -> int:
    """The exit status of slurmenv in ``slurmenv export WORDS | head -c 7``, run by bash."""
    bindir = str(Path(sys.executable).parent)
    env = {**environ, "PATH": f"{bindir}:/usr/bin:/bin"}
    script = f'slurmenv export {" ".join(words)} | head -c 7 >/dev/null; echo "${{PIPESTATUS[0]}}"'
    proc = subprocess.run(
        ["bash", "-c", script],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.strip().isdigit(), proc.stderr
    return int(proc.stdout)


def test_a_reader_that_goes_away_early_is_exit_status_1() -> None:
    hosts = [f"n{i:04d}" for i in range(1500)]
    env = synth.step_env(hosts, [4] * len(hosts), 5)
    res = resolve(env)
    assert res.world_size == 6000 and len(res.env("tf")["TF_CONFIG"]) > 64 * 1024
    text = page("docs/fail-closed.md")
    assert "`slurmenv export --for tf \\| head -c 7` in a step of 6,000 tasks" in text
    assert head_c_7(env, "--for", "tf") == 1


def test_an_output_that_fits_the_pipe_is_written_whole() -> None:
    assert "`slurmenv export | head -c 7` in an ordinary step exits 0" in " ".join(
        page("docs/fail-closed.md").split())
    assert head_c_7(synth.step_env(["n1", "n2"], [2, 2], 3)) == 0


# -- docs/proofs.md: what the real cluster does not show -----------------------------------------
def test_the_exceptions_proofs_md_names_are_the_harness_configuration() -> None:
    """proofs.md says the cgroup evidence is not exercised because the test cluster runs no
    cgroup plugin: true while the harness configures proctrack/linuxproc and task/none."""
    harness = page("tests/slurm_harness.py")
    text = page("docs/proofs.md")
    assert "ProctrackType=proctrack/linuxproc" in harness and "TaskPlugin=task/none" in harness
    assert "`proctrack/linuxproc`" in text and "`task/none`" in text
    assert "test_topology_ordered_layout_is_detected" in text
    assert "def test_topology_ordered_layout_is_detected(" in page("tests/test_resolve.py")
