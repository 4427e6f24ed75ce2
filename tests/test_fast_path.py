"""The export path: ``slurmenv export``/``exec`` parse common command lines without argparse,
and must then mean exactly what argparse would; the path imports nothing heavy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmenv.commands import main as cli

ROOT = Path(__file__).resolve().parent.parent


def argparse_result(argv: list[str]) -> dict[str, object] | None:
    """What argparse gives, or None when it refuses the command line."""
    try:
        return normal(vars(cli.build_parser().parse_args(argv)))
    except SystemExit:
        return None


def normal(values: dict[str, object]) -> dict[str, object]:
    """exec's command without a leading ``--`` (cmd_exec drops it; Python versions differ on
    whether argparse keeps it in a REMAINDER argument)."""
    command = values.get("argv")
    if isinstance(command, list) and command[:1] == ["--"]:
        values = {**values, "argv": command[1:]}
    return values


@pytest.mark.parametrize(
    "argv",
    [
        ["export"],
        ["export", "--for", "torch"],
        ["export", "--for=tf"],
        ["export", "--shell", "fish", "--for", "all"],
        ["export", "--format=json"],
        ["export", "--port", "12345", "--port-range=10000-20000"],
        ["export", "--addr-template", "{host}-ib", "--resolve-addr", "--tf-chief"],
        ["export", "--bind-gpus", "--no-bind-gpus", "--threads", "--no-threads"],
        ["export", "--master-addr", "10.0.0.1", "--for=torch"],
        ["exec", "--master-addr=n1", "--", "python", "train.py"],
        ["export", "--for", "torch", "--for", "tf"],  # the last one wins
        ["exec", "--", "python", "train.py"],
        ["exec", "python", "-c", "pass"],
        ["exec", "--for", "torch", "--", "a", "--for", "b"],
        ["exec", "--no-threads", "cmd", "--port", "1"],
        ["exec"],
    ],
)
def test_fast_path_taken_and_same_as_argparse(argv: list[str]) -> None:
    fast = cli._fast_args(argv)
    assert fast is not None, "the common command line should not need argparse"
    assert normal(vars(fast)) == argparse_result(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--fo", "torch"],  # abbreviation: argparse's business (here: ambiguous)
        ["export", "--for", "bogus"],
        ["export", "--for"],
        ["export", "-h"],
        ["export", "--help"],
        ["export", "stray"],
        ["export", "--tf-chief=1"],
        ["export", "--port", "-1"],
        ["export", "--port="],
        ["exec", "--port"],
        ["show"],
        [],
        ["--version"],
    ],
)
def test_anything_else_goes_to_argparse(argv: list[str]) -> None:
    assert cli._fast_args(argv) is None


VOCABULARY = [
    "--for", "torch", "tf", "all", "torchrun", "--for=torch", "--shell", "bash", "fish",
    "--format", "json", "dotenv", "--port", "12000", "--port-range", "10000-20000",
    "--addr-template", "{host}-ib", "--resolve-addr", "--tf-chief", "--bind-gpus",
    "--no-bind-gpus", "--threads", "--no-threads", "--", "python", "-c", "-h", "--fo", "x=1",
    "--port=1", "--shell=zsh", "--format=xml", "", "--master-addr", "n1", "--master-addr=",
    "--preflight", "--step-timeout", "5", "--step-timeout=2", "--preflight=1",
]  # fmt: skip


@given(st.sampled_from(["export", "exec"]), st.lists(st.sampled_from(VOCABULARY), max_size=7))
@settings(max_examples=300, deadline=None)
def test_fast_path_never_disagrees_with_argparse(command: str, rest: list[str]) -> None:
    argv = [command, *rest]
    fast = cli._fast_args(argv)
    if fast is not None:
        assert normal(vars(fast)) == argparse_result(argv)


def test_every_export_and_exec_option_is_understood() -> None:
    # An option of a kind the fast path does not handle would send every task to argparse:
    # correct, but slow. Then teach options.parse_leading about it.
    for command in ("export", "exec"):
        assert cli._fast_args([command]) is not None, command


def test_export_path_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)  # what the interpreter (and its site hooks) loaded\n"
        "from slurmenv.commands.main import main\n"
        "main(['export', '--for', 'torch'])\n"
        "heavy = {'argparse', 'json', 'socket', 'psutil', 'torch', 'tensorflow', 'jax', "
        "'string', 'subprocess', 'tempfile', 'typing', 'collections.abc', 'select'}\n"
        "print(sorted(heavy & (set(sys.modules) - before)), file=sys.stderr)\n"
    )
    env = {
        "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SLURM_JOB_ID": "77",
        "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[0000-4095]",
        "SLURM_STEP_NUM_NODES": "4096", "SLURM_STEP_NUM_TASKS": "4096",
        "SLURM_STEP_TASKS_PER_NODE": "1(x4096)", "SLURM_PROCID": "5", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "5", "SLURM_GTIDS": "5", "SLURMD_NODENAME": "n0005",
    }  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert "export MASTER_ADDR='n0000';" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("flag", ["-S", "-I"])
def test_export_path_imports_nothing_heavy_in_a_bare_interpreter(flag: str) -> None:
    # Site hooks (.pth files) load typing and more before slurmenv starts, which hides them
    # from the test above: -S starts without site, so there nothing heavy is loaded before;
    # -I (no user site, no PYTHON* variables) is how a console script may well start.
    import hostlist

    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {os.path.dirname(hostlist.__file__)!r}]\n"
        "before = set(sys.modules)\n"
        "from slurmenv.commands.main import main\n"
        "main(['export', '--for', 'torch'])\n"
        "heavy = {'typing', 'dataclasses', 'argparse', 'json', 'socket', 'psutil', 'string', "
        "'subprocess', 'tempfile', 'textwrap', 'inspect', 'collections.abc', 'select'}\n"
        "print(sorted(heavy & (set(sys.modules) - before)), file=sys.stderr)\n"
    )
    env = {
        "PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": "n[0000-0007]", "SLURM_STEP_NUM_NODES": "8",
        "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_TASKS_PER_NODE": "1(x8)", "SLURM_PROCID": "5",
        "SLURM_LOCALID": "0", "SLURM_NODEID": "5", "SLURM_GTIDS": "5", "SLURMD_NODENAME": "n0005",
    }  # fmt: skip
    out = subprocess.run([sys.executable, flag, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert "export RANK='5';" in out.stdout  # a step task, not the local fallback
    assert out.stderr.strip().splitlines()[-1] == "[]"


_JSON = st.recursive(
    st.one_of(st.text(), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False)),
    lambda inner: st.one_of(st.lists(inner), st.dictionaries(st.text(), inner)),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), _JSON))
@settings(max_examples=200, deadline=None)
def test_tf_config_encoding_is_jsons(config: dict[str, object]) -> None:
    # tfconfig encodes without importing json (export's path); it must be byte for byte
    # json.dumps(..., separators=(",", ":")), escapes and all.
    import json

    from slurmenv import tfconfig

    assert tfconfig.dumps(config, check_size=False) == json.dumps(config, separators=(",", ":"))


@given(st.lists(st.text(alphabet='n0:."\\\x7f\x1f é', max_size=4), max_size=4),
       st.text(alphabet='t:"\\\x00é', max_size=3))
@settings(max_examples=500, deadline=None)
def test_worker_lists_are_encoded_as_json_does(workers: list[str], key: str) -> None:
    # Lists of strings take tfconfig's plain path (one check of all the strings, no _json)
    # unless a string needs escaping: both must be json.dumps's bytes.
    import json

    from slurmenv import tfconfig

    for config in ({"cluster": {"worker": workers}}, {key: workers, "k": [key, *workers]}):
        assert tfconfig.dumps(config, check_size=False) == json.dumps(config, separators=(",", ":"))


@given(st.text(alphabet=" \t\n*?[(')$\\\"ab", max_size=12))
@settings(max_examples=1000, deadline=None)
def test_sh_words_replace_each_character_once(value: str) -> None:
    # render.sh_word replaces the characters unquoted eval would split or expand one after
    # the other, without a regular expression (export's path); the result must be a single
    # pass's: each character of the quoted value replaced once, replacements left alone.
    import re

    from slurmenv import render

    chars = "".join(render._SPLIT_SAFE)
    once = re.sub("[" + re.escape(chars) + "]", lambda m: render._SPLIT_SAFE[m.group()],
                  render.sh_quote(value))
    assert render.sh_word(value) == once
    # and so: no replacement holds a character replaced after it
    for i, safe in enumerate(render._SPLIT_SAFE.values()):
        assert not set(safe) & set(chars[i + 1:]), safe


@given(st.lists(st.integers(-5, 30)), st.integers(-10, 40))
@settings(max_examples=500, deadline=None)
def test_bisect_without_the_extension(values: list[int], x: int) -> None:
    import bisect

    from slurmenv.lean import bisect_right

    values.sort()
    assert bisect_right(values, x) == bisect.bisect_right(values, x)


def test_named_tuple_without_typing_behaves_like_typings() -> None:
    import pickle
    import typing

    from slurmenv import layout, options, ports
    from slurmenv import lean as _compat

    def make(base: type) -> type:
        class Point(base):  # type: ignore[valid-type,misc]
            """A point."""

            x: int
            y: int = 0

            def norm(self) -> int:
                return abs(self.x) + abs(self.y)

        return Point

    ours, theirs = make(_compat.NamedTuple), make(typing.NamedTuple)
    for cls in (ours, theirs):
        p = cls(3, y=-4)
        assert isinstance(p, tuple) and tuple(p) == (3, -4) and p.norm() == 7
        assert cls._fields == ("x", "y") and cls._field_defaults == {"y": 0}
        assert cls(1) == (1, 0) and p._replace(x=0) == (0, -4) and p._asdict() == {"x": 3, "y": -4}
        assert cls.__doc__ == "A point." and repr(p) == "Point(x=3, y=-4)"
        assert cls._make([5, 6]) == (5, 6) and cls.__match_args__ == ("x", "y")
        assert hash(p) == hash((3, -4)) and p.x == 3 and p[1] == -4
        for bad_args, bad_kwargs in (((), {}), ((1, 2, 3), {}), ((1,), {"x": 2}), ((1,), {"z": 0})):
            with pytest.raises(TypeError):
                cls(*bad_args, **bad_kwargs)
        with pytest.raises(ValueError):
            p._replace(z=1)
        with pytest.raises(AttributeError):
            p.x = 1  # type: ignore[misc]
    # the real ones pickle (by qualified name) and keep their methods
    for value in (options.Options(port=12000), ports.Ports(1, [2], "s"),
                  layout.Distribution("plane", 2, "x")):
        assert pickle.loads(pickle.dumps(value)) == value
    assert layout.Placement([0, 1, 0], [0, 0, 1]).ranks_on(0) == [0, 2]


def test_export_path_imports_nothing_heavy_without_site() -> None:
    # The test above cannot see modules the interpreter's site hooks load first (typing, for
    # one, via .pth files). With -S nothing is loaded before slurmenv: every banned module
    # found in sys.modules afterwards was imported by the export of a Slurm step task (not the
    # single-process fallback, which needs socket). python-hostlist comes from its directory
    # on PYTHONPATH, since -S also drops site-packages.
    import os

    import hostlist

    code = (
        "import sys\n"
        "assert sys.flags.no_site\n"
        "from slurmenv.commands.main import main\n"
        "main(['export'])\n"
        "import slurmenv.launchers as l\n"
        "print(l.detect(__import__('os').environ).NAME, file=sys.stderr)\n"
        "banned = {'typing', 'dataclasses', 'argparse', 'json', 'socket', 'psutil', 'torch', "
        "'tensorflow', 'jax', 'string', 'subprocess', 'tempfile', 'threading', "
        # TF_CONFIG's plain strings are quoted without json's extension module
        "'_json'}\n"
        "print(sorted(banned & set(sys.modules)), file=sys.stderr)\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.path.dirname(hostlist.__file__)]),
        "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[0000-4095]",
        "SLURM_STEP_NUM_NODES": "4096", "SLURM_STEP_NUM_TASKS": "4096",
        "SLURM_STEP_TASKS_PER_NODE": "1(x4096)", "SLURM_PROCID": "5", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "5", "SLURM_GTIDS": "5", "SLURMD_NODENAME": "n0005",
    }  # fmt: skip
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert "export MASTER_ADDR='n0000';" in out.stdout and "TF_CONFIG=" in out.stdout
    *_, launcher, found = out.stderr.strip().splitlines()
    assert launcher == "slurm"
    assert found == "[]"
