"""The launcher seam: the registry's order on overlapping signals, every launcher through the
same interface, and the one shared precedence of address and port (``slurmenv/pipeline.py``, ``derive``)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import launcher_contract
import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import launchers, pipeline
from slurmenv.errors import SlurmEnvError
from slurmenv.launchers import base
from slurmenv.options import Options

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
HAND = {"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}


def launcher_of(env: dict[str, str]) -> str:
    return str(launchers.detect(env).NAME)


contract_faults = launcher_contract.faults


def test_every_registered_launcher_meets_the_contract() -> None:
    for module in launchers.modules():
        assert contract_faults(module) == [], module.__name__
    names = [m.NAME for m in launchers.modules()]
    assert len(set(names)) == len(names)
    assert launchers.REGISTRY[-1] == "local"  # the last one detects everything
    assert [m.NAME for m in launchers.modules() if m.FALLBACK] == ["local"]


def test_the_contract_test_finds_a_missing_field() -> None:
    # The AWS-Batch-like launcher of issue 26, written from an older recipe: no TASK_VARIABLES,
    # no FALLBACK, no reason for its empty PREFIXES.
    partial = types.ModuleType("slurmenv.launchers.awsbatch")
    partial.NAME = "awsbatch"  # type: ignore[attr-defined]
    partial.VARIABLES = ("AWS_BATCH_JOB_NODE_INDEX",)  # type: ignore[attr-defined]
    partial.PREFIXES = ()  # type: ignore[attr-defined]
    partial.WHY_EMPTY = {}  # type: ignore[attr-defined]
    partial.detect = lambda environ: None  # type: ignore[attr-defined]
    partial.read = lambda environ, options: None  # type: ignore[attr-defined]
    faults = contract_faults(partial)
    assert "not a Launcher" in faults
    assert "read does not take the environment alone" in faults
    assert any(f.startswith("TASK_VARIABLES missing") for f in faults)
    assert any(f.startswith("FALLBACK missing") for f in faults)
    assert "PREFIXES is empty and WHY_EMPTY gives no reason" in faults


def test_every_launcher_module_is_registered() -> None:
    """A module of launchers/ that declares a launcher's NAME or detect is in REGISTRY, so a
    launcher written but not registered fails here instead of never detecting anything; the
    other modules are what launchers share (base, mpi, ...)."""
    for path in sorted((ROOT / "slurmenv" / "launchers").glob("*.py")):
        if path.stem == "__init__" or path.stem in launchers.REGISTRY:
            continue
        module = launchers.load(path.stem)
        assert not hasattr(module, "detect") and not hasattr(module, "NAME"), (
            f"slurmenv/launchers/{path.name} is a launcher module not in REGISTRY")


def test_registry_order_on_overlapping_signals() -> None:
    step = synth.step_env(HOSTS, [2, 2, 2, 2], 5)
    # torchrun's workers inside an srun task: torchrun's values win
    assert launcher_of({**step, "TORCHELASTIC_RUN_ID": "7", **HAND}) == "torchrun"
    # the marker alone (an agent's leftover) does not make a worker
    assert launcher_of({**step, "TORCHELASTIC_RUN_ID": "7"}) == "slurm"
    # srun --mpi=pmi2 / cray_shasta tasks: PMI_*/PALS_* agree with SLURM_*: a Slurm task
    assert launcher_of({**step, "PMI_RANK": "5", "PMI_SIZE": "8", "PALS_RANKID": "5"}) == "slurm"
    # hand-set values in an srun task: Slurm's own variables describe the task better
    assert launcher_of({**step, **HAND}) == "slurm"
    # the batch script with hand-set values: refused, not taken as they are
    batch = {"SLURM_JOB_ID": "12", "SLURM_NTASKS": "8", **HAND}
    assert launcher_of(batch) == "slurm-outside-step"
    assert launcher_of(HAND) == "preset"
    assert launcher_of({}) == "local"
    interactive = {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": str(base.INTERACTIVE_STEP)}
    assert slurmenv.resolve(interactive).launcher == "slurm-interactive-step"


def test_mpi_rank_that_disagrees_with_the_step_is_not_the_steps_task() -> None:
    # An MPI rank that inherited an srun task's SLURM_* (e.g. mpiexec inside srun): never
    # take SLURM_PROCID as its rank.
    step = synth.step_env(HOSTS, [2, 2, 2, 2], 5)
    env = {**step, "PMI_RANK": "2", "PMI_SIZE": "16"}
    assert not base.slurm_step_is_own(env)
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(env)
    assert info.value.variable == "PMI_RANK" and info.value.value == "2"


_NAMES = sorted(
    {n for m in launchers.modules() for n in m.VARIABLES}
    | {n for signals in launchers.SIGNALS.values() for n in signals}
    | {"SLURM_JOB_ID", "SLURM_STEP_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
)


@given(st.dictionaries(st.sampled_from(_NAMES), st.sampled_from(["0", "1", "7", "", "x"])))
@settings(max_examples=300, deadline=None)
def test_signals_are_necessary_for_detection(env: dict[str, str]) -> None:
    # A module skipped for want of its signal would never have detected the task.
    for name, signals in launchers.SIGNALS.items():
        if launchers.load(name).detect(env):
            assert any(env.get(s) for s in signals), name


def test_a_step_task_imports_no_other_launcher() -> None:
    env = {**synth.clean_env(PYTHONPATH=str(ROOT)), **synth.step_env(HOSTS, [2, 2, 2, 2], 5)}
    code = (
        "import sys\n"
        "from slurmenv.commands.main import main\n"
        "main(['export', '--for', 'torch'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('slurmenv.launchers.')), "
        "file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stderr.strip().splitlines()[-1] == (
        "['slurmenv.launchers.base', 'slurmenv.launchers.slurm']"
    )


# -- derive: one precedence for every launcher ----------------------------------------------
def task(**changes: object) -> base.Task:
    """A task as a launcher that knows rank 0's host and a port seed would read it."""
    values: dict[str, object] = {
        "launcher": "test", "rank": 1, "local_rank": 1, "world_size": 4, "local_world_size": 2,
        "node_rank": 0, "nnodes": 2, "hostname": "a", "sources": {}, "master_host": "a",
        "master_source": "host a", "port_seed": (4242, 3), "port_seed_source": "ids",
        "reserved_ports": None, "topology": base.Topology(),
    }
    values.update(changes)
    return base.Task(**values)  # type: ignore[arg-type]


