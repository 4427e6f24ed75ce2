"""No internal error for any input (issue 26): a property test over the environment.

Random and hostile values for every variable slurmenv reads (each registered launcher's
``VARIABLES``, the ``SLURMENV_*`` options, the rank-like variables), on top of valid task
environments of several launchers. For ``export``, ``show``, ``doctor`` (on recorded node
facts: no network), ``dump --probe`` (in process, into a temporary directory) and the task
prolog, the outcome is either a complete environment or a clean refusal: exit status 1, a
message naming a variable, no traceback and no "internal error".
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError, launchers, options, render
from slurmenv.commands import main as cli
from slurmenv.commands import taskprolog
from slurmenv.doctor import diagnose

DUMPS = pathlib.Path(__file__).parent / "dumps"
FACTS = json.loads((DUMPS / "healthy-rank0.json").read_text())["probe"]
HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]

#: Every variable slurmenv reads: the launchers' own, the options', the rank-like ones.
NAMES = sorted(
    {name for module in launchers.modules() for name in module.VARIABLES}
    | {row.variable for row in options.TABLE}
    | set(render.RANK_FIELDS) | {"MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", options.FOR_VARIABLE}
)

BASES: list[dict[str, str]] = [
    synth.step_env(HOSTS, [2, 2, 2, 2], 3),
    synth.step_env(HOSTS, [3, 1, 2, 2], 0, distribution="cyclic", SLURM_STEP_RESV_PORTS="12000-12004"),
    {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "1",
     "NNODES": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "23456"},
    {"TORCHELASTIC_RUN_ID": "r", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
     "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2", "NODE_RANK": "0",
     "NNODES": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"},
    {},
    json.loads((DUMPS / "healthy-rank5.json").read_text())["environ"],
]

HOSTILE = [
    "", " ", " 1", "1 ", "01", "1\n", "+1", "-1", "0", "1", "2", "7", "4294967290", "4294967294",
    "99999999999999999999999", "x" * 64, "a..b", "a;b", "$HOME", "*", "{host}", "{host} x",
    "{host};id", "{host}." + "x" * 64, "{host}-ib", "n[1-3]", "r1n[09-10]", "n[1-100000]",
    "2(x3)", "2(x0)", "1,0", "0,1", "0, 1", "é", "\udcff", "c[1-1000]", "yes", "TRUE", "Yes", "no",
    "block", "cyclic", "plane=2", "arbitrary", "/proc/self/environ", "/dev/zero", "12000-12003",
    "20000-30000", "29500", "fd00::1", "[::1]", "10.0.0.1", "torch", "tf", "all", "jax",
    "1" * 131_072, "a" * 131_072, "0," * 65_535 + "1", "{host}" + "x" * 120_000,
]
VALUES = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12),
    st.integers(0, 70000).map(str),
)
MUTATIONS = st.lists(st.tuples(st.sampled_from(NAMES), st.one_of(st.none(), VALUES)),
                     min_size=1, max_size=5)
SETTINGS = settings(max_examples=int(os.environ.get("SLURMENV_HOSTILE_EXAMPLES", "60")),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def mutated(base: int, changes: list[tuple[str, str | None]]) -> dict[str, str]:
    env = dict(BASES[base])
    for name, value in changes:
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` holding ``env`` (plus PATH) only, for the duration."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({"PATH": saved.get("PATH", "/usr/bin:/bin"), **env})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(argv)
        except SystemExit as exc:  # a usage error (argparse) exits 2
            status = exc.code if isinstance(exc.code, int) else 1
    return status, out.getvalue(), err.getvalue()


def clean(what: str, status: int, out: str, err: str) -> None:
    text = out + err
    assert "Traceback" not in text and "internal error" not in text.lower(), (what, text[-3000:])
    assert "this is a bug" not in text.lower(), (what, text[-3000:])
    assert status in (0, 1), (what, status, text[-3000:])
    if status == 1:
        assert "variable:" in text or "error" in text, (what, text[-3000:])  # doctor: stdout


def outcome_of(env: Mapping[str, str]) -> str | None:
    """None when the resolution is complete, else the variable it refuses."""
    import slurmenv

    try:
        slurmenv.resolve(env).env(options.outputs(env))
    except SlurmEnvError as exc:
        assert exc.message and "\n" not in exc.message.strip() or exc.variable
        return exc.variable or "?"
    return None


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMENV_DEBUG", raising=False)


@given(base=st.integers(0, len(BASES) - 1), changes=MUTATIONS)
@SETTINGS
def test_export_and_show_refuse_cleanly_or_give_everything(
    base: int, changes: list[tuple[str, str | None]]
) -> None:
    env = mutated(base, changes)
    with environment(env):
        try:
            refused = outcome_of(os.environ)
        except Exception as exc:  # noqa: BLE001 - the property: nothing else is raised
            pytest.fail(f"resolve raised {type(exc).__name__}: {exc!r} for {changes!r}")
        status, out, err = run_main(["export"])
        clean("export", status, out, err)
        assert (status == 0) == (refused is None), (status, refused, err[-2000:])
        if status == 0:
            assert "export RANK=" in out and "export MASTER_ADDR=" in out or \
                options.outputs(os.environ) not in ("all", "torch")
        else:
            assert "export " not in out.replace("exit 1", "")
        for argv in (["show"], ["show", "--json"], ["export", "--format", "json"]):
            clean(" ".join(argv), *run_main(argv))


@given(base=st.integers(0, len(BASES) - 1), changes=MUTATIONS)
@SETTINGS
def test_doctor_and_the_task_prolog_never_fail_inside(
    base: int, changes: list[tuple[str, str | None]]
) -> None:
    env = mutated(base, changes)
    with environment(env):
        try:
            report = diagnose(os.environ, {}, ephemeral=(32768, 60999), facts=FACTS)
        except SlurmEnvError:
            pass  # a refusal of the doctor's own options
        except Exception as exc:  # noqa: BLE001 - the property: nothing else is raised
            pytest.fail(f"doctor raised {type(exc).__name__}: {exc!r} for {changes!r}")
        else:
            assert report.checks
        status, text = taskprolog.run(os.environ)
        assert status in (0, 1), (status, text)
        assert "internal error" not in text.lower() and "Traceback" not in text, text
        assert all(line.startswith(("export ", "print ")) or line == ""
                   for line in text.splitlines()), text
        if status:  # a refusal exports only the values that stop every framework
            assert all(line.endswith("=" + taskprolog.STOP_VALUE)
                       for line in text.splitlines() if line.startswith("export ")), text


@given(base=st.integers(0, len(BASES) - 1), changes=MUTATIONS)
@settings(max_examples=int(os.environ.get("SLURMENV_HOSTILE_EXAMPLES", "60")) // 3,
          deadline=None, suppress_health_check=list(HealthCheck))
def test_dump_probe_never_fails_inside(
    tmp_path_factory: pytest.TempPathFactory, base: int, changes: list[tuple[str, str | None]]
) -> None:
    # the probe looks up the master's name: here a name no resolver knows fails at once
    out_dir = tmp_path_factory.mktemp("dump")
    env = mutated(base, changes)
    with environment(env):
        status, out, err = run_main(["dump", "--probe", "-o", str(out_dir / "d.json")])
    clean("dump --probe", status, out, err)


@pytest.mark.parametrize("value", ["a..b", "x" * 64, "a." + "y" * 70])
def test_doctor_and_probe_with_an_address_idna_refuses(value: str, tmp_path: pathlib.Path) -> None:
    # issue 26: UnicodeError ("label empty or too long") from socket in doctor/probe.py
    env = {**BASES[0], "SLURMENV_MASTER_ADDR": value}
    with environment(env):
        status, out, err = run_main(["doctor"])
        clean("doctor", status, out, err)
        assert status == 1 and "SLURMENV_MASTER_ADDR" in out + err, (out, err)
        # dump records the refusal in the file it writes (and says so)
        status, out, err = run_main(["dump", "--probe", "-o", str(tmp_path / "d.json")])
        clean("dump", status, out, err)
        assert status == 0 and "error recorded" in err
        assert "SLURMENV_MASTER_ADDR" in (tmp_path / "d.json").read_text()
    hosts = ["n" * 64, "m1"]  # rank 0's node name over 63 characters
    with environment(synth.step_env(hosts, [1, 1], 1)):
        status, out, err = run_main(["doctor"])
        clean("doctor", status, out, err)
        assert status == 1 and "n" * 64 in out + err
    with environment({**BASES[0], "SLURMENV_ADDR_TEMPLATE": "{host}." + "z" * 64}):
        status, out, err = run_main(["doctor"])
        clean("doctor", status, out, err)
        assert status == 1 and "SLURMENV_ADDR_TEMPLATE" in out + err


def test_a_memory_error_is_a_clean_failure_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 26: after a MemoryError, cli's handler imported commandline, which failed again
    import builtins

    from slurmenv.commands import console as commandline

    real_import = builtins.__import__
    failing = {"on": False}

    def no_memory(*args: Any, **kwargs: Any) -> Any:
        if failing["on"]:
            raise MemoryError
        return real_import(*args, **kwargs)

    def exhausted(argv: list[str]) -> int:
        failing["on"] = True  # from here on, any import fails as under a memory limit
        sys.modules.pop("slurmenv.commands.console", None)
        raise MemoryError

    monkeypatch.setattr(cli, "_run", exhausted)
    monkeypatch.setattr(builtins, "__import__", no_memory)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(["export"])
    finally:
        failing["on"] = False
        sys.modules["slurmenv.commands.console"] = commandline
    assert status != 0 and "exit 1" in out.getvalue() or "false" in out.getvalue()
    assert "memory" in err.getvalue().lower()
