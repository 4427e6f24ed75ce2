"""``slurmenv completion bash|zsh|fish``: a completion script for the shell, on stdout.

Nothing is written by hand: the commands, options and values come from the parsers the
commands use (``main.build_parser``, each ``main.EXTERNAL`` module's ``build_parser``,
``torchrun.own_arguments``), made from the options table, so a new row is completed in every
shell (tests/test_completion.py drives the real shells). An option with choices completes
them, one whose metavar is ``FILE`` file names, any other value nothing; after ``exec``'s
command starts, a command; after ``torchrun``'s options, files. It describes the whole command
line, so it sits above ``main`` (which loads it by name) and imports it.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
from collections.abc import Sequence

from ..lean import NamedTuple

SHELL_NAMES = ("bash", "zsh", "fish")
#: The value of an option: a file name, or anything (not completed).
FILE, ANY = "file", "any"


class Opt(NamedTuple):
    """One option of a command: its names (``-o``, ``--output``), what its value is (None: it
    takes none; a tuple of choices, FILE or ANY) and its help, shortened."""

    names: tuple[str, ...]
    value: tuple[str, ...] | str | None
    help: str


class Command(NamedTuple):
    """A command: name, help, options and what follows them: ``"command"`` (exec: a command to
    run), ``"files"`` (torchrun: its script), a tuple of words (help: a command) or None."""

    name: str
    help: str
    options: tuple[Opt, ...]
    rest: tuple[str, ...] | str | None


def _short(text: str | None) -> str:
    """A help text cut to its first clause, for a menu."""
    text = " ".join((text or "").replace("%%", "%").split())
    for stop in (" (", "; ", ": "):
        text = text.split(stop)[0]
    return text if len(text) <= 70 else text[:67].rstrip() + "..."


def _opt(names: Sequence[str], keywords: dict[str, object]) -> Opt:
    nargs = keywords.get("nargs")
    action = keywords.get("action", "store")
    value: tuple[str, ...] | str | None
    if action in ("store_true", "store_false", "help", "version") or nargs == 0:
        value = None
    elif keywords.get("choices") is not None:
        value = tuple(str(c) for c in keywords["choices"])  # type: ignore[attr-defined]
    elif keywords.get("metavar") == "FILE":
        value = FILE
    else:
        value = ANY
    return Opt(tuple(names), value, _short(keywords.get("help")))  # type: ignore[arg-type]


def _parser_options(parser: argparse.ArgumentParser) -> tuple[Opt, ...]:
    """The options of an argparse parser (positionals left out): argparse's list of actions,
    public in all but name; a flag (store_true, help, version) takes ``nargs=0``. An option
    hidden from the help (``argparse.SUPPRESS``: parsed only to be refused, as dump's
    ``--for``) is not offered either."""
    return tuple(_opt(a.option_strings, {"nargs": a.nargs, "choices": a.choices,
                                         "metavar": a.metavar, "help": a.help})
                 for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmenv completion",
        description="Print a completion script for bash, zsh or fish. Install it where the "
        "shell loads it by itself, e.g. slurmenv completion bash > "
        "~/.local/share/bash-completion/completions/slurmenv (see docs/shells.md)",
    )
    parser.add_argument("shell", choices=SHELL_NAMES, help="the shell")
    return parser


def commands() -> list[Command]:
    """Every command of ``slurmenv`` with its options, in the order of ``slurmenv --help``."""
    from . import main as cli

    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: _short(choice.help) for choice in sub._choices_actions}
    out = []
    for name in sub.choices:
        rest: tuple[str, ...] | str | None = None
        if name in cli.EXTERNAL:
            module = importlib.import_module(cli.EXTERNAL[name][0])
            if name == "torchrun":
                opts = (Opt(("-h", "--help"), None, "show the help and exit"),
                        *(_opt([flag], keywords) for flag, keywords in module.own_arguments()))
                rest = "files"
            else:
                opts = _parser_options(module.build_parser())
        else:
            opts = _parser_options(sub.choices[name])
            rest = ("command" if name == "exec" else
                    tuple(n for n in sub.choices if n != "help") if name == "help" else None)
        if name == "completion":
            rest = SHELL_NAMES
        out.append(Command(name, helps[name], opts, rest))
    return out


# -- bash ------------------------------------------------------------------------------------
def bash(cmds: Sequence[Command]) -> str:
    """A script for bash: ``complete -F _slurmenv slurmenv``; bash-completion helpers not
    needed."""
    q = shlex.quote
    names = " ".join(c.name for c in cmds)
    files = 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))'
    command = 'COMPREPLY=($(compgen -c -- "$cur"))'
    lines = [
        "# bash completion for slurmenv (generated by 'slurmenv completion bash')",
        "_slurmenv() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" cmd="" i=1 start=0',
        '    [ "$COMP_CWORD" -gt 0 ] && prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    # --opt=value: bash splits at '=' (COMP_WORDBREAKS)",
        '    if [ "$cur" = "=" ]; then cur=""',
        '    elif [ "$prev" = "=" ] && [ "$COMP_CWORD" -gt 1 ]; then prev="${COMP_WORDS[COMP_CWORD-2]}"',
        "    fi",
        '    while [ "$i" -lt "$COMP_CWORD" ]; do',
        '        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac',
        "        i=$((i + 1))",
        "    done",
        "    COMPREPLY=()",
        '    if [ -z "$cmd" ]; then',
        f'        COMPREPLY=($(compgen -W {q(names + " --help --version")} -- "$cur"))',
        "        return 0",
        "    fi",
        "    local opts='' j=$((i + 1))",
        '    case "$cmd" in',
    ]
    for cmd in cmds:
        flags = " ".join(n for o in cmd.options for n in o.names)
        lines.append(f"    {cmd.name})")
        lines.append(f"        opts={q(flags)}")
        values = [o for o in cmd.options if o.value is not None]
        if values:
            lines.append('        case "$prev" in')
            for o in values:
                pattern = "|".join(o.names)
                action = (f'COMPREPLY=($(compgen -W {q(" ".join(o.value))} -- "$cur"))'
                          if isinstance(o.value, tuple) else files if o.value == FILE else ":")
                lines.append(f"            {pattern}) {action}; return 0 ;;")
            lines.append("        esac")
        if cmd.rest is not None:
            # the first word after the options: where the command (exec), the script
            # (torchrun) or the argument (help, completion) starts
            lines += [
                '        while [ "$j" -lt "$COMP_CWORD" ]; do',
                '            case "${COMP_WORDS[j]}" in',
                '                --) start=$((j + 1)); break ;;',
            ]
            takes = [n for o in cmd.options if o.value is not None for n in o.names]
            if takes:  # an option and its value: --port 1234 or --port=1234 (3 words)
                lines.append(f'                {"|".join(takes)}) j=$((j + 1)); '
                             '[ "${COMP_WORDS[j]}" = "=" ] && j=$((j + 1)) ;;')
            # after the start: the command's words are files, the script's arguments too
            words = {"command": (f'if [ "$start" -eq "$COMP_CWORD" ]; then {command}; '
                                 f"else {files}; fi"),
                     "files": files}.get(str(cmd.rest), ":")
            # at the start (a word that is no option): the command, the script, the argument
            first = {"command": command, "files": files}.get(str(cmd.rest)) or (
                f'COMPREPLY=($(compgen -W {q(" ".join(cmd.rest))} -- "$cur"))')
            lines += [
                '                -*) ;;',
                '                *) start=$j; break ;;',
                "            esac",
                "            j=$((j + 1))",
                "        done",
                f'        if [ "$start" -gt 0 ]; then {words}; return 0; fi',
                f'        case "$cur" in -*) ;; *) {first}; return 0 ;; esac',
            ]
        lines.append("        ;;")
    lines += [
        "    *) return 0 ;;",
        "    esac",
        '    COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        "}",
        "complete -F _slurmenv slurmenv",
        "",
    ]
    return "\n".join(lines)


# -- zsh -------------------------------------------------------------------------------------
def _zsh_text(text: str) -> str:
    """``text`` for an _arguments spec: its brackets and colons escaped."""
    for char in "\\[]:":
        text = text.replace(char, "\\" + char)
    return text


def _zsh_spec(o: Opt) -> list[str]:
    specs = []
    for name in o.names:
        head = name + ("=" if o.value is not None and name.startswith("--") else "")
        if o.value is not None and not name.startswith("--"):
            head += "+"  # -oFILE or -o FILE
        spec = f"{head}[{_zsh_text(o.help)}]"
        word = name.lstrip("-")
        spec += (f":{word}:({' '.join(o.value)})" if isinstance(o.value, tuple)
                 else {FILE: ":file:_files", ANY: f":{word}: "}.get(str(o.value), ""))
        if len(o.names) > 1:
            spec = f"({' '.join(o.names)})" + spec
        specs.append(spec)
    return specs


def zsh(cmds: Sequence[Command]) -> str:
    """A script for zsh's completion system: a file ``_slurmenv`` in a directory of $fpath
    (``#compdef slurmenv``), or sourced after compinit."""
    q = shlex.quote
    lines = [
        "#compdef slurmenv",
        "# zsh completion for slurmenv (generated by 'slurmenv completion zsh')",
        "",
        "_slurmenv() {",
        "    local curcontext=$curcontext state line ret=1",
        "    local -a subcommands  # not 'commands': zsh's hash of the commands on $PATH",
        "    subcommands=(",
        *(f"        {q(c.name + ':' + c.help.replace(':', chr(92) + ':'))}" for c in cmds),
        "    )",
        "    _arguments -C '(- *)--version[show the version and exit]' \\",
        "        '(- *)'{-h,--help}'[show the help and exit]' \\",
        "        '1:command:->command' '*::argument:->argument' && ret=0",
        "    case $state in",
        "    command) _describe -t commands 'slurmenv command' subcommands && ret=0 ;;",
        "    argument)",
        "        case $words[1] in",
    ]
    for cmd in cmds:
        specs = [spec for o in cmd.options for spec in _zsh_spec(o)]
        rest = {"command": "(-)*::command:_normal",
                "files": "*::script or torchrun option:_files"}.get(str(cmd.rest))
        if isinstance(cmd.rest, tuple):
            rest = f"1:{cmd.name} argument:({' '.join(cmd.rest)})"
        specs += [rest] if rest else []
        lines.append(f"        {cmd.name})")
        if cmd.rest == "command":  # after --: the command and its arguments (_arguments
            lines += [  # does not hand the words after -- to _normal)
                "            if (( ${words[(i)--]} < CURRENT )); then",
                "                local n=${words[(i)--]}",
                "                shift $n words; (( CURRENT -= n ))",
                "                _normal && ret=0",
                "            else",
            ]
        lines.append("            _arguments -s -S \\")
        lines += [f"                {q(spec)} \\" for spec in specs]
        lines.append("                && ret=0")
        if cmd.rest == "command":
            lines.append("            fi")
        lines.append("            ;;")
    lines += [
        "        esac ;;",
        "    esac",
        "    return ret",
        "}",
        "",
        'if [ "$funcstack[1]" = "_slurmenv" ]; then',
        '    _slurmenv "$@"',
        "else",
        "    compdef _slurmenv slurmenv",
        "fi",
        "",
    ]
    return "\n".join(lines)


# -- fish ------------------------------------------------------------------------------------
def fish(cmds: Sequence[Command]) -> str:
    """A script for fish: ``slurmenv.fish`` in a completions directory (``$fish_complete_path``)."""
    q = shlex.quote  # fish reads POSIX single quotes the same way for these words
    names = " ".join(c.name for c in cmds)
    lines = [
        "# fish completion for slurmenv (generated by 'slurmenv completion fish')",
        "complete -c slurmenv -f",
        (f"complete -c slurmenv -n 'not __fish_seen_subcommand_from {names}' -l version "
         "-d 'show the version and exit'"),
        (f"complete -c slurmenv -n 'not __fish_seen_subcommand_from {names}' -s h -l help "
         "-d 'show the help and exit'"),
    ]
    for cmd in cmds:
        lines.append(f"complete -c slurmenv -n 'not __fish_seen_subcommand_from {names}' "
                     f"-a {cmd.name} -d {q(cmd.help)}")
    for cmd in cmds:
        when = f"__fish_seen_subcommand_from {cmd.name}"
        if cmd.rest is not None:  # options before the command/script only
            when += "; and not contains -- -- (commandline -opc)"
        for o in cmd.options:
            value = (f"-x -a {q(' '.join(o.value))}" if isinstance(o.value, tuple)
                     else {FILE: "-r -F", ANY: "-x"}.get(str(o.value)))
            lines.append(" ".join([
                f"complete -c slurmenv -n {q(when)}",
                *(f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}" for n in o.names),
                *([value] if value else []), f"-d {q(o.help)}"]))
        seen = f"__fish_seen_subcommand_from {cmd.name}"
        if cmd.rest == "command":
            takes = " ".join(n for o in cmd.options if o.value is not None for n in o.names)
            # skip slurmenv, exec and the options (with their values) and complete the
            # command line that is left (fish's __fish_complete_subcommand takes a "--"
            # after the options for an option with a value, and skips the command)
            lines += [
                f"function __slurmenv_{cmd.name}_command",
                "    set -l words (commandline -opc) (commandline -ct)",
                "    set -l i 3",
                "    while test $i -lt (count $words)",
                "        switch $words[$i]",
                "            case --",
                "                set i (math $i + 1); break",
                f"            case {takes}",
                "                set i (math $i + 2); continue",
                "            case '-*'",
                "            case '*'",
                "                break",
                "        end",
                "        set i (math $i + 1)",
                "    end",
                "    test $i -le (count $words); or return",
                "    complete -C (string join -- ' ' (string escape -- $words[$i..-1]))",
                "end",
                f"complete -c slurmenv -n {q(seen)} -a '(__slurmenv_{cmd.name}_command)'",
            ]
        elif cmd.rest == "files":
            lines.append(f"complete -c slurmenv -n {q(seen)} -F")
        elif isinstance(cmd.rest, tuple):
            lines.append(f"complete -c slurmenv -n {q(seen)} -a {q(' '.join(cmd.rest))}")
    return "\n".join(lines) + "\n"


SCRIPTS = {"bash": bash, "zsh": zsh, "fish": fish}


def script(shell: str) -> str:
    """The completion script for ``shell`` (one of SHELL_NAMES)."""
    return SCRIPTS[shell](commands())


def main(argv: Sequence[str]) -> int:
    """``slurmenv completion SHELL``: print the script."""
    from .console import write_output

    args = build_parser().parse_args(argv)
    return write_output(script(args.shell))