def test_port_precedence() -> None:
    opts = Options()
    formula = slurmenv.ports.block_ports(4242, 3, opts.port_range, 2).master
    assert pipeline.port_plan(task(), {}, opts, None).master == formula
    reserved = task(reserved_ports=("SLURM_STEP_RESV_PORTS", "12000-12002"))
    assert pipeline.port_plan(reserved, {}, opts, None).master == 12000
    inherited = {"MASTER_PORT": "23456"}
    assert pipeline.port_plan(reserved, inherited, opts, None).master == 23456
    assert pipeline.port_plan(reserved, inherited, Options(port=20000), None).master == 20000
    fixed = task(fixed={"MASTER_PORT": "29500"})
    assert pipeline.port_plan(fixed, inherited, Options(port=20000), None).master == 29500
    with pytest.raises(SlurmEnvError) as info:
        pipeline.port_plan(task(port_seed=None, port_seed_source="no job id here"), {}, opts, None)
    assert info.value.variable == "MASTER_PORT" and "--port" in str(info.value.fix)
    with pytest.raises(SlurmEnvError) as info:  # never in the ephemeral range
        pipeline.port_plan(task(), {}, Options(port=40000), (32768, 60999))
    assert info.value.variable == "--port" and "below 32768" in str(info.value.fix)


def test_address_precedence() -> None:
    assert pipeline.address(task(), Options()) == ("a", "host a")
    templated = pipeline.address(task(), Options(addr_template="{host}-ib"))
    assert templated[0] == "a-ib" and "template" in templated[1]
    # the master_addr option (options table: --master-addr) wins over the launcher's host,
    # with no template applied to it
    given = SimpleNamespace(**{**Options(addr_template="{host}-ib")._asdict(),
                               "master_addr": "10.0.0.1"})
    assert pipeline.address(task(), given)[0] == "10.0.0.1"  # type: ignore[arg-type]
    assert pipeline.address(task(fixed={"MASTER_ADDR": "w0"}), Options())[0] == "w0"
    with pytest.raises(SlurmEnvError) as info:
        pipeline.address(task(master_host=None, master_source="no variable names it"), Options())
    assert info.value.variable == "MASTER_ADDR" and "--master-addr" in str(info.value.fix)


def test_bindings_left_alone_when_the_slurm_variables_are_not_the_tasks() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_CPUS_PER_TASK": "4"}
    mine = pipeline.derive(task(), env, Options(bind_gpus=True), None)
    assert mine.bindings.get("OMP_NUM_THREADS") == "4"
    assert mine.bindings.get("CUDA_VISIBLE_DEVICES") == "1"
    other = pipeline.derive(task(own_bindings=False), env, Options(bind_gpus=True), None)
    assert dict(other.bindings) == {} and any("left alone" in n for n in other.notes)


def test_every_task_field_is_carried_or_consumed() -> None:
    # pipeline.CARRIED is the one mapping from a Task to its Resolution: a new Task field must be
    # named there (carried as it is) or in pipeline.CONSUMED (turned into something else)
    carried, consumed = set(pipeline.CARRIED), set(pipeline.CONSUMED)
    assert not carried & consumed
    assert carried | consumed == set(base.Task._fields)
    # what Resolution() takes by name: its public attributes and its named parameters
    accepted = {name for name in slurmenv.Resolution.__slots__ if not name.startswith("_")}
    accepted |= set(inspect.signature(slurmenv.Resolution).parameters) - {"fields"}
    assert carried <= accepted, carried - accepted


