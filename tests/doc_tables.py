"""The tables the docs generate from the code: each lies between two markers in its page,

    <!-- generated: NAME; ... -->

    ...

    <!-- end generated -->

and is what :data:`BLOCKS` renders for NAME (tests/test_doc_tables.py checks every page).
Rewrite them after changing a declaration (a launcher's ``CLAIMS``, a doctor check, a public
function's signature), with every other generated part of the docs (tests/regen.py)::

    python tests/regen.py
"""

from __future__ import annotations

import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
REGENERATE = "python tests/regen.py"  # every generated page at once (this module's too)
START = re.compile(r"^<!-- generated: ([\w-]+)(?:;[^>]*)? -->$")
END = "<!-- end generated -->"


def _launchers(render: str) -> Callable[[], str]:
    def block() -> str:
        import launcher_table as table

        return str(getattr(table, render)(table.claims()))

    return block


def _registry() -> str:
    import launcher_table

    return launcher_table.registry_order()


def _doctor_checks() -> str:
    """docs/doctor.md's table: every check (in print order) and what it looks at; the checks
    register themselves when checks.py imports the checks_* modules."""
    from slurmenv.doctor import checks, registry

    assert checks.diagnose is not None
    lines = ["| check | what it looks at |", "|---|---|"]
    return "\n".join(lines + [f"| `{e.label}` | {e.looks_at} |" for e in registry.ENTRIES])


#: The public functions docs/api.md gives the signatures of, as the page names them.
API = (
    "slurmenv.resolve", "Resolution.env", "Resolution.apply", "slurmenv.dump.load",
    "slurmenv.gpus.for_local_rank", "slurmenv.torch.init_process_group",
    "slurmenv.tf.cluster_resolver", "slurmenv.tf.serve", "slurmenv.jax.initialize_args", "slurmenv.jax.initialize",
    "slurmenv.lightning.Environment",
)


def _api_signatures() -> str:
    # written as tests/test_api_doc.py reads them back (``<read>``: read from the node)
    import test_api_doc

    return "\n".join(f"- `{name}({test_api_doc.show(test_api_doc.real(test_api_doc.target(name)))})`"
                     for name in API)


#: The SLURMENV variables that are not a row of the options table, and what each does.
#: tests/test_doc_claims.py checks that this names every SLURMENV variable slurmenv's source
#: reads or writes.
OTHER_VARIABLES = {
    "SLURMENV_FOR": "which variables `export`, `exec`, `show`, `doctor` and the task prolog "
                    "give (`--for`); the task prolog takes no option, so this is how it is "
                    "told",
    "SLURMENV_STEP_TIMEOUT": "seconds the step check (`doctor --step`, `exec --preflight`) waits "
                             "for the other tasks (`--step-timeout`)",
    "SLURMENV_PMI_TIMEOUT": "seconds a task waits for the other tasks of the step in the "
                            "exchange through Slurm's PMI (`SLURMENV_PMI`), default 60",
    "SLURMENV_DEBUG": "`1`: an unexpected error prints its traceback too (any `slurmenv` "
                      "command; not the task prolog)",
    "SLURMENV": "`1` opts a job in to the site-wide task prolog, `slurmenv-site-prolog` "
                "(docs/task-prolog.md); read by the prolog only",
    "SLURMENV_SET_BY": "written, not read from you: the task prolog marks the variables it set "
                       "(`<job>.<step>:NAME,...`), so that a `srun` inside that step resolves "
                       "them again",
}


def _choices(choices: object) -> str | None:
    return "{" + ",".join(map(str, choices)) + "}" if choices else None  # type: ignore[call-overload]


def _own_options() -> list[tuple[str, str, str]]:
    """(command, option, help) for each command's options that are not the options table's,
    read from the parsers the commands use (as the completion scripts are)."""
    import argparse
    import importlib

    from slurmenv import options
    from slurmenv.commands import main as cli

    shared = {row.flag for row in options.TABLE} | {options.FOR[0], "-h", "--help", "--version"}
    shared |= {f"--no-{row.flag[2:]}" for row in options.TABLE}
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name in sub.choices:
        if name == "torchrun":
            module = importlib.import_module(cli.EXTERNAL[name][0])
            actions = [(flag, kw.get("metavar") or _choices(kw.get("choices")),
                        str(kw.get("help", ""))) for flag, kw in module.own_arguments()]
            rows = [([flag], metavar, text) for flag, metavar, text in actions]
        else:
            parser = (importlib.import_module(cli.EXTERNAL[name][0]).build_parser()
                      if name in cli.EXTERNAL else sub.choices[name])
            rows = [(list(a.option_strings),
                     (a.metavar or _choices(a.choices)) if a.nargs != 0 else None, a.help or "")
                    for a in parser._actions if a.option_strings]
        for flags, metavar, text in rows:
            if set(flags) & shared:
                continue
            shown = ", ".join(f"`{f}{' ' + str(metavar) if metavar else ''}`" for f in flags)
            found.append((name, shown, " ".join(text.replace("%%", "%").split())))
    return found


