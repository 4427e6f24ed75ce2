"""The helpers every launcher's ``read`` shares (``slurmenv/launchers/base.py``): the strict
number reader, the "A must agree with B" refusal, the node sources and the hashed text ID; and
that the launchers use them instead of copies of their own."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmenv import launchers, ports
from slurmenv.errors import MAX_DIGITS, SlurmEnvError
from slurmenv.launchers import base

FOLDER = Path(__file__).resolve().parent.parent / "slurmenv" / "launchers"
FIX = "the launcher sets it in every task"


# -- read_int / optional_int -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "minimum", "expected"),
    [("0", 0, 0), ("7", 0, 7), ("70", 0, 70), ("1", 1, 1),
     ("9" * MAX_DIGITS, 0, int("9" * MAX_DIGITS))],
)  # fmt: skip
def test_read_int_reads_whole_numbers(text: str, minimum: int, expected: int) -> None:
    assert base.read_int({"N": text}, "N", FIX, minimum=minimum) == expected
    assert base.optional_int({"N": text}, "N", FIX, minimum=minimum) == expected


@pytest.mark.parametrize(
    ("text", "minimum", "said"),
    [("x", 0, "not a whole number"), ("+4", 0, "not a whole number"),
     ("-1", 0, "not a whole number"), ("4.0", 0, "not a whole number"),
     ("\u0664", 0, "not a whole number"),  # Arabic-Indic four: int() would take it
     ("\u00b2", 0, "not a whole number"),  # superscript two: str.isdigit() would take it
     ("1 2", 0, "not a whole number"), ("9" * (MAX_DIGITS + 1), 0, f"more than {MAX_DIGITS} digits"),
     (" 7", 0, "not a whole number"), ("7\n", 0, "not a whole number"),
     (" 7\n", 0, "not a whole number"), ("007", 0, "leading zero"), ("01", 0, "leading zero"),
     ("00", 0, "leading zero"),
     ("0", 1, "must be at least 1")],
)  # fmt: skip
def test_read_int_refuses_naming_variable_value_and_fix(text: str, minimum: int, said: str) -> None:
    for reader in (base.read_int, base.optional_int):
        with pytest.raises(SlurmEnvError) as info:
            reader({"N": text}, "N", FIX, minimum=minimum)
        assert (info.value.variable, info.value.value, info.value.fix) == ("N", text, FIX)
        assert said in info.value.message and info.value.message.startswith("N ")


@pytest.mark.parametrize("env", [{}, {"N": ""}])
def test_read_int_refuses_unset_and_optional_int_gives_none(env: dict[str, str]) -> None:
    with pytest.raises(SlurmEnvError) as info:
        base.read_int(env, "N", FIX)
    assert (info.value.variable, info.value.value, info.value.fix) == ("N", env.get("N"), FIX)
    assert info.value.message == "N is not set"
    assert base.optional_int(env, "N", FIX) is None


@given(st.text(max_size=25), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_read_int_takes_exactly_ascii_digits(text: str, minimum: int) -> None:
    # as Slurm writes numbers: ASCII digits only, no blank, sign or leading zero
    good = (0 < len(text) <= MAX_DIGITS and all(c in "0123456789" for c in text)
            and (text == "0" or not text.startswith("0")))
    try:
        value = base.read_int({"N": text}, "N", FIX, minimum=minimum)
    except SlurmEnvError as exc:
        assert (exc.variable, exc.value, exc.fix) == ("N", text, FIX)
        assert not good or int(text) < minimum
    else:
        assert good and value == int(text) >= minimum


# -- agree -------------------------------------------------------------------------------------
def test_agree_passes_equal_values_and_unset_sides() -> None:
    base.agree("PMI_RANK", 3, "FLUX_TASK_RANK", 3, FIX)
    base.agree("PMI_RANK", None, "FLUX_TASK_RANK", 3, FIX)  # PMI_RANK not set
    base.agree("RANK", 3, "PET_NODE_RANK", None, FIX)  # PET_NODE_RANK not set


def test_agree_names_both_variables_both_values_and_the_fix() -> None:
    with pytest.raises(SlurmEnvError) as info:
        base.agree("PMI_RANK", 2, "FLUX_TASK_RANK", 3, FIX)
    err = info.value
    assert (err.variable, err.value, err.fix) == ("PMI_RANK", "2", FIX)
    assert err.message == "PMI_RANK=2 but FLUX_TASK_RANK=3"
    with pytest.raises(SlurmEnvError) as info:
        base.agree("RANK", 2, "PET_NODE_RANK", 1, FIX, "the pod's index")
    assert info.value.message == "RANK=2 but PET_NODE_RANK=1 (the pod's index)"
    # what tells the expected value is a file, not a variable: said so in words
    with pytest.raises(SlurmEnvError) as info:
        base.agree("PALS_NODEID", 0, "the node index of rank 4 in the apinfo file", 1, FIX)
    assert info.value.message == "PALS_NODEID=0 but the node index of rank 4 in the apinfo file is 1"
    assert info.value.variable == "PALS_NODEID" and info.value.value == "0"


def test_launchers_refuse_disagreeing_variables_through_agree() -> None:
    # LSF used to say "jsrun's JSM_NAMESPACE_* say 4" without naming which one
    lsf = launchers.load("lsf")
    env = {"JSM_NAMESPACE_RANK": "4", "JSM_NAMESPACE_SIZE": "8", "JSM_NAMESPACE_LOCAL_RANK": "0",
           "JSM_NAMESPACE_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}  # fmt: skip
    with pytest.raises(SlurmEnvError) as info:
        lsf.read(env)
    assert info.value.message == "OMPI_COMM_WORLD_LOCAL_SIZE=2 but JSM_NAMESPACE_LOCAL_SIZE=4"
    # PALS used to say "PMI_RANK=5 but PALS_RANKID=6 says 6"
    with pytest.raises(SlurmEnvError) as info:
        launchers.load("pals").read({"PALS_RANKID": "6", "PMI_RANK": "5"})
    assert info.value.message == "PMI_RANK=5 but PALS_RANKID=6"
    # the hand-set GROUP_RANK and NODE_RANK are compared as numbers
    hand = {"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "h0", "MASTER_PORT": "29500",
            "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NNODES": "4"}  # fmt: skip
    preset = launchers.load("preset")
    assert preset.read({**hand, "NODE_RANK": "1", "GROUP_RANK": "1"}).node_rank == 1
    with pytest.raises(SlurmEnvError) as info:  # read strictly: no leading zero
        preset.read({**hand, "NODE_RANK": "1", "GROUP_RANK": "01"})
    assert (info.value.variable, info.value.value) == ("GROUP_RANK", "01")
    with pytest.raises(SlurmEnvError) as info:
        preset.read({**hand, "NODE_RANK": "1", "GROUP_RANK": "2"})
    assert (info.value.variable, info.value.message) == ("NODE_RANK", "NODE_RANK=1 but GROUP_RANK=2")


# -- node_sources ------------------------------------------------------------------------------
def test_node_sources_give_group_rank_the_node_ranks_sentence() -> None:
    assert base.node_sources("SLURM_NODEID=1", "SLURM_STEP_NUM_NODES=2") == {
        "NODE_RANK": "SLURM_NODEID=1", "GROUP_RANK": "SLURM_NODEID=1",
        "NNODES": "SLURM_STEP_NUM_NODES=2",
    }


def test_no_launcher_writes_group_ranks_source_itself() -> None:
    # GROUP_RANK's sentence is NODE_RANK's: written by base.node_sources only
    for path in sorted(FOLDER.glob("*.py")):
        if path.name == "base.py":
            continue
        text = path.read_text()
        assert not re.search(r"[\"']GROUP_RANK[\"']\s*:|\bGROUP_RANK\s*=", text), path.name


def test_every_launcher_gives_group_rank_node_ranks_source() -> None:
    import synth

    step = synth.step_env(["n1", "n2"], [2, 2], 3)
    hand = {"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "h0", "MASTER_PORT": "29500",
            "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1", "NNODES": "4"}  # fmt: skip
    hydra = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    for env in (step, hand, {}, hydra):
        task = launchers.detect(env).read(env)
        assert task.sources["GROUP_RANK"] == task.sources["NODE_RANK"], task.launcher


# -- hashed_id ---------------------------------------------------------------------------------
def test_hashed_id_is_the_stable_hash_with_its_sentence() -> None:
    assert base.hashed_id("PALS_APID", "a") == (0xE40C292C, "PALS_APID=a hashed")  # FNV-1a 32
    number, sentence = base.hashed_id("FLUX_JOB_ID", "ƒ2ZGz")
    assert number == ports.stable_hash("ƒ2ZGz") and sentence == "FLUX_JOB_ID=ƒ2ZGz hashed"
    assert base.hashed_id("X", "a1")[0] != base.hashed_id("X", "a2")[0]


def test_text_launch_ids_seed_the_port_through_hashed_id() -> None:
    for module in ("flux", "pals", "openmpi"):
        text = (FOLDER / f"{module}.py").read_text()
        assert "hashed_id(" in text and "stable_hash(" not in text, module


# -- the interface ----------------------------------------------------------------------------
def test_read_takes_the_environment_only() -> None:
    # options never reach a launcher: derive applies them to the Task
    for module in launchers.modules():
        assert list(inspect.signature(module.read).parameters) == ["environ"], module.NAME
        assert "Options" not in (FOLDER / f"{module.__name__.rpartition('.')[2]}.py").read_text()