def test_resolution_carries_the_tasks_fields() -> None:
    class Shape(base.Topology):
        tasks_per_node = "2(x2)"

    shape = Shape()
    values = {
        "launcher": "carried", "rank": 3, "local_rank": 1, "world_size": 4,
        "local_world_size": 2, "node_rank": 1, "nnodes": 2, "hostname": "b", "topology": shape,
        "job_id": "77", "step_id": "5", "fixed": {"TF_CONFIG": "{}"}, "origin": "a test task",
        "origin_fix": "none needed", "label": "test label", "in_worker": True, "unknown": (),
    }
    assert set(values) == set(pipeline.CARRIED)
    res = pipeline.derive(task(**values), {}, Options(), None)
    for name, value in values.items():
        if name == "topology":
            assert res.tasks_per_node == "2(x2)"
        else:
            assert getattr(res, name) == value, name
    unknown = ("NODE_RANK", "GROUP_RANK", "NNODES")
    res = pipeline.derive(task(unknown=unknown), {}, Options(), None)
    assert res.unknown == unknown
    assert pipeline.derive(task(label=""), {}, Options(), None).label == "test"  # the launcher


def test_the_test_only_launcher_meets_the_contract() -> None:
    # tests/awsbatch_launcher.py, written to docs/design.md's recipe (test_fail_closed.py
    # registers it): the recipe's fields are the contract's
    import awsbatch_launcher

    assert contract_faults(awsbatch_launcher) == []


# -- the explicit launcher choice (--launcher, SLURMENV_LAUNCHER, launcher=) -------------------
def test_an_explicit_launcher_settles_an_overlap() -> None:
    step = synth.step_env(HOSTS, [2, 2, 2, 2], 5)
    own = slurmenv.resolve(step, ephemeral_range=None)
    worker = {**step, "TORCHELASTIC_RUN_ID": "7", "MASTER_PORT": "29500",
              **{name: str(value) for name, value in own.env("torch").items()
                 if name != "MASTER_PORT"}}
    assert slurmenv.resolve(worker, ephemeral_range=None).launcher == "torchrun"
    chosen = slurmenv.resolve(worker, ephemeral_range=None, launcher="slurm")
    assert (chosen.launcher, chosen.rank, chosen.world_size) == ("slurm", 5, 8)
    by_variable = slurmenv.resolve({**worker, "SLURMENV_LAUNCHER": "slurm"}, ephemeral_range=None)
    assert by_variable.launcher == "slurm"
    # the keyword wins over the variable, as for every option
    assert slurmenv.resolve({**worker, "SLURMENV_LAUNCHER": "slurm"}, ephemeral_range=None,
                            launcher="torchrun").launcher == "torchrun"


def test_an_explicit_launcher_that_does_not_detect_the_task_is_refused() -> None:
    lsf = {"LSB_JOBID": "3", "LSB_HOSTS": "a a b b", "LSB_DJOB_NUMPROC": "4"}
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(lsf, step_evidence=None, launcher="lsf")
    err = info.value
    assert (err.variable, err.value) == ("SLURMENV_LAUNCHER", "lsf")
    assert "does not detect this task" in err.message and "JSM_NAMESPACE_RANK" in err.message
    assert "SLURMENV_LAUNCHER" in (err.fix or "")
    with pytest.raises(SlurmEnvError) as info:  # nothing of Slurm's here
        slurmenv.resolve({}, step_evidence=None, launcher="slurm")
    assert "none of its variables is set" in info.value.message
    # choosing the single-process default does not make a launcher's task one process
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve(synth.step_env(HOSTS, [2, 2, 2, 2], 5), step_evidence=None,
                         launcher="local")
    assert "train alone" in info.value.message


@pytest.mark.parametrize("name", ["nosuch", "base", "slurm-het", "SLURM"])
def test_an_unknown_launcher_name_is_refused_with_the_list(name: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        slurmenv.resolve({"SLURMENV_LAUNCHER": name}, step_evidence=None)
    assert (info.value.variable, info.value.value) == ("SLURMENV_LAUNCHER", name)
    assert all(registered in (info.value.fix or "") for registered in launchers.REGISTRY)


def test_every_registered_launcher_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    # the choices are the registry's names, a launcher added to it included
    import awsbatch_launcher

    awsbatch_launcher.register(monkeypatch)
    env = {"AWS_BATCH_JOB_NODE_INDEX": "0", "AWS_BATCH_JOB_NUM_NODES": "2",
           "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.7", "SLURMENV_PORT": "29500"}
    assert slurmenv.resolve(env, launcher="awsbatch", ephemeral_range=None).rank == 0
    for name in launchers.REGISTRY:
        assert Options(launcher=name).launcher == name
        assert slurmenv.options.from_environ({"SLURMENV_LAUNCHER": name}).launcher == name