def options_table(options: Any = None) -> str:
    """The options table (slurmenv/options.py, or a module built like it) as a page."""
    if options is None:
        from slurmenv import options
    negative_flag = options.negative_flag
    lines = [
        "# Options",
        "",
        ("<!-- Generated from the table in slurmenv/options.py by `" + REGENERATE + "`; "
         "tests/test_options.py checks it. -->"),
        "",
        ("Every resolution option is a command-line flag of `export`, `exec`, `show`, `doctor` "
         "and `dump`, a `SLURMENV_*` variable (set once in the batch script, it reaches every "
         "task through `srun`) and a keyword of `slurmenv.resolve()`. A flag or keyword wins "
         "over its variable. Yes/no variables take `1`, `true`, `yes`, `on` or `0`, `false`, "
         "`no`, `off`. `slurmenv torchrun` takes the options marked *torchrun*."),
        "",
        "| flag | variable | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for row in options.TABLE:
        flag = f"`{row.flag} {row.metavar}`" if row.metavar else f"`{row.flag}`"
        if row.negative:
            flag += f", `{negative_flag(row)}`"
        meaning = row.help + (f"; `{negative_flag(row)}`: {row.negative}" if row.negative else "")
        meaning += " (*torchrun*)" if row.torchrun else ""
        meaning = meaning.replace("|", "\\|")
        lines.append(f"| {flag} | `{row.variable}` | {options.default_text(row)} | {meaning} |")
    lines.append(f"| `--for SET` | `{options.FOR_VARIABLE}` | all | {options.FOR_HELP} (export, exec, show, "
                 "doctor and the task prolog; not a keyword of `resolve()`: pass it to "
                 "`Resolution.env(for_)`) |")
    lines += ["", "Python: `slurmenv.resolve(" + ", ".join(
        f"{row.field}=..." for row in options.TABLE) + ")`.", ""]
    return "\n".join(lines)


def options_page() -> str:
    """docs/options.md: the options table (slurmenv/options.py), then each command's own
    options (from the parsers) and every other SLURMENV variable."""
    lines = [options_table().rstrip("\n"), "", "## Each command's own options", "",
             "Generated from the commands' parsers. Besides the options above, and `-h`/`--help`:",
             "", "| command | option | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{command}` | {flag} | {text.replace('|', chr(92) + '|')} |"
              for command, flag, text in _own_options()]
    lines += ["", "## Other variables", "",
              "Every other `SLURMENV*` variable slurmenv reads or writes:", "",
              "| variable | meaning |", "| --- | --- |"]
    lines += [f"| `{name}` | {text} |" for name, text in OTHER_VARIABLES.items()]
    return "\n".join(lines) + "\n"


def _releases() -> str:
    import slurm_releases

    return slurm_releases.markdown()


#: block name -> (what renders it, where its source of truth is declared)
BLOCKS: dict[str, tuple[Callable[[], str], str]] = {
    "launchers": (_launchers("launchers"), "tests/launcher_claims.py"),
    "launcher-tests": (_launchers("launcher_tests"), "tests/launcher_claims.py"),
    "mpi-versions": (_launchers("mpi_versions"), "tests/launcher_claims.py"),
    "beyond-slurm": (_launchers("beyond_slurm"), "tests/launcher_claims.py"),
    "launcher-registry": (_registry, "REGISTRY, its comments and SIGNALS in slurmenv/launchers/__init__.py"),
    "doctor-checks": (_doctor_checks, "the @check registrations of slurmenv/doctor/checks_*.py"),
    "api-signatures": (_api_signatures, "the signatures of slurmenv's public functions"),
    "releases": (_releases, "the FEATURES of tests/test_real_*.py"),
}


def start_marker(name: str) -> str:
    return (f"<!-- generated: {name}; from {BLOCKS[name][1]} by `{REGENERATE}`, "
            "do not edit by hand -->")


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[tuple[str, int, int]]:
    """The generated blocks of a page: (name, line of the start marker, line of the end
    marker), 0-based; ValueError for a marker without its pair or an unknown name."""
    found, start, name = [], None, ""
    for number, line in enumerate(text.splitlines()):
        match = START.match(line.strip())
        if match:
            if start is not None:
                raise ValueError(f"line {number + 1}: a start marker inside block {name}")
            start, name = number, match.group(1)
            if name not in BLOCKS:
                raise ValueError(f"line {number + 1}: unknown generated block {name!r}")
        elif line.strip() == END:
            if start is None:
                raise ValueError(f"line {number + 1}: an end marker without a start")
            found.append((name, start, number))
            start = None
    if start is not None:
        raise ValueError(f"line {start + 1}: block {name} has no end marker")
    return found


def regenerated(text: str) -> str:
    """The page with every generated block rendered from the code now."""
    lines = text.splitlines()
    for name, start, end in reversed(blocks(text)):
        body = BLOCKS[name][0]().splitlines()
        lines[start:end + 1] = [start_marker(name), "", *body, "", END]
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


if __name__ == "__main__":
    sys.exit(f"the generated blocks are rewritten with every generated page: {REGENERATE}")
