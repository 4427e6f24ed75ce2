"""Every signature docs/api.md writes is the real one (``inspect.signature``).

A signature is a code span of the prose (not of an example block) that reads as a call with
parameters, ``name(a, b=1, *, c=None)``, naming slurmenv's own function: ``slurmenv.x.f``, a
top-level name (``resolve``) or a method of ``Resolution`` (``apply``, ``r.env``). It must
name every parameter in order, with its kind (before or after ``*``) and its default;
``<read>`` stands for a default that reads the node unless given (the sentinel
``slurmenv.resolve`` uses). An empty ``f()`` is a mention, not a signature: it must exist.
Spans naming another library (``torch.distributed...``) are left alone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import slurmenv

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api.md"
READ = "<read>"
CALL = re.compile(r"([A-Za-z_][\w.]*)\((.*)\)", re.DOTALL)
OURS = ("slurmenv", "Resolution", "r")


class Param(NamedTuple):
    name: str
    kind: str  # "positional", "keyword", "*args", "**kwargs"
    default: Any  # inspect.Parameter.empty when none; READ for the node-reading sentinel


def prose_spans(text: str) -> list[str]:
    """The inline code spans outside fenced blocks, a span's line breaks made spaces."""
    outside, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            outside.append(line)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", "\n".join(outside))]


def target(name: str) -> Any:
    """slurmenv's object that ``name`` names, or None when it is another library's."""
    first, *rest = name.split(".")
    if rest and first not in OURS:
        return None
    if first == "slurmenv":
        for cut in range(len(rest), -1, -1):  # the longest module prefix, then attributes
            try:
                obj: Any = importlib.import_module(".".join(["slurmenv", *rest[:cut]]))
            except ImportError:
                continue
            for attr in rest[cut:]:
                obj = getattr(obj, attr)
            return obj
    if rest:  # Resolution.apply, r.env
        return getattr(slurmenv.Resolution, rest[-1])
    found = getattr(slurmenv, first, None)
    return found if found is not None else getattr(slurmenv.Resolution, first)


def written(params: str) -> list[Param] | None:
    """The parameters a span writes, or None when it does not read as a signature."""
    try:
        tree = ast.parse(f"def f({params.replace(READ, '_read_')}): pass")
    except SyntaxError:
        return None
    args = tree.body[0].args  # type: ignore[attr-defined]

    def default(node: ast.expr | None) -> Any:
        if node is None:
            return inspect.Parameter.empty
        if isinstance(node, ast.Name) and node.id == "_read_":
            return READ
        return ast.literal_eval(node)

    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    found = [Param(a.arg, "positional", default(d)) for a, d in zip(positional, defaults)]
    if args.vararg:
        found.append(Param(args.vararg.arg, "*args", inspect.Parameter.empty))
    found += [Param(a.arg, "keyword", default(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        found.append(Param(args.kwarg.arg, "**kwargs", inspect.Parameter.empty))
    return found


def show(params: list[Param]) -> str:
    """The parameters as api.md would write them."""
    parts, star = [], False
    for p in params:
        if p.kind == "keyword" and not star:
            parts.append("*")
        star = star or p.kind in ("keyword", "*args")
        prefix = {"*args": "*", "**kwargs": "**"}.get(p.kind, "")
        value = "" if p.default is inspect.Parameter.empty else (
            f"={p.default}" if p.default == READ else f"={p.default!r}")
        parts.append(prefix + p.name + value)
    return ", ".join(parts)


def real(obj: Any) -> list[Param]:
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
        inspect.Parameter.VAR_POSITIONAL: "*args",
        inspect.Parameter.VAR_KEYWORD: "**kwargs",
    }
    if inspect.isclass(obj):  # what the class is called with
        obj = obj.__init__
    params = list(inspect.signature(obj).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [Param(p.name, kinds[p.kind], READ if type(p.default) is object else p.default)
            for p in params]


def signatures(text: str) -> list[tuple[str, list[Param]]]:
    found = []
    for span in prose_spans(text):
        match = CALL.fullmatch(span)
        if match and match.group(2).strip():
            params = written(match.group(2))
            if params is not None and match.group(1).split(".")[0] in (*OURS, match.group(1)):
                found.append((match.group(1), params))
    return found


def mentions(text: str) -> list[str]:
    return [m.group(1) for span in prose_spans(text)
            if (m := CALL.fullmatch(span)) and not m.group(2).strip()
            and m.group(1).startswith("slurmenv.")]


def test_the_page_writes_signatures() -> None:
    """The generated block (tests/doc_tables.py) writes every public function's signature."""
    import doc_tables

    names = [name for name, _ in signatures(PAGE.read_text(encoding="utf-8"))]
    assert set(doc_tables.API) <= set(names)


def test_every_framework_helper_takes_resolution_and_environ() -> None:
    """As the page says of every helper (the signatures block shows them)."""
    import doc_tables

    helpers = [name for name in doc_tables.API
               if name.split(".")[1:2] in (["torch"], ["tf"], ["jax"], ["lightning"])
               and name != "slurmenv.tf.serve"]  # runs a server from a resolver it is given
    assert len(helpers) == 5
    for name in helpers:
        assert {"resolution", "environ"} <= {p.name for p in real(target(name))}, name


def test_jax_coordinator_is_master_addr_as_written() -> None:
    from synth import step_env

    import slurmenv.jax

    assert "`coordinator_address`: `<MASTER_ADDR>:<MASTER_PORT>`" in PAGE.read_text("utf-8")
    env = step_env(["n1", "n2"], [1, 1], 1)
    res = slurmenv.resolve(env, ephemeral_range=None, master_addr="head-ib")
    args = slurmenv.jax.initialize_args(res)
    assert args["coordinator_address"] == f"head-ib:{res.master_port}"


@pytest.mark.parametrize(("name", "params"), [
    pytest.param(name, params, id=name) for name, params in signatures(PAGE.read_text("utf-8"))])
def test_every_written_signature_is_the_real_one(name: str, params: list[Param]) -> None:
    obj = target(name)
    assert obj is not None and callable(obj), f"docs/api.md: {name} is not slurmenv's"
    assert params == real(obj), (
        f"docs/api.md writes {name}({show(params)}), the code has {name}({show(real(obj))})")


@pytest.mark.parametrize("name", sorted(set(mentions(PAGE.read_text(encoding="utf-8")))))
def test_every_mentioned_function_exists(name: str) -> None:
    assert callable(target(name)), f"docs/api.md mentions {name}()"


def test_a_stale_signature_is_caught() -> None:
    """resolve() as api.md once wrote it, before a keyword was added: not the real one."""
    stale = "`resolve(environ=None, *, port=None, port_range=None)` and `resolve()`"
    ((name, params),) = signatures(stale)
    assert params != real(target(name))
    assert written("a, b=<read>, *, c='x'") == [
        Param("a", "positional", inspect.Parameter.empty), Param("b", "positional", READ),
        Param("c", "keyword", "x")]
    assert signatures("`torch.distributed.init_process_group(backend, rank=...)`") == []
