"""The options table (slurmenv/options.py) is the one place an option is defined: every command,
the Python API, dump, doctor, torchrun and docs/options.md follow it."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import doc_tables
import pytest
import synth

import slurmenv
from slurmenv import dump, options
from slurmenv.commands import doctor, show, torchrun
from slurmenv.commands import dump as dump_command
from slurmenv.commands import main as cli
from slurmenv.doctor.context import _PORT_VARIABLES, Context
from slurmenv.errors import SlurmEnvError
from slurmenv.options import FLAG, KINDS, TABLE

ROOT = Path(__file__).resolve().parent.parent


def field_type(row: options.Option) -> str:
    """The annotation of ``row``'s Options field: its kind's type, or None by default."""
    return row.kind.type + (" | None" if row.default is None else "")


ROWS = pytest.mark.parametrize("row", TABLE, ids=[row.field for row in TABLE])


def test_resolve_keywords_are_the_table() -> None:
    # resolve() spells its keywords out for its users (and their type checkers); they must
    # be the table's, in its order, each "not given" by default.
    params = list(inspect.signature(slurmenv.resolve).parameters.values())
    names = [p.name for p in params]
    table = names[names.index("port"):names.index("ephemeral_range")]
    assert table == [row.field for row in TABLE]
    for row in TABLE:
        param = inspect.signature(slurmenv.resolve).parameters[row.field]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is None
        assert param.annotation == row.kind.keyword, row.field


def test_options_is_the_table() -> None:
    assert options.Options._fields == tuple(row.field for row in TABLE)
    assert tuple(options.Options()) == tuple(row.default for row in TABLE)
    for row in TABLE:
        assert options.Options.__annotations__[row.field] == field_type(row), row.field
        assert row.variable == "SLURMENV_" + row.field.upper()
        assert row.flag == "--" + row.field.replace("_", "-")


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_each_kind_reads_its_samples(kind: options.Kind) -> None:
    assert len({repr(value) for _, value in kind.valid}) >= 2, "two valid values at least"
    for text, value in kind.valid:
        assert kind.parse(text, "SLURMENV_X") == value
        assert options.PARSERS[kind](text, "SLURMENV_X") == value
    assert kind.invalid, "one refused text at least"
    for text in kind.invalid:
        with pytest.raises(SlurmEnvError) as err:
            kind.parse(text, "SLURMENV_X")
        assert (err.value.variable, err.value.value, err.value.fix) == ("SLURMENV_X", text,
                                                                         kind.fix)
        assert err.value.message and "\n" not in err.value.message


def test_every_kind_has_a_row() -> None:
    assert {row.kind for row in TABLE} == set(KINDS)


def sample(row: options.Option) -> tuple[str, object, list[str]]:
    """A text for ``row`` that is not its default, its value, and the command line giving it."""
    text, value = next((t, v) for t, v in row.kind.valid if v != row.default)
    if row.kind == FLAG:
        return text, value, ["--no-" + row.flag[2:] if row.default else row.flag]
    return text, value, [row.flag, text]


@ROWS
def test_each_option_from_its_variable_keyword_and_flag(row: options.Option) -> None:
    text, value, argv = sample(row)
    assert value != row.default
    assert getattr(options.from_environ({row.variable: text}), row.field) == value
    assert getattr(options.from_environ({}, **{row.field: text}), row.field) == value
    assert getattr(options.from_environ({}, **{row.field: value}), row.field) == value
    # the keyword or flag wins over the variable
    other = next(t for t, v in row.kind.valid if v != value)
    assert getattr(options.from_environ({row.variable: other}, **{row.field: text}),
                   row.field) == value
    for parse in (lambda a: cli.build_parser().parse_args(["export", *a]),
                  lambda a: cli._fast_args(["export", *a])):
        given = options.given_in(parse(argv))
        assert given == {row.field: value if row.kind == FLAG else text}
        assert getattr(options.from_environ({row.variable: other}, **given), row.field) == value


@ROWS
def test_each_bad_value_names_the_variable_or_the_flag(row: options.Option) -> None:
    for bad in row.kind.invalid:
        with pytest.raises(SlurmEnvError) as err:
            options.from_environ({row.variable: bad})
        assert (err.value.variable, err.value.value, err.value.fix) == (row.variable, bad,
                                                                         row.kind.fix)
        # a keyword's text (a flag's on the command line has none) names the flag
        with pytest.raises(SlurmEnvError) as err:
            options.from_environ({}, **{row.field: bad})
        assert (err.value.variable, err.value.value) == (row.flag, bad)


@pytest.mark.parametrize("row", [r for r in TABLE if r.negative], ids=lambda r: r.field)
def test_a_negative_flag_overrides_its_variable(row: options.Option) -> None:
    args = cli.build_parser().parse_args(["exec", "--no-" + row.flag[2:], "cmd"])
    assert getattr(options.from_environ({row.variable: "1"}, **options.given_in(args)),
                   row.field) is False
    assert getattr(options.from_environ({row.variable: "0"}), row.field) is False


def every_flag() -> tuple[list[str], dict[str, object]]:
    """A command line giving every option, and the options it gives."""
    argv: list[str] = []
    want: dict[str, object] = {}
    for row in TABLE:
        text = row.kind.valid[0][0]
        argv += [row.flag] if row.kind == FLAG else [f"{row.flag}={text}"]
        want[row.field] = True if row.kind == FLAG else text
    return argv, want


@pytest.mark.parametrize("module", [show, doctor, dump_command], ids=["show", "doctor", "dump"])
def test_show_doctor_dump_take_and_record_every_option(module: ModuleType) -> None:
    argv, want = every_flag()
    assert options.given_in(module.build_parser().parse_args(argv)) == want


def test_dump_records_the_options_it_was_given_and_replays_them(tmp_path: Path) -> None:
    env = synth.step_env(["n1", "n2"], [1, 1], 1)
    args = dump_command.build_parser().parse_args(["--port-range=20000-30000", "--master-addr=n1"])
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump.collect(env, options=options.given_in(args))))
    recorded = dump.load(str(path))
    assert recorded.options == {"port_range": "20000-30000", "master_addr": "n1"}
    res = recorded.resolve()
    assert res.master_port == slurmenv.resolve(env, port_range="20000-30000",
                                               ephemeral_range=None).master_port


def test_doctor_files_every_option_error_under_options() -> None:
    for row in TABLE:
        if row.field == "resolve_addr":
            continue  # doctor resolves without DNS whatever is asked (it looks names up itself)
        env = {**synth.step_env(["n1", "n2"], [1, 1], 0), row.variable: row.kind.invalid[0]}
        err = doctor.resolve_for_doctor(env, {})[1]
        assert err is not None and err.variable == row.variable
        category = Context(env, {}, None, err, None, None, "all").err_category()
        # a port variable is filed with the ports (it is one), every other under options
        assert category == ("ports" if row.variable in _PORT_VARIABLES else "options")


def test_torchrun_takes_the_rows_marked_torchrun() -> None:
    rows = [row for row in TABLE if row.torchrun]
    assert {"port", "addr_template", "master_addr"} <= {row.field for row in rows}
    argv: list[str] = []
    for row in rows:
        argv += [row.flag] if row.kind == FLAG else [row.flag, row.kind.valid[0][0]]
    own, rest = torchrun.parse_own([*argv, "--dry-run", "--", "--nnodes=2", "train.py"])
    assert own == {**{row.field: True if row.kind == FLAG else row.kind.valid[0][0]
                      for row in rows}, "dry_run": True}
    assert rest == ["--nnodes=2", "train.py"]
    usage = torchrun.usage()
    for row in rows:
        assert row.flag in usage and row.variable in usage
    for row in TABLE:
        if not row.torchrun:
            assert row.flag not in usage
            assert torchrun.parse_own([row.flag, "train.py"])[0] == {}  # torchrun's, then


def test_torchrun_passes_its_options_to_the_resolution() -> None:
    env = synth.step_env(["n1", "n2"], [1, 1], 1)
    launch = torchrun.build(["train.py"], env, ephemeral_range=None, port="23456",
                            addr_template="{host}-ib")
    assert "--rdzv-endpoint=n1-ib:23456" in launch.argv and "--local-addr=n2-ib" in launch.argv


def test_docs_page_is_the_table() -> None:
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    # then each command's own options and the other variables (tests/doc_tables.py)
    assert page.startswith(doc_tables.options_table()), f"regenerate it: {doc_tables.REGENERATE}"
    for row in TABLE:
        assert f"`{row.variable}`" in page and f"`{row.flag}" in page


def load_with(tmp_path: Path, row: str, kind: str = "") -> Any:
    """slurmenv/options.py with one more row (and a kind before the table), loaded as a module
    of the package."""
    source = (ROOT / "slurmenv" / "options.py").read_text(encoding="utf-8")
    marker, table = "    # New fields go last", "class Options(NamedTuple):"
    assert marker in source and table in source
    source = source.replace(marker, row + marker, 1).replace(table, kind + table, 1)
    path = tmp_path / "options_with_extra.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("slurmenv._options_with_extra", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_with_extra_row(tmp_path: Path) -> Any:
    return load_with(tmp_path, '    extra: str | None = option("SLURMENV_EXTRA", "--extra", '
                     'ADDRESS, None, "an extra choice", metavar="X", torchrun=True)\n')


def test_adding_an_option_is_one_row(tmp_path: Path) -> None:
    extra = load_with_extra_row(tmp_path)
    assert "extra" in extra.Options._fields and extra.Options().extra is None
    assert extra.from_environ({"SLURMENV_EXTRA": "h1"}).extra == "h1"
    assert extra.from_environ({"SLURMENV_EXTRA": "h1"}, extra="h2").extra == "h2"
    args = extra.arguments()
    values, _ = extra.parse_leading(["--extra", "h3"], args)
    assert extra.given_in(values) == {"extra": "h3"}
    import argparse

    parser = argparse.ArgumentParser()
    extra.add_arguments(parser, args)
    assert extra.given_in(parser.parse_args(["--extra=h4"])) == {"extra": "h4"}
    assert {"SLURMENV_EXTRA", "--extra"} <= extra.names()
    assert "| `--extra X` | `SLURMENV_EXTRA` | unset |" in doc_tables.options_table(extra)


#: A kind of option that slurmenv does not have, written as its one entry.
NEW_KIND = '''
def _extra_count(text: str, variable: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError("not a count")
    return int(text)


EXTRA_COUNT = Kind("extra count", _extra_count, "int", "give a whole number, 1 or more",
                   valid=[("3", 3), (" 12", 12)], invalid=["0", "many"])


'''


def test_an_option_of_a_new_kind_is_one_kind_and_its_row(tmp_path: Path) -> None:
    extra = load_with(tmp_path, '    extra_count: int | None = option("SLURMENV_EXTRA_COUNT", '
                      '"--extra-count", EXTRA_COUNT, None, "how many", metavar="N")\n', NEW_KIND)
    kind = extra.EXTRA_COUNT
    assert kind in extra.KINDS and extra.PARSERS[kind] == kind.parse
    (row,) = [row for row in extra.TABLE if row.kind is kind]
    assert extra.Options.__annotations__[row.field] == field_type(row) == "int | None"
    assert kind.keyword == "int | None"
    for text, value in kind.valid:  # what the tests above do with every row, on this one
        assert extra.from_environ({row.variable: text}).extra_count == value
        assert extra.from_environ({row.variable: "7"}, extra_count=text).extra_count == value
    for bad in kind.invalid:
        with pytest.raises(SlurmEnvError) as err:
            extra.from_environ({row.variable: bad})
        assert (err.value.variable, err.value.value, err.value.fix) == (
            "SLURMENV_EXTRA_COUNT", bad, "give a whole number, 1 or more")
    values, _ = extra.parse_leading(["--extra-count", "5"], extra.arguments())
    assert extra.from_environ({}, **extra.given_in(values)).extra_count == 5
    assert "| `--extra-count N` | `SLURMENV_EXTRA_COUNT` | unset | how many |" in doc_tables.options_table(extra)


def test_master_addr_reaches_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    assert options.from_environ({"SLURMENV_MASTER_ADDR": "node017"}).master_addr == "node017"
    with pytest.raises(SlurmEnvError) as err:  # an address is taken as it is, never stripped
        options.from_environ({"SLURMENV_MASTER_ADDR": " node017 "})
    assert (err.value.variable, err.value.value) == ("SLURMENV_MASTER_ADDR", " node017 ")
    seen: list[options.Options] = []
    from slurmenv import pipeline

    real = pipeline.resolve

    def spy(environ: Mapping[str, str], opts: options.Options, *rest: Any) -> Any:
        seen.append(opts)
        return real(environ, opts, *rest)

    monkeypatch.setattr(pipeline, "resolve", spy)
    env = synth.step_env(["n1", "n2"], [1, 1], 1)
    slurmenv.resolve(env, master_addr="10.0.0.1", ephemeral_range=None)
    assert seen[-1].master_addr == "10.0.0.1"
    monkeypatch.setattr(os, "environ", {**env, "SLURMENV_MASTER_ADDR": "10.0.0.2"})
    cli.main(["export", "--for", "torch"])
    assert seen[-1].master_addr == "10.0.0.2"
    cli.main(["export", "--for", "torch", "--master-addr", "10.0.0.3"])
    assert seen[-1].master_addr == "10.0.0.3"
