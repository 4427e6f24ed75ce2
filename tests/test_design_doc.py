"""docs/design.md says what the code has: the calls its pipeline picture writes take those
parameters, and every class its Records section names exists."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
CALL = re.compile(r"\b([a-z_]\w*)\(([\w, *]*)\)")


def picture_calls() -> list[tuple[str, str, list[str]]]:
    """(module, function, parameters written) for each call in the pipeline picture whose
    line (or a line above it in the same box) names an importable module."""
    picture = PAGE.split("```", 2)[1]
    found, module = [], ""
    for line in picture.splitlines():
        path = re.match(r"^[\s│▼]*(slurmenv/[\w/]+\.py)\b", line)
        if path:
            module = path.group(1).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name, params in CALL.findall(line):
            found.append((module, name, [p.strip() for p in params.split(",") if p.strip()]))
    return found


def test_the_pictures_calls_have_the_codes_parameters() -> None:
    checked = 0
    for module, name, written in picture_calls():
        try:
            function = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if not inspect.isfunction(function) or not written:  # `f()`: a mention
            continue
        real = list(inspect.signature(function).parameters)
        named = [p for p in written if not p.startswith("*")]
        if len(named) < len(written):  # `**options`: the keywords, written as one
            assert real[:len(named)] == named, f"design.md: {module}.{name}({', '.join(real)})"
        else:
            assert real == named, f"design.md writes {module}.{name}({', '.join(written)}), " \
                f"the code has ({', '.join(real)})"
        checked += 1
    assert checked >= 2


def test_every_record_class_named_exists() -> None:
    section = PAGE.split("## Records", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([A-Z]\w*)`", section))
    defined = {node.name for path in (ROOT / "slurmenv").rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)}
    assert len(named) >= 10
    assert named <= defined, f"design.md's Records names no such class: {named - defined}"


def test_the_doctor_recipe_promises_no_byte_for_byte_output() -> None:
    """A new check's longer label re-flows every check's line of the text report."""
    recipe = PAGE.split("## Recipe: add a doctor check", 1)[1].split("\n## ", 1)[0]
    assert "byte for byte" not in recipe and "re-flows" in recipe
